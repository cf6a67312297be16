package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestPlanCoversEveryKindInsideItsSegments(t *testing.T) {
	for _, c := range []struct {
		d       time.Duration
		perKind int
	}{{4 * time.Minute, 1}, {30 * time.Minute, 5}, {2 * time.Hour, 24}} {
		for seed := range uint64(20) {
			p := NewPlan(seed, c.d, 4, 4, 2)
			if err := p.Check(); err != nil {
				t.Fatalf("%s seed %d: %v", c.d, seed, err)
			}
			if p.Segments[0].Chaos || p.Segments[len(p.Segments)-1].Chaos {
				t.Fatalf("%s seed %d: the warm-up and the last segment must be clean: %+v", c.d, seed, p.Segments)
			}
			upgrades := 0
			for i, sg := range p.Segments {
				if sg.Upgrade {
					upgrades++
					if sg.Chaos || i == 0 || i == len(p.Segments)-1 {
						t.Fatalf("%s seed %d: the upgrade must be midway and free of faults: %+v", c.d, seed, p.Segments)
					}
				}
			}
			if upgrades != 1 {
				t.Fatalf("%s seed %d: %d upgrade segments, want 1", c.d, seed, upgrades)
			}
			counts := p.Counts()
			for _, k := range Kinds {
				if counts[k] < c.perKind {
					t.Errorf("%s seed %d: %d faults of %s, want at least %d", c.d, seed, counts[k], k, c.perKind)
				}
			}
			ends := map[string]map[int]time.Duration{}
			for _, f := range p.Faults {
				seg := p.Segments[f.Segment]
				if !seg.Chaos {
					t.Errorf("%s seed %d: %v in a clean segment", c.d, seed, f)
				}
				if f.At+f.Hold > seg.Length {
					t.Errorf("%s seed %d: %v ends after its segment (%s)", c.d, seed, f, seg.Length)
				}
				g := specs[f.Kind].group
				if ends[g] == nil {
					ends[g] = map[int]time.Duration{}
				}
				// Faults come sorted by time: one of the group must have
				// ended before the next starts.
				if f.At < ends[g][f.Segment] {
					t.Errorf("%s seed %d: %v overlaps the group's previous fault", c.d, seed, f)
				}
				ends[g][f.Segment] = f.At + f.Hold
			}
		}
	}
}

func TestPlanIsTheSeeds(t *testing.T) {
	a, b := NewPlan(7, 30*time.Minute, 4, 4, 2), NewPlan(7, 30*time.Minute, 4, 4, 2)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	if c := NewPlan(8, 30*time.Minute, 4, 4, 2); reflect.DeepEqual(a.Faults, c.Faults) {
		t.Fatal("seeds 7 and 8 drew the same faults")
	}
}

func TestPlanRoundTripsAndRefusesBadOnes(t *testing.T) {
	dir := t.TempDir()
	p := NewPlan(3, 10*time.Minute, 4, 4, 2)
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatal("the plan read back differs")
	}
	for name, mutate := range map[string]func(*Plan){
		"unknown kind":             func(p *Plan) { p.Faults[0].Kind = "reboot" },
		"target too high":          func(p *Plan) { p.Faults[0].Kind, p.Faults[0].Target = WebhookKill, 2 },
		"segment too high":         func(p *Plan) { p.Faults[0].Segment = len(p.Segments) },
		"negative time":            func(p *Plan) { p.Faults[0].At = -time.Second },
		"fault in a clean segment": func(p *Plan) { p.Faults[0].Segment = 0 },
		"no segments":              func(p *Plan) { p.Segments = nil },
	} {
		bad := NewPlan(3, 10*time.Minute, 4, 4, 2)
		mutate(&bad)
		if err := bad.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := os.WriteFile(path, []byte(`{"seed": 1, "faults": [], "extra": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPlan(path); err == nil {
		t.Error("a plan with an unknown field was read")
	}
}
