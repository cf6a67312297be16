//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/invariant"
)

// userClient is a client of an ordinary user with edit rights on the pods
// of namespace ns: what a team member gets for their own namespace.
func userClient(ctx context.Context, t *testing.T, ns, user string) kubernetes.Interface {
	t.Helper()
	// The pod and Job rules of the aggregated edit ClusterRole (its aggregation is
	// kube-controller-manager's, which this control plane does not run), and
	// JobSets (the rules a cluster aggregates into edit for its users).
	if _, err := env.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-edit"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
			Verbs: []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"},
				Verbs: []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}},
			{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"},
				Verbs: []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user + "-edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(userConfig(t, user))
	if err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC authorizer learns the binding from its watch.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("user %s cannot list pods in %s: %v", user, ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// annotate sets (value non-nil) or removes (nil) a pod's annotation as the
// given client, with a merge patch.
func annotate(ctx context.Context, c kubernetes.Interface, ns, pod, key string, value *string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	_, err := c.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func strptr(s string) *string { return &s }

// recordsPolicyOff removes the records policy for the scenario and
// restores it after.
func recordsPolicyOff(ctx context.Context, t *testing.T) {
	t.Helper()
	was, err := env.SetRecordsPolicy(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := env.SetRecordsPolicy(cctx, was); err != nil {
			t.Errorf("restoring the records policy: %v", err)
		}
	})
}

// TestRecordsAreRotas: a team member with ordinary edit rights on their
// namespace cannot rewrite or remove Rota's records on their pods, ungate
// a queued pod or skip the scheduler with spec.nodeName (the chart's
// records policy refuses each, naming the record), nor charge a running
// pod to another team (the webhook); flooding the queue up to the team's
// cap refuses the next pod and holds up no other team. With the policy
// deleted, the same edits go through, and Rota does not believe them: a
// team at its quota whose running pods' admission records name another
// team gets no third pod admitted, a running pod whose assignment names
// the node's free GPU keeps the GPU it holds (the next pod gets the free
// one), and the invariant checker, which compares the records with the
// kubelet's grants, reports the forged assignment. After a restart the
// extender still does not believe it (it lacks Rota's signature): the node
// takes no new GPU work until the pod ends.
func TestRecordsAreRotas(t *testing.T) {
	const name = "qrecords"
	ctx, ns := setup(t, name, "qrecords", 5*time.Minute) // qrecords: 2 GPUs, no borrowing
	queueing(ctx, t)
	nodes(ctx, t, name, "qrecords", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 3, Plugin: true})
	alice := userClient(ctx, t, ns, "alice")

	for _, n := range []string{"a", "b"} {
		if _, err := alice.CoreV1().Pods(ns).Create(ctx, pod(ns, n, name).GPUs(1).Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitPods(ctx, t, ns, "a and b running", func(p []corev1.Pod) bool { return running(p, "a", "b") })
	if _, err := alice.CoreV1().Pods(ns).Create(ctx, pod(ns, "c", name).GPUs(1).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, ns, "c queued for quota", func(p []corev1.Pod) bool {
		c := byName(p, "c")
		return c != nil && gated(c) && queuedCondition(c) != nil
	})
	a := byName(pods, "a")
	held := assignment(t, a)
	free := freeGPU(t, held.Node, assignment(t, byName(pods, "a")), assignment(t, byName(pods, "b")))
	forgedAs := *held
	forgedAs.GPUs = []contract.AssignedGPU{{Index: free.Index, UUID: free.UUID, MemoryMiB: held.GPUs[0].MemoryMiB}}
	forgedData, err := forgedAs.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	otherTeam := `{"version":"v1","admittedAt":"2026-01-01T00:00:00Z","team":"nlp"}`
	n := env.Names
	edits := []struct {
		what string
		do   func() error
		// refusal is what the policy's message says.
		refusal string
	}{
		{"rewrite a's admission record to team nlp", func() error { return annotate(ctx, alice, ns, "a", n.AdmissionAnnotation, strptr(otherTeam)) }, "is Rota's record"},
		{"remove b's admission record", func() error { return annotate(ctx, alice, ns, "b", n.AdmissionAnnotation, nil) }, "is Rota's record"},
		{"rewrite a's assignment to the free GPU", func() error { return annotate(ctx, alice, ns, "a", n.AssignmentAnnotation, strptr(string(forgedData))) }, "is Rota's record"},
		{"mark b idle", func() error {
			return annotate(ctx, alice, ns, "b", n.IdleSinceAnnotation, strptr("2026-01-01T00:00:00Z"))
		}, "only rota-device-plugin"},
		{"give c a reservation", func() error { return annotate(ctx, alice, ns, "c", n.ReservationAnnotation, strptr("{}")) }, "is Rota's record"},
	}
	probes := []struct {
		what    string
		do      func() error
		refusal string
	}{
		{"ungate c", func() error {
			p, err := alice.CoreV1().Pods(ns).Get(ctx, "c", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.SchedulingGates = slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == n.QueueGate })
			_, err = alice.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			return err
		}, "is removed only by Rota's queue"},
		{"create a GPU pod bound by spec.nodeName", func() error {
			p := pod(ns, "direct", name).GPUs(1).Obj()
			p.Spec.NodeName = held.Node
			_, err := alice.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "cannot be created with spec.nodeName"},
		{"charge a to another team (its team label)", func() error {
			patch := []byte(`{"metadata":{"labels":{"` + n.TeamLabel + `":"nlp"}}}`)
			_, err := alice.CoreV1().Pods(ns).Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, "cannot change on an existing GPU pod"},
		{"create a pod carrying an assignment", func() error {
			p := pod(ns, "forged", name).Obj()
			p.Annotations = map[string]string{n.AssignmentAnnotation: string(forgedData)}
			_, err := alice.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "is Rota's record"},
	}
	for _, e := range append(edits, probes...) {
		err := e.do()
		if err == nil || !strings.Contains(err.Error(), e.refusal) {
			t.Errorf("%s: got %v; want a refusal saying %q", e.what, err, e.refusal)
		}
	}
	if t.Failed() {
		return
	}
	checkInvariants(ctx, t, nil)

	other := ns + "-other"
	if err := env.CreateNamespace(ctx, other, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.DeletePods(dctx, other); err != nil {
			t.Logf("cleaning up namespace %s: %v", other, err)
		}
	})
	// Flooding the queue up to the team's cap (maxQueuedPods 20) holds
	// nothing of anyone else's: one more is refused at creation, and a pod
	// of another team takes the node's free GPU at once.
	for i := range 19 {
		if _, err := alice.CoreV1().Pods(ns).Create(ctx, pod(ns, fmt.Sprintf("flood-%02d", i), name).GPUs(1).Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("queued pod %d of 20: %v", i+2, err)
		}
	}
	_, err = alice.CoreV1().Pods(ns).Create(ctx, pod(ns, "flood-over", name).GPUs(1).Obj(), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "maxQueuedPods 20") {
		t.Errorf("the 21st queued pod of team qrecords: got %v; want a refusal naming maxQueuedPods 20", err)
	}
	began := time.Now()
	create(ctx, t, pod(other, "visitor", name).GPUs(1).Obj())
	waitPods(ctx, t, other, "visitor running", func(p []corev1.Pod) bool { return running(p, "visitor") })
	t.Logf("with 20 pods of team qrecords queued, another team's pod ran %s after creation", time.Since(began).Round(100*time.Millisecond))
	for _, x := range []string{other} {
		if err := env.DeletePods(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 19 {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("flood-%02d", i), deleteNow); err != nil {
			t.Fatal(err)
		}
	}

	// Without the policy (an install that lacks it, or an admin's edit),
	// the edits go through, and are not believed.
	recordsPolicyOff(ctx, t)
	for _, e := range edits[:3] {
		if err := e.do(); err != nil {
			t.Fatalf("%s without the policy: %v", e.what, err)
		}
	}
	// The queue passes every second: c stays queued, its team at quota.
	holdsFor(ctx, t, 8*time.Second, time.Second, func(ctx context.Context) error {
		c := getPod(ctx, t, ns, "c")
		if !gated(c) {
			return errors.New("c was admitted: the forged records let team qrecords past its quota of 2 GPUs")
		}
		return nil
	})
	// The next pod (another namespace, a team without quota) on the node
	// gets the free GPU, not the one a holds.
	create(ctx, t, pod(other, "next", name).GPUs(1).Obj())
	nextPods := waitPods(ctx, t, other, "next running", func(p []corev1.Pod) bool { return running(p, "next") })
	if got := assignment(t, byName(nextPods, "next")); got.GPUs[0].UUID != free.UUID {
		t.Errorf("next got GPU %s; want the free GPU %s (a holds %s, its forged record names %s)",
			got.GPUs[0].UUID, free.UUID, held.GPUs[0].UUID, free.UUID)
	}
	evs, err := env.PodEvents(ctx, ns, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e corev1.Event) bool { return e.Reason == contract.ReasonForgedRecord }) {
		t.Errorf("pod a has no %s event", contract.ReasonForgedRecord)
	}
	// The checker compares the records with the kubelet's grants.
	vs, err := env.CheckInvariants(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(vs, func(v invariant.Violation) bool {
		return v.Kind == invariant.GrantMismatch && v.Object == "pod "+ns+"/a"
	}) {
		t.Errorf("the invariant checker does not report a's forged assignment:\n%s", invariant.Summary(vs))
	}

	// A restarted extender has no memory of what it committed, but a's
	// record no longer carries Rota's signature: the node is closed to new
	// GPU work until a ends, rather than a's GPU handed out again.
	if err := env.KillExtender(); err != nil {
		t.Fatal(err)
	}
	if err := env.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, pod(other, "after", name).GPUs(1).Obj())
	waitPods(ctx, t, other, "after refused: the node is closed", func(p []corev1.Pod) bool {
		q := byName(p, "after")
		if q == nil {
			return false
		}
		c := queuedCondition(q)
		return c != nil && strings.Contains(c.Message, "takes no new GPU work") && strings.Contains(c.Message, ns+"/a")
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "a", deleteNow); err != nil {
		t.Fatal(err)
	}
	pods = waitPods(ctx, t, other, "after running once a ended", func(p []corev1.Pod) bool { return running(p, "after") })
	if got := assignment(t, byName(pods, "after")); got.GPUs[0].UUID != held.GPUs[0].UUID {
		t.Errorf("after got GPU %s; want a's, %s, the one that came free", got.GPUs[0].UUID, held.GPUs[0].UUID)
	}
}

// freeGPU is a GPU of node that none of the assignments holds.
func freeGPU(t *testing.T, node string, held ...*contract.Assignment) contract.TopologyGPU {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := contract.ParseTopology([]byte(n.Annotations[env.Names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range topo.GPUs {
		if !slices.ContainsFunc(held, func(a *contract.Assignment) bool {
			return slices.ContainsFunc(a.GPUs, func(x contract.AssignedGPU) bool { return x.UUID == g.UUID })
		}) {
			return g
		}
	}
	t.Fatalf("node %s has no free GPU", node)
	return contract.TopologyGPU{}
}

// userConfig is the client configuration of user (a client certificate
// the control plane's CA signed).
func userConfig(t *testing.T, user string) *rest.Config {
	t.Helper()
	path, err := env.Cluster.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
