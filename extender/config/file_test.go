package config

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzApplyFile: any file either sets flags their own parsers accept or
// fails with an error; it never panics, and a failed file sets nothing.
func FuzzApplyFile(f *testing.F) {
	f.Add([]byte("apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  ttl: 30s\n  on: true\n  names: [a, b]\n"))
	f.Add([]byte("apiVersion: rota.config/v1alpha1\nkind: ExtenderConfiguration\nflags:\n  ttl: 1\n  n: 1.5e3\n"))
	f.Add([]byte("{\"apiVersion\":\"rota.config/v1alpha1\",\"kind\":\"ExtenderConfiguration\",\"flags\":{\"on\":[[1]]}}"))
	f.Add([]byte("flags: !!binary AAAA"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Skip(err)
		}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		ttl := fs.Duration("ttl", time.Second, "")
		on := fs.Bool("on", false, "")
		names := fs.String("names", "", "")
		n := fs.Float64("n", 0, "")
		if err := ApplyFile(fs, path); err != nil {
			if *ttl != time.Second || *on || *names != "" || *n != 0 {
				t.Fatalf("a refused file set flags: %v", err)
			}
		}
	})
}
