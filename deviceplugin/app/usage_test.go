package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/deviceplugin/config"
)

// TestPodUsageEndToEnd runs the plugin on the dgxh200 mock with a fake
// /proc: a pod's process busy on its GPU gets the gpu-utilization
// annotation; with no more samples the pod is marked idle (annotation and
// GPUIdle condition); busy again, the mark goes and the condition is False.
func TestPodUsageEndToEnd(t *testing.T) {
	const uid = "0d3c5b7e-4444-4a2b-9c3d-dddddddddddd"
	procRoot := t.TempDir()
	dir := filepath.Join(procRoot, "600")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"comm": "python\n", "cgroup": "0::/kubepods/burstable/pod" + uid + "/ctr\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, func(c *config.Config) {
		c.ProcRoot, c.LeakInterval = procRoot, 0
		// idle-after is long against the sampling so that a loaded machine
		// (a starved sample goroutine) does not mark the busy pod idle.
		c.UsageInterval, c.UsageWindow, c.IdleAfter, c.IdleUtilization, c.PublishUtilization = 20*time.Millisecond, 100*time.Millisecond, 2*time.Second, 0.05, true
	})
	busy := func() {
		r.events.AddUtilization(2, nvml.ProcessUtilizationSample{Pid: 600, TimeStamp: uint64(time.Now().UnixMicro()), SmUtil: 80}) //nolint:gosec // now is after 1970
	}
	// Busy (samples before the pod shows): the utilization annotation
	// appears with the pod's share.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				busy()
			}
		}
	}()
	p := podSpec("train", whole(r.gpus, 2), names.GPU, 1)
	p.UID = uid
	r.create(t, p)
	pod := waitPod(t, r, func(p *corev1.Pod) bool { return p.Annotations[names.GPUUtilizationAnnotation] != "" })
	// The first tick may come before the first sample (sm=0 is then
	// right); the values themselves are the publisher's unit tests'.
	if v := pod.Annotations[names.GPUUtilizationAnnotation]; !strings.HasPrefix(v, "sm=") || !strings.Contains(v, ",usedMiB=") {
		t.Errorf("utilization annotation = %q", v)
	}
	if _, ok := pod.Annotations[names.IdleSinceAnnotation]; ok {
		t.Errorf("a busy pod is marked idle: %v", pod.Annotations)
	}
	close(stop)
	// Idle: no samples for longer than the window plus idle-after.
	pod = waitPod(t, r, func(p *corev1.Pod) bool {
		return p.Annotations[names.IdleSinceAnnotation] != "" && idleCondition(p) != nil
	})
	if _, err := time.Parse(time.RFC3339, pod.Annotations[names.IdleSinceAnnotation]); err != nil {
		t.Errorf("idle-since: %v", err)
	}
	if c := idleCondition(pod); c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "below 5%") {
		t.Errorf("GPUIdle condition = %+v", c)
	}
	// Busy again.
	busy()
	pod = waitPod(t, r, func(p *corev1.Pod) bool {
		c := idleCondition(p)
		return p.Annotations[names.IdleSinceAnnotation] == "" && c != nil && c.Status == corev1.ConditionFalse
	})
	if _, ok := pod.Annotations[names.IdleSinceAnnotation]; ok {
		t.Errorf("idle-since kept on a busy pod: %v", pod.Annotations)
	}
}

func idleCondition(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if string(c.Type) == names.GPUIdleCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func waitPod(t *testing.T, r *rig, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(r.ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := r.client.CoreV1().Pods("team-a").Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod never got there: %v; last %+v %+v", err, got.Annotations, got.Status.Conditions)
	}
	return got
}
