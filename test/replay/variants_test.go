//go:build replay

package replay

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/sim"
	"github.com/rota-sched/rota/pkg/topology"
)

// variant is the simulator's loop with one of the real path's differences
// switched on, to attribute the gap between the simulator and the real
// path (TestVariants; no cluster needed).
type variant struct {
	name string
	// defaultWorkload: the policy keeps room for placement.DefaultWorkload
	// (what rota-extender builds) instead of the pod list's shapes.
	defaultWorkload bool
	// blindCPU: the policy scores a node without seeing CPU and host memory
	// (the extender's view: its topology has none, podreq.FromPod reads
	// none); they still decide feasibility (kube-scheduler's NodeResourcesFit).
	blindCPU bool
	// randomTies: ties among the best score go to a random node
	// (kube-scheduler's selectHost) instead of the lowest name.
	randomTies bool
	// cpuOnly: how CPU-only pods are placed: "" the policy (the simulator),
	// "most" or "least" kube-scheduler's NodeResourcesFit MostAllocated or
	// LeastAllocated on cpu and memory with random ties (the extender never
	// sees them), "random" any feasible node.
	cpuOnly string
}

var variants = []variant{
	{name: "simulator"},
	{name: "random ties", randomTies: true},
	{name: "DefaultWorkload", defaultWorkload: true},
	{name: "CPU-blind scores", blindCPU: true},
	{name: "CPU-only: MostAllocated", cpuOnly: "most"},
	{name: "CPU-only: LeastAllocated", cpuOnly: "least"},
	{name: "extender's information (DefaultWorkload + CPU-blind)", defaultWorkload: true, blindCPU: true},
	{name: "extender's information + CPU-only MostAllocated", defaultWorkload: true, blindCPU: true, cpuOnly: "most"},
	{name: "real path model: extender's information + CPU-only MostAllocated + random ties", defaultWorkload: true, blindCPU: true, cpuOnly: "most", randomTies: true},
	{name: "real path model, CPU-only LeastAllocated (default profile)", defaultWorkload: true, blindCPU: true, cpuOnly: "least", randomTies: true},
}

func TestVariants(t *testing.T) {
	root := repoRoot(t)
	nodes := readList(t, filepath.Join(root, *flagNodes), func(f *readFile) ([]sim.Node, error) { return sim.ReadNodes(f) })
	pods := readList(t, filepath.Join(root, *flagPods), func(f *readFile) ([]sim.Pod, error) { return sim.ReadPods(f) })
	var capMilli int64
	for _, n := range nodes {
		capMilli += int64(n.GPUs) * sim.MilliPerGPU
	}
	order := sim.Arrivals(pods, *flagSeed, sim.DefaultTune, capMilli)
	work := sim.WorkloadOf(pods, sim.WorkloadOptions{})
	var report strings.Builder
	fmt.Fprintf(&report, "seed %d, %s: GPU allocation ratio at 100%% arrived\n\n| variant | %s |\n|---|%s\n",
		*flagSeed, filepath.Base(*flagPods), strings.ReplaceAll(*flagPolicies, ",", " | "),
		strings.Repeat("---:|", len(strings.Split(*flagPolicies, ","))))
	for _, v := range variants {
		row := "| " + v.name + " |"
		for _, pol := range strings.Split(*flagPolicies, ",") {
			w := work
			if v.defaultWorkload {
				w = nil
			}
			var p placement.Policy
			var err error
			if w == nil {
				p, err = placement.NewPolicy(pol, nil)
			} else {
				p, err = sim.NewPolicy(pol, w, *flagSeed, nodes)
			}
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			at := runVariant(t, v, nodes, pods, order, p, capMilli)
			t.Logf("%-70s %-20s %.2f (%s)", v.name, pol, at, time.Since(began).Round(time.Millisecond))
			row += fmt.Sprintf(" %.2f |", at)
		}
		report.WriteString(row + "\n")
	}
	t.Logf("\n%s", report.String())
}

