package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// recordChecks checks the recorded run itself, the same way for every
// stack, so that no stack is judged by its own bookkeeping: at no instant
// did a node's running pods hold more GPUs than it has, nor a team more
// than its guarantee and the shared pool; and, for a stack that places
// gangs whole, no gang ended the run with only some members started.
func recordChecks(sc evaluate.Scenario, r evaluate.Run, s evalkit.Shape) []evaluate.Check {
	type step struct {
		t         time.Time
		gpus, mem float64 // whole GPUs and GiB of shares; gpus+mem/per on a node
		node      string
		team      string
		starts    bool
	}
	teamOf := map[string]string{}
	for _, j := range sc.Jobs {
		teamOf[j.Name] = j.Team
	}
	per := float64(max(sc.Cluster.GPUMemoryGiB, 1))
	var steps []step
	for _, p := range r.Pods {
		if p.Started.IsZero() {
			continue
		}
		end := p.Finished
		if end.IsZero() {
			end = r.End
		}
		g, m := float64(p.GPUs), float64(p.MemoryGiB)
		steps = append(steps, step{p.Started, g, m, p.Node, teamOf[p.Job], true}, step{end, -g, -m, p.Node, teamOf[p.Job], false})
	}
	// Ends before starts at the same instant: a pod that ends as another
	// starts does not overlap it.
	slices.SortStableFunc(steps, func(a, b step) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		switch {
		case a.starts == b.starts:
			return 0
		case a.starts:
			return 1
		}
		return -1
	})
	capCheck := evaluate.Check{Name: "capacity: no node's running pods hold more GPUs than it has"}
	quotaCheck := evaluate.Check{Name: "quota: no team holds more whole GPUs, or GPU memory in shares, than its guarantee and the shared pool"}
	limit := map[string]float64{}
	for _, t := range sc.Teams {
		limit[t.Name] = float64(t.GPUs + sc.Pool())
	}
	onNode, gpusOf, memOf := map[string]float64{}, map[string]float64{}, map[string]float64{}
	const eps = 1e-9
	for _, s := range steps {
		onNode[s.node] += s.gpus + s.mem/per
		gpusOf[s.team] += s.gpus
		memOf[s.team] += s.mem
		if !s.starts {
			continue
		}
		at := s.t.Sub(r.Start).Seconds()
		if onNode[s.node] > float64(sc.Cluster.GPUsPerNode)+eps && len(capCheck.Violations) < 5 {
			capCheck.Violations = append(capCheck.Violations, fmt.Sprintf("node %s held %.2f GPUs at +%.0fs", s.node, onNode[s.node], at))
		}
		if (gpusOf[s.team] > limit[s.team]+eps || memOf[s.team] > limit[s.team]*per+eps) && len(quotaCheck.Violations) < 5 {
			quotaCheck.Violations = append(quotaCheck.Violations, fmt.Sprintf("team %s held %.0f GPUs and %.0f GiB of shares (limit %.0f GPUs, %.0f GiB) at +%.0fs",
				s.team, gpusOf[s.team], memOf[s.team], limit[s.team], limit[s.team]*per, at))
		}
	}
	out := []evaluate.Check{capCheck, quotaCheck}
	if s.GangsWhole {
		gangCheck := evaluate.Check{Name: "gangs whole: no gang ended with only some members started"}
		started := map[string]int{}
		for _, p := range r.Pods {
			if !p.Started.IsZero() {
				started[p.Job]++
			}
		}
		for _, j := range sc.Jobs {
			if n := started[j.Name]; j.Gang() && n > 0 && n < j.Pods {
				gangCheck.Violations = append(gangCheck.Violations, fmt.Sprintf("gang %s: %d of %d members started", j.Name, n, j.Pods))
			}
		}
		out = append(out, gangCheck)
	}
	return out
}
