package reserve_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/reserve"
)

func head(key string, members, gpus int, age time.Duration) reserve.Queued {
	return reserve.Queued{Job: gangJob(key, members, gpus), Created: now.Add(-age),
		Status: queue.Status{Reason: queue.WaitRoom, Position: 1, Of: 1}}
}

func TestPolicyPass(t *testing.T) {
	p := reserve.Policy{Tiers: 1, LargeGPUs: 16}
	for _, tc := range []struct {
		name     string
		jobs     []reserve.Queued
		held     []string // keys holding room after the pass
		released []string
	}{
		{name: "a large head is held for at once", jobs: []reserve.Queued{head("ml/big", 2, 8, 0)}, held: []string{"ml/big"}},
		{name: "a small young head is not", jobs: []reserve.Queued{head("ml/small", 1, 8, time.Minute)}},
		{name: "a small head that waited 30 minutes is", jobs: []reserve.Queued{head("ml/old", 1, 8, 31*time.Minute)}, held: []string{"ml/old"}},
		{name: "not the head", jobs: []reserve.Queued{func() reserve.Queued {
			q := head("ml/second", 2, 8, 0)
			q.Status.Position = 2
			return q
		}()}},
		{name: "waiting for quota, not room", jobs: []reserve.Queued{func() reserve.Queued {
			q := head("ml/quota", 2, 8, 0)
			q.Status.Reason = queue.WaitQuota
			return q
		}()}},
		{name: "held past the maximum: released", jobs: []reserve.Queued{func() reserve.Queued {
			q := head("ml/stuck", 2, 8, 3*time.Hour)
			q.Record = reserve.Record{Since: now.Add(-2 * time.Hour), Domain: "tier 0 leaf0"}
			return q
		}()}, released: []string{"ml/stuck"}},
		{name: "a hold whose expected start is far keeps it past the maximum after it began", jobs: []reserve.Queued{func() reserve.Queued {
			q := head("ml/far", 2, 8, 5*time.Hour)
			q.Record = reserve.Record{Since: now.Add(-3 * time.Hour), Until: now.Add(time.Hour), Domain: "tier 0 leaf0"}
			return q
		}()}, held: []string{"ml/far"}},
		{name: "cooling off", jobs: []reserve.Queued{func() reserve.Queued {
			q := head("ml/cool", 2, 8, 3*time.Hour)
			q.Record = reserve.Record{CooledUntil: now.Add(time.Minute)}
			return q
		}()}},
		{name: "two heads never share nodes; higher priority first", jobs: []reserve.Queued{
			head("a/one", 2, 8, 0), func() reserve.Queued { q := head("b/two", 2, 8, 0); q.Priority = 10; return q }()},
			held: []string{"a/one", "b/two"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := cluster(t, 2, 2)
			ds, claims := p.Pass(tc.jobs, l.Snapshot(), now)
			var held, released []string
			owner := map[string]string{}
			for _, d := range ds {
				if d.Plan != nil {
					held = append(held, d.Key)
					if d.Record.Since.IsZero() || d.Record.Domain != d.Plan.Domain() {
						t.Errorf("%s: record %+v does not name the plan", d.Key, d.Record)
					}
				}
				if d.Released {
					released = append(released, d.Key)
					if !d.Record.CooledUntil.Equal(now.Add(30 * time.Minute)) {
						t.Errorf("%s: cools off until %v", d.Key, d.Record.CooledUntil)
					}
				}
			}
			for _, c := range claims {
				if o, dup := owner[c.Node]; dup {
					t.Errorf("node %s held for %s and %s", c.Node, o, c.Job)
				}
				owner[c.Node] = c.Job
			}
			if !sameSet(held, tc.held) || !sameSet(released, tc.released) {
				t.Errorf("held %v released %v, want %v and %v", held, released, tc.held, tc.released)
			}
			if tc.name == "two heads never share nodes; higher priority first" && owner["leaf0-0"] != "b/two" {
				t.Errorf("leaf0 went to %s, want the higher-priority b/two", owner["leaf0-0"])
			}
		})
	}
}

func TestPolicyPassBound(t *testing.T) {
	l := cluster(t, 4, 1)
	var jobs []reserve.Queued
	for _, k := range []string{"a/1", "b/2", "c/3"} {
		jobs = append(jobs, head(k, 1, 8, time.Hour))
	}
	ds, claims := reserve.Policy{Tiers: 1, Max: 2}.Pass(jobs, l.Snapshot(), now)
	plans := 0
	for _, d := range ds {
		if d.Plan != nil {
			plans++
		}
	}
	if plans != 2 || len(claims) != 2 {
		t.Fatalf("%d plans, %d claims with Max 2", plans, len(claims))
	}
}

// sameSet compares as sets (order aside).
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
