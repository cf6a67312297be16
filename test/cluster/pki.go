package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// CA is a throwaway certificate authority: an ECDSA P-256 key (generation
// takes microseconds) and a self-signed certificate (client-go's
// cert.NewSelfSignedCACert). Nothing outside the test trusts it.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert, PEM-encoded
	key  crypto.Signer
}

// ClientCert is a PEM certificate and key for one client identity.
type ClientCert struct {
	CertPEM, KeyPEM []byte
}

// NewCA creates a CA named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// Valid from an hour ago, as the certificates it issues.
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName, NotBefore: time.Now().Add(-time.Hour)}, key)
	if err != nil {
		return nil, err
	}
	p, err := cert.EncodeCertificates(c)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, PEM: p, key: key}, nil
}

// ServingCert is a serving certificate from a CA of its own, as a webhook
// or an extender is set up: CAPEM is what its clients trust (a webhook's
// caBundle, kube-scheduler's caFile).
type ServingCert struct {
	CAPEM, CertPEM, KeyPEM []byte
}

// Names of the files ServingCert.Files and ServingCert.Write lay out (a
// cert-manager Secret's keys).
const (
	CAFile   = "ca.crt"
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// NewServingCert issues a serving certificate for hosts (IP addresses or
// DNS names; with none, 127.0.0.1 and localhost) from a new CA, valid for
// one year. The pair is client-go's cert.GenerateSelfSignedCertKeyWithOptions
// (RSA); CertPEM is the certificate followed by its CA.
func NewServingCert(hosts ...string) (ServingCert, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	opts := cert.SelfSignedCertKeyOptions{Host: hosts[0]}
	for _, h := range hosts[1:] {
		if ip := net.ParseIP(h); ip != nil {
			opts.AlternateIPs = append(opts.AlternateIPs, ip)
		} else {
			opts.AlternateDNS = append(opts.AlternateDNS, h)
		}
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKeyWithOptions(opts)
	if err != nil {
		return ServingCert{}, fmt.Errorf("serving certificate for %v: %w", hosts, err)
	}
	chain, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return ServingCert{}, err
	}
	if len(chain) != 2 {
		return ServingCert{}, fmt.Errorf("serving certificate for %v: a chain of %d certificates, want the certificate and its CA", hosts, len(chain))
	}
	caPEM, err := cert.EncodeCertificates(chain[1])
	if err != nil {
		return ServingCert{}, err
	}
	return ServingCert{CAPEM: caPEM, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Files are the certificate as a Secret's data (SecretVolume.Write).
func (s ServingCert) Files() map[string][]byte {
	return map[string][]byte{CAFile: s.CAPEM, CertFile: s.CertPEM, KeyFile: s.KeyPEM}
}

// Write writes ca.crt, tls.crt and tls.key into dir, creating it if needed,
// and returns their paths in that order.
func (s ServingCert) Write(dir string) (caFile, certFile, keyFile string, err error) {
	caFile, certFile, keyFile = filepath.Join(dir, CAFile), filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if err := cert.WriteCert(caFile, s.CAPEM); err != nil {
		return "", "", "", err
	}
	if err := keyutil.WriteKey(keyFile, s.KeyPEM); err != nil {
		return "", "", "", err
	}
	if err := cert.WriteCert(certFile, s.CertPEM); err != nil {
		return "", "", "", err
	}
	return caFile, certFile, keyFile, nil
}

// pki is the cluster's throwaway public-key infrastructure: one CA that signs
// the API server's serving certificate and the client certificates, and the
// key pair that signs service-account tokens.
type pki struct {
	*CA

	// Paths of the files the processes read.
	caFile, servingCertFile, servingKeyFile, saPubFile, saKeyFile string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("rota-test-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{
		CA:              ca,
		caFile:          filepath.Join(dir, "ca.crt"),
		servingCertFile: filepath.Join(dir, "apiserver.crt"),
		servingKeyFile:  filepath.Join(dir, "apiserver.key"),
		saPubFile:       filepath.Join(dir, "sa.pub"),
		saKeyFile:       filepath.Join(dir, "sa.key"),
	}
	if err := os.WriteFile(p.caFile, p.PEM, 0o600); err != nil {
		return nil, err
	}

	serving, err := p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(serviceIP)},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCertFile, serving.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKeyFile, serving.KeyPEM, 0o600); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKeyFile, saKeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: saPubDER}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// ClientCert issues a client certificate for user in groups (the API server
// reads the common name as the user and the organizations as groups).
func (ca *CA) ClientCert(user string, groups ...string) (ClientCert, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// issue signs tmpl with the CA. client-go has no helper that signs with a
// given CA (its self-signed pair makes a CA of its own), so this is the
// one x509.CreateCertificate call; encoding is client-go's.
func (ca *CA) issue(tmpl *x509.Certificate) (ClientCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ClientCert{}, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("signing certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return ClientCert{}, err
	}
	certPEM, err := cert.EncodeCertificates(leaf)
	if err != nil {
		return ClientCert{}, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return ClientCert{}, err
	}
	return ClientCert{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux.
	}
	return n
}
