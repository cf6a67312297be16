// Package clustertest builds a small, realistic Rota cluster as API objects
// for kubectl-rota's tests (fake clientset, golden output):
//
//   - six GPU nodes: h100-a1..a3 (leaf-a) and h100-b1..b2 (leaf-b), each
//     8 x H100 80 GiB in two NVLink islands of 4; t4-c1 (leaf-c), 1 x T4
//     16 GiB; GPU 5 of h100-b1 is unhealthy (XID 79); plus cpu-1 without GPUs;
//   - teams llm, vision, research and speech (namespace labels) with a quota
//     ConfigMap that allows pod team overrides;
//   - gang llm/train-7: 16 members x 2 whole GPUs, 12 placed on leaf-a, 4
//     pending that do not fit;
//   - research/big-sweep: 8 whole GPUs pending (best node has 4 free);
//   - vision/detector-ft: a 60 GiB share that fits now (stale refusal), with
//     team vision at its GPU-memory quota;
//   - team speech at quota, with a Job whose pods the webhook rejects;
//   - memory shares on h100-b1, h100-b2 and t4-c1, where two shares claim
//     more than the T4 holds (a ledger violation).
//
// It is a test fixture: only tests import it.
package clustertest

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// Now is the fixture's present.
var Now = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// TrainingPriorityClass is the PriorityClass of the training gang (value 1000).
const TrainingPriorityClass = "rota-training"

// QuotaYAML is the quota ConfigMap's document.
const QuotaYAML = `teams:
  llm:
    gpus: 32
    borrow: {gpus: 8}
  vision:
    gpus: 4
    gpuMemoryGiB: 160
  research:
    gpus: 8
    gpuMemoryGiB: 32
    borrow: {gpus: 8, gpuMemoryGiB: 64}
  speech:
    gpus: 2
sharedPool: {gpus: 16, gpuMemoryGiB: 256}
allowPodTeamOverride: true
unknownTeams: deny
`

var names = contract.Default

const (
	gib = 1024
	// H100Mem and T4Mem are the GPUs' memory in MiB.
	H100Mem = 80 * gib
	T4Mem   = 16 * gib
)

type builder struct {
	topo map[string]*topology.Node
	objs []runtime.Object
}

func ago(d time.Duration) metav1.Time { return metav1.NewTime(Now.Add(-d)) }

func (b *builder) node(name, leaf string, spec topology.Spec, unhealthy map[int]string) {
	spec.Name = name
	spec.Tiers = []string{leaf, "zone-1"}
	n := topology.FromSpec(spec)
	for i := range n.GPUs {
		if r, ok := unhealthy[n.GPUs[i].Index]; ok {
			n.GPUs[i].Healthy, n.GPUs[i].Reason = false, r
		}
	}
	b.topo[name] = n
	doc := n.Document()
	doc.Leaf = leaf
	doc.Generation = 3
	data, err := doc.Marshal()
	if err != nil {
		panic(err)
	}
	b.objs = append(b.objs, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(30 * 24 * time.Hour),
			Labels: map[string]string{
				names.Domain + "/leaf":           leaf,
				"topology.kubernetes.io/zone":    "zone-1",
				"nvidia.com/gpu.product":         strings.ReplaceAll(spec.Model, " ", "-"),
				"kubernetes.io/hostname":         name,
				"node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{names.TopologyAnnotation: string(data)}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceName(names.GPU):       *resource.NewQuantity(int64(spec.Count), resource.DecimalSI),
			corev1.ResourceName(names.GPUMemory): *resource.NewQuantity(int64(spec.Count)*int64(spec.MemoryMiB)/gib, resource.DecimalSI),
		}},
	})
}

// podSpec describes one fixture pod.
type podSpec struct {
	ns, name string
	age      time.Duration
	gpus     int64 // whole GPUs
	memGiB   int64 // or a memory share in GiB units
	node     string
	on       []int // GPU indexes of the assignment (bound pods)
	gang     string
	gangSize int
	labels   map[string]string
	priority int32
	// queuedFor: the queue admitted the pod after this long, holding the
	// GPUs it is bound to (its admission record); 0: no record.
	queuedFor time.Duration
}

