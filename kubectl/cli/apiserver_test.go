package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/clustertest"
	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/test/cluster"
)

// TestRealAPIServer runs the commands against a real kube-apiserver (no
// scheduler) holding the fixture: the kubeconfig is read by clientcmd as
// kubectl reads it, lists are paged, and the event field selectors
// (involvedObject.kind, reason) are the server's. Skipped with -short or
// when hack/k8s-tools.sh has not built the binaries.
func TestRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	dir, err := cluster.BinDir()
	if err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Skipf("no control-plane binaries in %s (run hack/k8s-tools.sh)", dir)
	}
	c := cluster.StartT(t, cluster.Options{NoScheduler: true, NoPodSimulator: true, NodeLeaseInterval: -1})
	ctx := t.Context()
	cs := c.Client()
	load(t, cs)

	rota := func(args ...string) *bytes.Buffer {
		t.Helper()
		var out, errOut bytes.Buffer
		env := Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
			Terminal: func() bool { return false }, HTTP: http.DefaultClient, Now: time.Now,
			Client: func(cc clientcmd.ClientConfig) (kubernetes.Interface, error) {
				rc, err := cc.ClientConfig()
				if err != nil {
					return nil, err
				}
				return kubernetes.NewForConfig(rc)
			}}
		if err := Run(ctx, append([]string{"--kubeconfig", c.Kubeconfig}, args...), env); err != nil {
			t.Fatalf("kubectl rota %q: %v; stderr: %s", args, err, errOut.String())
		}
		if errOut.Len() > 0 {
			t.Errorf("kubectl rota %q stderr: %s", args, errOut.String())
		}
		return &out
	}

	var w report.Why
	mustDecode(t, rota("why", "--gang", "train-7", "-n", "llm", "-o", "json"), &w)
	if w.Gang.Placed != 12 || w.Gang.Size != 16 || len(w.Decisions) != 2 || w.Fit.FitsNow {
		t.Errorf("why --gang: placed %d/%d, %d decisions, fits %v; want 12/16, 2 decisions (FailedScheduling, GPUUnschedulable), no fit",
			w.Gang.Placed, w.Gang.Size, len(w.Decisions), w.Fit.FitsNow)
	}
	var teams report.Teams
	mustDecode(t, rota("top", "teams", "-o", "json"), &teams)
	for _, q := range teams.Teams {
		if q.Team == "speech" && (q.Rejections != 5 || q.State != report.StateAtQuota) {
			t.Errorf("speech: %d rejections, %s; want 5, at quota", q.Rejections, q.State)
		}
	}
	var l report.NodeLedger
	mustDecode(t, rota("ledger", "--node", "t4-c1", "-o", "json"), &l)
	if len(l.Entries)+len(l.Violations) != 3 || len(l.Violations) != 1 {
		t.Errorf("ledger t4-c1: %d entries, violations %q; want 2 and 1", len(l.Entries), l.Violations)
	}
	if out := rota("top", "nodes").String(); !strings.Contains(out, "GPU 5: XID 79") {
		t.Errorf("top nodes lacks the XID 79 GPU:\n%s", out)
	}

	// release: the merge patch with its resourceVersion precondition as
	// the server applies it; the taint stays for rota-extender to remove.
	n, err := cs.CoreV1().Nodes().Get(ctx, "h100-b1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[names.QuarantineAnnotation] = "node"
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: names.QuarantineTaint, Effect: corev1.TaintEffectNoSchedule})
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := rota("release", "h100-b1", "--dry-run").String(); !strings.Contains(out, "would release node") {
		t.Errorf("release --dry-run: %s", out)
	}
	var rel Release
	mustDecode(t, rota("release", "h100-b1", "-o", "json"), &rel)
	n, err = cs.CoreV1().Nodes().Get(ctx, "h100-b1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[names.QuarantineAnnotation]; got != "release" || len(n.Spec.Taints) != 1 || !slices.Equal(rel.Targets, []string{"node"}) {
		t.Errorf("after release: annotation %q, taints %v, targets %v; want release, the quarantine taint, [node]", got, n.Spec.Taints, rel.Targets)
	}
}

// load creates the fixture's objects; pods get the server's UIDs, so the
// events are pointed at those.
func load(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	core := cs.CoreV1()
	uids := map[types.UID]types.UID{}
	var events []*corev1.Event
	objs := clustertest.Objects()
	// Namespaces first: everything else lives in one.
	for _, o := range objs {
		if ns, ok := o.(*corev1.Namespace); ok && ns.Name != "default" {
			if _, err := core.Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, o := range objs {
		var err error
		switch x := o.(type) {
		case *corev1.Node:
			_, err = core.Nodes().Create(ctx, x, metav1.CreateOptions{})
		case *schedulingv1.PriorityClass:
			_, err = cs.SchedulingV1().PriorityClasses().Create(ctx, x, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = core.ConfigMaps(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
		case *corev1.Pod:
			var p *corev1.Pod
			x.Spec.Priority = nil // the server resolves the PriorityClass
			if p, err = core.Pods(x.Namespace).Create(ctx, x, metav1.CreateOptions{}); err == nil {
				uids[x.UID] = p.UID
				p.Status = x.Status
				_, err = core.Pods(x.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
		case *corev1.Event:
			events = append(events, x)
		}
		if err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	for _, e := range events {
		if u, ok := uids[e.InvolvedObject.UID]; ok {
			e.InvolvedObject.UID = u
		}
		if _, err := core.Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create event: %v", err)
		}
	}
}

func mustDecode(t *testing.T, b *bytes.Buffer, v any) {
	t.Helper()
	if err := json.Unmarshal(b.Bytes(), v); err != nil {
		t.Fatalf("decode: %v\n%s", err, b.String())
	}
}
