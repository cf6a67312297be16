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
	c.ReservationTTL = time.Second
	c.TierLabels = []string{"a", "a"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"listen:", "policy:", "domain:", "tls-cert-file and tls-key-file", "reservation-ttl:", "tier-labels[1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, lacks %q", err, want)
		}
	}
}

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
	want := SchedulerConfig("http://127.0.0.1:8888", "/etc/kubernetes/scheduler.conf")
	body := string(data)
	if i := strings.Index(body, "apiVersion:"); i > 0 {
		body = body[i:] // skip the comment header
	}
	if body != want {
		t.Errorf("deploy/scheduler/scheduler-config.yaml is stale; regenerate it with SchedulerConfig:\n%s", want)
	}
}
