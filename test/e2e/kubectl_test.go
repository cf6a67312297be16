//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestKubectlRota runs the kubectl-rota plugin, built from cmd/kubectl-rota
// into bin/, against the cluster's kubeconfig:
//
//   - why --gang on a gang whose members cannot all fit (one node has room
//     for a member, the other does not) names the gang's progress and the
//     scheduler's refusal;
//   - top teams and why on a team at its quota show the webhook's rejection.
//     This cluster runs no kube-controller-manager, so the test plays the
//     Job controller: it creates the Job's pod, gets the webhook's real
//     denial, and records the FailedCreate event the Job controller writes
//     ("Error creating: <denial>").
func TestKubectlRota(t *testing.T) {
	const name = "kubectl"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	bin := buildKubectlRota(ctx, t)
	kubectl := func(args ...string) string {
		t.Helper()
		return runKubectlRota(ctx, t, bin, args...)
	}

	// The gang: 2 members of 3 GPUs on 2 nodes of 4 GPUs, one of which
	// already runs a 2-GPU pod: room for 1 of 2 members.
	spec := h100
	spec.Count = 4
	nodes(ctx, t, name, "kubectl", 2, spec)
	create(ctx, t, pod(ns, "blocker", name).GPUs(2).Obj())
	waitPods(ctx, t, ns, "blocker bound", func(ps []corev1.Pod) bool { return harness.Bound(ps) == 1 })
	for i := range 2 {
		create(ctx, t, pod(ns, fmt.Sprintf("train-%d", i), name).Gang("train", 2).GPUs(3).Obj())
	}
	// The first refusals wait for the second member; then the gang is
	// planned and refused for room.
	refusal := waitRefusal(ctx, t, ns, "1 of 2 members fit", "train-0", "train-1")
	t.Logf("gang refusal: %s", refusal)

	out := kubectl("why", "--gang", "train", "-n", ns, "--extender-url", env.ExtenderURL)
	for _, want := range []string{
		"Summary:", "waiting for GPUs", "gang " + ns + "/train has 0 of 2 members placed", "do not fit together",
		"Gang:", "0/2 members placed (2 created, 2 pending",
		"FailedScheduling by default-scheduler",
		"1 of 2 members fit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("why --gang train does not say %q", want)
		}
	}

	// Team kubectl (quota 4 GPUs, no borrowing) at its quota: four pending
	// 1-GPU pods that match no node.
	qns := ns + "-team"
	if err := env.CreateNamespace(ctx, qns, "kubectl"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.DeletePods(dctx, qns); err != nil {
			t.Logf("cleaning up namespace %s: %v", qns, err)
		}
	})
	for i := range 4 {
		create(ctx, t, pod(qns, fmt.Sprintf("gpu-%d", i), name+"-none").GPUs(1).Obj())
	}
	job := quotaRejectedJob(ctx, t, qns)

	out = kubectl("top", "teams")
	var line string
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "kubectl ") && strings.Contains(l, qns) {
			line = l
		}
	}
	if !strings.Contains(line, "at quota") {
		t.Errorf("top teams: team kubectl's row %q does not say %q", line, "at quota")
	}
	// The rejection this test makes, and one more when the job controller
	// runs (another scenario may have started it) and tried the Job too.
	if !regexp.MustCompile(`\b[1-9][0-9]* \(last`).MatchString(line) {
		t.Errorf("top teams: team kubectl's row %q counts no rejection", line)
	}
	for _, want := range []string{"kubectl last rejected: team kubectl", "quota 4 GPUs"} {
		if !strings.Contains(out, want) {
			t.Errorf("top teams does not say %q (job %s)", want, job)
		}
	}

	out = kubectl("why", "gpu-0", "-n", qns)
	for _, want := range []string{"Team:", "kubectl", "Quota:", "at quota: guarantee 4 GPUs"} {
		if !strings.Contains(out, want) {
			t.Errorf("why gpu-0 (team kubectl at quota) does not say %q", want)
		}
	}
	note(name, "why --gang and top teams read from the live cluster")
}

// waitRefusal waits until one of the pods has a FailedScheduling event
// that says want, and returns its message.
func waitRefusal(ctx context.Context, t *testing.T, ns, want string, pods ...string) string {
	t.Helper()
	var last []string
	var found string
	err := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = last[:0]
		for _, p := range pods {
			msg, err := env.LastFailedScheduling(ctx, ns, p)
			if err == nil && strings.Contains(msg, want) {
				found = msg
				return true, nil
			}
			last = append(last, p+": "+msg)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event saying %q: %v; last:\n%s", want, err, strings.Join(last, "\n"))
	}
	return found
}

// runKubectlRota runs the kubectl-rota binary bin against the shared
// cluster, without colour, and returns what it printed.
func runKubectlRota(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	args = append(args, "--kubeconfig", env.Cluster.Kubeconfig, "--color", "never")
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-rota %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubectl-rota %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// buildKubectlRota builds the plugin into bin/ at the repository root.
func buildKubectlRota(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "go", "build", "-o", filepath.Join(root, "bin")+string(filepath.Separator), "./cmd/kubectl-rota")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-rota: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "kubectl-rota")
}

// quotaRejectedJob creates a Job in namespace ns whose 1-GPU pod the
// webhook denies, and records the Job controller's FailedCreate event with
// the real denial. It returns the Job's name.
func quotaRejectedJob(ctx context.Context, t *testing.T, ns string) string {
	t.Helper()
	tmpl := pod(ns, "", "kubectl-none").GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "finetune", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := tmpl.DeepCopy()
	p.Name, p.GenerateName = "", job.Name+"-"
	p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	_, err = env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	switch {
	case err == nil:
		t.Fatalf("a 1-GPU pod of team kubectl, at its quota of 4 GPUs, was admitted")
	case !harness.IsWebhookDenial(err):
		t.Fatalf("the Job's pod failed, but not by the webhook: %v", err)
	}
	now := metav1.Now()
	_, err = env.Client.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: job.Name + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: ns, Name: job.Name,
			UID: job.UID, ResourceVersion: job.ResourceVersion},
		Reason: "FailedCreate", Message: "Error creating: " + err.Error(), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "job-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return job.Name
}
