package app

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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/test/cluster"
)

// unreachableConfig is testConfig with a kubeconfig for an API server that
// does not answer.
func unreachableConfig(t *testing.T) config.Config {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
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
	return cfg
}

// run builds the App as main does and runs it until the test ends (when
// Run must return nil within 15 s); it returns the address it serves on.
func run(t *testing.T, cfg config.Config) net.Addr {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	a, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("New() = %v", err)
	}
	ready := make(chan net.Addr, 1)
	a.ready = ready
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() after cancel = %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run() did not return after cancel")
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("Run() = %v before serving", err)
		return nil
	}
}

// trusting is an HTTPS client that trusts only ca and opens a connection
// per request, so each sees the certificate served now.
func trusting(ca []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// TestRun starts the real server over TLS against an API server that does
// not answer: it is healthy but not ready, speaks HTTP/2 to a client that
// offers it (as the API server's webhook client may), refuses plain HTTP,
// and it shuts down on cancel.
func TestRun(t *testing.T) {
	serving, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	cfg := unreachableConfig(t)
	if _, cfg.TLSCertFile, cfg.TLSKeyFile, err = serving.Write(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	addr := run(t, cfg)

	c := trusting(serving.CAPEM)
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
	h2 := trusting(serving.CAPEM)
	h2.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	resp, err := h2.Get(fmt.Sprintf("https://%s/healthz", addr))
	if err != nil {
		t.Fatalf("GET /healthz offering HTTP/2: %v", err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("GET /healthz offering HTTP/2 was answered in %s", resp.Proto)
	}
	// TLS only: a plain HTTP request gets no answer from the webhook.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://%s/healthz", addr)); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP GET /healthz = %d %q, want a refusal", resp.StatusCode, body)
		}
	}
}

// TestRunReloadsCertificate: the serving certificate is a Secret volume
// that the kubelet updates (symlinks into ..data, swapped with one rename,
// the old folder removed), as after a cert-manager renewal; the running
// webhook serves the new certificate without a restart, and no longer the
// old one.
func TestRunReloadsCertificate(t *testing.T) {
	vol, err := cluster.NewSecretVolume(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatal(err)
	}
	write := func() []byte {
		t.Helper()
		c, err := cluster.NewServingCert()
		if err != nil {
			t.Fatal(err)
		}
		if err := vol.Write(c.Files()); err != nil {
			t.Fatal(err)
		}
		return c.CAPEM
	}
	ca1 := write()
	cfg := unreachableConfig(t)
	cfg.TLSCertFile, cfg.TLSKeyFile = vol.Path(cluster.CertFile), vol.Path(cluster.KeyFile)
	url := fmt.Sprintf("https://%s/healthz", run(t, cfg))
	get := func(ca []byte) error {
		resp, err := trusting(ca).Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(ca1); err != nil {
		t.Fatalf("GET before the update: %v", err)
	}

	ca2 := write()
	began := time.Now()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { last = get(ca2); return last == nil, nil }); err != nil {
		t.Fatalf("GET after the kubelet's update: still %v after 20s (the renewed certificate is not served)", last)
	}
	t.Logf("certificate reloaded in %s", time.Since(began).Round(time.Millisecond))
	if err := get(ca1); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GET trusting only the replaced CA = %v, want a certificate error", err)
	}
}

// TestRunRefusesBadCertificate: a missing or mismatched serving pair fails
// Run at once, naming the file, instead of a webhook that refuses every
// handshake.
func TestRunRefusesBadCertificate(t *testing.T) {
	serving, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, certFile, _, err := serving.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	_, _, otherKey, err := other.Write(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ cert, key, want string }{
		"missing files":       {filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key"), "none.crt"},
		"key of another pair": {certFile, otherKey, otherKey},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := unreachableConfig(t)
			cfg.TLSCertFile, cfg.TLSKeyFile = tc.cert, tc.key
			_, ctx := ktesting.NewTestContext(t)
			a, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
