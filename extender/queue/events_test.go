package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/rota-sched/rota/pkg/quota"
)

// recorded is one event as the pass recorded it.
type recorded struct {
	kind, name, reason, msg string
}

type eventLog struct{ got []recorded }

func (l *eventLog) Event(obj runtime.Object, _, reason, msg string) {
	r := recorded{reason: reason, msg: msg}
	switch o := obj.(type) {
	case *corev1.Pod:
		r.kind, r.name = "Pod", o.Name
	case *corev1.ObjectReference:
		r.kind, r.name = o.Kind, o.Name
	}
	l.got = append(l.got, r)
}
func (l *eventLog) Eventf(obj runtime.Object, typ, reason, f string, args ...any) {
	l.Event(obj, typ, reason, fmt.Sprintf(f, args...))
}
func (l *eventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, f string, args ...any) {
	l.Eventf(obj, typ, reason, f, args...)
}

var _ record.EventRecorder = (*eventLog)(nil)

// A pass's Queued and Admitted events go on the controller of the pods a
// controller owns, one event per controller and reason, naming its pods;
// a pod no controller owns gets its own.
func TestPassEventsPerController(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 14}}}
	var objs []runtime.Object
	for i := range 12 {
		objs = append(objs, ownedBy(gpuPod(fmt.Sprintf("train-%02d", i), 1, time.Hour-time.Duration(i)*time.Minute, true), "Job", "train"))
	}
	objs = append(objs, ownedBy(gpuPod("eval-0", 1, 30*time.Minute, true), "Job", "eval"),
		gpuPod("bare", 1, 20*time.Minute, true),
		ownedBy(gpuPod("late-0", 4, 10*time.Minute, true), "Job", "late"), ownedBy(gpuPod("late-1", 4, 9*time.Minute, true), "Job", "late"))
	r := &fakeRoom{free: 32}
	c, _ := start(t, cfg, r, objs...)
	log := &eventLog{}
	c.o.Recorder = log
	c.Pass(t.Context())

	// 14 GPUs of quota: train's 12, eval-0 and bare are admitted; late's
	// two 4-GPU pods wait for quota.
	byTarget := map[string]recorded{}
	for _, e := range log.got {
		key := e.kind + "/" + e.name + "/" + e.reason
		if _, dup := byTarget[key]; dup {
			t.Errorf("two %s events on %s %s in one pass", e.reason, e.kind, e.name)
		}
		byTarget[key] = e
	}
	if len(log.got) != 4 {
		t.Errorf("recorded %d events, want 4 (train, eval and bare admitted; late queued): %+v", len(log.got), log.got)
	}
	train, ok := byTarget["Job/train/Admitted"]
	if !ok || !strings.HasPrefix(train.msg, "admitted 12 pods to team vision after 49m0s-1h0m0s in the queue: train-00, train-01,") ||
		!strings.Contains(train.msg, "train-09, and 2 more") {
		t.Errorf("train's Admitted event = %+v, want one naming 10 of its 12 pods and the range of their waits", train)
	}
	if e, ok := byTarget["Job/eval/Admitted"]; !ok || !strings.HasPrefix(e.msg, "admitted 1 pod to team vision after 30m0s in the queue: eval-0;") {
		t.Errorf("eval's Admitted event = %+v", e)
	}
	if e, ok := byTarget["Pod/bare/Admitted"]; !ok || !strings.HasPrefix(e.msg, "admitted to team vision after 20m0s in the queue; room held on node n1") {
		t.Errorf("bare's own Admitted event = %+v", e)
	}
	late, ok := byTarget["Job/late/Queued"]
	if !ok || !strings.HasPrefix(late.msg, "queued 2 pods in team vision: late-0, late-1; the first: position 1 of 2 in team vision; waiting for quota") {
		t.Errorf("late's Queued event = %+v", late)
	}
	for _, e := range log.got {
		if e.kind == "Pod" && e.name != "bare" {
			t.Errorf("pod %s that a Job owns got its own %s event", e.name, e.reason)
		}
	}

	// A pod gets its Queued event once: the next pass records none.
	log.got = nil
	c.Pass(t.Context())
	if slices.ContainsFunc(log.got, func(e recorded) bool { return e.reason == "Queued" }) {
		t.Errorf("second pass recorded %+v, want no Queued event again", log.got)
	}
}
