//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/extender/queue"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// chartWith renders the chart as make manifests does, with sets, into the
// test's temporary folder.
func chartWith(t *testing.T, sets ...string) string {
	t.Helper()
	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "rota", "charts/rota", "--namespace", "rota-system", "--kube-version", "1.37.2",
		"--set", "admission.certManager.enabled=true", "--set", "recordsKey.generate=false"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), args...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	path := filepath.Join(t.TempDir(), "rota.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFairShareHistorySurvivesRestart: on a control plane of its own, with
// the chart rendered with extender.fairShareHalfLife (its RBAC, and
// rota-extender as its ServiceAccount), team night holds all 4 GPUs for a
// minute while the leader keeps the usage history in its ConfigMap. The
// extender is killed (kill -9); meanwhile night's pods end and both teams
// queue four 1-GPU pods, night's first. The restarted extender reads the
// history, so team day, which held nothing, gets 3 of the 4 GPUs; with no
// memory the two teams would split them 2 and 2.
func TestFairShareHistorySurvivesRestart(t *testing.T) {
	const name = "fshistory"
	scenario(t, name)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const halfLife = "30s"
	e, err := harness.Start(ctx, harness.Options{
		Manifests: chartWith(t, "extender.fairShareHalfLife="+halfLife),
		Quota: "teams:\n  night: {gpus: 0, borrow: {gpus: 4}}\n  day: {gpus: 0, borrow: {gpus: 4}}\n" +
			"sharedPool: {gpus: 4}\nunknownTeams: unlimited\n",
		ExtenderArgs: []string{"--fair-share-half-life=" + halfLife, "--usage-history-config-map=rota-extender-usage-history"},
		Logf:         func(f string, a ...any) { t.Logf("fshistory: "+f, a...) }})
	if err != nil {
		t.Fatalf("starting a control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.LogTails(40))
		}
		if err := e.Stop(); err != nil {
			t.Logf("stopping: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(e.Dir)
		}
	})
	if _, err := e.SetQueueing(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddGPUNodes(ctx, harness.GPUNodeSpec{Name: "fs-0", Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4}); err != nil {
		t.Fatal(err)
	}
	for ns, team := range map[string]string{"night": "night", "day": "day"} {
		if err := e.CreateNamespace(ctx, ns, team); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, err := e.CreatePod(ctx, harness.Pod("night", fmt.Sprintf("all-night-%d", i)).GPUs(1).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.WaitPods(ctx, "night", func(p []corev1.Pod) bool { return harness.Running(p) == 4 }); err != nil {
		t.Fatalf("waiting for night's 4 pods: %v", err)
	}
	// The leader writes the history every 10 s; after a minute of holding
	// everything, night's mean share is about 3/4 (two half-lives).
	var kept pkgqueue.History
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cm, err := e.Client.CoreV1().ConfigMaps(harness.SystemNamespace).Get(ctx, "rota-extender-usage-history", metav1.GetOptions{})
		if err == nil {
			if kept, err = pkgqueue.ParseHistory([]byte(cm.Data[queue.HistoryKey]), 0); err != nil {
				t.Fatalf("the kept history does not parse: %v", err)
			}
			if kept.Share["night"] >= 0.7 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("night's kept share %v after two minutes (%v)", kept.Share, err)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("kept before the kill: %v at %s", kept.Share, kept.At.Format(time.RFC3339))
	if err := e.KillExtender(); err != nil {
		t.Fatal(err)
	}
	if err := e.DeletePods(ctx, "night"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := e.CreatePod(ctx, harness.Pod("night", fmt.Sprintf("night-%d", i)).GPUs(1).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // night's pods are older
	for i := range 4 {
		if _, err := e.CreatePod(ctx, harness.Pod("day", fmt.Sprintf("day-%d", i)).GPUs(1).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	// The first pass admits 4: day goes first until its share reaches
	// night's remembered one (about 3/4), then the next goes by that rule
	// too; without memory the teams would split them 2 and 2.
	var dayRunning, nightRunning int
	for {
		dayPods, err := e.Pods(ctx, "day")
		if err != nil {
			t.Fatal(err)
		}
		nightPods, err := e.Pods(ctx, "night")
		if err != nil {
			t.Fatal(err)
		}
		dayRunning, nightRunning = harness.Running(dayPods), harness.Running(nightPods)
		if dayRunning+nightRunning == 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of day's and %d of night's pods running", dayRunning, nightRunning)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if dayRunning < 3 {
		t.Errorf("day runs %d pods, night %d; want day at least 3 (night's past share counts against it)", dayRunning, nightRunning)
	}
	note(name, "after a kill -9, the new leader read night's past share %.2f: day got %d GPUs of 4, night %d",
		kept.Share["night"], dayRunning, nightRunning)
}
