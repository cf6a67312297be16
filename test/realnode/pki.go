package realnode

import (
	"os"
	"path/filepath"

	"github.com/rota-sched/rota/test/cluster"
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
	ca, err := cluster.NewCA("rota-realnode-kubelet-client-ca")
	if err != nil {
		return nil, err
	}
	// The kubelet authorizes every authenticated client (AlwaysAllow); the
	// name shows up in its logs.
	cert, err := ca.ClientCert("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	p := &kubeletClientPKI{
		caFile:   filepath.Join(dir, "kubelet-client-ca.crt"),
		certFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		keyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	for path, data := range map[string][]byte{p.caFile: ca.PEM, p.certFile: cert.CertPEM, p.keyFile: cert.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
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
