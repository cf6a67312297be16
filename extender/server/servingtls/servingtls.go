// Package servingtls is the TLS of Rota's HTTPS listeners, rota-extender's
// verbs and rota-admission's webhooks: a serving certificate and, when
// given, a client CA that every client certificate must chain to, read from
// files and re-read whenever they change. The work is k8s.io/apiserver's
// dynamiccertificates (a file watch, and a check every minute): a
// cert-manager renewal or a kubelet Secret volume update needs no restart,
// and a pair that fails to load (a certificate replaced before its key)
// leaves the last good one in service.
//
// It lives beside rota-extender's server, which it was written for, and
// rota-admission imports it: it imports nothing of Rota's, so it carries
// neither service's code into the other; pkg/ cannot hold it (no TLS
// serving there).
package servingtls

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// Files are the PEM files a listener serves with.
type Files struct {
	// CertFile and KeyFile are the serving certificate (its chain may
	// follow it) and its key.
	CertFile, KeyFile string
	// ClientCAFile, when set, is the CA bundle a client's certificate must
	// chain to: a client without one is refused in the handshake.
	ClientCAFile string
}

// Config is one listener's TLS. Build it with Load; Run keeps it current.
// It is safe for concurrent use.
type Config struct {
	serving  *dynamiccertificates.DynamicCertKeyPairContent
	clientCA *dynamiccertificates.DynamicFileCAContent // nil without Files.ClientCAFile
	ctrl     *dynamiccertificates.DynamicServingCertificateController
}

// Load reads the files now: an unreadable file, a key that is not the
// certificate's, or a client CA that is not PEM is an error naming it.
// name prefixes the reloaders' names in the log ("rota-admission").
// nextProtos are the ALPN protocols offered in the handshake; with none,
// HTTP/1.1 is spoken.
func Load(name string, f Files, nextProtos ...string) (*Config, error) {
	serving, err := dynamiccertificates.NewDynamicServingContentFromFiles(name+"-serving", f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate %s, %s: %w", f.CertFile, f.KeyFile, err)
	}
	c := &Config{serving: serving}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	var caProvider dynamiccertificates.CAContentProvider
	if f.ClientCAFile != "" {
		if c.clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile(name+"-client-ca", f.ClientCAFile); err != nil {
			return nil, fmt.Errorf("client CA %s: %w", f.ClientCAFile, err)
		}
		caProvider = c.clientCA
		base.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c.ctrl = dynamiccertificates.NewDynamicServingCertificateController(base, caProvider, serving, nil, nil)
	serving.AddListener(c.ctrl)
	if c.clientCA != nil {
		c.clientCA.AddListener(c.ctrl)
	}
	if err := c.ctrl.RunOnce(); err != nil {
		return nil, fmt.Errorf("TLS configuration: %w", err)
	}
	return c, nil
}

// TLSConfig is the listener's http.Server.TLSConfig: every handshake gets
// the certificates as last loaded.
func (c *Config) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: c.ctrl.GetConfigForClient}
}

// Run re-reads the files whenever they change, until ctx ends.
func (c *Config) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.serving.Run(ctx, 1) })
	if c.clientCA != nil {
		wg.Go(func() { c.clientCA.Run(ctx, 1) })
	}
	wg.Go(func() { c.ctrl.Run(1, ctx.Done()) })
	wg.Wait()
}
