package certs

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rota-sched/rota/test/cluster"
)

// serve starts a TLS server whose certificate comes from r and returns its URL.
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

func client(ca []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
}

func TestGenerateAndReload(t *testing.T) {
	dir := t.TempDir()
	b1, err := Generate(dir)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	r, err := NewReloader(b1.CertFile, b1.KeyFile)
	if err != nil {
		t.Fatalf("NewReloader() error = %v", err)
	}
	r.minCheck = 0
	url := serve(t, r)
	if _, err := client(b1.CAPEM).Get(url); err != nil {
		t.Fatalf("GET with the generated CA: %v", err)
	}

	// New files (a rotation): the next handshake serves the new certificate.
	b2, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(b2.CAPEM).Get(url); err != nil {
		t.Fatalf("GET with the rotated CA: %v", err)
	}
	if _, err := client(b1.CAPEM).Get(url); err == nil {
		t.Fatalf("the old CA still verifies: the certificate was not reloaded")
	}

	// A half-written pair keeps the last good certificate in service.
	if err := writeAtomic(b2.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client(b2.CAPEM).Get(url); err != nil {
		t.Fatalf("GET while the key is broken: %v", err)
	}
	if r.Err() == nil {
		t.Errorf("Err() = nil after a failed reload")
	}
}

func TestGenerateHosts(t *testing.T) {
	b, err := Generate(t.TempDir(), "rota-admission.rota-system.svc", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(b.CertFile, b.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("rota-admission.rota-system.svc"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("10.0.0.1"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err == nil {
		t.Error("the certificate is valid for a host it was not made for")
	}
}

func TestNewReloaderErrors(t *testing.T) {
	if _, err := NewReloader("/nonexistent/tls.crt", "/nonexistent/tls.key"); err == nil {
		t.Error("NewReloader with missing files gave no error")
	}
}

// TestReloadKubeletSecretVolume: the files are a Secret volume that the
// kubelet updates (symlinks into ..data, swapped with one rename, the old
// folder removed), as after a cert-manager renewal; the next handshake
// serves the new certificate without a restart.
func TestReloadKubeletSecretVolume(t *testing.T) {
	vol, err := cluster.NewSecretVolume(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatal(err)
	}
	write := func() []byte {
		b, err := Generate(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{"ca.crt": b.CAPEM}
		for k, p := range map[string]string{"tls.crt": b.CertFile, "tls.key": b.KeyFile} {
			if files[k], err = os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := vol.Write(files); err != nil {
			t.Fatal(err)
		}
		return b.CAPEM
	}
	ca1 := write()
	r, err := NewReloader(vol.Path("tls.crt"), vol.Path("tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	r.minCheck = 0
	url := serve(t, r)
	if _, err := client(ca1).Get(url); err != nil {
		t.Fatalf("GET before the update: %v", err)
	}
	ca2 := write()
	if _, err := client(ca2).Get(url); err != nil {
		t.Fatalf("GET after the kubelet's update: %v (the renewed certificate is not served)", err)
	}
	if _, err := client(ca1).Get(url); err == nil {
		t.Fatal("the certificate from before the update is still served")
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err() = %v after a clean update", err)
	}
}
