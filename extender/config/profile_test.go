package config

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestSchedulerProfile(t *testing.T) {
	var cfg struct {
		PercentageOfNodesToScore int `json:"percentageOfNodesToScore"`
		Extenders                []struct {
			Weight     int64  `json:"weight"`
			URLPrefix  string `json:"urlPrefix"`
			BindVerb   string `json:"bindVerb"`
			FilterVerb string `json:"filterVerb"`
		} `json:"extenders"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			Plugins       struct {
				Score struct {
					Disabled []struct{ Name string } `json:"disabled"`
				} `json:"score"`
			} `json:"plugins"`
			PluginConfig []struct {
				Name string `json:"name"`
				Args struct {
					ScoringStrategy struct {
						Type      string `json:"type"`
						Resources []struct {
							Name   string `json:"name"`
							Weight int    `json:"weight"`
						} `json:"resources"`
					} `json:"scoringStrategy"`
				} `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	out := SchedulerProfile("http://127.0.0.1:8888/", "/k")
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if cfg.PercentageOfNodesToScore != 0 || strings.Contains(out, "percentageOfNodesToScore") {
		t.Errorf("percentageOfNodesToScore = %d, want it left to kube-scheduler's adaptive default", cfg.PercentageOfNodesToScore)
	}
	if w := SchedulerProfile("http://x", "/k", WithPercentageOfNodesToScore(100)); !strings.Contains(w, "percentageOfNodesToScore: 100\n") {
		t.Errorf("WithPercentageOfNodesToScore(100) ignored:\n%s", w)
	}
	if len(cfg.Extenders) != 1 || cfg.Extenders[0].Weight != ProfileWeight || cfg.Extenders[0].URLPrefix != "http://127.0.0.1:8888" ||
		cfg.Extenders[0].BindVerb != "bind" || cfg.Extenders[0].FilterVerb != "filter" {
		t.Errorf("extenders = %+v", cfg.Extenders)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Fatalf("profiles = %+v", cfg.Profiles)
	}
	p := cfg.Profiles[0]
	var disabled []string
	for _, d := range p.Plugins.Score.Disabled {
		disabled = append(disabled, d.Name)
	}
	if strings.Join(disabled, ",") != strings.Join(ProfileDisabledScorePlugins, ",") {
		t.Errorf("disabled score plugins = %v", disabled)
	}
	if len(p.PluginConfig) != 1 || p.PluginConfig[0].Name != "NodeResourcesFit" ||
		p.PluginConfig[0].Args.ScoringStrategy.Type != "MostAllocated" || len(p.PluginConfig[0].Args.ScoringStrategy.Resources) != 2 {
		t.Errorf("pluginConfig = %+v", p.PluginConfig)
	}
	if w := SchedulerProfile("http://x", "/k", WithWeight(7)); !strings.Contains(w, "weight: 7\n") {
		t.Errorf("WithWeight(7) ignored:\n%s", w)
	}
	// Every pod reaches the extender (no managedResources) unless asked.
	if strings.Contains(out, "managedResources") {
		t.Errorf("the profile limits the extender to GPU pods:\n%s", out)
	}
	if w := SchedulerProfile("http://x", "/k", WithGPUFreePods(false)); !strings.Contains(w, "managedResources") {
		t.Errorf("WithGPUFreePods(false) ignored:\n%s", w)
	}
	if w := SchedulerConfig("http://x", "/k"); !strings.Contains(w, "managedResources") {
		t.Errorf("SchedulerConfig sends GPU-free pods by default:\n%s", w)
	}
}

// TestDeployProfileSample keeps deploy/scheduler/rota-profile.yaml in step
// with SchedulerProfile.
func TestDeployProfileSample(t *testing.T) {
	data, err := os.ReadFile("../../deploy/scheduler/rota-profile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := SchedulerProfile(sampleURL, "/etc/kubernetes/scheduler.conf", WithTLS(sampleTLS))
	body := string(data)
	if i := strings.Index(body, "apiVersion:"); i > 0 {
		body = body[i:]
	}
	if body != want {
		t.Errorf("deploy/scheduler/rota-profile.yaml is stale; regenerate it with SchedulerProfile:\n%s", want)
	}
}
