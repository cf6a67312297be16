package ledger_test

import (
	"fmt"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
)

// BenchmarkSnapshotAfterBind5k is the extender's pattern under load: each
// bind changes one node, and the next filter takes a fresh snapshot of
// 5,000 nodes.
func BenchmarkSnapshotAfterBind5k(b *testing.B) {
	l := ledger.New()
	for i := range 5000 {
		l.UpsertNode(gpuNode(fmt.Sprintf("node-%05d", i)))
	}
	l.Snapshot()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		uid := fmt.Sprintf("p%d", i)
		if err := l.Reserve(share(uid, fmt.Sprintf("node-%05d", i%5000), 0, 1024), expires); err != nil {
			b.Fatal(err)
		}
		if s := l.Snapshot(); s.Len() != 5000 {
			b.Fatal(s.Len())
		}
		l.Release(uid)
		i++
	}
}

// BenchmarkCheck5k is the extender's periodic invariant check at 5,000
// nodes holding 20,000 allocations: it holds the ledger's read lock, so
// its cost is time every writer waits.
func BenchmarkCheck5k(b *testing.B) {
	l := ledger.New()
	for i := range 5000 {
		l.UpsertNode(gpuNode(fmt.Sprintf("node-%05d", i)))
	}
	for i := range 20000 {
		uid := fmt.Sprintf("p%d", i)
		if err := l.Reserve(share(uid, fmt.Sprintf("node-%05d", i%5000), i/5000, 1024), expires); err != nil {
			b.Fatal(err)
		}
	}
	l.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if errs := l.Check(); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
