//go:build e2e

package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestExtenderKilledDuringBurst: 200 GPU pods arrive at once; rota-extender
// is killed with SIGKILL while they are being placed and started again. The
// restarted extender rebuilds its ledger from the API server alone. At the
// end no GPU is over capacity, no pod is bound without an assignment, and
// every pod is bound or pending with a scheduling reason from Rota.
func TestExtenderKilledDuringBurst(t *testing.T) {
	const name = "restart"
	const total = 200
	ctx, ns := setup(t, name, "", 4*time.Minute)
	spec := h100
	spec.Count, spec.IslandSize = 8, 4
	nodes(ctx, t, name, "rs", 10, spec) // 80 GPUs

	// 180 memory shares of 20..50 GiB and 20 one-GPU pods, in mixed order:
	// more than the 80 GPUs hold, so some must wait.
	mk := func(i int) *corev1.Pod {
		b := pod(ns, fmt.Sprintf("burst-%03d", i), name)
		if i%10 == 9 {
			return b.GPUs(1).Obj()
		}
		return b.Memory(int64(10 * (2 + i%4))).Obj()
	}
	var wg sync.WaitGroup
	errs := make(chan error, total)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if _, err := env.CreatePod(ctx, mk(i)); err != nil {
					errs <- err
				}
			}
		})
	}
	killed := make(chan int, 1)
	go func() {
		// Kill once some, but not all, pods are bound.
		for ctx.Err() == nil {
			pods, err := env.Pods(ctx, ns)
			if err == nil && harness.Bound(pods) >= 40 {
				if err := env.KillExtender(); err != nil {
					t.Errorf("killing rota-extender: %v", err)
				}
				killed <- harness.Bound(pods)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("creating a burst pod: %v", err)
	}
	var boundAtKill int
	select {
	case boundAtKill = <-killed:
	case <-ctx.Done():
		t.Fatal("the burst never bound 40 pods")
	}
	downAt := time.Now()
	pods, _ := env.Pods(ctx, ns)
	t.Logf("rota-extender killed (SIGKILL) with %d of %d pods bound, %d created", boundAtKill, total, len(pods))
	time.Sleep(2 * time.Second)
	boundWhileDown := 0
	if pods, err := env.Pods(ctx, ns); err == nil {
		boundWhileDown = harness.Bound(pods)
	}
	if err := env.StartExtender(ctx); err != nil {
		t.Fatalf("restarting rota-extender: %v", err)
	}
	t.Logf("rota-extender restarted after %.1fs (pid %d)", time.Since(downAt).Seconds(), env.Extender.PID())
	restartedAt := time.Now()

	// Settle: every pod bound, or pending with a reason from Rota (not the
	// scheduler's error about the extender being down), and no change for 5s.
	pods, pending := settle(ctx, t, ns, total, 5*time.Second)
	settled := time.Since(restartedAt)
	checkInvariants(ctx, t, nil)
	rotaReasons(t, pending)
	t.Logf("%d bound (%d at the kill, %d while the extender was down), %d pending with a reason; settled %.1fs after the restart",
		harness.Bound(pods), boundAtKill, boundWhileDown, len(pending), settled.Seconds())
	if boundWhileDown > boundAtKill+5 {
		t.Logf("note: %d pods were bound while the extender was down (binds in flight at the kill)", boundWhileDown-boundAtKill)
	}
	note(name, "killed at %d/%d bound; %d bound, %d pending with Rota's reason, settled %.0fs after restart",
		boundAtKill, total, harness.Bound(pods), len(pending), settled.Seconds())

}
