// Package certs serves the webhook's TLS certificate, re-reading it when the
// files change on disk (a cert-manager or kubelet secret rotation), and
// generates a throwaway CA and serving certificate for tests and the local
// control plane.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names Generate writes.
const (
	CAFile   = "ca.crt"
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Bundle is what Generate wrote.
type Bundle struct {
	// CAPEM is the CA certificate: the caBundle of a
	// ValidatingWebhookConfiguration.
	CAPEM []byte
	// Paths of the files written.
	CAFile, CertFile, KeyFile string
}

// Generate writes a new self-signed CA (ca.crt) and a serving certificate
// and key signed by it (tls.crt, tls.key) into dir, creating dir if needed.
// The certificate is valid for the given hosts (IP addresses or DNS names);
// with none, for 127.0.0.1 and localhost. Both are valid for one year. Use
// the files with --tls-cert-file and --tls-key-file and Bundle.CAPEM as the
// webhook's caBundle.
func Generate(dir string, hosts ...string) (Bundle, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Bundle{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, fmt.Errorf("generating the CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "rota-admission-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return Bundle{}, fmt.Errorf("signing the CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Bundle{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, fmt.Errorf("generating the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return Bundle{}, fmt.Errorf("signing the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Bundle{}, err
	}
	b := Bundle{
		CAPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAFile:   filepath.Join(dir, CAFile),
		CertFile: filepath.Join(dir, CertFile),
		KeyFile:  filepath.Join(dir, KeyFile),
	}
	// Write the key before the certificate: a Reloader that sees the new
	// certificate then finds its key (it retries on a mismatch anyway).
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{b.CAFile, b.CAPEM, 0o644},
		{b.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{b.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
	} {
		if err := writeAtomic(f.path, f.data, f.mode); err != nil {
			return Bundle{}, err
		}
	}
	return b, nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// Reloader serves a certificate from files, re-reading them when their
// modification time or size changes. Build it with NewReloader. It is safe
// for concurrent use.
type Reloader struct {
	certFile, keyFile string
	// minCheck spaces out the stat calls under many handshakes.
	minCheck time.Duration

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string
	lastCheck time.Time
	lastErr   error
}

// NewReloader loads the certificate once; it fails if the files are not a
// valid pair.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, minCheck: time.Second}
	stamp, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	r.cert, r.stamp, r.lastCheck = &cert, stamp, time.Now()
	return r, nil
}

func (r *Reloader) stat() (string, error) {
	var stamp string
	for _, p := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return stamp, nil
}

// GetCertificate is tls.Config.GetCertificate: it returns the current
// certificate, reloading it first when the files changed. A pair that
// fails to load (say, the certificate was replaced but not the key yet)
// keeps the previous certificate in service and is retried.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.lastCheck) < r.minCheck {
		return r.cert, nil
	}
	r.lastCheck = now
	stamp, err := r.stat()
	if err != nil {
		r.lastErr = err
		return r.cert, nil
	}
	if stamp == r.stamp {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.lastErr = fmt.Errorf("reloading the serving certificate: %w", err)
		return r.cert, nil
	}
	r.cert, r.stamp, r.lastErr = &cert, stamp, nil
	return r.cert, nil
}

// Err returns the last reload problem, or nil once a reload succeeded.
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}
