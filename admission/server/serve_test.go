package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/admission/certs"
)

// TestRun starts the real server over TLS against an API server that does
// not answer: it is healthy but not ready, refuses plain HTTP, and it shuts
// down on cancel.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	b, err := certs.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Listen, cfg.Kubeconfig = "127.0.0.1:0", kubeconfig
	cfg.TLSCertFile, cfg.TLSKeyFile = b.CertFile, b.KeyFile
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, ready) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run() = %v before serving", err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CAPEM)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := c.Get(fmt.Sprintf("https://%s%s", addr, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d %q, want %d", path, resp.StatusCode, body, want)
		}
	}
	// TLS only: a plain HTTP request gets no answer from the webhook.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://%s/healthz", addr)); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP GET /healthz = %d %q, want a refusal", resp.StatusCode, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() after cancel = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run() did not return after cancel")
	}
}
