package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/test/cluster"
)

// stubVerbs answers every verb at once and counts the calls, so a test can
// tell a refused request from one that reached the decision layer.
type stubVerbs struct{ calls chan string }

func (s *stubVerbs) Filter(_ context.Context, a *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	s.calls <- "filter"
	return &extenderv1.ExtenderFilterResult{NodeNames: a.NodeNames}
}
func (s *stubVerbs) Prioritize(context.Context, *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	s.calls <- "prioritize"
	return extenderv1.HostPriorityList{}, nil
}
func (s *stubVerbs) Bind(context.Context, *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	s.calls <- "bind"
	return &extenderv1.ExtenderBindingResult{}
}
func (s *stubVerbs) Preempt(context.Context, *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	s.calls <- "preempt"
	return &extenderv1.ExtenderPreemptionResult{}, nil
}
func (s *stubVerbs) Decisions(string, string) []scheduling.Decision { return nil }
func (s *stubVerbs) Ready() bool                                    { return true }

// pki is a serving certificate (in a kubelet-style Secret volume) and a
// client CA file, with the certificates a test's clients present.
type pki struct {
	serving   *cluster.SecretVolume
	servingCA []byte
	clientCAs *cluster.SecretVolume
	good, bad cluster.ClientCert
	clientCA  *cluster.CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{}
	var err error
	if p.serving, err = cluster.NewSecretVolume(filepath.Join(dir, "serving")); err != nil {
		t.Fatal(err)
	}
	if p.clientCAs, err = cluster.NewSecretVolume(filepath.Join(dir, "client-ca")); err != nil {
		t.Fatal(err)
	}
	p.rotateServing(t)
	other, err := cluster.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	if p.bad, err = other.ClientCert("kube-scheduler"); err != nil {
		t.Fatal(err)
	}
	p.rotateClientCA(t)
	return p
}

// rotateServing writes a serving certificate from a new CA.
func (p *pki) rotateServing(t *testing.T) {
	t.Helper()
	c, err := cluster.NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.serving.Write(c.Files()); err != nil {
		t.Fatal(err)
	}
	p.servingCA = c.CAPEM
}

// rotateClientCA replaces the client CA and issues p.good from the new one.
func (p *pki) rotateClientCA(t *testing.T) {
	t.Helper()
	ca, err := cluster.NewCA("rota-extender-clients")
	if err != nil {
		t.Fatal(err)
	}
	if p.good, err = ca.ClientCert("rota-scheduler"); err != nil {
		t.Fatal(err)
	}
	if err := p.clientCAs.Write(map[string][]byte{"ca.crt": ca.PEM}); err != nil {
		t.Fatal(err)
	}
	p.clientCA = ca
}

func (p *pki) tls() TLS {
	return TLS{CertFile: p.serving.Path("tls.crt"), KeyFile: p.serving.Path("tls.key"), ClientCAFile: p.clientCAs.Path("ca.crt")}
}

