package quota

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/contract"
)

func ptr[T any](v T) *T { return &v }

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		want     Config
		wantErrs []string // substrings, one per expected problem
	}{
		{
			name: "full",
			give: `{"teams":{"vision":{"gpus":64,"gpuMemoryGiB":512,"borrow":{"gpus":16,"gpuMemoryGiB":128},"maxPriority":1000}},
				"sharedPool":{"gpus":32,"gpuMemoryGiB":256},"allowPodTeamOverride":true,"unknownTeams":"unlimited"}`,
			want: Config{
				Teams: map[string]Team{"vision": {GPUs: 64, GPUMemoryGiB: 512,
					Borrow: Limits{GPUs: 16, GPUMemoryGiB: 128}, MaxPriority: ptr[int32](1000)}},
				SharedPool:           Limits{GPUs: 32, GPUMemoryGiB: 256},
				AllowPodTeamOverride: true,
				UnknownTeams:         UnlimitedUnknown,
			},
		},
		{name: "empty object", give: `{}`, want: Config{}},
		{name: "not JSON", give: `teams: [`, wantErrs: []string{"is not a valid quota document"}},
		{name: "unknown field", give: `{"team":{}}`, wantErrs: []string{`unknown field "team"`}},
		{name: "trailing data", give: `{} {}`, wantErrs: []string{"has data after the document"}},
		{name: "fractional GPUs", give: `{"teams":{"a":{"gpus":1.5}}}`, wantErrs: []string{"is not a valid quota document"}},
		{
			name: "every problem at once",
			give: `{"teams":{"a":{"gpus":-1,"borrow":{"gpuMemoryGiB":-2}},"bad name!":{}},"sharedPool":{"gpus":-3},"unknownTeams":"maybe"}`,
			wantErrs: []string{
				`unknownTeams: "maybe" is not a known policy`,
				`sharedPool.gpus: "-3" is out of range`,
				`teams.a.gpus: "-1" is out of range`,
				`teams.a.borrow.gpuMemoryGiB: "-2" is out of range`,
				`teams: "bad name!" is not a valid team name`,
			},
		},
		{name: "too large", give: `{"x":"` + strings.Repeat("a", MaxConfigBytes) + `"}`, wantErrs: []string{"is too large"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.give))
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Parse() error = %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Parse() (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse() = %+v, want errors %q", got, tc.wantErrs)
			}
			for _, w := range tc.wantErrs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse() error = %q, want it to contain %q", err, w)
				}
			}
			var fe *contract.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("Parse() error %T is not a *contract.FieldError", err)
			}
		})
	}
}

func TestConfigHelpers(t *testing.T) {
	c := Config{
		Teams: map[string]Team{
			"vision": {GPUs: 64, GPUMemoryGiB: 8, Borrow: Limits{GPUs: 16, GPUMemoryGiB: 100}},
			"nlp":    {GPUs: 10, MaxPriority: ptr[int32](100)},
		},
		SharedPool: Limits{GPUs: 32, GPUMemoryGiB: 4},
	}
	if got, want := c.Reachable("vision"), (Amount{GPUs: 80, MemoryMiB: 12 * 1024}); got != want {
		t.Errorf("Reachable(vision) = %v, want %v", got, want)
	}
	if got := c.Reachable("nobody"); !got.IsZero() {
		t.Errorf("Reachable(nobody) = %v, want zero", got)
	}
	if c.Policy() != DenyUnknown {
		t.Errorf("Policy() = %q, want deny by default", c.Policy())
	}
	nlp, _ := c.Team("nlp")
	if !nlp.PriorityAllowed(100) || nlp.PriorityAllowed(101) {
		t.Errorf("PriorityAllowed around ceiling 100 is wrong")
	}
	if v, _ := c.Team("vision"); !v.PriorityAllowed(1 << 30) {
		t.Errorf("a team without a ceiling must allow any priority")
	}
	usage := map[string]Usage{
		"vision": {Running: Amount{GPUs: 70}, Pending: Amount{MemoryMiB: 9 * 1024}},
		"nlp":    {Running: Amount{GPUs: 5}},
		"other":  {Running: Amount{GPUs: 1000}}, // not configured: not charged to the pool
	}
	if got, want := c.PoolUsed(usage), (Amount{GPUs: 6, MemoryMiB: 1024}); got != want {
		t.Errorf("PoolUsed() = %v, want %v", got, want)
	}
}

func TestParseRoundTrip(t *testing.T) {
	c := Config{Teams: map[string]Team{"a": {GPUs: 1, Borrow: Limits{GPUs: 2}}}, SharedPool: Limits{GPUs: 3}}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)) error = %v", err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"teams":{"vision":{"gpus":64,"gpuMemoryGiB":512,"borrow":{"gpus":16}}},"sharedPool":{"gpus":32}}`))
	f.Add([]byte(`{"teams":{"a":{"maxPriority":-5}},"unknownTeams":"unlimited","allowPodTeamOverride":true}`))
	f.Add([]byte(`{"teams":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"groups":{"org":{"gpus":4,"borrow":{"gpus":2}},"lab":{"parent":"org","gpus":2,"lend":{"gpus":1},"weight":2}},` +
		`"teams":{"x":{"gpus":1,"borrow":{"gpus":8},"group":"lab"},"y":{"gpus":2}},"sharedPool":{"gpus":3}}`))
	f.Add([]byte(`{"groups":{"a":{"parent":"b"},"b":{"parent":"a"}},"teams":{}}`))
	f.Add([]byte(`{"groups":{"org":{"gpus":4}},"teams":{"x":{"gpus":1,"group":"org"},"y":{}},` +
		`"nodePools":{"p1":{"owner":"org","policy":"spread"},"p2":{"owner":"y","workload":[{"gpus":1,"weight":1,"models":[]}]}}}`))
	f.Add([]byte(`{"teams":{"x":{}},"nodePools":{"a":{"owner":"x"},"b":{"owner":"x","policy":"nope","workload":[]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		// A parsed config is valid, and survives a round trip unchanged.
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-Parse(%s) error = %v", out, err)
		}
		if diff := cmp.Diff(c, c2); diff != "" {
			t.Fatalf("round trip changed the config (-before +after):\n%s", diff)
		}
		// Reachable never overflows into negative numbers, and (in a tree
		// too) what a team reaches with nothing else in use is allowed.
		for name := range c.Teams {
			r := c.Reachable(name)
			if r.GPUs < 0 || r.MemoryMiB < 0 {
				t.Fatalf("Reachable(%q) = %v is negative", name, r)
			}
			if a := (Account{Team: name}); len(c.Teams[name].Models) == 0 && r.GPUs > 0 && !c.CheckAccount(a, nil, Amount{GPUs: r.GPUs}).Allowed {
				t.Fatalf("team %q reaches %d GPUs, yet CheckAccount refuses them with nothing in use", name, r.GPUs)
			}
		}
	})
}

func TestTeamMinRuntime(t *testing.T) {
	c, err := ParseYAML([]byte("teams:\n  a: {gpus: 4, minRuntime: 30m}\n  b: {gpus: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TeamMinRuntime("a"); got != 30*time.Minute {
		t.Errorf("a: %v", got)
	}
	if got := c.TeamMinRuntime("b") + c.TeamMinRuntime("nobody"); got != 0 {
		t.Errorf("b and an unknown team: %v", got)
	}
	for _, bad := range []string{"soon", "-5m", "900h0m1s"} {
		if _, err := ParseYAML([]byte("teams:\n  a: {gpus: 4, minRuntime: " + bad + "}\n")); err == nil {
			t.Errorf("minRuntime %q accepted", bad)
		}
	}
}
