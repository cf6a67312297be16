package harness

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/fixture"
	"github.com/rota-sched/rota/test/invariant"
)

// PodBuilder builds GPU pods: harness.Pod("ns", "p").Memory(20).Obj(). It
// is test/fixture's builder with the spelling the scenarios use (Memory in
// gpu-memory units); Fixture reaches the rest of fixture's methods.
type PodBuilder struct{ b *fixture.PodBuilder }

// Pod starts a pod with one container, no resources, no UID (the API
// server assigns one) and a zero termination grace period.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{fixture.Pod(namespace, name).UID("").TerminationGracePeriod(0)}
}

// Fixture returns the underlying builder (its calls change this pod).
func (p *PodBuilder) Fixture() *fixture.PodBuilder { return p.b }

// GPUs asks for n whole GPUs.
func (p *PodBuilder) GPUs(n int) *PodBuilder { p.b.GPUs(n); return p }

// Memory asks for a share of units gpu-memory units (GiB by default).
func (p *PodBuilder) Memory(units int64) *PodBuilder {
	p.b.Resource(contract.Default.GPUMemory, strconv.FormatInt(units, 10))
	return p
}

// CPU asks for CPU (e.g. "4").
func (p *PodBuilder) CPU(q string) *PodBuilder { p.b.CPU(q); return p }

// Gang makes the pod a member of gang name with size members.
func (p *PodBuilder) Gang(name string, size int) *PodBuilder { p.b.Gang(name, size); return p }

// NotPreemptible labels the pod example.com/preemptible=false.
func (p *PodBuilder) NotPreemptible() *PodBuilder { p.b.NotPreemptible(); return p }

// PriorityClass sets the pod's priority class.
func (p *PodBuilder) PriorityClass(name string) *PodBuilder { p.b.PriorityClass(name); return p }

// NodeSelector adds a node selector term.
func (p *PodBuilder) NodeSelector(k, v string) *PodBuilder { p.b.NodeSelector(k, v); return p }

// Label sets a label.
func (p *PodBuilder) Label(k, v string) *PodBuilder { p.b.Label(k, v); return p }

// Annotation sets an annotation.
func (p *PodBuilder) Annotation(k, v string) *PodBuilder { p.b.Annotation(k, v); return p }

// Obj returns the pod.
func (p *PodBuilder) Obj() *corev1.Pod { return p.b.Obj() }

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
	dyn, err := dynamic.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		return nil, err
	}
	return invariant.Check(ctx, e.Client, invariant.Options{Names: e.Names, MemoryUnitMiB: e.unitMiB, Quota: q, Grants: e.Grants(),
		Dynamic: dyn})
}

// Grants are the devices the kubelet stand-in got from the device plugins
// for each pod it admitted (Allocate calls that succeeded), as the
// invariant checker's independent truth: what no user can rewrite.
func (e *Env) Grants() map[types.UID]invariant.Grant {
	if e.Kubelet == nil {
		return nil
	}
	out := map[types.UID]invariant.Grant{}
	for _, a := range e.Kubelet.Allocations() {
		if a.Err != "" {
			continue
		}
		g := invariant.Grant{Shared: map[string]int{}}
		for _, c := range a.Containers {
			switch c.Resource {
			case e.Names.GPU:
				g.Whole = append(g.Whole, c.DeviceIDs...)
			case e.Names.GPUMemory:
				for _, id := range c.DeviceIDs {
					if uuid, _, ok := handoff.ParseMemoryDeviceID(id); ok {
						g.Shared[uuid]++
					}
				}
			}
		}
		out[a.UID] = g
	}
	return out
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
