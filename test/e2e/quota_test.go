//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestTeamQuota: rota-admission denies the pod that would take a team over
// its quota, with a message that says so, and counts pending pods: the
// pods here never find a node (their node selector matches none), yet they
// use up the quota. Many pods admitted at the same moment still respect it.
// Its namespaces have queueing off (the namespace label), so the deny at
// creation applies whether or not the queue gate is installed.
func TestTeamQuota(t *testing.T) {
	const name = "quota"
	ctx, ns := setup(t, name, "vision", 2*time.Minute) // vision: 4 GPUs, 40 GiB, no borrowing
	if err := env.SetNamespaceQueueing(ctx, ns, false); err != nil {
		t.Fatal(err)
	}
	q, err := config.ParseQuota([]byte(quotaDoc))
	if err != nil {
		t.Fatal(err)
	}

	// Four pending 1-GPU pods fill the team's 4 GPUs.
	for i := range 4 {
		create(ctx, t, pod(ns, fmt.Sprintf("gpu-%d", i), name).GPUs(1).Obj())
	}
	_, err = env.CreatePod(ctx, pod(ns, "gpu-4", name).GPUs(1).Obj())
	switch {
	case err == nil:
		t.Fatal("the fifth 1-GPU pod of team vision (quota 4 GPUs, 4 pending) was admitted")
	case !harness.IsWebhookDenial(err):
		t.Fatalf("the fifth pod failed, but not by the webhook: %v", err)
	}
	for _, want := range []string{"team vision", "quota 4 GPUs", "4 pending"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("denial %q does not say %q", err, want)
		}
	}
	t.Logf("denied: %v", err)
	pods, _ := env.Pods(ctx, ns)
	if b := harness.Bound(pods); b != 0 {
		t.Fatalf("%d pods bound; this scenario has no nodes", b)
	}

	// Memory shares count against gpuMemoryGiB: 2 x 20 GiB fit 40 GiB, a third does not.
	create(ctx, t, pod(ns, "mem-0", name).Memory(20).Obj())
	create(ctx, t, pod(ns, "mem-1", name).Memory(20).Obj())
	if _, err := env.CreatePod(ctx, pod(ns, "mem-2", name).Memory(20).Obj()); !harness.IsWebhookDenial(err) ||
		!strings.Contains(err.Error(), "GPU memory") {
		t.Errorf("third 20 GiB share of team vision (40 GiB quota): got %v, want a denial about GPU memory", err)
	}

	// A pending pod deleted gives its quota back.
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "gpu-0", deleteNow); err != nil {
		t.Fatal(err)
	}
	if err := retryCreate(ctx, t, pod(ns, "gpu-4", name).GPUs(1).Obj(), func(err error) bool { return err == nil }); err != nil {
		t.Errorf("deleting a pending pod did not free its quota within 10s: %v", err)
	}

	// Team nlp may hold 2 GPUs plus 2 borrowed: 12 pods created at once, 4 admitted.
	nlp := "e2e-quota-nlp"
	if err := env.CreateNamespace(ctx, nlp, "nlp"); err != nil {
		t.Fatal(err)
	}
	if err := env.SetNamespaceQueueing(ctx, nlp, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.DeletePods(dctx, nlp)
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, denied := 0, 0
	var other []error
	for i := range 12 {
		wg.Go(func() {
			_, err := env.CreatePod(ctx, pod(nlp, fmt.Sprintf("burst-%02d", i), name).GPUs(1).Obj())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case harness.IsWebhookDenial(err):
				denied++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	if admitted != 4 || denied != 8 || len(other) > 0 {
		t.Errorf("12 concurrent 1-GPU pods of team nlp (2 guaranteed + 2 borrowable): %d admitted, %d denied, other errors %v; want 4 and 8",
			admitted, denied, other)
	}
	checkInvariants(ctx, t, &q)
	note(name, "denials carry the team's numbers; 12 concurrent creates -> %d admitted", admitted)
}
