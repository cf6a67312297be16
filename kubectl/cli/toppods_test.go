package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/pkg/contract"
)

// topPodsCLI runs one command line against two GPU pods: ml/sleepy
// (marked idle, 1%) and web/busy (80%), and a CPU pod.
func topPodsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join("testdata", "kubeconfig"))
	names := contract.Default
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	pod := func(ns, name string, a contract.Assignment, ann map[string]string, conds ...corev1.PodCondition) *corev1.Pod {
		b, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ann[names.AssignmentAnnotation] = string(b)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
			Spec: corev1.PodSpec{NodeName: a.Node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds}}
	}
	objs := []runtime.Object{
		pod("ml", "sleepy", contract.Assignment{Version: "v1", Node: "n1", GPUs: []contract.AssignedGPU{{Index: 2, UUID: "GPU-2", MemoryMiB: 10240}}},
			map[string]string{names.GPUUtilizationAnnotation: "sm=1,usedMiB=512", names.IdleSinceAnnotation: "2026-07-01T11:00:00Z"},
			corev1.PodCondition{Type: corev1.PodConditionType(names.GPUIdleCondition), Status: corev1.ConditionTrue, Message: "GPU utilization 1% has stayed below 5% for 30m0s"}),
		pod("web", "busy", contract.Assignment{Version: "v1", Node: "n2", Whole: true, GPUs: []contract.AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 81920}}},
			map[string]string{names.GPUUtilizationAnnotation: "sm=80,usedMiB=60000"}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "cpu"}, Spec: corev1.PodSpec{NodeName: "n1"}},
	}
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }, Terminal: func() bool { return false },
		Client: func(clientcmd.ClientConfig) (kubernetes.Interface, error) { return fake.NewClientset(objs...), nil },
		HTTP:   http.DefaultClient, Now: func() time.Time { return now }}
	err := Run(t.Context(), args, env)
	return out.String(), err
}

func TestTopPodsTable(t *testing.T) {
	out, err := topPodsCLI(t, "top", "pods")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("output:\n%s", out)
	}
	for i, want := range [][]string{
		{"POD", "NODE", "GPUS", "SM", "GPU MEM USED", "IDLE", "NOTE"},
		{"ml/sleepy", "n1", "share 10 GiB", "1%", "512 MiB", "idle 1h0m0s", "GPU utilization 1% has stayed below 5% for 30m0s"},
		{"web/busy", "n2", "1", "80%", "60000 MiB", "-"},
	} {
		for _, cell := range want {
			if !strings.Contains(lines[i], cell) {
				t.Errorf("line %d %q lacks %q", i, lines[i], cell)
			}
		}
	}
	if !strings.Contains(lines[4], "2 pod(s), 1 idle.") {
		t.Errorf("summary %q", lines[4])
	}
}

func TestTopPodsNamespaceAndJSON(t *testing.T) {
	out, err := topPodsCLI(t, "top", "pods", "-n", "web", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r report.Pods
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(r.Pods) != 1 || r.Pods[0].Pod != "web/busy" || r.Pods[0].Utilization == nil || r.Pods[0].Utilization.SMPercent != 80 {
		t.Errorf("top pods -n web = %+v", r)
	}
	if _, err := topPodsCLI(t, "top", "pods", "--gang", "g"); err == nil {
		t.Error("--gang accepted")
	}
}
