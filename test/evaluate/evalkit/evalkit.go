// Package evalkit holds what the evaluation (test/evaluate) and the soak
// (test/soak) share: the Job a user submits for a generated job, the
// scenario's nodes and teams, and Rota's quota and flags as the chart gives
// them.
package evalkit

import (
	"fmt"
	"maps"
	"math"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
)

// Labels the evaluation puts on what it creates.
const (
	JobLabel  = "evaluate.rota/job"
	KindLabel = "evaluate.rota/kind"
	// HighPriority is the PriorityClass of the jobs drawn as urgent.
	HighPriority = "evaluate-high"
)

// Shape is how a stack asks for a job's GPUs: stacks without memory shares
// ask for a whole GPU instead of a share, as NVIDIA's device plugin does.
type Shape struct {
	Shares bool
	// GangLabels marks a gang's pods with Rota's gang label and size. A
	// gang is an Indexed Job with completions equal to parallelism, which
	// Rota reads as a gang of that size without them.
	GangLabels bool
	// GangsWhole says the stack starts a gang's pods all or none: the
	// evaluation checks it.
	GangsWhole bool
	// Labels and Suspend are what the stack's queue wants on a Job.
	Labels  map[string]string
	Suspend bool
	// GangAnnotations go on a gang's pod template (Kueue's topology
	// request).
	GangAnnotations map[string]string
}

// Held is what one pod of j holds on a stack of this shape.
func (s Shape) Held(j evaluate.Job) (gpus, memGiB int64) {
	if j.MemoryGiB > 0 && !s.Shares {
		return 1, 0
	}
	return j.GPUs, j.MemoryGiB
}

// Object is the Job a user of the stack submits for j: Pods pods that
// sleep for the runtime (whole seconds, at least one), in the team's
// namespace.
func Object(j evaluate.Job, namespace string, s Shape, image string, names contract.Names) *batchv1.Job {
	gpus, mem := s.Held(j)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(j.CPUMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(j.HostMiB<<20, resource.BinarySI),
	}
	if gpus > 0 {
		res[corev1.ResourceName(names.GPU)] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	if mem > 0 {
		res[corev1.ResourceName(names.GPUMemory)] = *resource.NewQuantity(mem, resource.DecimalSI)
	}
	secs := max(int64(math.Ceil(j.Runtime.Seconds())), 1)
	labels := map[string]string{JobLabel: j.Name, KindLabel: string(j.Kind)}
	podLabels := map[string]string{JobLabel: j.Name, KindLabel: string(j.Kind)}
	var podAnn map[string]string
	if j.Gang() && s.GangLabels {
		podLabels[names.GangLabel] = j.Name
		podAnn = map[string]string{names.GangSizeAnnotation: strconv.Itoa(j.Pods)}
	}
	if j.Gang() && len(s.GangAnnotations) > 0 {
		podAnn = maps.Clone(s.GangAnnotations)
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	n := int32(j.Pods)
	zero := int32(0)
	grace := int64(0)
	obj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			Parallelism: &n, Completions: &n, BackoffLimit: &zero,
			// A pod preempted or evicted is not the job's failure: it is
			// created again (as the users' guide advises for every stack).
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnn},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{Name: "work", Image: image,
						Command:   []string{"sleep", fmt.Sprint(secs)},
						Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
				},
			},
		},
	}
	if j.Gang() {
		indexed := batchv1.IndexedCompletion
		obj.Spec.CompletionMode = &indexed
	}
	if j.High {
		obj.Spec.Template.Spec.PriorityClassName = HighPriority
	}
	if s.Suspend {
		obj.Spec.Suspend = &s.Suspend
	}
	return obj
}
