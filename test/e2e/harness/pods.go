package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/invariant"
)

// PodBuilder builds GPU pods: harness.Pod("ns", "p").Memory(20).Obj().
type PodBuilder struct {
	names contract.Names
	pod   *corev1.Pod
}

// Pod starts a pod with one container, no resources, and a zero
// termination grace period.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{names: contract.Default, pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "main", Image: "rota.test/train:1"}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}}
}

func (b *PodBuilder) res(name, q string) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Limits[corev1.ResourceName(name)] = resource.MustParse(q)
	c.Resources.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
	return b
}

// GPUs asks for n whole GPUs.
func (b *PodBuilder) GPUs(n int) *PodBuilder { return b.res(b.names.GPU, fmt.Sprint(n)) }

// Memory asks for a share of units gpu-memory units (GiB by default).
func (b *PodBuilder) Memory(units int64) *PodBuilder {
	return b.res(b.names.GPUMemory, fmt.Sprint(units))
}

// CPU asks for CPU (e.g. "4").
func (b *PodBuilder) CPU(q string) *PodBuilder { return b.res(string(corev1.ResourceCPU), q) }

// Gang makes the pod a member of gang name with size members.
func (b *PodBuilder) Gang(name string, size int) *PodBuilder {
	b.Label(b.names.GangLabel, name)
	return b.Annotation(b.names.GangSizeAnnotation, fmt.Sprint(size))
}

// NotPreemptible labels the pod example.com/preemptible=false.
func (b *PodBuilder) NotPreemptible() *PodBuilder { return b.Label(b.names.PreemptibleLabel, "false") }

// PriorityClass sets the pod's priority class.
func (b *PodBuilder) PriorityClass(name string) *PodBuilder {
	b.pod.Spec.PriorityClassName = name
	return b
}

// NodeSelector adds a node selector term.
func (b *PodBuilder) NodeSelector(k, v string) *PodBuilder {
	if b.pod.Spec.NodeSelector == nil {
		b.pod.Spec.NodeSelector = map[string]string{}
	}
	b.pod.Spec.NodeSelector[k] = v
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(k, v string) *PodBuilder {
	if b.pod.Labels == nil {
		b.pod.Labels = map[string]string{}
	}
	b.pod.Labels[k] = v
	return b
}

// Annotation sets an annotation.
func (b *PodBuilder) Annotation(k, v string) *PodBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

// Obj returns the pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

// CreateNamespace creates a namespace, labelled with team unless team is "".
func (e *Env) CreateNamespace(ctx context.Context, name, team string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if team != "" {
		ns.Labels = map[string]string{e.Names.TeamLabel: team}
	}
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}

// CreatePriorityClass creates a PriorityClass (ignoring one that exists).
func (e *Env) CreatePriorityClass(ctx context.Context, name string, value int32) error {
	_, err := e.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Pods lists the pods of a namespace.
func (e *Env) Pods(ctx context.Context, namespace string) ([]corev1.Pod, error) {
	l, err := e.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

// WaitPods polls the namespace's pods until cond holds or ctx ends, and
// returns the last list.
func (e *Env) WaitPods(ctx context.Context, namespace string, cond func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = e.Pods(ctx, namespace)
		if err != nil {
			return false, nil // keep polling through API hiccups
		}
		return cond(pods), nil
	})
	return pods, err
}

// Bound counts the pods with a node.
func Bound(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// Running counts the pods in phase Running.
func Running(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// PodEvents returns the events about one pod, oldest first.
func (e *Env) PodEvents(ctx context.Context, namespace, name string) ([]corev1.Event, error) {
	l, err := e.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", name),
			fields.OneTermEqualSelector("involvedObject.kind", "Pod")).String()})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(l.Items, func(i, j int) bool { return eventTime(l.Items[i]).Before(eventTime(l.Items[j])) })
	return l.Items, nil
}

// NamespaceEvents returns a namespace's pod events with reason, by pod name, oldest first.
func (e *Env) NamespaceEvents(ctx context.Context, namespace, reason string) (map[string][]corev1.Event, error) {
	l, err := e.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(l.Items, func(i, j int) bool { return eventTime(l.Items[i]).Before(eventTime(l.Items[j])) })
	out := map[string][]corev1.Event{}
	for _, ev := range l.Items {
		out[ev.InvolvedObject.Name] = append(out[ev.InvolvedObject.Name], ev)
	}
	return out, nil
}

// LastFailedScheduling returns the newest FailedScheduling message of a pod, or "".
func (e *Env) LastFailedScheduling(ctx context.Context, namespace, name string) (string, error) {
	evs, err := e.PodEvents(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Reason == "FailedScheduling" {
			return evs[i].Message, nil
		}
	}
	return "", nil
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	default:
		return ev.CreationTimestamp.Time
	}
}

// Assignment reads a pod's assignment annotation (nil when it has none).
func (e *Env) Assignment(pod *corev1.Pod) (*contract.Assignment, error) {
	return podreq.Assignment(pod, e.Names)
}

// CheckInvariants runs the invariant checker against the cluster.
func (e *Env) CheckInvariants(ctx context.Context, q *quota.Config) ([]invariant.Violation, error) {
	return invariant.Check(ctx, e.Client, invariant.Options{Names: e.Names, MemoryUnitMiB: e.unitMiB, Quota: q})
}

// DeletePods deletes every pod of a namespace (the kubelet stand-in
// finishes the deletion of bound ones) and waits until they are gone.
func (e *Env) DeletePods(ctx context.Context, namespace string) error {
	if err := e.Client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{}); err != nil {
		return err
	}
	_, err := e.WaitPods(ctx, namespace, func(p []corev1.Pod) bool { return len(p) == 0 })
	return err
}

// isWebhookDenial reports whether err is the API server relaying a denial by an admission webhook.
func isWebhookDenial(err error) bool {
	return err != nil && strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), "denied the request")
}

// IsWebhookDenial is isWebhookDenial for callers.
func IsWebhookDenial(err error) bool { return isWebhookDenial(err) }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// CreatePod creates a pod and returns the stored object.
func (e *Env) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	p, err := e.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return p, nil
}