func (b *builder) pod(s podSpec) {
	res := corev1.ResourceList{}
	if s.gpus > 0 {
		res[corev1.ResourceName(names.GPU)] = *resource.NewQuantity(s.gpus, resource.DecimalSI)
	}
	if s.memGiB > 0 {
		res[corev1.ResourceName(names.GPUMemory)] = *resource.NewQuantity(s.memGiB, resource.DecimalSI)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name, UID: types.UID("uid-" + s.ns + "-" + s.name),
			CreationTimestamp: ago(s.age), Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName,
			Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/" + s.ns + "/trainer:1.4",
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if s.priority != 0 {
		// As the API server's priority admission resolves it.
		p.Spec.PriorityClassName, p.Spec.Priority = TrainingPriorityClass, &s.priority
	}
	for k, v := range s.labels {
		p.Labels[k] = v
	}
	if s.gang != "" {
		p.Labels[names.GangLabel] = s.gang
		p.Annotations[names.GangSizeAnnotation] = fmt.Sprint(s.gangSize)
	}
	if s.node != "" {
		p.Spec.NodeName = s.node
		p.Status.Phase = corev1.PodRunning
		n := b.topo[s.node]
		as := contract.Assignment{Version: contract.Version, Node: s.node, Whole: s.gpus > 0}
		if s.gang != "" {
			as.Gang = s.ns + "/" + s.gang
		}
		for _, idx := range s.on {
			g := n.GPUs[n.Slot(idx)]
			mem := g.MemoryMiB
			if s.memGiB > 0 {
				mem = contract.MiB(s.memGiB) * gib
			}
			as.GPUs = append(as.GPUs, contract.AssignedGPU{Index: idx, UUID: g.UUID, MemoryMiB: mem})
		}
		data, err := as.Marshal()
		if err != nil {
			panic(err)
		}
		p.Annotations[names.AssignmentAnnotation] = string(data)
		if s.queuedFor > 0 {
			at := ago(s.age - s.queuedFor).Time
			adm := contract.Admission{Version: contract.Version, AdmittedAt: at, QueuedFor: s.queuedFor.String(),
				Team: p.Namespace, Hold: &as, HoldUntil: at.Add(5 * time.Minute), NarrowedTo: []string{s.node}}
			data, err := adm.Marshal()
			if err != nil {
				panic(err)
			}
			p.Annotations[names.AdmissionAnnotation] = string(data)
		}
	} else {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, LastTransitionTime: ago(s.age - time.Second)}}
	}
	b.objs = append(b.objs, p)
}

func (b *builder) event(ns, name, kind, uid, reason, source string, last time.Duration, count int32, msg string) {
	b.objs = append(b.objs, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", name, len(b.objs)),
			CreationTimestamp: ago(last)},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name, UID: types.UID(uid)},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning, Count: count,
		Source:         corev1.EventSource{Component: source},
		FirstTimestamp: ago(last + time.Duration(count)*time.Minute), LastTimestamp: ago(last),
	})
}

func namespace(name, team string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/metadata.name": name}}}
	if team != "" {
		ns.Labels[names.TeamLabel] = team
	}
	return ns
}

