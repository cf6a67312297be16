package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadWorkload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w, err := LoadWorkload(write("ok.yaml", "- {milli: 500, weight: 0.2}\n- {gpus: 1, weight: 0.8}\n"))
	if err != nil || len(w) != 2 || w[0].Milli != 500 || w[1].GPUs != 1 {
		t.Fatalf("LoadWorkload = %+v, %v", w, err)
	}
	if w, err := LoadWorkload(""); w != nil || err != nil {
		t.Errorf("empty path = %+v, %v; want the default (nil, nil)", w, err)
	}
	for name, body := range map[string]string{
		"unknown.yaml": "- {gpu: 1, weight: 1}\n",
		"both.yaml":    "- {gpus: 1, milli: 500, weight: 1}\n",
		"empty.yaml":   "[]\n",
		"bad.yaml":     "{{{\n",
	} {
		if _, err := LoadWorkload(write(name, body)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}
	if _, err := LoadWorkload(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}
