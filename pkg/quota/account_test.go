package quota

import (
	"slices"
	"strings"
	"testing"
)

func TestAccounts(t *testing.T) {
	c, err := ParseYAML([]byte(`
teams:
  vision: {gpus: 8, borrow: {gpus: 4}, weight: 2, maxQueuedPods: 50}
  nlp:
    models:
      H100: {gpus: 16, borrow: {gpus: 8}}
      T4: {gpus: 4}
sharedPool: {gpus: 6}
modelPools:
  H100: {gpus: 2}
queueing: "on"
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.QueueingEnabled() {
		t.Error("QueueingEnabled() = false, want true")
	}
	v, _ := c.Team("vision")
	n, _ := c.Team("nlp")
	if v.EffectiveWeight() != 2 || n.EffectiveWeight() != 1 {
		t.Errorf("weights = %v, %v; want 2, 1", v.EffectiveWeight(), n.EffectiveWeight())
	}
	if v.QueueCap() != 50 || n.QueueCap() != DefaultMaxQueuedPods {
		t.Errorf("queue caps = %d, %d; want 50, %d", v.QueueCap(), n.QueueCap(), DefaultMaxQueuedPods)
	}
	for _, tc := range []struct {
		team   string
		models []string
		want   []Account
	}{
		{"vision", nil, []Account{{Team: "vision"}}},
		{"vision", []string{"H100"}, []Account{{Team: "vision"}}},
		{"nlp", nil, []Account{{"nlp", "H100"}, {"nlp", "T4"}}},
		{"nlp", []string{"T4", "A100", "T4"}, []Account{{"nlp", "T4"}}},
		{"nlp", []string{"A100"}, nil},
		{"nobody", nil, nil},
	} {
		if got := c.Accounts(tc.team, tc.models); !slices.Equal(got, tc.want) {
			t.Errorf("Accounts(%q, %q) = %v, want %v", tc.team, tc.models, got, tc.want)
		}
	}
	if got, want := c.ReachableAccount(Account{"nlp", "H100"}), (Amount{GPUs: 18}); got != want {
		t.Errorf("Reachable(nlp H100) = %v, want %v (16 + pool 2)", got, want)
	}
	if got, want := c.ReachableAccount(Account{"nlp", "T4"}), (Amount{GPUs: 4}); got != want {
		t.Errorf("Reachable(nlp T4) = %v, want %v", got, want)
	}
	if got := c.ReachableAccount(Account{Team: "nlp"}); !got.IsZero() {
		t.Errorf("Reachable(nlp, no model) = %v, want zero: nlp's quota is per model", got)
	}
	usage := map[Account]Usage{
		{"nlp", "H100"}:  {Running: Amount{GPUs: 17}},
		{Team: "vision"}: {Running: Amount{GPUs: 9}},
	}
	if d := c.CheckAccount(Account{"nlp", "H100"}, usage, Amount{GPUs: 1}); !d.Allowed || d.Borrowed.GPUs != 1 {
		t.Errorf("nlp H100 +1 at 17 of 16+2: %+v, want allowed borrowing 1", d)
	}
	d := c.CheckAccount(Account{"nlp", "H100"}, usage, Amount{GPUs: 2})
	if d.Allowed || !strings.Contains(d.Shortfalls[0].Message("this pod"), "team nlp (H100)") {
		t.Errorf("nlp H100 +2 at 17 of 16+2: %+v, want refused naming the account", d)
	}
	// vision borrows 1 from the shared pool; the H100 pool is separate.
	if got := c.AccountPoolUsed("", usage); got.GPUs != 1 {
		t.Errorf("shared pool used = %v, want 1 GPU", got)
	}
}

func TestAccountConfigErrors(t *testing.T) {
	_, err := ParseYAML([]byte(`
teams:
  a: {weight: -1, maxQueuedPods: -2, models: {"": {gpus: 1}, H100: {gpus: -1}}}
modelPools: {H100: {gpus: -3}}
queueing: maybe
`))
	for _, want := range []string{`queueing: "maybe" is not a known mode`, `teams.a.weight`, `teams.a.maxQueuedPods`,
		`teams.a.models: is not a GPU model name`, `teams.a.models[H100].gpus`, `modelPools[H100].gpus`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
}

func TestQueueingModeYAML(t *testing.T) {
	for give, want := range map[string]bool{"queueing: off": false, "queueing: on": true, `queueing: "off"`: false,
		"queueing: false": false, "{}": true, "queueing: \"on\"": true} {
		c, err := ParseYAML([]byte(give))
		if err != nil {
			t.Fatalf("ParseYAML(%q): %v", give, err)
		}
		if c.QueueingEnabled() != want {
			t.Errorf("ParseYAML(%q).QueueingEnabled() = %v, want %v", give, c.QueueingEnabled(), want)
		}
	}
	if _, err := ParseYAML([]byte("queueing: 3")); err == nil {
		t.Error("queueing: 3 parsed")
	}
}
