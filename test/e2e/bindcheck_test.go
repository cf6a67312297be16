//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestBindChecksNode: rota-extender's bind verb checks what kube-scheduler
// would have. A GPU pod whose nodeSelector matches no node (kube-scheduler
// never asks to bind it) is bound through the verb directly, with the
// scheduler's own client certificate, to the scenario's GPU node: the
// extender refuses with the reason in the answer, writes nothing (the pod
// stays unbound, with no assignment) and records the refusal. The same for
// a pod of a scheduler the extender does not serve. The refusals are the
// informers' real objects: the node's labels and the pending pod's
// selector as the trimmed caches keep them.
func TestBindChecksNode(t *testing.T) {
	const name = "bindcheck"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count = 2
	node := nodes(ctx, t, name, "bindcheck", 1, spec)[0].Spec.Name

	picky := create(ctx, t, pod(ns, "picky", name).GPUs(1).NodeSelector("rota.test/pool", "nowhere").Obj())
	foreign := pod(ns, "foreign", name).GPUs(1).Obj()
	foreign.Spec.SchedulerName = "no-such-scheduler"
	foreign = create(ctx, t, foreign)

	client, err := env.ExtenderTLS.VerbsClient(&env.ExtenderTLS.SchedulerCert)
	if err != nil {
		t.Fatal(err)
	}
	bind := func(args extenderv1.ExtenderBindingArgs) string {
		t.Helper()
		body, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Post(env.VerbsURL+"/bind", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var res extenderv1.ExtenderBindingResult
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &res) != nil {
			t.Fatalf("bind answered %d %q", resp.StatusCode, raw)
		}
		return res.Error
	}
	for _, c := range []struct {
		pod       string
		uid       types.UID
		wantError string
	}{
		{"picky", picky.UID, "bind: pod " + ns + "/picky may not run on node " + node + ": node " + node +
			" does not match the pod's nodeSelector rota.test/pool=nowhere," + ScenarioLabel + "=" + name},
		{"foreign", foreign.UID, "bind: pod " + ns + `/foreign has schedulerName "no-such-scheduler"; this extender binds only pods of default-scheduler`},
	} {
		// The informer may not hold the pod yet: the extender reads it from
		// the API then, and refuses the same.
		got := bind(extenderv1.ExtenderBindingArgs{PodName: c.pod, PodNamespace: ns, PodUID: c.uid, Node: node})
		if !strings.Contains(got, c.wantError) {
			t.Errorf("bind of %s: Error %q, want %q", c.pod, got, c.wantError)
		}
	}
	// Nothing was written, and nothing is later: both stay pending, the
	// selector-bound one with kube-scheduler's own FailedScheduling.
	time.Sleep(2 * time.Second)
	for _, n := range []string{"picky", "foreign"} {
		if p := getPod(ctx, t, ns, n); p.Spec.NodeName != "" || p.Annotations[env.Names.AssignmentAnnotation] != "" {
			t.Errorf("%s after the refused bind: node %q, annotations %v", n, p.Spec.NodeName, p.Annotations)
		}
	}
	if msg := failedScheduling(ctx, t, ns, "picky"); !strings.Contains(msg, "node affinity/selector") {
		t.Errorf("kube-scheduler's FailedScheduling for picky is %q, want its own node affinity/selector refusal", msg)
	}
	m, err := env.ExtenderMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"NodeAffinity", "WrongScheduler"} {
		if got := m[`rota_extender_decisions_total{outcome="error",reason="`+reason+`",verb="bind"}`]; got < 1 {
			t.Errorf("rota_extender_decisions_total for bind refusals %s = %v, want >= 1", reason, got)
		}
	}
	checkInvariants(ctx, t, nil)
	note(name, "a pod no node's labels match and a pod of another scheduler, bound through /bind directly: both refused with the reason, both still pending")
}
