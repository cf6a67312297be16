package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/admission/certs"
	"github.com/rota-sched/rota/test/cluster"
)

// TestTLSClientCertificates: with --tls-cert-file, --tls-key-file and
// --client-ca-file the extender speaks only TLS and answers only clients
// whose certificate the client CA signed.
func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	serving, err := certs.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := cluster.NewCA("rota-extender-clients")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := cluster.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	good, err := clientCA.ClientCert("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := otherCA.ClientCert("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	srv := New(nil, Options{})
	go func() {
		done <- srv.Run(ctx, HTTP{Listen: "127.0.0.1:0", ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
			ShutdownTimeout: time.Second, TLS: TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: caFile}}, ready)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addr := (<-ready).String()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serving.CAPEM)
	client := func(c *cluster.ClientCert) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if c != nil {
			pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	tests := []struct {
		name    string
		client  *http.Client
		url     string
		wantErr string // "" means 200 "ok"
	}{
		{name: "client certificate from the client CA", client: client(&good), url: "https://" + addr + "/healthz"},
		{name: "no client certificate", client: client(nil), url: "https://" + addr + "/healthz", wantErr: "certificate"},
		{name: "certificate from another CA", client: client(&bad), url: "https://" + addr + "/healthz", wantErr: "certificate"},
		{name: "plain HTTP", client: client(&good), url: "http://" + addr + "/healthz", wantErr: "400"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.client.Get(tc.url)
			if err == nil {
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if tc.wantErr == "" && (resp.StatusCode != http.StatusOK || string(body) != "ok\n") {
					t.Errorf("GET = %d %q, want 200 ok", resp.StatusCode, body)
				}
				if tc.wantErr != "" && !strings.Contains(resp.Status, tc.wantErr) {
					t.Errorf("GET = %s, want a refusal (%s)", resp.Status, tc.wantErr)
				}
				return
			}
			if tc.wantErr == "" || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("GET: %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
