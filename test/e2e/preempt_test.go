//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestPreemption: a high-priority pod that needs 60 GiB of one GPU evicts
// lower-priority memory shares from one GPU, and never a pod labelled
// example.com/preemptible=false.
//
// Layout (one node, two 80 GiB GPUs, real device plugin):
//
//	GPU A: four 20 GiB low-priority shares (preemptible)
//	GPU B: one 40 GiB low-priority share labelled preemptible=false, two 20 GiB shares
//
// Only GPU A can make 60 GiB: on B the 40 GiB share may not go.
func TestPreemption(t *testing.T) {
	const name = "preemption"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	for pc, v := range map[string]int32{"rota-e2e-low": 100, "rota-e2e-high": 100000} {
		if err := env.CreatePriorityClass(ctx, pc, v); err != nil {
			t.Fatal(err)
		}
	}
	spec := h100
	spec.Count, spec.Plugin = 2, true
	nodes(ctx, t, name, "pre", 1, spec)

	// The protected pod first so that it opens GPU B... binpack fills one
	// GPU before the next, so create in an order that yields the layout.
	for i := range 4 {
		create(ctx, t, pod(ns, fmt.Sprintf("low-a%d", i), name).Memory(20).PriorityClass("rota-e2e-low").Obj())
	}
	waitPods(ctx, t, ns, "GPU A full", func(p []corev1.Pod) bool { return harness.Running(p) == 4 })
	create(ctx, t, pod(ns, "keep", name).Memory(40).PriorityClass("rota-e2e-low").NotPreemptible().Obj())
	for i := range 2 {
		create(ctx, t, pod(ns, fmt.Sprintf("low-b%d", i), name).Memory(20).PriorityClass("rota-e2e-low").Obj())
	}
	pods := waitPods(ctx, t, ns, "GPU B full", func(p []corev1.Pod) bool { return harness.Running(p) == 7 })
	gpuOf := map[string]string{}
	for i := range pods {
		gpuOf[pods[i].Name] = assignment(t, &pods[i]).GPUs[0].UUID
	}
	gpuA, gpuB := gpuOf["low-a0"], gpuOf["keep"]
	for p, g := range gpuOf {
		want := gpuA
		if strings.HasPrefix(p, "low-b") || p == "keep" {
			want = gpuB
		}
		if g != want || gpuA == gpuB {
			t.Fatalf("layout differs from the plan: %v", gpuOf)
		}
	}
	checkInvariants(ctx, t, nil)

	began := time.Now()
	high := create(ctx, t, pod(ns, "high", name).Memory(60).PriorityClass("rota-e2e-high").Obj())
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	pods = waitPods(wctx, t, ns, "the high-priority pod running", func(ps []corev1.Pod) bool {
		i := slices.IndexFunc(ps, func(p corev1.Pod) bool { return p.Name == "high" })
		return i >= 0 && ps[i].Status.Phase == corev1.PodRunning
	})
	took := time.Since(began)
	present := map[string]bool{}
	for _, p := range pods {
		present[p.Name] = p.DeletionTimestamp == nil
	}
	if !present["keep"] {
		t.Errorf("the pod labelled %s=false was evicted", env.Names.PreemptibleLabel)
	}
	for _, p := range []string{"low-b0", "low-b1"} {
		if !present[p] {
			t.Errorf("%s on GPU B was evicted, but evicting on GPU B cannot make room", p)
		}
	}
	evicted := 0
	for i := range 4 {
		if !present[fmt.Sprintf("low-a%d", i)] {
			evicted++
		}
	}
	if evicted < 3 {
		t.Errorf("%d pods evicted from GPU A, want at least 3 (60 GiB needed)", evicted)
	}
	hp := getPod(ctx, t, ns, "high")
	if a := assignment(t, hp); a.GPUs[0].UUID != gpuA {
		t.Errorf("high-priority pod placed on GPU %s, want GPU A %s", a.GPUs[0].UUID, gpuA)
	}
	if got, ok := env.Kubelet.Allocation(high.UID); !ok || got.Err != "" ||
		got.Containers[0].Envs["NVIDIA_VISIBLE_DEVICES"] != gpuA || got.Containers[0].Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=61440M" {
		t.Errorf("high-priority pod: Allocate %+v, want GPU A with 61440 MiB", got)
	}
	checkInvariants(ctx, t, nil)
	note(name, "%d shares evicted from one GPU in %.1fs; the non-preemptible pod stayed", evicted, took.Seconds())
}
