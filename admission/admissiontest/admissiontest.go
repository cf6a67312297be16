// Package admissiontest builds pods, namespaces, nodes and AdmissionReview
// bodies for the webhook's tests and benchmarks. Pods and nodes come from
// test/fixture; PodBuilder keeps the spelling the admission tests use
// (quantities as strings, as a user writes them in a manifest).
package admissiontest

import (
	"encoding/json"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/fixture"
)

// PodBuilder builds a pod: admissiontest.Pod("ns", "p").GPUs(2).Obj().
type PodBuilder struct{ b *fixture.PodBuilder }

// Pod starts fixture.Pod with the UID "uid-<namespace>-<name>".
func Pod(namespace, name string) *PodBuilder {
	return &PodBuilder{fixture.Pod(namespace, name).UID("uid-" + namespace + "-" + name)}
}

// with returns p after one of its fixture builder's calls.
func (p *PodBuilder) with(*fixture.PodBuilder) *PodBuilder { return p }

// GPUs asks for n whole GPUs (requests and limits).
func (p *PodBuilder) GPUs(n int) *PodBuilder { return p.with(p.b.GPUs(n)) }

// Memory asks for a memory share written as q (requests and limits).
func (p *PodBuilder) Memory(q string) *PodBuilder {
	return p.with(p.b.Resource(contract.Default.GPUMemory, q))
}

// Resource sets one resource on the first container's requests and/or limits.
func (p *PodBuilder) Resource(name, q string, requests, limits bool) *PodBuilder {
	if requests {
		p.b.Request(name, q)
	}
	if limits {
		p.b.Limit(name, q)
	}
	return p
}

// Gang makes the pod a member of a gang of size members, the size written
// as given ("" omits it).
func (p *PodBuilder) Gang(name, size string) *PodBuilder {
	p.b.Label(contract.Default.GangLabel, name)
	if size != "" {
		p.b.Annotation(contract.Default.GangSizeAnnotation, size)
	}
	return p
}

// Label sets a label.
func (p *PodBuilder) Label(k, v string) *PodBuilder { return p.with(p.b.Label(k, v)) }

// Annotation sets an annotation.
func (p *PodBuilder) Annotation(k, v string) *PodBuilder { return p.with(p.b.Annotation(k, v)) }

// Priority sets the resolved priority.
func (p *PodBuilder) Priority(v int32) *PodBuilder { return p.with(p.b.Priority(v)) }

// Node binds the pod to a node (it counts as running).
func (p *PodBuilder) Node(n string) *PodBuilder { return p.with(p.b.Node(n)) }

// Phase sets the pod's phase.
func (p *PodBuilder) Phase(ph corev1.PodPhase) *PodBuilder { return p.with(p.b.Phase(ph)) }

// UID sets the UID ("" clears it).
func (p *PodBuilder) UID(uid string) *PodBuilder { return p.with(p.b.UID(uid)) }

// ControlledBy sets the pod's controller (fixture.PodBuilder.ControlledBy).
func (p *PodBuilder) ControlledBy(apiVersion, kind, name, uid string) *PodBuilder {
	return p.with(p.b.ControlledBy(apiVersion, kind, name, uid))
}

// Gated adds Rota's queue gate, as the mutating webhook does.
func (p *PodBuilder) Gated() *PodBuilder { return p.with(p.b.Gated()) }

// SchedulingGate adds a scheduling gate.
func (p *PodBuilder) SchedulingGate(name string) *PodBuilder { return p.with(p.b.SchedulingGate(name)) }

// InitGPUs adds an init container that asks for n whole GPUs.
func (p *PodBuilder) InitGPUs(n int) *PodBuilder { return p.with(p.b.InitGPUs(n)) }

// Obj returns the pod, with its TypeMeta set (it goes into review bodies).
func (p *PodBuilder) Obj() *corev1.Pod {
	pod := p.b.Obj()
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	return pod
}

// Namespace returns a namespace with the team label set (none when team is "").
func Namespace(name, team string) *corev1.Namespace { return fixture.Namespace(name, team) }

// QueueingOff labels a namespace with queueing off.
func QueueingOff(ns *corev1.Namespace) *corev1.Namespace {
	return queueing(ns, contract.QueueingOff)
}

// QueueingKueue labels a namespace as Kueue's to queue.
func QueueingKueue(ns *corev1.Namespace) *corev1.Namespace {
	return queueing(ns, contract.QueueingKueue)
}

func queueing(ns *corev1.Namespace, mode string) *corev1.Namespace {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[contract.Default.QueueingLabel] = mode
	return ns
}

// Node returns a node with a topology annotation of n "H100" GPUs of memMiB
// each.
func Node(name string, n int, memMiB contract.MiB) *corev1.Node {
	return ModelNode(name, "H100", n, memMiB)
}

// ModelNode returns a node with n GPUs of one model, memMiB each.
func ModelNode(name, model string, n int, memMiB contract.MiB) *corev1.Node {
	return fixture.GPUNode(name).Model(model).GPUs(n, memMiB).Obj()
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
