package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// The record checks find what they are for: two pods over one node's
// GPUs, a team over its limit, a gang started in part; and pass a run
// where one pod ends as the next starts.
func TestRecordChecks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	sc := evaluate.Scenario{Cluster: evaluate.Cluster{Nodes: 2, GPUsPerNode: 8, GPUMemoryGiB: 80},
		Teams: []evaluate.Team{{Name: "a", GPUs: 4}, {Name: "b", GPUs: 4}}, // pool: 8
		Jobs: []evaluate.Job{{Name: "big", Team: "a", Kind: evaluate.Training, Pods: 1, GPUs: 8},
			{Name: "next", Team: "a", Kind: evaluate.Training, Pods: 1, GPUs: 8},
			{Name: "gang", Team: "b", Kind: evaluate.Training, Pods: 2, GPUs: 4}}}
	run := func(pods ...evaluate.PodRecord) map[string][]string {
		r := evaluate.Run{Start: t0, End: at(100), Pods: pods}
		out := map[string][]string{}
		for _, c := range recordChecks(sc, r, evalkit.Shape{GangsWhole: true}) {
			out[strings.SplitN(c.Name, ":", 2)[0]] = c.Violations
		}
		return out
	}
	clean := run(evaluate.PodRecord{Job: "big", Node: "n1", GPUs: 8, Started: at(0), Finished: at(10)},
		evaluate.PodRecord{Job: "next", Node: "n1", GPUs: 8, Started: at(10), Finished: at(20)},
		evaluate.PodRecord{Job: "gang", Node: "n2", GPUs: 4, Started: at(0), Finished: at(5)},
		evaluate.PodRecord{Job: "gang", Node: "n2", GPUs: 4, Started: at(1), Finished: at(5)})
	for name, vs := range clean {
		if len(vs) > 0 {
			t.Errorf("%s: %v on a clean run", name, vs)
		}
	}
	bad := run(evaluate.PodRecord{Job: "big", Node: "n1", GPUs: 8, Started: at(0), Finished: at(10)},
		evaluate.PodRecord{Job: "next", Node: "n1", GPUs: 8, Started: at(5), Finished: at(20)},
		evaluate.PodRecord{Job: "gang", Node: "n2", GPUs: 4, Started: at(0), Finished: at(5)},
		evaluate.PodRecord{Job: "gang", Node: "n2", GPUs: 4})
	for _, name := range []string{"capacity", "quota", "gangs whole"} {
		if len(bad[name]) == 0 {
			t.Errorf("%s: no violation found on a run that breaks it", name)
		}
	}
}
