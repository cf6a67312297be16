package queue

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// eventNames is how many pod names an owner's event lists before "and N
// more".
const eventNames = 10

// passEvents gathers one pass's Queued and Admitted events. A pod that no
// controller owns gets them on itself. The pods a controller owns (a Job's,
// a ReplicaSet's, a JobSet's Job's) get them on that controller: one event
// per controller, reason and pass, naming its pods. A 3,000-pod Job admitted
// in passes of 200 makes 15 Admitted events instead of 3,000; each event is
// an API write that the API server stores and sends to its watchers, as
// costly as the admitting update itself. What each pod needs to say why it
// waited stays on the pod: its Queued condition (where it stands, what it
// waits for) and its admission record (team, time in the queue, where its
// GPUs are held), which `kubectl rota why` shows.
//
// It is safe for concurrent use: a pass's admitting updates run at once.
type passEvents struct {
	mu     sync.Mutex
	pods   []podEvent
	owners map[ownerKey]*ownerEvent
	order  []ownerKey
}

// podEvent is an event on the object itself: a pod no controller owns,
// or a Job queued suspended.
type podEvent struct {
	obj         runtime.Object
	reason, msg string
}

type ownerKey struct {
	namespace string
	uid       types.UID
	reason    string
	team      string
}

type ownerEvent struct {
	ref              corev1.ObjectReference
	pods             []string
	first            fmt.Stringer // own message of the pod first by name (Queued)
	firstName        string
	minWait, maxWait time.Duration
}

func newPassEvents() *passEvents { return &passEvents{owners: map[ownerKey]*ownerEvent{}} }

// queued notes a pod's first Queued event; msg is where it stands (formatted
// only for a pod no controller owns, and for the first pod of each owner).
func (e *passEvents) queued(pod *corev1.Pod, team string, msg fmt.Stringer) {
	e.add(pod, "Queued", team, msg, 0)
}

// jobQueued notes the first Queued event of a Job queued suspended, on
// the Job: it has no pods to name.
func (e *passEvents) jobQueued(job runtime.Object, kind, team string, pods int, msg fmt.Stringer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	noun := "pods"
	if pods == 1 {
		noun = "pod"
	}
	e.pods = append(e.pods, podEvent{obj: job, reason: "Queued", msg: fmt.Sprintf(
		"queued suspended in team %s, a %s of %d %s (none exists until the queue admits it whole): %s", team, kind, pods, noun, msg.String())})
}

// admitted notes a pod's Admitted event: msg is the pod's own message,
// used when no controller owns it.
func (e *passEvents) admitted(pod *corev1.Pod, team string, msg fmt.Stringer, waited time.Duration) {
	e.add(pod, "Admitted", team, msg, waited)
}

func (e *passEvents) add(pod *corev1.Pod, reason, team string, msg fmt.Stringer, waited time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		e.pods = append(e.pods, podEvent{obj: pod, reason: reason, msg: msg.String()})
		return
	}
	k := ownerKey{namespace: pod.Namespace, uid: ref.UID, reason: reason, team: team}
	o, ok := e.owners[k]
	if !ok {
		o = &ownerEvent{ref: corev1.ObjectReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name,
			Namespace: pod.Namespace, UID: ref.UID}, first: msg, firstName: pod.Name, minWait: waited, maxWait: waited}
		e.owners[k] = o
		e.order = append(e.order, k)
	}
	if pod.Name < o.firstName {
		o.first, o.firstName = msg, pod.Name
	}
	o.pods = append(o.pods, pod.Name)
	o.minWait, o.maxWait = min(o.minWait, waited), max(o.maxWait, waited)
}

// emit hands the gathered events to record.
func (e *passEvents) emit(record func(obj runtime.Object, typ, reason, msg string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.pods {
		record(p.obj, corev1.EventTypeNormal, p.reason, p.msg)
	}
	for _, k := range e.order {
		o := e.owners[k]
		record(&o.ref, corev1.EventTypeNormal, k.reason, o.message(k))
	}
}

// message says what happened to the owner's pods in the pass, for
// example "admitted 16 pods to team ml after 2s-5s in the queue: train-0,
// ..., and 6 more; ..." or "queued 3 pods in team ml: a, b, c; the first:
// position 4 of 9 in team ml; waiting for quota: ..." (the first by name).
func (o *ownerEvent) message(k ownerKey) string {
	slices.Sort(o.pods)
	names := strings.Join(o.pods[:min(len(o.pods), eventNames)], ", ")
	if n := len(o.pods) - eventNames; n > 0 {
		names += fmt.Sprintf(", and %d more", n)
	}
	noun := "pods"
	if len(o.pods) == 1 {
		noun = "pod"
	}
	if k.reason == "Queued" {
		return fmt.Sprintf("queued %d %s in team %s: %s; the first: %s", len(o.pods), noun, k.team, names, o.first.String())
	}
	waited := o.minWait.Round(time.Second).String()
	if mx := o.maxWait.Round(time.Second); mx != o.minWait.Round(time.Second) {
		waited += "-" + mx.String()
	}
	return fmt.Sprintf("admitted %d %s to team %s after %s in the queue: %s; each pod's admission record says where its GPUs are held",
		len(o.pods), noun, k.team, waited, names)
}

// emitEvents records a pass's gathered events (none without a Recorder).
func (c *Controller) emitEvents(e *passEvents) {
	if c.o.Recorder != nil {
		e.emit(c.o.Recorder.Event)
	}
}