// Objects returns the fixture's API objects.
func Objects() []runtime.Object {
	b := &builder{topo: map[string]*topology.Node{}}
	h100 := topology.Spec{Model: "NVIDIA H100 80GB HBM3", Count: 8, MemoryMiB: H100Mem, IslandSize: 4, NUMANodes: 2}
	for _, n := range []string{"h100-a1", "h100-a2", "h100-a3"} {
		b.node(n, "leaf-a", h100, nil)
	}
	b.node("h100-b1", "leaf-b", h100, map[int]string{5: "XID 79"})
	b.node("h100-b2", "leaf-b", h100, nil)
	b.node("t4-c1", "leaf-c", topology.Spec{Model: "Tesla T4", Count: 1, MemoryMiB: T4Mem}, nil)
	b.objs = append(b.objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1", CreationTimestamp: ago(30 * 24 * time.Hour)}})

	for _, ns := range []*corev1.Namespace{namespace("llm", "llm"), namespace("vision", "vision"),
		namespace("research", "research"), namespace("speech", "speech"), namespace("default", ""),
		namespace("rota-system", "")} {
		b.objs = append(b.objs, ns)
	}
	b.objs = append(b.objs, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: TrainingPriorityClass}, Value: 1000,
		Description: "large training jobs"})
	b.objs = append(b.objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rota-system", Name: "rota-quota"},
		Data: map[string]string{"quota.yaml": QuotaYAML}})

	// Gang llm/train-7: 12 members on leaf-a (4 per node, 2 GPUs each), 4 pending.
	for i := range 16 {
		s := podSpec{ns: "llm", name: fmt.Sprintf("train-7-%d", i), age: 3 * time.Hour, gpus: 2, gang: "train-7", gangSize: 16,
			labels: map[string]string{names.PreemptibleLabel: "false", "job-name": "train-7"}, priority: 1000}
		if i < 12 {
			s.node = []string{"h100-a1", "h100-a2", "h100-a3"}[i/4]
			s.on = []int{2 * (i % 4), 2*(i%4) + 1}
		}
		b.pod(s)
	}
	// h100-b1: vision whole GPUs 0,1; a 40 GiB vision share on GPU 2; GPU 5 unhealthy.
	b.pod(podSpec{ns: "vision", name: "resnet-ddp-0", age: 26 * time.Hour, gpus: 2, node: "h100-b1", on: []int{0, 1},
		queuedFor: 95 * time.Second})
	b.pod(podSpec{ns: "vision", name: "notebook-ana", age: 50 * time.Hour, memGiB: 40, node: "h100-b1", on: []int{2}})
	// h100-b2: research 4 whole GPUs (island 1), speech 2 whole GPUs, two shares.
	b.pod(podSpec{ns: "research", name: "sweep-0", age: 5 * time.Hour, gpus: 4, node: "h100-b2", on: []int{4, 5, 6, 7}})
	b.pod(podSpec{ns: "speech", name: "asr-train-0", age: 9 * time.Hour, gpus: 2, node: "h100-b2", on: []int{2, 3}})
	b.pod(podSpec{ns: "vision", name: "detector-serve", age: 72 * time.Hour, memGiB: 60, node: "h100-b2", on: []int{0}})
	b.pod(podSpec{ns: "research", name: "notebook-kim", age: 7 * time.Hour, memGiB: 20, node: "h100-b2", on: []int{1}})
	// t4-c1: three shares claiming 24 GiB of 16 (the last by UID is not accounted).
	b.pod(podSpec{ns: "default", name: "jupyter", age: 4 * time.Hour, memGiB: 4, node: "t4-c1", on: []int{0},
		labels: map[string]string{names.TeamLabel: "research"}})
	b.pod(podSpec{ns: "research", name: "debug-shell", age: 2 * time.Hour, memGiB: 12, node: "t4-c1", on: []int{0}})
	b.pod(podSpec{ns: "research", name: "tiny-infer", age: 6 * time.Hour, memGiB: 8, node: "t4-c1", on: []int{0}})
	// Pending.
	b.pod(podSpec{ns: "research", name: "big-sweep", age: 45 * time.Minute, gpus: 8})
	b.pod(podSpec{ns: "vision", name: "detector-ft", age: 20 * time.Minute, memGiB: 60})

	// Refusals, as kube-scheduler and rota-extender write them.
	const gangMsg = `gang llm/train-7: 2 of 4 members fit in the cluster (each needs 2 whole GPUs); 2 more must fit; the best node holds 2, the best tier-0 group "leaf-b" holds 2, the best tier-1 group "zone-1" holds 2`
	b.event("llm", "train-7-12", "Pod", "uid-llm-train-7-12", "FailedScheduling", "default-scheduler", 2*time.Minute, 37,
		"0/7 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 6 "+gangMsg+". preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")
	b.event("llm", "train-7-12", "Pod", "uid-llm-train-7-12", "GPUUnschedulable", "rota-extender", 3*time.Minute, 12,
		"0/6 nodes fit the GPU request: 6 like h100-a1: "+gangMsg)
	b.event("research", "big-sweep", "Pod", "uid-research-big-sweep", "FailedScheduling", "default-scheduler", time.Minute, 9,
		"0/7 nodes are available: 1 GPU 5 unhealthy: XID 79, 1 node has 1 healthy GPUs, pod needs 8, 1 node(s) didn't match Pod's node affinity/selector, 4 0 free GPUs, pod needs 8. preemption: 0/7 nodes are available: 3 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling.")
	b.event("vision", "detector-ft", "Pod", "uid-vision-detector-ft", "FailedScheduling", "default-scheduler", 14*time.Minute, 2,
		"0/7 nodes are available: 1 GPU 2 has 40 GiB free, pod needs 60 GiB, 1 node has 1 healthy GPUs, pod needs 8, 1 node(s) didn't match Pod's node affinity/selector, 1 pod needs 60 GiB on one GPU; the largest GPU here has 16 GiB, 3 no GPU has memory free, pod needs 60 GiB. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")
	b.event("speech", "asr-eval", "Job", "uid-speech-job-asr-eval", "FailedCreate", "job-controller", 6*time.Minute, 5,
		`Error creating: admission webhook "pods.rota.example.com" denied the request: team speech: quota 2 GPUs, 2 in use or queued (2 running, 0 pending); this pod needs 1; borrowable from shared pool: 0 (the team may not borrow)`)
	// Noise: an event of another pod and a normal one.
	b.event("vision", "resnet-ddp-0", "Pod", "uid-vision-resnet-ddp-0", "Scheduled", "default-scheduler", 26*time.Hour, 1,
		"Successfully assigned vision/resnet-ddp-0 to h100-b1")
	return b.objs
}
