package placement_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

func TestFitHeldRoom(t *testing.T) {
	start := time.Date(2026, 12, 2, 14, 40, 0, 0, time.UTC)
	l := ledger.New()
	l.UpsertNode(topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 8, MemoryMiB: 81920}))
	l.SetClaims([]ledger.Claim{{Job: "ml/pretrain-3", Gang: true, Node: "n1", GPUs: 8, Start: start}})
	ni := l.Snapshot().Node("n1")
	for _, tc := range []struct {
		name string
		r    placement.Request
		want string // "" fits
	}{
		{"no declared runtime", placement.Request{Job: "ns/a", GPUs: 1},
			"GPU held for gang ml/pretrain-3, expected start 2026-12-02 14:40 UTC; this pod declares no maximum runtime, so it cannot backfill"},
		{"runs past the start", placement.Request{Job: "ns/b", GPUs: 1, Ends: start.Add(time.Minute)},
			"this pod may run until 2026-12-02 14:41 UTC, past it"},
		{"a share with no runtime", placement.Request{Job: "ns/c", MemoryUnits: 4}, "GPU held for gang ml/pretrain-3"},
		{"backfill", placement.Request{Job: "ns/d", GPUs: 8, Ends: start}, ""},
		{"the job itself", placement.Request{Job: "ml/pretrain-3", GPUs: 8}, ""},
	} {
		_, reason := placement.Fit(tc.r, ni)
		switch {
		case tc.want == "" && reason != nil:
			t.Errorf("%s: refused: %s", tc.name, reason.Message())
		case tc.want != "" && reason == nil:
			t.Errorf("%s: fits held room", tc.name)
		case tc.want != "" && (reason.Code != placement.Held || reason.Resolvable || !strings.Contains(reason.Message(), tc.want)):
			t.Errorf("%s: reason %s (resolvable %v) %q, want Held %q", tc.name, reason.Code, reason.Resolvable, reason.Message(), tc.want)
		}
	}
	// A gang of outsiders counts no slot on the held node.
	if n := placement.Slots(placement.Request{Job: "ns/g", GPUs: 1}, ni, 10); n != 0 {
		t.Errorf("an outsider counts %d slots on a fully held node", n)
	}
}

// A GPU with leaked memory (published by the device plugin) is never given
// whole; shares still fit into what is left.
func TestFitLeakedGPU(t *testing.T) {
	n := topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 1, MemoryMiB: 81920})
	n.GPUs[0].MemoryMiB, n.GPUs[0].LeakedMiB = 81920-4096, 4096
	l := ledger.New()
	l.UpsertNode(n)
	ni := l.Snapshot().Node("n1")
	if _, reason := placement.Fit(placement.Request{GPUs: 1}, ni); reason == nil {
		t.Fatal("a whole-GPU pod was placed on a GPU with leaked memory")
	}
	if _, reason := placement.Fit(placement.Request{MemoryUnits: 8}, ni); reason != nil {
		t.Fatalf("a share does not fit the rest of a leaky GPU: %s", reason.Message())
	}
}

// A node whose device plugin cannot run CUDA MPS takes memory shares only
// from pods that accept an unenforced limit; whole GPUs are not affected.
func TestFitShareNeedsMPS(t *testing.T) {
	n := topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 2, MemoryMiB: 81920})
	n.MPS = &contract.TopologyMPS{Available: false, Reason: "nvidia-cuda-mps-control not found"}
	l := ledger.New()
	l.UpsertNode(n)
	ni := l.Snapshot().Node("n1")
	_, reason := placement.Fit(placement.Request{MemoryUnits: 8}, ni)
	if reason == nil || reason.Code != placement.NoMPS || !strings.Contains(reason.Message(), "not found") {
		t.Fatalf("a share on a node without MPS: %v", reason)
	}
	if _, reason := placement.Fit(placement.Request{MemoryUnits: 8, ShareWithoutMPS: true}, ni); reason != nil {
		t.Fatalf("an opted-in share was refused: %s", reason.Message())
	}
	if _, reason := placement.Fit(placement.Request{GPUs: 1}, ni); reason != nil {
		t.Fatalf("a whole GPU was refused for want of MPS: %s", reason.Message())
	}
}

// A node marked NoShares (its memory unit is not the cluster's) takes no
// memory share, opted-in or not, and says why; whole GPUs still fit.
func TestFitNoShares(t *testing.T) {
	n := topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 2, MemoryMiB: 81920})
	n.NoShares = "its device plugin counts in 512 MiB units"
	l := ledger.New()
	l.UpsertNode(n)
	ni := l.Snapshot().Node("n1")
	for _, r := range []placement.Request{{MemoryUnits: 8}, {MemoryUnits: 8, ShareWithoutMPS: true}} {
		_, reason := placement.Fit(r, ni)
		if reason == nil || reason.Code != placement.NoShares || !strings.Contains(reason.Message(), "512 MiB units") {
			t.Fatalf("a share on a NoShares node: %v", reason)
		}
	}
	if _, reason := placement.Fit(placement.Request{GPUs: 1}, ni); reason != nil {
		t.Fatalf("a whole GPU was refused: %s", reason.Message())
	}
}
