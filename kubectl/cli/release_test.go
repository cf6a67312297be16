package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/clustertest"
	"github.com/rota-sched/rota/pkg/contract"
)

// quarantineFixture is the fixture cluster as rota-extender's remediation
// left it: h100-b1 quarantined as a node (annotation "node" plus its
// unhealthy GPU 5, and the taint), GPU 2 of h100-b2 quarantined alone,
// and a release of h100-a3 requested but not yet acted on.
func quarantineFixture(t *testing.T) *fake.Clientset {
	t.Helper()
	objs := clustertest.Objects()
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		n.ResourceVersion = "7"
		switch n.Name {
		case "h100-b1":
			n.Annotations[names.QuarantineAnnotation] = "node," + gpuUUID(t, n, 5)
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: names.QuarantineTaint, Effect: corev1.TaintEffectNoSchedule})
		case "h100-b2":
			n.Annotations[names.QuarantineAnnotation] = gpuUUID(t, n, 2)
		case "h100-a3":
			n.Annotations[names.QuarantineAnnotation] = contract.QuarantineRelease
		}
	}
	return fake.NewClientset(objs...)
}

var names = contract.Default

func gpuUUID(t *testing.T, n *corev1.Node, index int) string {
	t.Helper()
	topo, err := contract.ParseTopology([]byte(n.Annotations[names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range topo.GPUs {
		if g.Index == index {
			return g.UUID
		}
	}
	t.Fatalf("node %s has no GPU %d", n.Name, index)
	return ""
}

// runWith runs one command line against cs.
func runWith(t *testing.T, cs kubernetes.Interface, args ...string) *run {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join("testdata", "kubeconfig"))
	r := &run{}
	env := Env{
		Stdout: &r.stdout, Stderr: &r.stderr,
		Getenv:   func(string) string { return "" },
		Terminal: func() bool { return false },
		Client:   func(clientcmd.ClientConfig) (kubernetes.Interface, error) { return cs, nil },
		HTTP:     http.DefaultClient,
		Now:      func() time.Time { return clustertest.Now },
	}
	r.err = Run(t.Context(), args, env)
	return r
}

func nodePatches(cs *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			out = append(out, p)
		}
	}
	return out
}

func getNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReleaseGolden(t *testing.T) {
	tests := []struct {
		name      string
		giveArgs  []string
		wantWrite bool
	}{
		{"release", []string{"release", "h100-b1"}, true},
		{"release-gpu-only", []string{"release", "node/h100-b2"}, true},
		{"release-dry-run", []string{"release", "node", "h100-b1", "--dry-run"}, false},
		{"release-json", []string{"release", "h100-b1", "-o", "json"}, true},
		{"release-pending", []string{"release", "h100-a3"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := quarantineFixture(t)
			r := runWith(t, cs, tc.giveArgs...)
			if r.err != nil {
				t.Fatalf("Run(%q) = %v", tc.giveArgs, r.err)
			}
			if r.stderr.Len() > 0 {
				t.Errorf("stderr: %s", r.stderr.String())
			}
			golden(t, tc.name, r.stdout.Bytes())
			patches := nodePatches(cs)
			if !tc.wantWrite {
				if len(patches) != 0 {
					t.Errorf("%d node patches, want none", len(patches))
				}
				return
			}
			if len(patches) != 1 {
				t.Fatalf("%d node patches, want 1", len(patches))
			}
			// Exactly the annotation, guarded by the version that was read.
			var body struct {
				Metadata struct {
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patches[0].GetPatch(), &body); err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{names.QuarantineAnnotation: contract.QuarantineRelease}; len(body.Metadata.Annotations) != 1 ||
				body.Metadata.Annotations[names.QuarantineAnnotation] != contract.QuarantineRelease {
				t.Errorf("patch annotations = %v, want %v", body.Metadata.Annotations, want)
			}
			if body.Metadata.ResourceVersion == "" {
				t.Errorf("patch %s has no resourceVersion precondition", patches[0].GetPatch())
			}
			node := getNode(t, cs, patches[0].GetName())
			if got := node.Annotations[names.QuarantineAnnotation]; got != contract.QuarantineRelease {
				t.Errorf("annotation after release = %q, want %q", got, contract.QuarantineRelease)
			}
			// The taint is rota-extender's to remove, with its in-memory quarantine.
			if node.Name == "h100-b1" && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == names.QuarantineTaint }) {
				t.Errorf("kubectl-rota removed the taint itself")
			}
		})
	}
}

