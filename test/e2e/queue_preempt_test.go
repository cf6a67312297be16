//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueuePreemptGuarantee: kube-scheduler's own priority preemption keeps
// the queue's guarantees. Team qguard-a runs four 1-GPU pods on the only
// node of its model, two within its guarantee of 2 and two borrowed. An
// urgent pod of team qguard-u (admitted without room, so kube-scheduler
// preempts for it) that needs 3 GPUs could only run by taking qguard-a
// below its guarantee: the extender's preempt verb refuses every victim
// set, and no pod of qguard-a goes. A 2-GPU urgent pod then takes exactly
// the two borrowed GPUs back.
func TestQueuePreemptGuarantee(t *testing.T) {
	const name = "qguard"
	ctx, nsU := setup(t, name, "qguard-u", 4*time.Minute)
	nsA := "e2e-qguard-a"
	if err := env.CreateNamespace(ctx, nsA, "qguard-a"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.DeletePods(dctx, nsA)
	})
	if err := env.CreatePriorityClass(ctx, "rota-e2e-urgent", 1000000); err != nil {
		t.Fatal(err)
	}
	queueing(ctx, t)
	nodes(ctx, t, name, "qguard", 1, harness.GPUNodeSpec{Model: "Rota Guard GPU", MemoryMiB: h100.MemoryMiB, Count: 4})
	for i := range 4 {
		create(ctx, t, pod(nsA, fmt.Sprintf("a%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsA, "team qguard-a's four pods running", func(p []corev1.Pod) bool { return harness.Running(p) == 4 })

	create(ctx, t, pod(nsU, "urgent3", name).GPUs(3).PriorityClass("rota-e2e-urgent").Obj())
	msg, err := preemptMessage(ctx, nsU, "urgent3", 90*time.Second)
	if err != nil {
		t.Fatalf("no preempt decision that kept team qguard-a's guarantee: %v\n%s", err, env.LogTails(40))
	}
	if !strings.Contains(msg, "qguard-a") || !strings.Contains(msg, "guarantee") {
		t.Errorf("preempt decision message %q does not name team qguard-a's guarantee", msg)
	}
	// kube-scheduler retries the pod; give it a few tries before counting.
	time.Sleep(5 * time.Second)
	pods, err := env.Pods(ctx, nsA)
	if err != nil {
		t.Fatal(err)
	}
	if r := harness.Running(pods); r != 4 {
		t.Fatalf("team qguard-a runs %d pods after the 3-GPU preemption attempt, want 4 (none taken below its guarantee)\n%s", r, describe(ctx, pods))
	}
	if u, err := env.Pods(ctx, nsU); err != nil || running(u, "urgent3") {
		t.Fatalf("urgent3 runs (err %v): it could only run by taking team qguard-a below its guarantee", err)
	}

	if err := env.Client.CoreV1().Pods(nsU).Delete(ctx, "urgent3", deleteNow); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	create(ctx, t, pod(nsU, "urgent2", name).GPUs(2).PriorityClass("rota-e2e-urgent").Obj())
	waitPods(ctx, t, nsU, "urgent2 running", func(p []corev1.Pod) bool { return running(p, "urgent2") })
	took := time.Since(began)
	pods = waitPods(ctx, t, nsA, "team qguard-a back at its guarantee", func(p []corev1.Pod) bool {
		live := 0
		for i := range p {
			if p[i].DeletionTimestamp == nil {
				live++
			}
		}
		return live == 2
	})
	if r := harness.Running(pods); r != 2 {
		t.Errorf("team qguard-a runs %d pods, want its guarantee of 2\n%s", r, describe(ctx, pods))
	}
	note(name, "3-GPU urgent pod refused (guarantee kept); 2-GPU urgent pod created to running in %s", took.Round(100*time.Millisecond))
	checkInvariants(ctx, t, nil)
}

// preemptMessage waits for a preempt decision on the pod whose message says
// a quota guarantee kept victims, and returns that message.
func preemptMessage(ctx context.Context, ns, name string, limit time.Duration) (string, error) {
	var msg string
	err := wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.ExtenderURL+"/debug/pods/"+ns+"/"+name, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil // the extender may be restarting; try again
		}
		defer resp.Body.Close()
		var got struct {
			Decisions []scheduling.Decision `json:"decisions"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil {
			return false, nil
		}
		for _, d := range got.Decisions {
			if d.Verb == "preempt" && strings.Contains(d.Message, "guarantee") {
				msg = d.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg, err
}
