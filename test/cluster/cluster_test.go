//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/test/cluster"
)

// TestClusterSchedulesPod starts etcd, kube-apiserver and kube-scheduler,
// registers three simulated GPU nodes, and checks that the real scheduler binds
// a pod and the pod simulator reports it Running; then it restarts the API
// server and the scheduler and checks that a second pod still schedules.
//
//	go test -tags e2e ./test/cluster/ -v
func TestClusterSchedulesPod(t *testing.T) {
	began := time.Now()
	c := cluster.StartT(t, cluster.Options{})
	startTook := time.Since(began)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	version, err := c.Version()
	if err != nil {
		t.Fatal(err)
	}
	if want := wantVersion(t); version != want {
		t.Errorf("API server version = %q, want %q", version, want)
	}

	for i := range 3 {
		node, err := c.CreateNode(ctx, fmt.Sprintf("gpu-%d", i),
			map[string]string{"example.com/rack": "r0"}, map[string]string{"example.com/gpu": "8"})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Status.Allocatable["example.com/gpu"]; got.Cmp(resource.MustParse("8")) != 0 {
			t.Errorf("node %s allocatable example.com/gpu = %s, want 8", node.Name, got.String())
		}
		if len(node.Spec.Taints) != 0 {
			t.Errorf("node %s taints = %v, want none", node.Name, node.Spec.Taints)
		}
	}

	pod := schedulePod(ctx, t, c, "plain-0", nil)
	t.Logf("pod %s bound to %s and Running (cluster start %s, version %s)",
		pod.Name, pod.Spec.NodeName, startTook.Round(time.Millisecond), version)

	gpuPod := schedulePod(ctx, t, c, "gpu-0", corev1.ResourceList{"example.com/gpu": resource.MustParse("8")})
	if gpuPod.Spec.NodeName == "" {
		t.Fatal("GPU pod has no node")
	}

	restartBegan := time.Now()
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StopScheduler(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted API server and scheduler in %s", time.Since(restartBegan).Round(time.Millisecond))
	schedulePod(ctx, t, c, "plain-1", nil)

	if err := c.Client().CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, c, pod.Name); err != nil {
		t.Fatal(err)
	}
}

// schedulePod creates a pod requesting requests and waits until it runs.
func schedulePod(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, requests corev1.ResourceList) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "registry.example/train:1",
			Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
		}}},
	}
	created := time.Now()
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.WaitForPhase(ctx, c.Client(), "default", name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.Spec.NodeName, "gpu-") {
		t.Fatalf("pod %s bound to %q, want one of the simulated nodes", name, got.Spec.NodeName)
	}
	if got.Status.PodIP == "" {
		t.Errorf("pod %s has no pod IP", name)
	}
	t.Logf("pod %s: created -> Running on %s in %s", name, got.Spec.NodeName, time.Since(created).Round(time.Millisecond))
	return got
}

func waitGone(ctx context.Context, c *cluster.Cluster, name string) error {
	for {
		_, err := c.Client().CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if strings.Contains(err.Error(), "not found") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s still exists: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// wantVersion reads KUBE_VERSION from test/tools/versions.env.
func wantVersion(t *testing.T) string {
	data, err := os.ReadFile("../tools/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "KUBE_VERSION="); ok {
			return v
		}
	}
	t.Fatal("no KUBE_VERSION in test/tools/versions.env")
	return ""
}
