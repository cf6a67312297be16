//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestMemoryShares: pods asking example.com/gpu-memory are packed onto
// GPUs (binpack), no GPU is ever over its memory, the pods that do not fit
// wait with Rota's reason, and the device plugin's Allocate response hands
// each container exactly its assigned GPU and memory limit.
func TestMemoryShares(t *testing.T) {
	const name = "memory-shares"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	spec := h100
	spec.Count, spec.Plugin = 2, true
	nodes(ctx, t, name, "mem", 2, spec) // 2 nodes x 2 GPUs x 80 GiB, real device plugins

	// Three 30 GiB shares fit two GPUs (2 + 1); binpack must not spread them over three.
	for i := range 3 {
		create(ctx, t, pod(ns, fmt.Sprintf("share-%d", i), name).Memory(30).Obj())
	}
	pods := waitPods(ctx, t, ns, "3 running shares", func(p []corev1.Pod) bool { return harness.Running(p) == 3 })
	used := map[string]int{}
	for i := range pods {
		a := assignment(t, &pods[i])
		used[a.GPUs[0].UUID]++
	}
	if len(used) != 2 {
		t.Errorf("3 shares of 30 GiB landed on %d GPUs, want 2 (packed): %v", len(used), used)
	}

	// Seven more: 8 fit (two per GPU), 2 must wait with a reason.
	for i := 3; i < 10; i++ {
		create(ctx, t, pod(ns, fmt.Sprintf("share-%d", i), name).Memory(30).Obj())
	}
	waitPods(ctx, t, ns, "8 running shares", func(p []corev1.Pod) bool { return harness.Running(p) == 8 })
	time.Sleep(2 * time.Second) // would a ninth sneak in?
	pods, _ = env.Pods(ctx, ns)
	if b := harness.Bound(pods); b != 8 {
		t.Fatalf("%d shares bound, want 8 (4 GPUs x 2 x 30 GiB)\n%s", b, describe(ctx, pods))
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			continue
		}
		msg := failedScheduling(ctx, t, ns, p.Name)
		if !strings.Contains(msg, "GiB") {
			t.Errorf("pending pod %s: FailedScheduling %q does not say how much GPU memory is missing", p.Name, msg)
		}
	}
	checkInvariants(ctx, t, nil)

	// Allocate: exactly the assigned GPU, and the assigned memory as the limit.
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		a := assignment(t, p)
		uuid := a.GPUs[0].UUID
		n := env.GPUNode(p.Spec.NodeName)
		if n.GPUIndex(uuid) < 0 {
			t.Errorf("pod %s: assigned GPU %s is not on node %s", p.Name, uuid, p.Spec.NodeName)
		}
		got, ok := env.Kubelet.Allocation(p.UID)
		if !ok || got.Err != "" {
			t.Errorf("pod %s: no successful Allocate: %+v", p.Name, got)
			continue
		}
		if len(got.Containers) != 1 {
			t.Errorf("pod %s: %d Allocate calls, want 1", p.Name, len(got.Containers))
			continue
		}
		c := got.Containers[0]
		want := map[string]string{
			"NVIDIA_VISIBLE_DEVICES":           uuid,
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=30720M",
			"ROTA_ASSIGNED_POD":                ns + "/" + p.Name,
		}
		for k, v := range want {
			if c.Envs[k] != v {
				t.Errorf("pod %s: Allocate env %s = %q, want %q (all: %v)", p.Name, k, c.Envs[k], v, c.Envs)
			}
		}
		if len(c.DeviceIDs) != 30 {
			t.Errorf("pod %s: %d gpu-memory devices, want 30", p.Name, len(c.DeviceIDs))
		}
		for _, id := range c.DeviceIDs {
			if !strings.HasPrefix(id, uuid+"::") {
				t.Errorf("pod %s: device %s is not a unit of its GPU %s", p.Name, id, uuid)
				break
			}
		}
	}
	note(name, "3 shares packed on 2 GPUs; 8 of 10 placed on 4 GPUs; Allocate env matched every assignment")
}

