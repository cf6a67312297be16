package harness

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"time"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/test/cluster"
)

// ExtenderTLS is the mutual TLS of rota-extender's verbs, set up as the
// chart sets it up: a serving certificate for 127.0.0.1 from one test CA,
// and a client CA (the extender's --client-ca-file) that signed the one
// client certificate kube-scheduler presents.
type ExtenderTLS struct {
	// ServingCA verifies the extender's serving certificate (the
	// scheduler's caFile).
	ServingCA []byte
	// SchedulerCert is kube-scheduler's client certificate.
	SchedulerCert cluster.ClientCert
	// Files the processes read.
	ServingCAFile, ServingCertFile, ServingKeyFile    string
	ClientCAFile, SchedulerCertFile, SchedulerKeyFile string
}

// newExtenderTLS writes the certificates into dir.
func newExtenderTLS(dir string) (*ExtenderTLS, error) {
	serving, err := cluster.NewServingCert("127.0.0.1")
	if err != nil {
		return nil, err
	}
	servingCAFile, servingCertFile, servingKeyFile, err := serving.Write(filepath.Join(dir, "serving"))
	if err != nil {
		return nil, err
	}
	clientCA, err := cluster.NewCA("rota-extender-clients")
	if err != nil {
		return nil, err
	}
	sched, err := clientCA.ClientCert("rota-scheduler")
	if err != nil {
		return nil, err
	}
	t := &ExtenderTLS{
		ServingCA: serving.CAPEM, SchedulerCert: sched,
		ServingCAFile: servingCAFile, ServingCertFile: servingCertFile, ServingKeyFile: servingKeyFile,
		ClientCAFile:      filepath.Join(dir, "client-ca.crt"),
		SchedulerCertFile: filepath.Join(dir, "scheduler.crt"),
		SchedulerKeyFile:  filepath.Join(dir, "scheduler.key"),
	}
	for path, data := range map[string][]byte{t.ClientCAFile: clientCA.PEM, t.SchedulerCertFile: sched.CertPEM,
		t.SchedulerKeyFile: sched.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Args are rota-extender's TLS flags: serving certificate and client CA.
func (t *ExtenderTLS) Args() []string {
	return []string{"--tls-cert-file=" + t.ServingCertFile, "--tls-key-file=" + t.ServingKeyFile,
		"--client-ca-file=" + t.ClientCAFile}
}

// SchedulerTLS is kube-scheduler's tlsConfig for the extender entry.
func (t *ExtenderTLS) SchedulerTLS() extconfig.SchedulerTLS {
	return extconfig.SchedulerTLS{CertFile: t.SchedulerCertFile, KeyFile: t.SchedulerKeyFile, CAFile: t.ServingCAFile}
}

func (t *ExtenderTLS) clusterTLS() *cluster.ExtenderTLS {
	return &cluster.ExtenderTLS{CertFile: t.SchedulerCertFile, KeyFile: t.SchedulerKeyFile, CAFile: t.ServingCAFile}
}

// VerbsClient returns an HTTP client for the verbs listener that trusts
// its serving certificate and presents c, whatever CAs the server asks for
// (as client-go does); nil presents none. Each request opens a new
// connection.
func (t *ExtenderTLS) VerbsClient(c *cluster.ClientCert) (*http.Client, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(t.ServingCA)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if c != nil {
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}, nil
}