func TestReleaseErrors(t *testing.T) {
	cs := quarantineFixture(t)
	b2GPU := gpuUUID(t, getNode(t, cs, "h100-b2"), 2)
	b1GPU := gpuUUID(t, getNode(t, cs, "h100-b1"), 5)
	quarantined := "quarantined: h100-b1 (node, " + b1GPU + "), h100-b2 (" + b2GPU + ")"
	tests := []struct {
		name     string
		giveArgs []string
		wantErr  []string
	}{
		{"unknown node", []string{"release", "h100-z9"}, []string{"node h100-z9 not found", quarantined}},
		{"not quarantined", []string{"release", "h100-a1"}, []string{"node h100-a1 is not quarantined",
			"no example.com/quarantine annotation, no example.com/quarantined taint", quarantined}},
		{"gpu names its node", []string{"release", "gpu", b2GPU}, []string{"release works per node",
			"GPU " + b2GPU + " is quarantined on node h100-b2", "kubectl rota release h100-b2"}},
		{"gpu by uuid", []string{"release", b1GPU}, []string{"quarantined on node h100-b1", "(node, " + b1GPU + ")"}},
		{"gpu not quarantined", []string{"release", "gpu/GPU-0000"}, []string{"GPU GPU-0000 is not quarantined on any node"}},
		{"not a node", []string{"release", "pod/x"}, []string{"only nodes"}},
		{"no node", []string{"release"}, []string{"name one node"}},
		{"two nodes", []string{"release", "a", "b"}, []string{"want NODE, node NODE or gpu UUID"}},
		{"dry-run elsewhere", []string{"top", "nodes", "--dry-run"}, []string{"apply to release only"}},
		{"wait elsewhere", []string{"ledger", "--node", "t4-c1", "--wait"}, []string{"apply to release only"}},
		{"gang", []string{"release", "h100-b1", "--gang", "x"}, []string{"do not apply"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runWith(t, cs, tc.giveArgs...)
			if r.err == nil {
				t.Fatalf("Run(%q) succeeded; stdout: %s", tc.giveArgs, r.stdout.String())
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(r.err.Error(), want) {
					t.Errorf("Run(%q) = %v, want an error containing %q", tc.giveArgs, r.err, want)
				}
			}
		})
	}
	if p := nodePatches(cs); len(p) != 0 {
		t.Errorf("failed commands patched nodes: %d patches", len(p))
	}
	// No quarantine at all.
	r := runWith(t, fake.NewClientset(clustertest.Objects()...), "release", "h100-a1")
	if r.err == nil || !strings.Contains(r.err.Error(), "no node is quarantined") {
		t.Errorf("release on a cluster without quarantine = %v, want 'no node is quarantined'", r.err)
	}
}

// TestReleaseRetriesOnConflict: the quarantine changed between read and
// write (the patch carries the version read); the command reads again.
func TestReleaseRetriesOnConflict(t *testing.T) {
	cs := quarantineFixture(t)
	conflicts := 0
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "h100-b1", nil)
		}
		return false, nil, nil
	})
	r := runWith(t, cs, "release", "h100-b1")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := getNode(t, cs, "h100-b1").Annotations[names.QuarantineAnnotation]; got != contract.QuarantineRelease || len(nodePatches(cs)) != 2 {
		t.Errorf("after a conflict: annotation %q, %d patches; want release written by the second", got, len(nodePatches(cs)))
	}
}

// TestReleaseWait: --wait returns once rota-extender (played here) has
// cleared the annotation and the taint, and fails with a hint when it
// does not act.
func TestReleaseWait(t *testing.T) {
	defer func(d time.Duration) { releasePollInterval = d }(releasePollInterval)
	releasePollInterval = 10 * time.Millisecond

	cs := quarantineFixture(t)
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The controller clears the quarantine shortly after the release.
		go func() {
			time.Sleep(50 * time.Millisecond)
			n, err := cs.CoreV1().Nodes().Get(context.Background(), a.(k8stesting.PatchAction).GetName(), metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			delete(n.Annotations, names.QuarantineAnnotation)
			n.Spec.Taints = nil
			if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}()
		return false, nil, nil
	})
	r := runWith(t, cs, "release", "h100-b1", "--wait=5s")
	if r.err != nil {
		t.Fatal(r.err)
	}
	golden(t, "release-wait", r.stdout.Bytes())

	r = runWith(t, quarantineFixture(t), "release", "h100-b1", "--wait=100ms")
	if r.err == nil || !strings.Contains(r.err.Error(), "did not complete the release within 100ms") ||
		!strings.Contains(r.err.Error(), "--remediation=on") {
		t.Errorf("--wait without a controller = %v, want a timeout naming --remediation=on", r.err)
	}
	if r := runWith(t, quarantineFixture(t), "release", "h100-b1", "--wait=-1s"); r.err == nil || !strings.Contains(r.err.Error(), "negative") {
		t.Errorf("--wait=-1s = %v, want an error", r.err)
	}
}

func TestReleaseHelp(t *testing.T) {
	r := runWith(t, quarantineFixture(t), "--help")
	for _, want := range []string{"kubectl rota release NODE [--dry-run]", "--dry-run", "--wait", "quarantine=release"} {
		if !bytes.Contains(r.stdout.Bytes(), []byte(want)) {
			t.Errorf("help lacks %q", want)
		}
	}
}
