//go:build e2e

package cluster_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/test/cluster"
)

// TestControllerManagerRunsJobs starts kube-controller-manager with the Job
// controller only: a Job's pods are created (by the controller's own
// ServiceAccount), scheduled, run, and finished by the test, and the Job
// completes.
//
//	go test -tags e2e ./test/cluster/ -run TestControllerManagerRunsJobs -v
func TestControllerManagerRunsJobs(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	if err := c.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-controller-manager (job) ready in %s", time.Since(began).Round(time.Millisecond))
	if err := c.StartControllerManager(ctx, "job"); err != nil {
		t.Errorf("starting it again with the same controllers: %v, want nil", err)
	}
	if err := c.StartControllerManager(ctx, "job", "garbage-collector"); err == nil {
		t.Error("starting it again with other controllers: nil error, want one")
	}
	if _, err := c.CreateNode(ctx, "node-0", nil, nil); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pi", Namespace: "default"},
		Spec: batchv1.JobSpec{Parallelism: &two, Completions: &two, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "registry.example/pi:1"}},
		}}},
	}
	if _, err := c.Client().BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	finished := map[string]bool{}
	for len(finished) < 2 {
		pods, err := c.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=pi"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == corev1.PodRunning && !finished[p.Name] {
				if err := cluster.FinishPod(ctx, c.Client(), p, corev1.PodSucceeded); err != nil {
					t.Fatal(err)
				}
				finished[p.Name] = true
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the Job's pods: %d finished, want 2: %v", len(finished), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		j, err := c.Client().BatchV1().Jobs("default").Get(ctx, "pi", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Succeeded == 2 && j.Status.CompletionTime != nil {
			t.Logf("Job complete %s after its creation", j.Status.CompletionTime.Sub(j.CreationTimestamp.Time))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Job not complete: %+v: %v", j.Status, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := cluster.FinishPod(ctx, c.Client(), &corev1.Pod{}, corev1.PodRunning); err == nil {
		t.Error("FinishPod(Running): nil error, want one")
	}
}
