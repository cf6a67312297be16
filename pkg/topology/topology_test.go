package topology

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestNew(t *testing.T) {
	doc := contract.Topology{Version: contract.Version, MemoryUnitMiB: 2048, GPUs: []contract.TopologyGPU{
		{Index: 1, UUID: "GPU-b", Model: "H100", MemoryMiB: 81920, NUMA: 0, Island: 0, Peers: []int{0}, Health: contract.Healthy},
		{Index: 0, UUID: "GPU-a", Model: "H100", MemoryMiB: 81920, NUMA: 0, Island: 0, Peers: []int{1}, Health: contract.Healthy},
		{Index: 2, UUID: "GPU-c", Model: "A100", MemoryMiB: 40960, NUMA: 1, Island: 1, Health: contract.Unhealthy, Reason: "XID 79"},
	}}
	labels := map[string]string{"example.com/leaf": "leaf-3", "unrelated": "x"}
	n := New("node-1", labels, DefaultLabels(contract.Default), doc)
	want := &Node{Name: "node-1", Tiers: []string{"leaf-3", ""}, MemoryUnitMiB: 2048, GPUs: []GPU{
		{Index: 0, UUID: "GPU-a", Model: "H100", MemoryMiB: 81920, Island: 0, Peers: []int{1}, Healthy: true},
		{Index: 1, UUID: "GPU-b", Model: "H100", MemoryMiB: 81920, Island: 0, Peers: []int{0}, Healthy: true},
		{Index: 2, UUID: "GPU-c", Model: "A100", MemoryMiB: 40960, NUMA: 1, Island: 1, Healthy: false, Reason: "XID 79"},
	}}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Fatalf("New() (-want +got):\n%s", diff)
	}
	// The node does not share memory with the document.
	doc.GPUs[0].Peers[0] = 9
	if n.GPUs[1].Peers[0] != 0 {
		t.Errorf("New() aliases the document's peer lists")
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"Slot(2)", n.Slot(2), 2},
		{"Slot(7)", n.Slot(7), -1},
		{"SlotByUUID", n.SlotByUUID("GPU-b"), 1},
		{"SlotByUUID unknown", n.SlotByUUID("GPU-z"), -1},
		{"Models", n.Models(), []string{"A100", "H100"}},
		{"TotalMemoryMiB", n.TotalMemoryMiB(), MiB(81920*2 + 40960)},
		{"Tier(0)", n.Tier(0), "leaf-3"},
		{"Tier(1) unknown", n.Tier(1), ""},
		{"Tier(-1)", n.Tier(-1), ""},
		{"Tier(5)", n.Tier(5), ""},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestNewDefaultsUnit(t *testing.T) {
	n := New("n", nil, Labels{}, contract.Topology{Version: contract.Version})
	if n.MemoryUnitMiB != contract.DefaultMemoryUnitMiB || len(n.GPUs) != 0 || n.Tiers != nil {
		t.Errorf("New(empty) = %+v", n)
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	n := FromSpec(Spec{Name: "node-7", Model: "H200", Count: 8, MemoryMiB: 144384, IslandSize: 4, NUMANodes: 2})
	n.GPUs[5].Healthy, n.GPUs[5].Reason = false, "XID 79"
	doc := n.Document()
	b, err := doc.Marshal()
	if err != nil {
		t.Fatalf("Document() is not valid: %v", err)
	}
	parsed, err := contract.ParseTopology(b)
	if err != nil {
		t.Fatal(err)
	}
	back := New("node-7", nil, Labels{}, parsed)
	if diff := cmp.Diff(n, back); diff != "" {
		t.Errorf("New(Document()) (-want +got):\n%s", diff)
	}
}

func TestFromSpec(t *testing.T) {
	tests := []struct {
		name        string
		give        Spec
		wantIslands []int
		wantNUMA    []int
		wantPeers   [][]int
	}{
		{"8 GPUs one island", Spec{Name: "a", Model: "H100", Count: 8, MemoryMiB: 81920, IslandSize: 8, NUMANodes: 2},
			[]int{0, 0, 0, 0, 0, 0, 0, 0}, []int{0, 0, 0, 0, 1, 1, 1, 1},
			[][]int{{1, 2, 3, 4, 5, 6, 7}, {0, 2, 3, 4, 5, 6, 7}, {0, 1, 3, 4, 5, 6, 7}, {0, 1, 2, 4, 5, 6, 7},
				{0, 1, 2, 3, 5, 6, 7}, {0, 1, 2, 3, 4, 6, 7}, {0, 1, 2, 3, 4, 5, 7}, {0, 1, 2, 3, 4, 5, 6}}},
		{"pairs", Spec{Name: "b", Count: 4, MemoryMiB: 1024, IslandSize: 2},
			[]int{0, 0, 1, 1}, []int{0, 0, 0, 0}, [][]int{{1}, {0}, {3}, {2}}},
		{"no NVLink", Spec{Name: "c", Count: 3, MemoryMiB: 1024},
			[]int{0, 1, 2}, []int{0, 0, 0}, [][]int{nil, nil, nil}},
		{"partial last island", Spec{Name: "d", Count: 3, MemoryMiB: 1024, IslandSize: 2},
			[]int{0, 0, 1}, []int{0, 0, 0}, [][]int{{1}, {0}, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := FromSpec(tc.give)
			if len(n.GPUs) != tc.give.Count {
				t.Fatalf("FromSpec() has %d GPUs, want %d", len(n.GPUs), tc.give.Count)
			}
			var islands, numa []int
			var peers [][]int
			for i, g := range n.GPUs {
				if g.Index != i || !g.Healthy || g.MemoryMiB != tc.give.MemoryMiB || g.Model != tc.give.Model {
					t.Errorf("GPU %d = %+v", i, g)
				}
				if !strings.HasPrefix(g.UUID, "GPU-") {
					t.Errorf("GPU %d UUID %q", i, g.UUID)
				}
				islands, numa, peers = append(islands, g.Island), append(numa, g.NUMA), append(peers, g.Peers)
			}
			if !slices.Equal(islands, tc.wantIslands) || !slices.Equal(numa, tc.wantNUMA) || !cmp.Equal(peers, tc.wantPeers) {
				t.Errorf("islands %v numa %v peers %v; want %v %v %v", islands, numa, peers, tc.wantIslands, tc.wantNUMA, tc.wantPeers)
			}
			if n.MemoryUnitMiB != 1024 {
				t.Errorf("MemoryUnitMiB = %d, want the 1 GiB default", n.MemoryUnitMiB)
			}
			// Its document is valid.
			if err := n.Document().Validate(); err != nil {
				t.Errorf("Document().Validate() = %v", err)
			}
		})
	}
}

func TestFromSpecStableUUIDs(t *testing.T) {
	a := FromSpec(Spec{Name: "node-1", Count: 8, MemoryMiB: 1024})
	b := FromSpec(Spec{Name: "node-1", Count: 8, MemoryMiB: 1024})
	c := FromSpec(Spec{Name: "node-2", Count: 8, MemoryMiB: 1024})
	seen := map[string]bool{}
	for i := range a.GPUs {
		if a.GPUs[i].UUID != b.GPUs[i].UUID {
			t.Errorf("UUIDs differ between runs: %s, %s", a.GPUs[i].UUID, b.GPUs[i].UUID)
		}
		for _, u := range []string{a.GPUs[i].UUID, c.GPUs[i].UUID} {
			if seen[u] {
				t.Errorf("UUID %s repeats", u)
			}
			seen[u] = true
		}
	}
	// The spec's tiers are copied, not shared.
	tiers := []string{"leaf-1"}
	n := FromSpec(Spec{Name: "x", Tiers: tiers, UnitMiB: 512, CPUMilli: 64000, HostMemoryMiB: 1 << 20})
	tiers[0] = "changed"
	if n.Tier(0) != "leaf-1" || n.MemoryUnitMiB != 512 || n.CPUMilli != 64000 || n.HostMemoryMiB != 1<<20 {
		t.Errorf("FromSpec() = %+v", n)
	}
}
