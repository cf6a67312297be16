package queue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rota-sched/rota/pkg/ledger"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/topology"
)

// historyRun starts a controller with fair-share memory over 8 GPUs, two
// teams (vision in ml, night in ml2) each queueing four 1-GPU pods and room
// for four, and the given objects.
func historyRun(t *testing.T, objs ...runtime.Object) (*Controller, func() map[string]int) {
	t.Helper()
	night := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml2", Labels: map[string]string{names.TeamLabel: "night"}}}
	objs = append(objs, night)
	for i := range 4 {
		objs = append(objs, gpuPod(fmt.Sprintf("v%d", i), 1, time.Hour, true))
		p := gpuPod(fmt.Sprintf("n%d", i), 1, 2*time.Hour, true)
		p.Namespace = "ml2"
		objs = append(objs, p)
	}
	r := &fakeRoom{free: 4}
	c, _ := start(t, nil, r, objs...)
	l := ledger.New()
	l.UpsertNode(topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 8, MemoryMiB: 80 << 10}))
	c.o.Snapshot = l.Snapshot
	c.o.FairShareHalfLife, c.o.HistoryNamespace, c.o.HistoryConfigMap = time.Hour, "rota-system", "hist"
	return c, func() map[string]int {
		got := map[string]int{}
		for _, h := range r.held {
			got[h[:1]]++
		}
		return got
	}
}

// The history kept by an earlier leader says team night held 90 % of the
// cluster: this leader reads it, admits team vision's pods before night's
// (older) ones, and keeps the history, brought up to now, in its ConfigMap.
func TestHistoryReadUsedAndKept(t *testing.T) {
	stored := pkgqueue.History{At: t0.Add(-10 * time.Second), Share: map[string]float64{"night": 0.9}}
	data, err := pkgqueue.MarshalHistory(stored)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hist", Namespace: "rota-system"}, Data: map[string]string{HistoryKey: string(data)}}
	c, held := historyRun(t, cm)
	c.Pass(t.Context())
	if got := held(); got["v"] != 4 || got["n"] != 0 {
		t.Errorf("admitted %v; want vision's 4 first (night's past use is 0.9)", got)
	}
	kept, err := c.o.Client.CoreV1().ConfigMaps("rota-system").Get(t.Context(), "hist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := pkgqueue.ParseHistory([]byte(kept.Data[HistoryKey]), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := pkgqueue.History{HalfLife: time.Hour, At: stored.At, Share: stored.Share}.Observe(map[string]float64{"vision": 0.5}, t0)
	if !h.At.Equal(t0) || h.Share["night"] != want.Share["night"] || h.Share["vision"] != want.Share["vision"] || h.Share["night"] >= 0.9 {
		t.Errorf("kept %+v, want %+v (night decayed, vision's half share counted)", h, want)
	}
}

// Without the history's memory (half-life 0) the two teams split the room.
func TestHistoryOffSplitsEvenly(t *testing.T) {
	c, held := historyRun(t)
	c.o.FairShareHalfLife = 0
	c.Pass(t.Context())
	if got := held(); got["v"] != 2 || got["n"] != 2 {
		t.Errorf("admitted %v, want 2 and 2", got)
	}
}

// A history that cannot be read is never overwritten: no write happens
// until a read succeeds.
func TestHistoryFailedReadWritesNothing(t *testing.T) {
	c, _ := historyRun(t)
	client := c.o.Client.(interface {
		PrependReactor(verb, resource string, reaction k8stesting.ReactionFunc)
	})
	writes := 0
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is away")
	})
	for _, verb := range []string{"create", "update"} {
		client.PrependReactor(verb, "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			writes++
			return false, nil, nil
		})
	}
	c.Pass(t.Context())
	if writes != 0 || c.historyLoaded {
		t.Errorf("after a failed read: %d writes, loaded %v", writes, c.historyLoaded)
	}
}
