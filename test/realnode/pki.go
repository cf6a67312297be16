package realnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// kubeletClientPKI is what the API server needs to call the kubelet (logs,
// exec): a CA the kubelet trusts for client certificates, and a client
// certificate it signed for the API server. It is separate from the
// control plane's CA, so it can be made before the control plane starts
// and passed in as kube-apiserver flags.
type kubeletClientPKI struct {
	caFile, certFile, keyFile string
}

func newKubeletClientPKI(dir string) (*kubeletClientPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rota-realnode-kubelet-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		// The kubelet authorizes every authenticated client (AlwaysAllow);
		// the name shows up in its logs.
		Subject:   pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	p := &kubeletClientPKI{
		caFile:   filepath.Join(dir, "kubelet-client-ca.crt"),
		certFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		keyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	for path, block := range map[string]*pem.Block{
		p.caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		p.certFile: {Type: "CERTIFICATE", Bytes: der},
		p.keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// apiServerArgs are the kube-apiserver flags that let it reach this
// kubelet: by host name (which resolves to 127.0.0.1; the kubelet's node IP
// may not be loopback) with the client certificate.
func (p *kubeletClientPKI) apiServerArgs() []string {
	return []string{
		"--kubelet-preferred-address-types=Hostname,InternalIP",
		"--kubelet-client-certificate=" + p.certFile,
		"--kubelet-client-key=" + p.keyFile,
	}
}
