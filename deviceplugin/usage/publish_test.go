package usage

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rota-sched/rota/pkg/contract"
)

var names = contract.Default

type pubFixture struct {
	t      *testing.T
	client *fake.Clientset
	pub    *Publisher
	t0     time.Time
}

func newPub(t *testing.T, cfg PublishConfig) *pubFixture {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: uidA}}
	client := fake.NewClientset(pod)
	f := &pubFixture{t: t, client: client, pub: NewPublisher(client, names, cfg), t0: time.Unix(1_000_000, 0).UTC()}
	f.pub.OnAdd(pod, true)
	return f
}

// sync runs one Sync at t0+d and feeds the pod back as the informer would;
// it returns the patches it made.
func (f *pubFixture) sync(d time.Duration, p Pod) []string {
	f.t.Helper()
	f.client.ClearActions()
	f.pub.Sync(context.Background(), f.t0.Add(d), []Pod{p})
	var patches []string
	for _, a := range f.client.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, pa.GetSubresource()+":"+string(pa.GetPatch()))
		}
	}
	pod := f.get()
	f.pub.OnUpdate(nil, pod)
	return patches
}

func (f *pubFixture) get() *corev1.Pod {
	f.t.Helper()
	pod, err := f.client.CoreV1().Pods("ns").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pod
}

func (f *pubFixture) condition() *corev1.PodCondition {
	for _, c := range f.get().Status.Conditions {
		if string(c.Type) == names.GPUIdleCondition {
			return &c
		}
	}
	return nil
}

func busy(sm float64) Pod {
	return Pod{UID: uidA, Pod: "ns/a", SM: sm, UsedMiB: 2048, State: Busy, GPUs: []GPU{{UUID: "GPU-0", SM: sm, UsedMiB: 2048}}}
}

func TestPublishUtilizationBounded(t *testing.T) {
	f := newPub(t, PublishConfig{Utilization: true})
	if p := f.sync(0, busy(0.40)); len(p) != 1 {
		t.Fatalf("first value: patches %v", p)
	}
	if v := f.get().Annotations[names.GPUUtilizationAnnotation]; v != "sm=40,usedMiB=2048" {
		t.Errorf("annotation = %q", v)
	}
	// Within a minute nothing is written, however much it moves.
	if p := f.sync(30*time.Second, busy(0.90)); len(p) != 0 {
		t.Errorf("within a minute: patches %v", p)
	}
	// After a minute, a move under 5 points is not written; 5 or more is.
	if p := f.sync(2*time.Minute, busy(0.44)); len(p) != 0 {
		t.Errorf("4 points: patches %v", p)
	}
	if p := f.sync(3*time.Minute, busy(0.35)); len(p) != 1 {
		t.Errorf("5 points: patches %v", p)
	}
	if v := f.get().Annotations[names.GPUUtilizationAnnotation]; v != "sm=35,usedMiB=2048" {
		t.Errorf("annotation = %q", v)
	}
	// Unknown pods and pods the informer has not shown are left alone.
	if p := f.sync(10*time.Minute, Pod{UID: uidA, Pod: "ns/a", State: Unknown}); len(p) != 0 {
		t.Errorf("unknown state: patches %v", p)
	}
	if p := f.sync(10*time.Minute, Pod{UID: uidB, Pod: "ns/b", State: Busy, SM: 1}); len(p) != 0 {
		t.Errorf("pod not in the informer: patches %v", p)
	}
}

func TestPublishIdleMark(t *testing.T) {
	f := newPub(t, PublishConfig{Idle: true, IdleBelow: 0.05, IdleAfter: 30 * time.Minute})
	since := f.t0.Add(-31 * time.Minute)
	idle := Pod{UID: uidA, Pod: "ns/a", SM: 0.02, State: Idle, BelowSince: since, GPUs: []GPU{{UUID: "GPU-0", SM: 0.02}}}
	below := idle
	below.State = Below
	if p := f.sync(0, below); len(p) != 0 {
		t.Fatalf("below but not idle yet: patches %v", p)
	}
	p := f.sync(0, idle)
	if len(p) != 2 || !strings.HasPrefix(p[1], "status:") {
		t.Fatalf("idle: patches %v, want the annotation and the status", p)
	}
	if v := f.get().Annotations[names.IdleSinceAnnotation]; v != since.Format(time.RFC3339) {
		t.Errorf("idle-since = %q, want %s", v, since.Format(time.RFC3339))
	}
	c := f.condition()
	if c == nil || c.Status != corev1.ConditionTrue || c.Reason != ReasonIdle ||
		!strings.Contains(c.Message, "GPU utilization 2% has stayed below 5% for 31m0s") {
		t.Fatalf("condition = %+v", c)
	}
	// Still idle: nothing more is written.
	if p := f.sync(10*time.Minute, idle); len(p) != 0 {
		t.Errorf("still idle: patches %v", p)
	}
	// Below (after a restart the idle clock starts again) keeps the mark.
	if p := f.sync(11*time.Minute, below); len(p) != 0 {
		t.Errorf("below with a mark: patches %v", p)
	}
	// Busy: the annotation goes, the condition turns False.
	if p := f.sync(12*time.Minute, busy(0.5)); len(p) != 2 {
		t.Fatalf("busy: patches %v", p)
	}
	if v, ok := f.get().Annotations[names.IdleSinceAnnotation]; ok {
		t.Errorf("idle-since kept: %q", v)
	}
	if c := f.condition(); c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonBusy {
		t.Errorf("condition after busy = %+v", c)
	}
	if p := f.sync(13*time.Minute, busy(0.5)); len(p) != 0 {
		t.Errorf("still busy: patches %v", p)
	}
}

func TestPublishOff(t *testing.T) {
	f := newPub(t, PublishConfig{})
	if p := f.sync(0, Pod{UID: uidA, Pod: "ns/a", State: Idle, BelowSince: f.t0}); len(p) != 0 {
		t.Errorf("nothing enabled: patches %v", p)
	}
}
