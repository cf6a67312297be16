package discovery

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// MockServer returns a fresh go-nvml mock DGX server by name: dgxa100,
// dgxh100, dgxh200 or dgxb200 (8 GPUs each, random UUIDs).
func MockServer(name string) (*server.Server, error) {
	switch name {
	case "dgxa100":
		return dgxa100.New(), nil
	case "dgxh100":
		return dgxh100.New(), nil
	case "dgxh200":
		return dgxh200.New(), nil
	case "dgxb200":
		return dgxb200.New(), nil
	}
	return nil, fmt.Errorf("unknown mock server %q: use dgxa100, dgxh100, dgxh200 or dgxb200", name)
}

// MockOptions fills in what go-nvml's mock servers leave out.
type MockOptions struct {
	// IslandSize groups GPUs into NVLink islands of this many consecutive
	// GPUs. The mock servers implement no NVLink calls; real DGX A100, H100,
	// H200 and B200 systems connect all 8 GPUs through NVSwitch, so 0 means
	// "all GPUs in one island". 1 means no NVLink.
	IslandSize int
	// NUMANodes spreads GPUs evenly over this many NUMA nodes (DGX: 2);
	// 0 means 2.
	NUMANodes int
}

// MockEvents injects NVML events into a mock server's event set. It is safe
// for concurrent use.
type MockEvents struct {
	s  *server.Server
	ch chan nvml.EventData

	mu    sync.Mutex
	lost  map[int]bool                  // GPU index -> answers ERROR_GPU_IS_LOST
	procs map[int][2][]nvml.ProcessInfo // GPU index -> compute, MPS client lists
	mode  map[int]nvml.ComputeMode
	util  map[int][]nvml.ProcessUtilizationSample // GPU index -> samples (AddUtilization)
}

// InjectXID delivers an XID critical error for the GPU at index.
func (m *MockEvents) InjectXID(index int, xid uint64) {
	m.ch <- nvml.EventData{Device: m.s.Devices[index], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// InjectECC delivers a double-bit ECC error for the GPU at index.
func (m *MockEvents) InjectECC(index int) {
	m.ch <- nvml.EventData{Device: m.s.Devices[index], EventType: nvml.EventTypeDoubleBitEccError}
}

// SetLost makes the GPU at index fail (or pass again) every probe.
func (m *MockEvents) SetLost(index int, lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost[index] = lost
}

func (m *MockEvents) isLost(index int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost[index]
}

// PrepareMock completes a go-nvml mock server so discovery and health can
// run against it: NUMA node, NVLink P2P status, event registration, an event
// set fed by the returned MockEvents, and lost-GPU simulation on the UUID and
// memory queries. Functions the caller already set are kept.
func PrepareMock(s *server.Server, o MockOptions) *MockEvents {
	ev := &MockEvents{s: s, ch: make(chan nvml.EventData, 64), lost: map[int]bool{},
		procs: map[int][2][]nvml.ProcessInfo{}, mode: map[int]nvml.ComputeMode{}, util: map[int][]nvml.ProcessUtilizationSample{}}
	n := len(s.Devices)
	island := o.IslandSize
	if island <= 0 {
		island = n
	}
	numa := o.NUMANodes
	if numa <= 0 {
		numa = 2
	}
	for i, d := range s.Devices {
		md, ok := d.(*server.Device)
		if !ok {
			continue
		}
		if md.GetNumaNodeIdFunc == nil {
			md.GetNumaNodeIdFunc = func() (int, nvml.Return) { return i * numa / n, nvml.SUCCESS }
		}
		if md.GetP2PStatusFunc == nil {
			md.GetP2PStatusFunc = func(other nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
				od, ok := other.(*server.Device)
				if !ok || idx != nvml.P2P_CAPS_INDEX_NVLINK {
					return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
				}
				if island > 1 && od.Index/island == i/island {
					return nvml.P2P_STATUS_OK, nvml.SUCCESS
				}
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
		}
		if md.RegisterEventsFunc == nil {
			md.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		}
		ev.prepareProcesses(i, md)
		ev.prepareUtilization(i, md)
		uuid, mem := md.GetUUIDFunc, md.GetMemoryInfoFunc
		md.GetUUIDFunc = func() (string, nvml.Return) {
			if ev.isLost(i) {
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return uuid()
		}
		md.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			if ev.isLost(i) {
				return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
			}
			return mem()
		}
	}
	if s.EventSetCreateFunc == nil {
		s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
					t := time.NewTimer(time.Duration(ms) * time.Millisecond)
					defer t.Stop()
					select {
					case e := <-ev.ch:
						return e, nvml.SUCCESS
					case <-t.C:
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		}
	}
	return ev
}

// OpenMock builds the named mock DGX server, prepares it and opens it as an
// NVML backend.
func OpenMock(name string, o MockOptions) (*NVML, *MockEvents, error) {
	s, err := MockServer(name)
	if err != nil {
		return nil, nil, err
	}
	ev := PrepareMock(s, o)
	n, err := NewNVML(s)
	if err != nil {
		return nil, nil, err
	}
	return n, ev, nil
}
