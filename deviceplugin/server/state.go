package server

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/health"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// State is the node's GPUs with their current health.
type State struct {
	unitMiB contract.MiB

	mu      sync.Mutex
	gpus    []topology.GPU
	changed chan struct{} // closed and replaced on every change
	mps     *contract.TopologyMPS
	leaks   map[string]Leak // by GPU UUID; only GPUs with leaked memory
}

// Leak is one GPU's leaked memory as published: Leaked MiB held by processes
// of no pod, and Floor, the memory assigned to the GPU's live pods (the
// published capacity never goes below it, so the extender never finds its
// running pods over capacity).
type Leak struct {
	Leaked, Floor contract.MiB
}

// NewState starts from the discovered GPUs.
func NewState(gpus []topology.GPU, unitMiB contract.MiB) *State {
	cp := make([]topology.GPU, len(gpus))
	for i, g := range gpus {
		g.Peers = slices.Clone(g.Peers)
		cp[i] = g
	}
	return &State{unitMiB: unitMiB, gpus: cp, changed: make(chan struct{})}
}

// UnitMiB is the gpu-memory unit.
func (s *State) UnitMiB() contract.MiB { return s.unitMiB }

// Apply records a health change; it reports whether anything changed.
func (s *State) Apply(c health.Change) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.gpus {
		g := &s.gpus[i]
		if g.UUID != c.UUID {
			continue
		}
		if g.Healthy == c.Healthy && g.Reason == c.Reason {
			return false
		}
		g.Healthy, g.Reason = c.Healthy, c.Reason
		s.notifyLocked()
		return true
	}
	return false
}

// SetMPS sets the node's MPS state for the topology document (nil: not
// said).
func (s *State) SetMPS(m *contract.TopologyMPS) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (m == nil && s.mps == nil) || (m != nil && s.mps != nil && *m == *s.mps) {
		return
	}
	if m != nil {
		c := *m
		m = &c
	}
	s.mps = m
	s.notifyLocked()
}

// SetLeaks replaces the leaked memory by GPU UUID (GPUs without a leak may
// be left out); it reports whether anything changed.
func (s *State) SetLeaks(leaks map[string]Leak) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]Leak{}
	for u, l := range leaks {
		if l.Leaked > 0 {
			next[u] = l
		}
	}
	if maps.Equal(next, s.leaks) || (len(next) == 0 && len(s.leaks) == 0) {
		return false
	}
	s.leaks = next
	s.notifyLocked()
	return true
}

func (s *State) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Snapshot returns a copy of the GPUs and a channel closed at the next change.
func (s *State) Snapshot() ([]topology.GPU, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.gpus), s.changed
}

// Counts returns how many GPUs are healthy and unhealthy.
func (s *State) Counts() (healthy, unhealthy int) {
	gpus, _ := s.Snapshot()
	for _, g := range gpus {
		if g.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	return healthy, unhealthy
}

// Document renders the topology annotation (Generation left 0) and returns
// a channel closed at the next change. A GPU with leaked memory is
// published with memoryMiB reduced by it — never below the memory assigned
// to its live pods, nor below one unit — and leakedMiB set; a GPU whose
// leak leaves less than one unit free of assignments is published
// Unhealthy with the leak as its reason.
func (s *State) Document() (contract.Topology, <-chan struct{}) {
	s.mu.Lock()
	gpus, ch := slices.Clone(s.gpus), s.changed
	mps, leaks := s.mps, maps.Clone(s.leaks)
	s.mu.Unlock()
	n := topology.Node{MemoryUnitMiB: s.unitMiB, GPUs: gpus}
	doc := n.Document()
	if mps != nil {
		c := *mps
		doc.MPS = &c
	}
	for i := range doc.GPUs {
		g := &doc.GPUs[i]
		l, ok := leaks[g.UUID]
		if !ok {
			continue
		}
		g.LeakedMiB = l.Leaked
		free := g.MemoryMiB - l.Leaked
		if free-l.Floor < s.unitMiB && g.Health == contract.Healthy {
			g.Health = contract.Unhealthy
			g.Reason = fmt.Sprintf("GPU memory leaked: %d MiB held by processes of no pod", int64(l.Leaked))
		}
		g.MemoryMiB = max(free, l.Floor, s.unitMiB)
	}
	return doc, ch
}

// Units is how many gpu-memory devices a GPU of mem MiB gets.
func Units(mem, unitMiB contract.MiB) int {
	if unitMiB <= 0 {
		return 0
	}
	return int(mem / unitMiB)
}

// Devices lists the kubelet devices of one resource: one per GPU for
// KindGPU (ID = UUID), Units(memory) per GPU for KindMemory
// (ID = "<uuid>::<n>"). Every device of an unhealthy GPU is Unhealthy.
func Devices(k handoff.Kind, gpus []topology.GPU, unitMiB contract.MiB) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, g := range gpus {
		h := pluginapi.Healthy
		if !g.Healthy {
			h = pluginapi.Unhealthy
		}
		if k == handoff.KindGPU {
			out = append(out, &pluginapi.Device{ID: g.UUID, Health: h})
			continue
		}
		for n := range Units(g.MemoryMiB, unitMiB) {
			out = append(out, &pluginapi.Device{ID: handoff.MemoryDeviceID(g.UUID, n), Health: h})
		}
	}
	return out
}

// KubeletMaxMessage is the kubelet's gRPC receive limit for device plugin
// messages (grpc-go's default, which the kubelet does not raise).
const KubeletMaxMessage = 4 << 20

// MaxListAndWatchBytes is the largest ListAndWatch message the plugin agrees
// to send: three quarters of the kubelet's limit, leaving room for longer
// UUIDs and future fields.
const MaxListAndWatchBytes = KubeletMaxMessage * 3 / 4

// CheckMessageSize computes the encoded size of the largest ListAndWatch
// message for the given GPUs and unit (every device Unhealthy, the longer
// spelling) and refuses units that come near the kubelet's limit.
func CheckMessageSize(gpus []topology.GPU, unitMiB contract.MiB) error {
	worst := make([]topology.GPU, len(gpus))
	for i, g := range gpus {
		g.Healthy = false
		worst[i] = g
	}
	size := MessageSize(Devices(handoff.KindMemory, worst, unitMiB))
	if size <= MaxListAndWatchBytes {
		return nil
	}
	devices := 0
	var mem contract.MiB
	for _, g := range gpus {
		devices += Units(g.MemoryMiB, unitMiB)
		mem = max(mem, g.MemoryMiB)
	}
	// Smallest power-of-two unit that fits, for the hint.
	hint := unitMiB
	for hint < mem && size > MaxListAndWatchBytes {
		hint *= 2
		size = MessageSize(Devices(handoff.KindMemory, worst, hint))
	}
	return fmt.Errorf("memory unit %d MiB gives %d gpu-memory devices and a %d-byte ListAndWatch message; "+
		"the kubelet accepts at most %d bytes and Rota stops at %d: use --memory-unit-mib %d or larger (default 1024)",
		unitMiB, devices, MessageSize(Devices(handoff.KindMemory, worst, unitMiB)), KubeletMaxMessage, MaxListAndWatchBytes, hint)
}