// client trusts servingCA and presents c (none when nil). Each request
// opens a new connection, so it sees the server's current certificates.
func client(t *testing.T, servingCA []byte, c *cluster.ClientCert) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if c != nil {
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		// Presented whatever CAs the server asks for, as client-go does
		// (crypto/tls would leave out a certificate the server's CA list
		// does not name).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// runServer runs srv on two loopback listeners and returns the verbs and
// ops addresses; the test's end stops it and checks Run's error.
func runServer(t *testing.T, srv *Server, h HTTP) (verbs, ops string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, opsReady := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	h.Listen, h.ReadTimeout, h.WriteTimeout, h.ShutdownTimeout = "127.0.0.1:0", 5*time.Second, 5*time.Second, time.Second
	if h.OpsListen != "" {
		h.OpsReady = opsReady
	}
	go func() { done <- srv.Run(ctx, h, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-ready:
		verbs = a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if h.OpsListen != "" {
		ops = (<-opsReady).String()
	}
	return verbs, ops
}

// brokenByAlert: in TLS 1.3 a client may be writing its request when the
// server's alert closes the connection, and sees that instead of the alert.
func brokenByAlert(err error) bool {
	return strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset by peer")
}

var filterBody = []byte(`{"pod":{"metadata":{"name":"p","namespace":"ns"}},"nodenames":["n1"]}`)
var bindBody = []byte(`{"podName":"p","podNamespace":"ns","podUID":"u","node":"n1"}`)

// TestVerbsNeedClientCertificates: with a serving certificate and a client
// CA, every verb is answered only to a client whose certificate that CA
// signed; a client without one, with one of another CA, or speaking plain
// HTTP is refused before the decision layer sees the request. The ops
// listener answers probes and Prometheus in plain HTTP without
// certificates, and neither listener serves the other's routes.
func TestVerbsNeedClientCertificates(t *testing.T) {
	p := newPKI(t)
	stub := &stubVerbs{calls: make(chan string, 100)}
	verbs, ops := runServer(t, New(stub, Options{}), HTTP{OpsListen: "127.0.0.1:0", TLS: p.tls()})

	post := func(c *http.Client, url string, body []byte) (int, string, error) {
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	for _, verb := range []struct {
		path string
		body []byte
	}{{"/filter", filterBody}, {"/bind", bindBody}, {"/prioritize", filterBody}, {"/preempt", []byte(`{"pod":{}}`)}} {
		t.Run(verb.path, func(t *testing.T) {
			refusals := []struct {
				name   string
				client *http.Client
				url    string
				want   string // in the error, or the status line of a plain-HTTP answer
			}{
				{"no client certificate", client(t, p.servingCA, nil), "https://" + verbs + verb.path, "certificate required"},
				{"certificate from another CA", client(t, p.servingCA, &p.bad), "https://" + verbs + verb.path, "unknown certificate authority"},
				{"plain HTTP", http.DefaultClient, "http://" + verbs + verb.path, "400"},
			}
			for _, r := range refusals {
				code, body, err := post(r.client, r.url, verb.body)
				switch {
				case err != nil && !strings.Contains(err.Error(), r.want) && !brokenByAlert(err):
					t.Errorf("%s: %v, want an error containing %q", r.name, err, r.want)
				case err == nil && !strings.Contains(fmt.Sprint(code), r.want):
					t.Errorf("%s: %d %q, want a refusal (%s)", r.name, code, body, r.want)
				}
			}
			select {
			case c := <-stub.calls:
				t.Fatalf("a refused request reached the decision layer (%s)", c)
			default:
			}
			code, body, err := post(client(t, p.servingCA, &p.good), "https://"+verbs+verb.path, verb.body)
			if err != nil || code != http.StatusOK {
				t.Fatalf("with the scheduler's certificate: %d %q %v", code, body, err)
			}
			if c := <-stub.calls; "/"+c != verb.path {
				t.Errorf("decision layer got %s, want %s", c, verb.path)
			}
		})
	}

	// The ops listener: plain HTTP, no certificate; no verbs there.
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK} {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			t.Fatalf("GET %s on the ops listener: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the ops listener = %d, want %d", path, resp.StatusCode, want)
		}
	}
	for _, path := range VerbPaths {
		code, _, err := post(http.DefaultClient, "http://"+ops+path, filterBody)
		if err != nil || code != http.StatusNotFound {
			t.Errorf("POST %s on the ops listener = %d %v, want 404", path, code, err)
		}
	}
	resp, err := client(t, p.servingCA, &p.good).Get("https://" + verbs + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /healthz on the verbs listener = %d, want 404 (the ops endpoints have their own listener)", resp.StatusCode)
	}
}

// TestCertificatesReloaded: the serving certificate and the client CA are
// Secret volumes updated the way the kubelet does (..data swapped); the
// running server picks up both without a restart: a client trusting only
// the new serving CA connects, the old client certificate is refused and
// one from the new client CA is accepted.
func TestCertificatesReloaded(t *testing.T) {
	p := newPKI(t)
	stub := &stubVerbs{calls: make(chan string, 100)}
	verbs, _ := runServer(t, New(stub, Options{}), HTTP{OpsListen: "127.0.0.1:0", TLS: p.tls()})
	url := "https://" + verbs + "/filter"
	call := func(servingCA []byte, c *cluster.ClientCert) error {
		resp, err := client(t, servingCA, c).Post(url, "application/json", bytes.NewReader(filterBody))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out extenderv1.ExtenderFilterResult
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("answer %d: %w", resp.StatusCode, err)
		}
		<-stub.calls
		return nil
	}
	eventually := func(what string, ok func() error) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := ok()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %v after 20s", what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := call(p.servingCA, &p.good); err != nil {
		t.Fatal(err)
	}

	oldServingCA := p.servingCA
	p.rotateServing(t)
	began := time.Now()
	eventually("new serving certificate", func() error { return call(p.servingCA, &p.good) })
	t.Logf("serving certificate reloaded in %s", time.Since(began).Round(time.Millisecond))
	if err := call(oldServingCA, &p.good); err == nil {
		t.Error("the old serving certificate is still served")
	}

	oldClient := p.good
	p.rotateClientCA(t)
	began = time.Now()
	eventually("new client CA", func() error { return call(p.servingCA, &p.good) })
	t.Logf("client CA reloaded in %s", time.Since(began).Round(time.Millisecond))
	if err := call(p.servingCA, &oldClient); err == nil || !(strings.Contains(err.Error(), "unknown certificate authority") || brokenByAlert(err)) {
		t.Errorf("a certificate of the replaced client CA: %v, want refused", err)
	}
}