// TestWholeGPUsNVLinkIsland: a 4-GPU pod lands inside one NVLink island
// when one has room, although the lowest-numbered free GPUs straddle two.
func TestWholeGPUsNVLinkIsland(t *testing.T) {
	const name = "whole-gpus"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count, spec.IslandSize, spec.NUMA, spec.Plugin = 8, 4, 2, true
	n := nodes(ctx, t, name, "nvl", 1, spec)[0] // islands {0-3} and {4-7}

	// A 2-GPU pod first: it takes two GPUs of one island.
	create(ctx, t, pod(ns, "pair", name).GPUs(2).Obj())
	pods := waitPods(ctx, t, ns, "the pair running", func(p []corev1.Pod) bool { return harness.Running(p) == 1 })
	pair := assignment(t, &pods[0])
	pairIsland := map[int]bool{}
	for _, g := range pair.GPUs {
		pairIsland[g.Index/4] = true
	}
	if len(pairIsland) != 1 {
		t.Errorf("the 2-GPU pod straddles NVLink islands: %v", pair.UUIDs())
	}

	create(ctx, t, pod(ns, "quad", name).GPUs(4).Obj())
	pods = waitPods(ctx, t, ns, "the quad running", func(p []corev1.Pod) bool { return harness.Running(p) == 2 })
	quadPod := pods[slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == "quad" })]
	quad := assignment(t, &quadPod)
	islands := map[int]bool{}
	var idx []int
	for _, g := range quad.GPUs {
		islands[n.Topology.GPUs[g.Index].Island] = true
		idx = append(idx, g.Index)
	}
	slices.Sort(idx)
	if len(islands) != 1 || len(idx) != 4 {
		t.Errorf("the 4-GPU pod got GPUs %v across islands %v; want one whole NVLink island", idx, islands)
	}
	for _, g := range pair.GPUs {
		if slices.Contains(idx, g.Index) {
			t.Errorf("GPU %d assigned to both pods", g.Index)
		}
	}
	got, ok := env.Kubelet.Allocation(quadPod.UID)
	if !ok || got.Err != "" || len(got.Containers) != 1 {
		t.Fatalf("quad: Allocate result %+v", got)
	}
	visible := strings.Split(got.Containers[0].Envs["NVIDIA_VISIBLE_DEVICES"], ",")
	slices.Sort(visible)
	want := quad.UUIDs()
	slices.Sort(want)
	if !slices.Equal(visible, want) {
		t.Errorf("quad: NVIDIA_VISIBLE_DEVICES = %v, want the assigned %v", visible, want)
	}
	checkInvariants(ctx, t, nil)
	var pairIdx []int
	for _, g := range pair.GPUs {
		pairIdx = append(pairIdx, g.Index)
	}
	note(name, "2-GPU pod on GPUs %v, then the 4-GPU pod on %v: one NVLink island", pairIdx, idx)
}

// TestUnschedulableReason: a pod no node can hold gets a FailedScheduling
// event whose message carries Rota's explanation. Both cases pass the
// scheduler's own per-node count (NodeResourcesFit sees enough gpu and
// gpu-memory in total), so only Rota's per-GPU view can refuse them.
func TestUnschedulableReason(t *testing.T) {
	const name = "reason"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := t4
	spec.Count = 2
	nodes(ctx, t, name, "t4", 2, spec) // 15 GiB GPUs
	// A cordoned node with larger GPUs: the webhook admits a 20 GiB share
	// (some GPU in the cluster holds it), the scheduler skips the node.
	bigSpec := h100
	bigSpec.Count = 8
	big := nodes(ctx, t, name, "big", 1, bigSpec)
	if err := env.Cordon(ctx, big[0].Spec.Name, true); err != nil {
		t.Fatal(err)
	}
	// Three 10 GiB shares take one GPU each (15 GiB GPUs hold one), so one
	// node keeps no idle GPU and the other one.
	for i := range 3 {
		create(ctx, t, pod(ns, fmt.Sprintf("share-%d", i), name).Memory(10).Obj())
	}
	waitPods(ctx, t, ns, "the shares running", func(p []corev1.Pod) bool { return harness.Running(p) == 3 })

	create(ctx, t, pod(ns, "too-much-memory", name).Memory(20).Obj())
	create(ctx, t, pod(ns, "too-many-gpus", name).GPUs(2).Obj())
	for _, p := range []string{"too-much-memory", "too-many-gpus"} {
		msg := failedScheduling(ctx, t, ns, p)
		t.Logf("%s: FailedScheduling: %s", p, msg)
		if !strings.Contains(msg, "GPU") {
			t.Errorf("%s: FailedScheduling %q carries no GPU reason from Rota", p, msg)
		}
		if got := getPod(ctx, t, ns, p); got.Spec.NodeName != "" {
			t.Errorf("%s bound to %s", p, got.Spec.NodeName)
		}
	}
	// Rota's words, as the extender wrote them into FailedNodes (one per
	// node) and into its own event (one example per kind of reason).
	for p, want := range map[string]struct{ node, event string }{
		"too-much-memory": {"needs 20 GiB on one GPU; the largest GPU here has 15 GiB", "the largest GPU here has 15 GiB"},
		"too-many-gpus":   {"1 free GPU, pod needs 2", "pod needs 2"},
	} {
		if msg, _ := env.LastFailedScheduling(ctx, ns, p); !strings.Contains(msg, want.node) {
			t.Errorf("%s: FailedScheduling %q does not carry Rota's reason %q", p, msg, want.node)
		}
		evs, err := env.PodEvents(ctx, ns, p)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs {
			if ev.Source.Component == "rota-extender" && ev.Reason == "GPUUnschedulable" && strings.Contains(ev.Message, want.event) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no GPUUnschedulable event from rota-extender saying %q", p, want.event)
		}
	}
	checkInvariants(ctx, t, nil)
}
