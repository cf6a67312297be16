package queue

import (
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// An admitted pod is charged to its own team, whatever its admission
// record says: a record that names another team, or an account the team
// does not have, is not believed (the pod's owner can rewrite the record
// where the records policy is missing); one that names an account the team
// and the pod's models allow says which of them the queue chose.
func TestAccountFromDoesNotBelieveOtherTeams(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"vision": {Models: map[string]quota.ModelQuota{"A": {GPUs: 2}, "B": {GPUs: 2}}},
		"nlp":    {GPUs: 4},
	}}
	rec := func(team, model string) *contract.Admission {
		return &contract.Admission{Version: contract.Version, AdmittedAt: time.Unix(1, 0), Team: team, Model: model}
	}
	var models []string // the pod names none
	for _, tc := range []struct {
		name     string
		adm      *contract.Admission
		want     quota.Account
		believed bool
	}{
		{"no record", nil, quota.Account{Team: "vision", Model: "A"}, true},
		{"the chosen account", rec("vision", "B"), quota.Account{Team: "vision", Model: "B"}, true},
		{"another team", rec("nlp", ""), quota.Account{Team: "vision", Model: "A"}, false},
		{"an unlimited stranger", rec("nobody", ""), quota.Account{Team: "vision", Model: "A"}, false},
		{"a model the team lacks", rec("vision", "C"), quota.Account{Team: "vision", Model: "A"}, false},
		{"no team at all", rec("", ""), quota.Account{Team: "vision", Model: "A"}, false},
	} {
		got, believed := accountFrom(cfg, "vision", models, tc.adm)
		if got != tc.want || believed != tc.believed {
			t.Errorf("%s: charged to %+v (believed %t); want %+v (%t)", tc.name, got, believed, tc.want, tc.believed)
		}
	}
}
