package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/util/cert"
)

func TestPKI(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	client, err := p.ClientCert("system:kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.Cert)
	for _, tc := range []struct {
		file  string
		usage x509.ExtKeyUsage
		host  string
	}{
		{p.servingCertFile, x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"", x509.ExtKeyUsageClientAuth, ""},
	} {
		data := client.CertPEM
		if tc.file != "" {
			if data, err = os.ReadFile(tc.file); err != nil {
				t.Fatal(err)
			}
		}
		certs, err := cert.ParseCertsPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s: %v", certs[0].Subject.CommonName, err)
		}
	}
	if _, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM); err != nil {
		t.Errorf("the client certificate and its key are not a pair: %v", err)
	}
}

// TestServingCert: the certificate is valid for the hosts it was made for
// and no others, its CA verifies it, and Write lays out a pair that loads.
func TestServingCert(t *testing.T) {
	s, err := NewServingCert("rota-admission.rota-system.svc", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	caFile, certFile, keyFile, err := s.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")},
		[]string{caFile, certFile, keyFile}); diff != "" {
		t.Errorf("Write paths (-want +got):\n%s", diff)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cert.NewPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"rota-admission.rota-system.svc", "10.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err == nil {
		t.Error("the certificate is valid for a host it was not made for")
	}

	def, err := NewServingCert()
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(def.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if err := certs[0].VerifyHostname(host); err != nil {
			t.Errorf("default hosts: %v", err)
		}
	}
}
