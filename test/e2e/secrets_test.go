//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

const secretsScenario = "no-secrets-in-logs"

// keyDataRE finds base64 key material in kubeconfigs (client-key-data).
var keyDataRE = regexp.MustCompile(`(?m)^\s*client-key-data:\s*(\S+)`)

// runSecretsCheck runs after the scenarios: no log of a Rota process holds
// key material of the run (private keys of the PKI, the webhook's serving
// key, the client keys in the kubeconfigs Rota used) or a bearer token.
func runSecretsCheck() bool {
	fmt.Println("=== RUN   Secrets (no key material or token in Rota's logs)")
	var secrets []string
	var logs []string
	err := filepath.WalkDir(env.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "etcd" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() { // sockets of the device plugins and kubelet stand-ins
			return nil
		}
		if strings.HasSuffix(path, ".log") {
			if strings.HasPrefix(d.Name(), "rota-") {
				logs = append(logs, path)
			}
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		secrets = append(secrets, keyMaterial(data)...)
		return nil
	})
	var failures []string
	if err != nil {
		failures = append(failures, "walking "+env.Dir+": "+err.Error())
	}
	if len(secrets) == 0 || len(logs) == 0 {
		failures = append(failures, fmt.Sprintf("found %d secrets and %d Rota logs to check; want both", len(secrets), len(logs)))
	}
	var bytesScanned int
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		bytesScanned += len(data)
		for _, marker := range []string{"PRIVATE KEY", "Bearer "} {
			if bytes.Contains(data, []byte(marker)) {
				failures = append(failures, fmt.Sprintf("%s contains %q", filepath.Base(path), marker))
			}
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				failures = append(failures, fmt.Sprintf("%s contains key material (%.8s...)", filepath.Base(path), s))
			}
		}
	}
	return reportCheck("Secrets", secretsScenario,
		fmt.Sprintf("%d Rota logs (%d KiB) checked for %d keys and bearer tokens", len(logs), bytesScanned/1024, len(secrets)), failures)
}

// keyMaterial returns distinctive pieces of the private keys in data: the
// first base64 line of each PEM private key, and the first 48 characters of
// each kubeconfig client-key-data.
func keyMaterial(data []byte) []string {
	var out []string
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.Contains(l, "PRIVATE KEY-----") && strings.HasPrefix(l, "-----BEGIN") && i+1 < len(lines) && len(lines[i+1]) >= 32 {
			out = append(out, lines[i+1])
		}
	}
	for _, m := range keyDataRE.FindAllSubmatch(data, -1) {
		if len(m[1]) >= 48 {
			out = append(out, string(m[1][:48]))
		}
	}
	return out
}
