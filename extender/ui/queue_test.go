package ui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// TestStateTeamQueues: with the queue controller on, the state carries its
// view by team (teams by name, pods in queue order, a team with queued pods
// and no admitted use too), and a queued pod's reason in the waiting list
// is where it stands in its team's queue.
func TestStateTeamQueues(t *testing.T) {
	if st := fixture(t).State(); st.TeamQueues != nil {
		t.Errorf("queue controller off: TeamQueues = %+v, want none", st.TeamQueues)
	}

	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"q-1", "q-2"} {
		if err := idx.Add(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: names.QueueGate}},
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(names.GPU): resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}); err != nil {
			t.Fatal(err)
		}
	}
	msg := "position 1 of 2 in team vision; waiting for quota: team vision: quota 2 GPUs, 2 in use or queued"
	limit := int64(8)
	view := contract.QueueView{Leader: true,
		Groups: []contract.QueueGroup{{Group: "ml", PoolGPUs: 4, BorrowedGPUs: 2, FromPoolGPUs: 2, BorrowLimitGPUs: &limit},
			{Group: "cv", Parent: "ml", Depth: 1}},
		Teams: []contract.QueueTeam{
			{Team: "vision", Group: "cv", Queued: 2, GPUs: 2, MemoryMiB: 160 * 1024, Share: 0.25},
			{Team: "audio", GPUs: 1, Share: 0.125},
		},
		Pods: []contract.QueuePosition{
			{Pod: "vision/q-2", Workload: "vision/q-2", Team: "vision", Position: 2, Of: 2, Reason: "Quota", Message: "position 2 of 2", Waiting: 60},
			{Pod: "vision/q-1", Workload: "vision/q-1", Team: "vision", Position: 1, Of: 2, Reason: "Quota", Message: msg, Waiting: 60},
			{Pod: "nlp/x", Workload: "nlp/g", Team: "nlp", Position: 1, Of: 1, Reason: "Room", Message: "position 1 of 1 in team nlp", Waiting: 5},
		}}
	u := ui.New(ui.Options{Names: names, Snapshot: ledger.New().Snapshot, Pods: corelisters.NewPodLister(idx),
		Queue: func() contract.QueueView { return view }, Now: func() time.Time { return t0 }})
	rec := get(t, router(u), "/ui/api/state")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ui/api/state: %d\n%s", rec.Code, rec.Body)
	}
	var got ui.State
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := &ui.TeamQueues{Leader: true, Teams: []ui.TeamQueue{
		{QueueTeam: view.Teams[1], Pods: []contract.QueuePosition{}},
		{QueueTeam: contract.QueueTeam{Team: "nlp"}, Pods: []contract.QueuePosition{view.Pods[2]}},
		{QueueTeam: view.Teams[0], Pods: []contract.QueuePosition{view.Pods[1], view.Pods[0]}},
	}, Groups: view.Groups}
	if d := diff(want, got.TeamQueues); d != "" {
		t.Errorf("team queues mismatch:\n%s", d)
	}
	if !strings.Contains(rec.Body.String(), `"teamQueues":{"leader":true,"teams":[{"team":"audio","queued":0,"admittedGPUs":1`) {
		t.Errorf("state JSON does not carry the view's own field names: %s", rec.Body)
	}
	if len(got.Queue) != 2 || got.Queue[0].Pod != "vision/q-1" || got.Queue[0].Reason != msg || got.Queue[0].Verb != "queue" ||
		got.Queue[0].Outcome != "Quota" {
		t.Errorf("waiting list = %+v, want vision/q-1 first with its queue position as the reason", got.Queue)
	}

	view = contract.QueueView{Leader: false}
	if st := u.State(); st.TeamQueues == nil || st.TeamQueues.Leader || len(st.TeamQueues.Teams) != 0 {
		t.Errorf("standby: TeamQueues = %+v, want leader false and no team", st.TeamQueues)
	}
}
