package servingtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/test/cluster"
)

// serve runs an HTTPS server with c until the test ends and returns its
// address.
func serve(t *testing.T, c *Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		cancel()
		<-done // Run returns once ctx ends
	})
	return ln.Addr().String()
}

// handshake connects trusting only ca and returns the negotiated ALPN
// protocol.
func handshake(addr string, ca []byte, protos ...string) (string, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: protos})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().NegotiatedProtocol, nil
}

// TestReloadKeepsLastGoodPair: files rewritten in place, certificate first:
// while the new certificate's key is not there yet, the last good pair
// stays in service; once the key follows, the new pair is served.
func TestReloadKeepsLastGoodPair(t *testing.T) {
	dir := t.TempDir()
	first, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	_, certFile, keyFile, err := first.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("test", Files{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, c)
	if _, err := handshake(addr, first.CAPEM); err != nil {
		t.Fatalf("handshake: %v", err)
	}

	second, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// The watch fires within milliseconds; for two seconds every handshake
	// must still get the first pair.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := handshake(addr, first.CAPEM); err != nil {
			t.Fatalf("handshake while the key is the old one: %v (the last good pair left service)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(keyFile, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { _, last = handshake(addr, second.CAPEM); return last == nil, nil }); err != nil {
		t.Fatalf("the completed pair is not served: still %v after 20s", last)
	}
}

// TestNextProtos: the listener offers the ALPN protocols it was loaded
// with, and none otherwise.
func TestNextProtos(t *testing.T) {
	s, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	_, certFile, keyFile, err := s.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		offered []string
		want    string
	}{
		"h2 and http/1.1": {[]string{"h2", "http/1.1"}, "h2"},
		"http/1.1":        {[]string{"http/1.1"}, "http/1.1"},
		"none":            {nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Load("test", Files{CertFile: certFile, KeyFile: keyFile}, tc.offered...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := handshake(serve(t, c), s.CAPEM, "h2", "http/1.1")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("negotiated %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLoadErrors: a file that cannot serve fails Load, naming it.
func TestLoadErrors(t *testing.T) {
	s, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, certFile, keyFile, err := s.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files Files
		want  string
	}{
		"missing certificate": {Files{CertFile: filepath.Join(dir, "none.crt"), KeyFile: keyFile}, "none.crt"},
		"key not PEM":         {Files{CertFile: certFile, KeyFile: junk}, "serving certificate " + certFile + ", " + junk},
		"certificate as key":  {Files{CertFile: certFile, KeyFile: caFile}, "serving certificate"},
		"client CA not PEM":   {Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: junk}, "client CA " + junk},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load("test", tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load("test", Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}); err != nil {
		t.Errorf("Load() with valid files = %v", err)
	}
}
