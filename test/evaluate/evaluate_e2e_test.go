//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// TestEvaluateSmall is the evaluation's short version that CI runs: the
// burst scenario, small, on every stack. Every stack must have run, and
// every run must pass every check that applies to it; report.md and
// report.html must hold each stack, and the page is screenshot with
// headless Chromium (where installed) for people to look at.
func TestEvaluateSmall(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // run() finds .cache/kueue from the repository root; restored after the test
	out := filepath.Join(root, "bin", "evaluate-small")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	o := options{size: evaluate.Small, scenarios: []string{"burst"}, stacks: []string{"stock", "kueue", "rota"},
		seed: 7, out: out, image: "busybox:1.36", deadline: 150 * time.Second}
	if err := run(ctx, o); err != nil {
		t.Fatal(err)
	}
	rep := readResults(t, out)
	if len(rep.Results) != 3 {
		t.Fatalf("%d results; want one per stack", len(rep.Results))
	}
	fitting := 0
	for _, j := range evaluate.Burst(7, evaluate.Small).Jobs {
		if !j.NeverFits {
			fitting++
		}
	}
	for _, res := range rep.Results {
		if res.Skipped != "" {
			t.Errorf("%s did not run: %s", res.Stack, res.Skipped)
			continue
		}
		if res.Completed == 0 || res.AdmittedPods == 0 || len(res.Equivalent) == 0 {
			t.Errorf("%s: %d jobs completed, %d pods started, %d allocation points: the run recorded nothing",
				res.Stack, res.Completed, res.AdmittedPods, len(res.Equivalent))
		}
		t.Logf("%s: %d of %d fitting jobs completed, makespan %.0fs, mean use %.0f%%", res.Stack, res.Completed, fitting,
			res.Makespan, 100*res.MeanUse)
		for _, c := range res.Checks {
			if len(c.Violations) > 0 {
				t.Errorf("%s: %s: %s", res.Stack, c.Name, strings.Join(c.Violations, "; "))
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stack := range o.stacks {
		if !strings.Contains(string(md), "| "+stack+" |") || !strings.Contains(string(page), "<td>"+stack+"</td>") {
			t.Errorf("the report has no row for %s", stack)
		}
	}
	if n := strings.Count(string(page), "data:image/png;base64,"); n < 5 {
		t.Errorf("report.html has %d plots; want the allocation and wait plots and one team plot per stack", n)
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Logf("no chromium: report.html not screenshot (%s)", filepath.Join(out, "report.html"))
		return
	}
	shot := filepath.Join(out, "report.png")
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,2400",
		"--screenshot="+shot, "file://"+filepath.Join(out, "report.html"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v: %s", err, b)
	}
	if st, err := os.Stat(shot); err != nil {
		t.Errorf("screenshot: %v", err)
	} else if st.Size() < 50_000 {
		t.Errorf("screenshot %s is %d bytes; want a rendered page", shot, st.Size())
	}
	t.Logf("report: %s, screenshot %s", filepath.Join(out, "report.html"), shot)
}

// TestEvaluateExistingCluster measures a cluster the evaluation did not
// start, as a platform team points it at its staging cluster: the job set
// runs in namespaces of its own, which it refuses to reuse and deletes
// afterwards. The cluster here is a local control plane with kube-scheduler
// and simulated nodes whose pods a Sleeper ends, as a kubelet would.
func TestEvaluateExistingCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := cluster.StartT(t, cluster.Options{})
	// The namespace controller deletes what the evaluation made; as on a
	// real cluster, the pod garbage collector fails the Job pods that were
	// deleted before they were scheduled, so that the job controller lets
	// them go (without it their finalizer holds the namespace for ever).
	if err := c.StartControllerManager(ctx, "job", "namespace", "podgc"); err != nil {
		t.Fatal(err)
	}
	sc := evaluate.Burst(7, evaluate.Small)
	for i := range sc.Cluster.Nodes {
		if _, err := c.CreateNode(ctx, evalkit.NodeName(i), nil, map[string]string{"cpu": "96", "memory": "1Ti", "pods": "110",
			names.GPU: strconv.Itoa(sc.Cluster.GPUsPerNode)}); err != nil {
			t.Fatal(err)
		}
	}
	kubelet := cluster.NewSleeper(c.Client(), c.Nodes.Simulated)
	if err := kubelet.Start(ctx); err != nil {
		t.Fatal(err)
	}
	taken := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "staging-vision"}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	o := options{size: evaluate.Small, scenarios: []string{"burst"}, seed: 7, out: out, image: "busybox:1.36",
		deadline: 150 * time.Second,
		existing: &existingStack{kubeconfig: c.Kubeconfig, prefix: "staging", as: "whole", names: names, label: "staging"}}
	o.stacks = []string{"staging"}
	if err := run(ctx, o); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "not run: could not start: namespaces staging-vision exist") {
		t.Fatalf("the run did not refuse a namespace that exists:\n%s", md)
	}
	if err := c.Client().CoreV1().Namespaces().Delete(ctx, "staging-vision", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := c.Client().CoreV1().Namespaces().Get(ctx, "staging-vision", metav1.GetOptions{}); err != nil {
			break
		}
		time.Sleep(time.Second)
	}
	o.existing = &existingStack{kubeconfig: c.Kubeconfig, prefix: "staging", as: "whole", names: names, label: "staging"}
	if err := run(ctx, o); err != nil {
		t.Fatal(err)
	}
	rep := readResults(t, out)
	if len(rep.Results) != 1 || rep.Results[0].Skipped != "" || rep.Results[0].Completed == 0 {
		t.Fatalf("results: %+v", rep.Results)
	}
	t.Logf("staging: %d jobs completed, makespan %.0fs", rep.Results[0].Completed, rep.Results[0].Makespan)
	list, err := c.Client().CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range list.Items {
		if strings.HasPrefix(ns.Name, "staging-") {
			t.Errorf("namespace %s left behind (%s)", ns.Name, ns.Status.Phase)
		}
	}
}

// readResults reads the results.json a run wrote into dir.
func readResults(t *testing.T, dir string) (rep struct{ Results []evaluate.Result }) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