// TestRunRefusesBadCertificates: unreadable or mismatched files fail Run at
// once with the file named, instead of a server that refuses every
// handshake.
func TestRunRefusesBadCertificates(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := p.tls()
	for name, tc := range map[string]struct {
		tls  TLS
		want string
	}{
		"missing certificate": {TLS{CertFile: filepath.Join(dir, "none.crt"), KeyFile: good.KeyFile}, "none.crt"},
		"key of another pair": {TLS{CertFile: good.CertFile, KeyFile: junk}, "serving certificate"},
		"client CA not PEM":   {TLS{CertFile: good.CertFile, KeyFile: good.KeyFile, ClientCAFile: junk}, "client CA " + junk},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := New(nil, Options{}).Run(ctx, HTTP{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", ShutdownTimeout: time.Second, TLS: tc.tls}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestSingleListener: without OpsListen every route is on Listen (the
// embedding form Handler also serves).
func TestSingleListener(t *testing.T) {
	stub := &stubVerbs{calls: make(chan string, 10)}
	verbs, _ := runServer(t, New(stub, Options{}), HTTP{})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + verbs + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
	}
	resp, err := http.Post("http://"+verbs+"/filter", "application/json", bytes.NewReader(filterBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || <-stub.calls != "filter" {
		t.Errorf("POST /filter = %d", resp.StatusCode)
	}
}

// TestVerbsOverOneHTTP2Connection: the verbs listener offers HTTP/2, so a
// client configured as kube-scheduler's extender client is (client-go's
// transport defaults, HTTP/2 allowed) makes concurrent calls over a single
// connection: one TLS handshake, not one per call beyond two idle
// HTTP/1.1 connections.
func TestVerbsOverOneHTTP2Connection(t *testing.T) {
	p := newPKI(t)
	stub := &stubVerbs{calls: make(chan string, 100)}
	verbs, _ := runServer(t, New(stub, Options{}), HTTP{OpsListen: "127.0.0.1:0", TLS: p.tls()})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.servingCA)
	pair, err := tls.X509KeyPair(p.good.CertPEM, p.good.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var handshakes atomic.Int32
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			handshakes.Add(1)
			return &pair, nil
		}}
	c := &http.Client{Timeout: 5 * time.Second, Transport: utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: cfg})}
	t.Cleanup(c.CloseIdleConnections)
	// The first call opens the connection (concurrent first calls may each
	// dial before one is up); the burst after it shares it.
	resp, err := c.Post("https://"+verbs+"/bind", "application/json", bytes.NewReader(bindBody))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var wg sync.WaitGroup
	protos := make(chan string, 40)
	for range 40 {
		wg.Go(func() {
			resp, err := c.Post("https://"+verbs+"/bind", "application/json", bytes.NewReader(bindBody))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Error(err)
				return
			}
			protos <- resp.Proto
		})
	}
	wg.Wait()
	close(protos)
	for p := range protos {
		if p != "HTTP/2.0" {
			t.Fatalf("a call went over %s, want HTTP/2.0", p)
		}
	}
	if n := handshakes.Load(); n != 1 {
		t.Errorf("41 calls, 40 of them concurrent, took %d TLS handshakes, want 1", n)
	}
	if n := len(stub.calls); n != 41 {
		t.Errorf("the decision layer got %d calls, want 41", n)
	}
}
