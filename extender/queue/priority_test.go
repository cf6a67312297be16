package queue

import (
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

func priorityClass(name string, value int32, globalDefault bool) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, GlobalDefault: globalDefault}
}

// A Job queued suspended queues at the priority its pods will have: its
// PriorityClass's value. Before, its planned pods carried none and an
// urgent Job waited behind an older one of priority 0. A Job naming a
// class that does not exist is not admitted: its pods would be refused.
func TestJobQueuedAtItsClassPriority(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 2}}}
	old := queuedJob("old", 2, 1, 2*time.Hour)
	urgent := queuedJob("urgent", 2, 1, time.Hour)
	urgent.Spec.Template.Spec.PriorityClassName = "urgent"
	ghost := queuedJob("ghost", 1, 1, 3*time.Hour)
	ghost.Spec.Template.Spec.PriorityClassName = "missing"
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, old, urgent, ghost, priorityClass("urgent", 1000, false))
	signing(c)
	c.Pass(t.Context())
	if podreq.Suspended(getJob(t, client, "urgent")) || !podreq.Suspended(getJob(t, client, "old")) {
		t.Errorf("urgent suspended %v, old suspended %v; want the urgent Job (class value 1000) admitted first, the older one waiting",
			podreq.Suspended(getJob(t, client, "urgent")), podreq.Suspended(getJob(t, client, "old")))
	}
	if !podreq.Suspended(getJob(t, client, "ghost")) {
		t.Errorf("a Job naming a PriorityClass that does not exist was admitted")
	}
}

// plannedPriority resolves as the API server's Priority admission does:
// the named class; else the smallest global default; else 0.
func TestPlannedPriority(t *testing.T) {
	store := func(pcs ...*schedulingv1.PriorityClass) cache.Store {
		s := cache.NewStore(cache.MetaNamespaceKeyFunc)
		for _, pc := range pcs {
			if err := s.Add(pc); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	named, unnamed := gpuPod("n", 1, 0, false), gpuPod("u", 1, 0, false)
	named.Spec.PriorityClassName = "high"
	for _, tc := range []struct {
		name    string
		classes cache.Store
		pod     string
		want    int32
		err     bool
	}{
		{"named class", store(priorityClass("high", 100, false), priorityClass("def", 7, true)), "n", 100, false},
		{"named class missing", store(priorityClass("def", 7, true)), "n", 0, true},
		{"global default", store(priorityClass("high", 100, false), priorityClass("def", 7, true)), "u", 7, false},
		{"smallest of two defaults", store(priorityClass("d1", 7, true), priorityClass("d2", -3, true)), "u", -3, false},
		{"no default", store(priorityClass("high", 100, false)), "u", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := unnamed
			if tc.pod == "n" {
				pod = named
			}
			got, err := plannedPriority(tc.classes, pod)
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("got %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}
