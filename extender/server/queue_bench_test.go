package server

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/fixture"
)

// BenchmarkQueueAdmission5kNodes10kQueued is one admission decision of the
// queue controller: pkg/queue orders 10,000 queued pods of 20 teams, picks
// the team with the lowest dominant share and holds room for its head on a
// 5,000-node cluster with 35,000 pods placed (the extender's HoldRoom over
// the ledger); the hold is released after each decision, so every one
// starts from the same state.
func BenchmarkQueueAdmission5kNodes10kQueued(b *testing.B) {
	bc := loadBigCluster(b, 5000, 35000, 35000)
	defer bc.stop()
	cfg := quota.Config{Teams: map[string]quota.Team{}}
	var queued []pkgqueue.Workload
	pods := map[string]*corev1.Pod{}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for team := range 20 {
		name := fmt.Sprintf("team-%02d", team)
		cfg.Teams[name] = quota.Team{GPUs: 10000, GPUMemoryGiB: 100000, Weight: float64(1 + team%3)}
	}
	for i := range 10000 {
		team := fmt.Sprintf("team-%02d", i%20)
		units := contract.MiB(10 + 10*(i%4))
		p := fixture.Pod("default", fmt.Sprintf("q-%05d", i)).MemoryMiB(units * gib).UID(fmt.Sprintf("uid-q-%05d", i)).Obj()
		key := "default/" + p.Name
		pods[key] = p
		queued = append(queued, pkgqueue.Workload{Key: key, Team: team, Accounts: []quota.Account{{Team: team}},
			Priority: int32(i % 3), Created: t0.Add(time.Duration(i) * time.Second), Members: 1, Present: 1,
			PerMember: quota.Amount{MemoryMiB: units * gib}, Shape: fmt.Sprint(int64(units))})
	}
	in := pkgqueue.Input{Config: cfg, Queued: queued, Capacity: pkgqueue.Capacity{GPUs: 40000, MemoryMiB: 40000 * 80 * 1024},
		MaxAdmissions: 1}
	b.ReportAllocs()
	for b.Loop() {
		res := pkgqueue.Plan(in, pkgqueue.FitterFunc(func(w *pkgqueue.Workload, a quota.Account) (bool, string) {
			h, reason := bc.ext.Room().HoldRoom([]*corev1.Pod{pods[w.Key]}, room.Scope{Model: a.Model}, t0.Add(time.Hour))
			if reason != "" {
				return false, reason
			}
			bc.ext.Room().ReleaseHold(h)
			return true, ""
		}))
		if len(res.Admitted) != 1 {
			b.Fatalf("admitted %d, want 1: %+v", len(res.Admitted), res.Waiting[queued[0].Key])
		}
	}
}

// BenchmarkHoldRoom5kNodes5Shapes is the queue's holds as the load test's
// pods ask them: a cycle of five request shapes (10, 20 and 40 GiB shares,
// one and two whole GPUs) on a 5,000-node cluster with 35,000 pods placed,
// each hold released after it is made. Each hold refits only the nodes
// that changed since the last hold of its shape, while the hold memo keeps
// every shape of the cycle.
func BenchmarkHoldRoom5kNodes5Shapes(b *testing.B) { benchHoldRoom(b, "") }

// BenchmarkHoldRoom5kNodes5ShapesVersioned is the same with pods that carry
// a resourceVersion, as the informer's do: each pod's request is parsed
// once (podreq.Parser), not at every hold.
func BenchmarkHoldRoom5kNodes5ShapesVersioned(b *testing.B) { benchHoldRoom(b, "1") }

func benchHoldRoom(b *testing.B, rv string) {
	bc := loadBigCluster(b, 5000, 35000, 35000)
	defer bc.stop()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var pods []*corev1.Pod
	for i, shape := range []func(*fixture.PodBuilder) *fixture.PodBuilder{
		func(p *fixture.PodBuilder) *fixture.PodBuilder { return p.MemoryMiB(10 * gib) },
		func(p *fixture.PodBuilder) *fixture.PodBuilder { return p.MemoryMiB(20 * gib) },
		func(p *fixture.PodBuilder) *fixture.PodBuilder { return p.MemoryMiB(40 * gib) },
		func(p *fixture.PodBuilder) *fixture.PodBuilder { return p.GPUs(1) },
		func(p *fixture.PodBuilder) *fixture.PodBuilder { return p.GPUs(2) },
	} {
		pods = append(pods, shape(fixture.Pod("default", fmt.Sprintf("h-%d", i)).UID(fmt.Sprintf("uid-h-%d", i)).ResourceVersion(rv)).Obj())
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, reason := bc.ext.Room().HoldRoom(pods[i%len(pods):i%len(pods)+1], room.Scope{}, t0.Add(time.Hour))
		if reason != "" {
			b.Fatalf("%s: %s", pods[i%len(pods)].Name, reason)
		}
		bc.ext.Room().ReleaseHold(h)
		i++
	}
}
