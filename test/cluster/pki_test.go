package cluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
)

func TestPKI(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.ClientCert("system:kube-scheduler")
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
		data := cert.CertPEM
		if tc.file != "" {
			if data, err = os.ReadFile(tc.file); err != nil {
				t.Fatal(err)
			}
		}
		block, _ := pem.Decode(data)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s: %v", c.Subject.CommonName, err)
		}
	}
}
