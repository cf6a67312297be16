package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	c := Default()
	c.Listen = "nope"
	c.Policy = "random"
	c.Domain = "Bad"
	c.TLSCertFile = "cert.pem"
	c.BindTTL = time.Second
	c.TierLabels = []string{"a", "a"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"listen:", "policy:", "domain:", "tls-cert-file and tls-key-file", "bind-ttl:", "tier-labels[1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, lacks %q", err, want)
		}
	}
}

// The verbs listener refuses to face other hosts without client
// certificates unless allow-unauthenticated-verbs says so; the ops listener
// needs its own address.
func TestValidateVerbsAuthentication(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" means valid
	}{
		{name: "loopback without TLS", edit: func(c *Config) { c.Listen = "127.0.0.1:8888" }},
		{name: "localhost without TLS", edit: func(c *Config) { c.Listen = "localhost:8888" }},
		{name: "IPv6 loopback without TLS", edit: func(c *Config) { c.Listen = "[::1]:8888" }},
		{name: "every interface without TLS", edit: func(c *Config) { c.Listen = ":8888" },
			wantErr: "anyone who reaches it can bind pods"},
		{name: "pod IP with TLS but no client CA", edit: func(c *Config) {
			c.Listen, c.TLSCertFile, c.TLSKeyFile = "10.1.2.3:8888", "tls.crt", "tls.key"
		}, wantErr: "anyone who reaches it can bind pods"},
		{name: "every interface with client certificates", edit: func(c *Config) {
			c.Listen, c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = ":8888", "tls.crt", "tls.key", "ca.crt"
		}},
		{name: "every interface, explicitly unauthenticated", edit: func(c *Config) {
			c.Listen, c.AllowUnauthenticatedVerbs = ":8888", true
		}},
		{name: "client CA without TLS", edit: func(c *Config) { c.ClientCAFile = "ca.crt" },
			wantErr: "client-ca-file: needs tls-cert-file"},
		{name: "ops listener on the verbs address", edit: func(c *Config) { c.OpsListen = c.Listen },
			wantErr: "ops-listen: \"127.0.0.1:8888\" is also listen"},
		{name: "ops listener not host:port", edit: func(c *Config) { c.OpsListen = "8889" }, wantErr: "ops-listen:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if tc.wantErr == "" && err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// With WithTLS the extender entry turns on HTTPS and names the client
// certificate, its key and the CA of the extender's serving certificate;
// without it there is no tlsConfig.
func TestSchedulerConfigTLS(t *testing.T) {
	var cfg struct {
		Extenders []struct {
			URLPrefix   string `json:"urlPrefix"`
			EnableHTTPS bool   `json:"enableHTTPS"`
			TLSConfig   *struct {
				CertFile   string `json:"certFile"`
				KeyFile    string `json:"keyFile"`
				CAFile     string `json:"caFile"`
				ServerName string `json:"serverName"`
			} `json:"tlsConfig"`
		}
	}
	out := SchedulerConfig("https://10.0.0.7:8888", "/k", WithTLS(SchedulerTLS{CertFile: "/c.crt", KeyFile: "/c.key",
		CAFile: "/ca.crt", ServerName: "rota-extender.rota-system.svc"}))
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	e := cfg.Extenders[0]
	if !e.EnableHTTPS || e.TLSConfig == nil || e.TLSConfig.CertFile != "/c.crt" || e.TLSConfig.KeyFile != "/c.key" ||
		e.TLSConfig.CAFile != "/ca.crt" || e.TLSConfig.ServerName != "rota-extender.rota-system.svc" {
		t.Errorf("extender entry with TLS = %+v\n%s", e, out)
	}
	cfg.Extenders = nil
	if err := yaml.Unmarshal([]byte(SchedulerConfig("http://127.0.0.1:8888", "/k")), &cfg); err != nil {
		t.Fatal(err)
	}
	if e := cfg.Extenders[0]; e.EnableHTTPS || e.TLSConfig != nil {
		t.Errorf("extender entry without WithTLS = %+v", e)
	}
}

// The samples in deploy/scheduler are for a cluster's own kube-scheduler
// calling the chart's extender: its Service name, and the chart's client
// certificate Secret (rota-scheduler-tls) copied to the control-plane host.
const sampleURL = "https://rota-extender.rota-system.svc:8888"

var sampleTLS = SchedulerTLS{CertFile: "/etc/kubernetes/rota/tls.crt", KeyFile: "/etc/kubernetes/rota/tls.key",
	CAFile: "/etc/kubernetes/rota/ca.crt", ServerName: "rota-extender.rota-system.svc"}

func TestSchedulerConfig(t *testing.T) {
	out := SchedulerConfig("http://127.0.0.1:8888/", "/kubeconfig", WithWeight(5), WithDomain("gpu.acme.io"))
	var cfg struct {
		Kind             string
		ClientConnection struct{ Kubeconfig string }
		Extenders        []struct {
			URLPrefix                                         string `json:"urlPrefix"`
			FilterVerb, PrioritizeVerb, BindVerb, PreemptVerb string
			Weight                                            int64
			NodeCacheCapable, Ignorable                       bool
			HTTPTimeout                                       string `json:"httpTimeout"`
			ManagedResources                                  []struct {
				Name               string
				IgnoredByScheduler bool `json:"ignoredByScheduler"`
			} `json:"managedResources"`
		}
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != "KubeSchedulerConfiguration" || cfg.ClientConnection.Kubeconfig != "/kubeconfig" || len(cfg.Extenders) != 1 {
		t.Fatalf("config = %s", out)
	}
	e := cfg.Extenders[0]
	if e.URLPrefix != "http://127.0.0.1:8888" || e.FilterVerb != "filter" || e.PrioritizeVerb != "prioritize" ||
		e.BindVerb != "bind" || e.PreemptVerb != "preempt" || e.Weight != 5 || !e.NodeCacheCapable || e.Ignorable ||
		e.HTTPTimeout != "5s" || len(e.ManagedResources) != 2 ||
		e.ManagedResources[0].Name != "gpu.acme.io/gpu" || e.ManagedResources[0].IgnoredByScheduler ||
		e.ManagedResources[1].Name != "gpu.acme.io/gpu-memory" || e.ManagedResources[1].IgnoredByScheduler {
		t.Errorf("extender entry = %+v", e)
	}
}

// TestDeploySample keeps deploy/scheduler/scheduler-config.yaml in step
// with SchedulerConfig.
func TestDeploySample(t *testing.T) {
	data, err := os.ReadFile("../../deploy/scheduler/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := SchedulerConfig(sampleURL, "/etc/kubernetes/scheduler.conf", WithTLS(sampleTLS))
	body := string(data)
	if i := strings.Index(body, "apiVersion:"); i > 0 {
		body = body[i:] // skip the comment header
	}
	if body != want {
		t.Errorf("deploy/scheduler/scheduler-config.yaml is stale; regenerate it with SchedulerConfig:\n%s", want)
	}
}
