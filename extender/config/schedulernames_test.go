package config

import (
	"strings"
	"testing"
)

func TestValidateSchedulerNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		give    []string
		wantErr string // "": valid
	}{
		{name: "default", give: Default().SchedulerNames},
		{name: "two profiles", give: []string{"rota-scheduler", "default-scheduler"}},
		{name: "none", give: nil, wantErr: "scheduler-names: is empty"},
		{name: "empty name (--scheduler-names=)", give: []string{""}, wantErr: `scheduler-names[0]: "" is not a scheduler name`},
		{name: "space after the comma", give: []string{"a", " b"}, wantErr: `scheduler-names[1]: " b" is not a scheduler name`},
		{name: "upper case", give: []string{"Rota"}, wantErr: `scheduler-names[0]: "Rota" is not a scheduler name`},
		{name: "twice", give: []string{"a", "a"}, wantErr: `scheduler-names[1]: "a" is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.SchedulerNames = tc.give
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if got := Default().SchedulerNames; len(got) != 1 || got[0] != "rota-scheduler" {
		t.Errorf("default scheduler names %v, want [rota-scheduler] (the chart's second scheduler)", got)
	}
}
