package cluster

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestSchedulerConfigDefault(t *testing.T) {
	out, err := schedulerConfig("", "/tmp/k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["apiVersion"] != schedulerConfigAPIVersion || cfg["kind"] != "KubeSchedulerConfiguration" {
		t.Errorf("config header = %v %v", cfg["apiVersion"], cfg["kind"])
	}
	if got := cfg["clientConnection"].(map[string]any)["kubeconfig"]; got != "/tmp/k" {
		t.Errorf("kubeconfig = %v, want /tmp/k", got)
	}
	if got := cfg["leaderElection"].(map[string]any)["leaderElect"]; got != false {
		t.Errorf("leaderElect = %v, want false", got)
	}
}

func TestSchedulerConfigTemplateAndExtender(t *testing.T) {
	tmpl := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{{.Kubeconfig}}"
leaderElection:
  leaderElect: true
profiles:
- schedulerName: rota
`
	out, err := schedulerConfig(tmpl, "/x/sched.kubeconfig", &Extender{
		URL: "http://127.0.0.1:1234/rota", FilterVerb: "filter", PrioritizeVerb: "prioritize",
		BindVerb: "bind", NodeCacheCapable: true, HTTPTimeout: 3 * time.Second,
		ManagedResources: []ManagedResource{{Name: "example.com/gpu", IgnoredByScheduler: false}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"kubeconfig: /x/sched.kubeconfig", "leaderElect: false", "schedulerName: rota",
		"urlPrefix: http://127.0.0.1:1234/rota", "filterVerb: filter", "bindVerb: bind",
		"weight: 1", "httpTimeout: 3s", "nodeCacheCapable: true", "name: example.com/gpu",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "preemptVerb") {
		t.Errorf("config has a preemptVerb although none was set:\n%s", s)
	}
}

func TestSchedulerConfigBadTemplate(t *testing.T) {
	if _, err := schedulerConfig("{{.Nope}}", "/k", nil, nil); err == nil {
		t.Error("want an error for an unknown template field")
	}
}

// ExtenderTLS reaches every extender entry that has no tlsConfig of its own
// (a template's and Options.Extender's); one with its own keeps it.
func TestSchedulerConfigExtenderTLS(t *testing.T) {
	tmpl := `extenders:
- urlPrefix: https://127.0.0.1:1/a
  filterVerb: filter
- urlPrefix: https://127.0.0.1:2/b
  filterVerb: filter
  enableHTTPS: true
  tlsConfig: {certFile: /own.crt, keyFile: /own.key, caFile: /own-ca.crt}
`
	all := &ExtenderTLS{CertFile: "/c.crt", KeyFile: "/c.key", CAFile: "/ca.crt", ServerName: "rota-extender"}
	out, err := schedulerConfig(tmpl, "/k", &Extender{URL: "https://127.0.0.1:3/c", FilterVerb: "filter"}, all)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Extenders []struct {
			URLPrefix   string `json:"urlPrefix"`
			EnableHTTPS bool   `json:"enableHTTPS"`
			TLSConfig   struct {
				CertFile   string `json:"certFile"`
				CAFile     string `json:"caFile"`
				ServerName string `json:"serverName"`
			} `json:"tlsConfig"`
		}
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Extenders) != 3 {
		t.Fatalf("extenders = %+v", cfg.Extenders)
	}
	for i, want := range []string{"/c.crt", "/own.crt", "/c.crt"} {
		e := cfg.Extenders[i]
		if !e.EnableHTTPS || e.TLSConfig.CertFile != want {
			t.Errorf("extender %s: enableHTTPS %v certFile %q, want true %q", e.URLPrefix, e.EnableHTTPS, e.TLSConfig.CertFile, want)
		}
	}
	if e := cfg.Extenders[0]; e.TLSConfig.CAFile != "/ca.crt" || e.TLSConfig.ServerName != "rota-extender" {
		t.Errorf("tlsConfig = %+v", e.TLSConfig)
	}
}
