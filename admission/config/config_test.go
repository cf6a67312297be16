package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

func TestValidate(t *testing.T) {
	ok := Default()
	ok.TLSCertFile, ok.TLSKeyFile, ok.Identity = "c", "k", "me"
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate() of a good config = %v", err)
	}
	bad := ok
	bad.Listen, bad.TLSKeyFile, bad.Domain, bad.RenewDeadline, bad.Identity = "nope", "", "EXAMPLE", time.Hour, ""
	bad.SuspendJobs = "everywhere"
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate() of a bad config = nil")
	}
	for _, want := range []string{"--listen=nope", "--tls-cert-file and --tls-key-file are required", "--domain=EXAMPLE", "--leader-elect-renew-deadline", "--identity", "--suspend-jobs=everywhere"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %q", err, want)
		}
	}
}

// TestSampleQuotaConfig parses the documented example in deploy/admission.
func TestSampleQuotaConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "admission", "quota-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The ConfigMap's data block is indented under "quota.yaml: |".
	_, doc, found := strings.Cut(string(data), "quota.yaml: |\n")
	if !found {
		t.Fatal("quota-config.yaml has no quota.yaml key")
	}
	var lines []string
	for _, l := range strings.Split(doc, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	c, err := ParseQuota([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("the sample does not parse: %v", err)
	}
	if v, ok := c.Teams["vision"]; !ok || v.GPUs != 64 || v.GPUMemoryGiB != 512 || v.Borrow.GPUs != 16 {
		t.Errorf("sample team vision = %+v", v)
	}
	r, inf := c.Teams["research"], c.Teams["inference"]
	if !c.QueueingEnabled() || r.EffectiveWeight() != 2 || r.QueueCap() != 200 || c.Teams["nlp"].QueueCap() != quota.DefaultMaxQueuedPods {
		t.Errorf("sample queueing %q, research %+v", c.Queueing, r)
	}
	h100 := quota.Account{Team: "inference", Model: "NVIDIA H100 80GB HBM3"}
	if len(inf.Models) != 2 || c.ReachableAccount(h100).GPUs != 24 {
		t.Errorf("sample team inference = %+v, reach of %v %+v (want 16 + 8 from its model pool)", inf, h100, c.ReachableAccount(h100))
	}
}

func TestParseQuota(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    quota.Config
		wantErr string
	}{
		{name: "yaml", give: "teams:\n  a: {gpus: 2}\nunknownTeams: unlimited\n",
			want: quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 2}}, UnknownTeams: quota.UnlimitedUnknown}},
		{name: "json", give: `{"teams":{"a":{"gpus":2}}}`, want: quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 2}}}},
		{name: "empty document", give: "", want: quota.Config{}},
		{name: "duplicate key", give: "teams:\n  a: {gpus: 1}\n  a: {gpus: 2}\n", wantErr: "not valid YAML"},
		{name: "unknown field", give: "teams:\n  a: {gpu: 1}\n", wantErr: `unknown field "gpu"`},
		{name: "negative", give: "sharedPool: {gpus: -1}\n", wantErr: "sharedPool.gpus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseQuota([]byte(tc.give))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseQuota() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseQuota() error = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseQuota() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseQuota(f *testing.F) {
	f.Add([]byte("teams:\n  vision:\n    gpus: 64\n    gpuMemoryGiB: 512\n    borrow: {gpus: 16}\n    maxPriority: 1000\nsharedPool: {gpus: 32}\n"))
	f.Add([]byte("teams: {a: {gpus: 1}}\nallowPodTeamOverride: true\nunknownTeams: deny\n"))
	f.Add([]byte("- 1\n- 2\n"))
	f.Add([]byte("a: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseQuota(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseQuota accepted an invalid config: %v", err)
		}
	})
}

func TestQueueControllers(t *testing.T) {
	if got := ParseUsers(" a, b ,,c "); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("ParseUsers = %q", got)
	}
	if got := ParseUsers(""); got != nil {
		t.Errorf("ParseUsers(\"\") = %q, want none", got)
	}
	c := Default()
	c.TLSCertFile, c.TLSKeyFile, c.Identity = "c", "k", "me"
	if got := c.QueueControllerUsers(); !reflect.DeepEqual(got, []string{"system:serviceaccount:rota-system:rota-extender"}) {
		t.Errorf("default = %q", got)
	}
	c.QueueControllers = []string{"x", "has space"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--queue-controller-users") {
		t.Errorf("Validate with a user name holding a space = %v", err)
	}
	c.QueueControllers = []string{"x"}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
}
