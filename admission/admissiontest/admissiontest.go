// Package admissiontest builds pods, namespaces, nodes and AdmissionReview
// bodies for the webhook's tests and benchmarks.
package admissiontest

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

// PodBuilder builds a pod: admissiontest.Pod("ns", "p").GPUs(2).Obj().
type PodBuilder struct {
	names contract.Names
	pod   *corev1.Pod
}

// Pod starts a pod with one container and no resources, in the default
// domain's names.
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{names: contract.Default, pod: &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "train"}}},
	}}
}

func (b *PodBuilder) set(res, q string, requests, limits bool) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	if requests {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Requests[corev1.ResourceName(res)] = resource.MustParse(q)
	}
	if limits {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[corev1.ResourceName(res)] = resource.MustParse(q)
	}
	return b
}

// GPUs asks for n whole GPUs (requests and limits).
func (b *PodBuilder) GPUs(n int) *PodBuilder { return b.set(b.names.GPU, fmt.Sprint(n), true, true) }

// Memory asks for a memory share written as q (requests and limits).
func (b *PodBuilder) Memory(q string) *PodBuilder { return b.set(b.names.GPUMemory, q, true, true) }

// Resource sets one resource on the first container's requests and/or limits.
func (b *PodBuilder) Resource(name, q string, requests, limits bool) *PodBuilder {
	return b.set(name, q, requests, limits)
}

// Gang makes the pod a member of a gang of size members ("" omits the size).
func (b *PodBuilder) Gang(name, size string) *PodBuilder {
	b.Label(b.names.GangLabel, name)
	if size != "" {
		b.Annotation(b.names.GangSizeAnnotation, size)
	}
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

// Priority sets the resolved priority.
func (b *PodBuilder) Priority(p int32) *PodBuilder { b.pod.Spec.Priority = &p; return b }

// Node binds the pod to a node (it counts as running).
func (b *PodBuilder) Node(n string) *PodBuilder { b.pod.Spec.NodeName = n; return b }

// Phase sets the pod's phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder { b.pod.Status.Phase = p; return b }

// UID sets the UID ("" clears it).
func (b *PodBuilder) UID(uid string) *PodBuilder { b.pod.UID = types.UID(uid); return b }

// Gated adds Rota's queue gate, as the mutating webhook does.
func (b *PodBuilder) Gated() *PodBuilder { return b.SchedulingGate(b.names.QueueGate) }

// SchedulingGate adds a scheduling gate.
func (b *PodBuilder) SchedulingGate(name string) *PodBuilder {
	b.pod.Spec.SchedulingGates = append(b.pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: name})
	return b
}

// InitGPUs adds an init container that asks for n whole GPUs.
func (b *PodBuilder) InitGPUs(n int) *PodBuilder {
	q := resource.MustParse(fmt.Sprint(n))
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, corev1.Container{Name: "init", Image: "prep",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceName(b.names.GPU): q},
			Limits:   corev1.ResourceList{corev1.ResourceName(b.names.GPU): q}}})
	return b
}

// Obj returns the pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }

// Namespace returns a namespace with the team label set (none when team is "").
func Namespace(name, team string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if team != "" {
		ns.Labels = map[string]string{contract.Default.TeamLabel: team}
	}
	return ns
}

// QueueingOff labels a namespace with queueing off.
func QueueingOff(ns *corev1.Namespace) *corev1.Namespace {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[contract.Default.QueueingLabel] = contract.QueueingOff
	return ns
}

// Node returns a node with a topology annotation of n "H100" GPUs of memMiB
// each.
func Node(name string, n int, memMiB contract.MiB) *corev1.Node {
	return ModelNode(name, "H100", n, memMiB)
}

// ModelNode returns a node with n GPUs of one model, memMiB each.
func ModelNode(name, model string, n int, memMiB contract.MiB) *corev1.Node {
	t := contract.Topology{Version: contract.Version, MemoryUnitMiB: contract.DefaultMemoryUnitMiB}
	for i := range n {
		t.GPUs = append(t.GPUs, contract.TopologyGPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model,
			MemoryMiB: memMiB, Health: contract.Healthy, Island: 0})
	}
	data, err := t.Marshal()
	if err != nil {
		panic(err) // fixtures are literals
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{contract.Default.TopologyAnnotation: string(data)}}}
}

// Review returns an AdmissionReview request body for op on pod (old is the
// previous pod for UPDATE, else nil).
func Review(op admissionv1.Operation, pod, old *corev1.Pod) []byte {
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID("req-" + pod.Name),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace,
		Name:      pod.Name,
		Operation: op,
	}
	if op != admissionv1.Delete {
		req.Object = raw(pod)
	}
	if old != nil {
		req.OldObject = raw(old)
	}
	return Body(req)
}

// ReviewAs is Review sent by user (the request's userInfo.username).
func ReviewAs(op admissionv1.Operation, pod, old *corev1.Pod, user string) []byte {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(Review(op, pod, old), &review); err != nil {
		panic(err)
	}
	review.Request.UserInfo.Username = user
	return Body(review.Request)
}

// Body wraps a request into an AdmissionReview body.
func Body(req *admissionv1.AdmissionRequest) []byte {
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		panic(err)
	}
	return data
}

func raw(obj any) runtime.RawExtension {
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return runtime.RawExtension{Raw: data}
}