func runVariant(t *testing.T, v variant, nodes []sim.Node, pods []sim.Pod, order []int, p placement.Policy, capMilli int64) float64 {
	fit := newEngine(nodes, p)
	var view *ledger.Ledger
	if v.blindCPU {
		view = ledger.New()
		for _, n := range nodes {
			view.UpsertNode(topology.FromSpec(topology.Spec{Name: n.Name, Model: n.Model, Count: n.GPUs,
				MemoryMiB: sim.GPUMemoryMiB, UnitMiB: sim.UnitMiB}))
		}
	}
	rng := rand.New(rand.NewPCG(*flagSeed, 7))
	c := newCurve(capMilli)
	var cands []int
	for k, pi := range order {
		sp := pods[pi]
		r := sp.Request("u" + strconv.Itoa(k))
		es := fit.evaluate(r)
		cpuOnly := sp.GPUs == 0
		scores := make([]int64, len(es))
		for i, m := range es {
			scores[i] = m.score
		}
		switch {
		case cpuOnly && v.cpuOnly == "random":
			for i := range scores {
				scores[i] = 0
			}
		case cpuOnly && v.cpuOnly != "":
			snap := fit.l.Snapshot()
			for i, m := range es {
				if m.ok {
					scores[i] = resourceFitScore(snap.Node(fit.names[i]), sp, v.cpuOnly == "most")
				}
			}
		case v.blindCPU && !cpuOnly:
			vr := r
			vr.CPUMilli, vr.HostMemoryMiB = 0, 0
			snap := view.Snapshot()
			for i, m := range es {
				if m.ok {
					ni := snap.Node(fit.names[i])
					ch, reason := placement.Fit(vr, ni)
					if reason != nil {
						t.Fatalf("blind view: %s does not fit on %s: %v", sp.Name, ni.Name(), reason)
					}
					scores[i] = p.Score(vr, ni, ch)
				}
			}
		}
		bi := -1
		var bs int64
		cands = cands[:0]
		for i, m := range es {
			switch {
			case !m.ok:
			case bi < 0 || scores[i] > bs:
				bi, bs = i, scores[i]
				cands = append(cands[:0], i)
			case scores[i] == bs:
				cands = append(cands, i)
			}
		}
		random := v.randomTies || (cpuOnly && v.cpuOnly != "")
		if bi >= 0 && random {
			bi = cands[rng.IntN(len(cands))]
		}
		if bi >= 0 {
			if err := fit.commit(r, bi); err != nil {
				t.Fatal(err)
			}
			if view != nil && !cpuOnly {
				vr := r
				vr.CPUMilli, vr.HostMemoryMiB = 0, 0
				ni := view.Snapshot().Node(fit.names[bi])
				ch, reason := placement.Fit(vr, ni)
				if reason != nil {
					t.Fatal(reason)
				}
				if err := view.Reserve(ch.Allocation(vr, ni), time.Time{}); err != nil {
					t.Fatal(err)
				}
				if err := view.Commit(vr.UID); err != nil {
					t.Fatal(err)
				}
			}
		}
		c.add(sp, bi >= 0)
	}
	at, _ := c.at(100)
	return at
}

// resourceFitScore is kube-scheduler's NodeResourcesFit score on cpu and
// memory (weights 1): MostAllocated (requested+pod)/allocatable x 100, or
// LeastAllocated (allocatable-requested-pod)/allocatable x 100, averaged.
func resourceFitScore(ni *ledger.NodeInfo, p sim.Pod, most bool) int64 {
	one := func(capacity, free, req int64) int64 {
		if capacity == 0 {
			return 0
		}
		used := capacity - free + req
		if most {
			return used * 100 / capacity
		}
		return (capacity - used) * 100 / capacity
	}
	cpu := one(ni.Node.CPUMilli, ni.FreeCPUMilli(), p.CPUMilli)
	mem := one(int64(ni.Node.HostMemoryMiB), int64(ni.FreeHostMemoryMiB()), int64(p.HostMemoryMiB))
	return (cpu + mem) / 2
}
