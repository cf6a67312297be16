package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The configuration file sets flags by name, read by each flag's own
// parser; the command line overrides it, wherever --config stands.
func TestConfigFileThenFlags(t *testing.T) {
	path := writeConfig(t, `apiVersion: rota.config/v1alpha1
kind: ExtenderConfiguration
flags:
  bind-ttl: 45s
  gang-ttl: 3m
  queue: true
  kube-api-qps: 250
  tier-labels: [example.com/leaf, topology.kubernetes.io/zone, example.com/pod]
  remediation: dry-run
`)
	cfg, rcfg, err := parseFlags([]string{"--gang-ttl=4m", "--config", path})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BindTTL != 45*time.Second || !cfg.Queue.Enabled || cfg.QPS != 250 || string(rcfg.Mode) != "dry-run" {
		t.Errorf("from the file: bind-ttl %v, queue %t, qps %v, remediation %s", cfg.BindTTL, cfg.Queue.Enabled, cfg.QPS, rcfg.Mode)
	}
	if cfg.GangTTL != 4*time.Minute {
		t.Errorf("gang-ttl = %v; the command line's 4m must win over the file's 3m", cfg.GangTTL)
	}
	if want := []string{"example.com/leaf", "topology.kubernetes.io/zone", "example.com/pod"}; !slices.Equal(cfg.TierLabels, want) {
		t.Errorf("tier-labels = %v; want %v", cfg.TierLabels, want)
	}
}

// A file that is not a configuration Rota knows, or names a flag that does
// not exist or a value its flag refuses, is an error that names the field.
func TestConfigFileRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"old version", "apiVersion: rota.config/v0\nkind: ExtenderConfiguration\nflags: {}\n", "apiVersion"},
		{"unknown flag", "apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  reservation-ttl: 30s\n", "flags.reservation-ttl: no such flag"},
		{"bad value", "apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  bind-ttl: soon\n", "flags.bind-ttl"},
		{"unknown field", "apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflag:\n  queue: true\n", "unknown field"},
		{"nested", "apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  queue: {on: true}\n", "flags.queue"},
		{"itself", "apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  config: other.yaml\n", "flags.config"},
	} {
		_, _, err := parseFlags([]string{"--config=" + writeConfig(t, tc.body)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want one naming %q", tc.name, err, tc.want)
		}
	}
}
