package placement_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

const gib = 1024

var expires = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cluster is a ledger plus helpers to put pods on its nodes.
type cluster struct {
	t   *testing.T
	l   *ledger.Ledger
	seq int
}

func newCluster(t *testing.T) *cluster { return &cluster{t: t, l: ledger.New()} }

// node adds a node of count GPUs with memGiB each in islands of island GPUs.
func (c *cluster) node(name string, count int, memGiB int, island int, tiers ...string) *cluster {
	c.l.UpsertNode(topology.FromSpec(topology.Spec{Name: name, Model: "H100", Count: count,
		MemoryMiB: placement.MiB(memGiB * gib), IslandSize: island, Tiers: tiers}))
	return c
}

func (c *cluster) add(n *topology.Node) *cluster { c.l.UpsertNode(n); return c }

// unhealthy marks GPU idx of node name unhealthy.
func (c *cluster) unhealthy(name string, idx int, reason string) *cluster {
	ni := c.l.Snapshot().Node(name)
	n := *ni.Node
	n.GPUs = slices.Clone(n.GPUs)
	n.GPUs[idx].Healthy, n.GPUs[idx].Reason = false, reason
	c.l.UpsertNode(&n)
	return c
}

type podOpt func(*ledger.Allocation)

func prio(p int32) podOpt { return func(a *ledger.Allocation) { a.Priority = p } }

// share puts a pod holding memGiB on GPU idx of node.
func (c *cluster) share(node string, idx int, memGiB int, opts ...podOpt) string {
	c.t.Helper()
	return c.put(ledger.Allocation{Node: node, GPUs: []ledger.Share{{Index: idx, MemoryMiB: placement.MiB(memGiB * gib)}}}, opts)
}

// whole puts a pod owning GPUs idxs of node.
func (c *cluster) whole(node string, idxs []int, opts ...podOpt) string {
	c.t.Helper()
	ni := c.l.Snapshot().Node(node)
	a := ledger.Allocation{Node: node, Whole: true}
	for _, i := range idxs {
		a.GPUs = append(a.GPUs, ledger.Share{Index: i, MemoryMiB: ni.Node.GPUs[ni.Node.Slot(i)].MemoryMiB})
	}
	return c.put(a, opts)
}

func (c *cluster) put(a ledger.Allocation, opts []podOpt) string {
	c.t.Helper()
	c.seq++
	a.PodUID = fmt.Sprintf("pod-%02d", c.seq)
	a.Pod = "ns/" + a.PodUID
	for _, o := range opts {
		o(&a)
	}
	if err := c.l.Restore(a); err != nil {
		c.t.Fatalf("put %+v: %v", a, err)
	}
	return a.PodUID
}

func (c *cluster) ni(name string) *ledger.NodeInfo { return c.l.Snapshot().Node(name) }

// render prints everything a snapshot shows, to prove nothing changed.
func render(s *ledger.Snapshot) string {
	var b strings.Builder
	for _, name := range s.Names() {
		ni := s.Node(name)
		fmt.Fprintf(&b, "%s %+v %d\n", name, ni.Use, len(ni.Allocs))
		ids := make([]string, 0, len(ni.Allocs))
		for id := range ni.Allocs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			fmt.Fprintf(&b, " %+v\n", *ni.Allocs[id])
		}
	}
	return b.String()
}

func shareGiB(n int64) placement.Request {
	return placement.Request{UID: "new", Pod: "ns/new", MemoryUnits: n}
}
func gpus(n int) placement.Request { return placement.Request{UID: "new", Pod: "ns/new", GPUs: n} }
