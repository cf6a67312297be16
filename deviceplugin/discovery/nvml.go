package discovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// Library is the part of NVML that discovery uses. nvml.Interface (the real
// library) and go-nvml's mock servers satisfy it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

// watchedEvents are the NVML event types that can make a GPU unhealthy.
const watchedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// waitMillis bounds one EventSet.Wait so Watch notices cancellation.
const waitMillis = 500

// NVML is the Backend over an NVML library (real or mock). It is safe for
// concurrent use.
type NVML struct {
	lib  Library
	devs []nvml.Device // by GPU position in gpus
	gpus []topology.GPU

	mu     sync.Mutex // guards closed
	closed bool

	watched atomic.Int32 // GPUs registered for health events (Watch)
}

var _ Backend = (*NVML)(nil)

// OpenNVML loads libnvidia-ml.so.1 and discovers the GPUs. It returns an
// error wrapping ErrNoDriver when the library or driver is missing.
func OpenNVML() (*NVML, error) {
	return NewNVML(nvml.New())
}

// NewNVML initialises lib and discovers its GPUs.
func NewNVML(lib Library) (*NVML, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND || ret == nvml.ERROR_DRIVER_NOT_LOADED {
			return nil, fmt.Errorf("%w: nvml init: %s (is libnvidia-ml.so.1 on the library path and the nvidia kernel module loaded?)",
				ErrNoDriver, nvml.ErrorString(ret))
		}
		return nil, fmt.Errorf("nvml init: %w", nvmlErr(ret))
	}
	n := &NVML{lib: lib}
	if err := n.discover(); err != nil {
		_ = lib.Shutdown() // the discovery error is the one to report
		return nil, err
	}
	return n, nil
}

func (n *NVML) discover() error {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml device count: %w", nvmlErr(ret))
	}
	if count == 0 {
		return fmt.Errorf("nvml reports no GPUs")
	}
	if count > contract.MaxGPUsPerNode {
		return fmt.Errorf("nvml reports %d GPUs, more than the %d Rota supports", count, contract.MaxGPUsPerNode)
	}
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d handle: %w", i, nvmlErr(ret))
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d uuid: %w", i, nvmlErr(ret))
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d name: %w", i, nvmlErr(ret))
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d memory: %w", i, nvmlErr(ret))
		}
		numa, ret := d.GetNumaNodeId()
		if ret != nvml.SUCCESS || numa < 0 {
			numa = -1 // not supported (single-socket hosts, old drivers)
		}
		n.devs = append(n.devs, d)
		n.gpus = append(n.gpus, topology.GPU{
			Index: i, UUID: uuid, Model: name, MemoryMiB: contract.MiB(mem.Total >> 20),
			NUMA: numa, Healthy: true,
		})
	}
	// NVLink peers: NVML's P2P status over NVLink answers the question
	// directly for point-to-point links and NVSwitch fabrics alike.
	for i := range n.devs {
		for j := range n.devs {
			if i == j {
				continue
			}
			st, ret := n.devs[i].GetP2PStatus(n.devs[j], nvml.P2P_CAPS_INDEX_NVLINK)
			if ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				n.gpus[i].Peers = append(n.gpus[i].Peers, n.gpus[j].Index)
			}
		}
	}
	islands(n.gpus)
	return nil
}

// GPUs implements Backend.
func (n *NVML) GPUs() []topology.GPU { return n.gpus }

// WatchedGPUs is how many GPUs a running Watch registered for XID and ECC
// events (0 when none is running).
func (n *NVML) WatchedGPUs() int { return int(n.watched.Load()) }

// Watch implements Backend: it registers XID and double-bit ECC events on
// every GPU that supports them and waits for events until ctx is done.
func (n *NVML) Watch(ctx context.Context, emit func(Event)) error {
	logger := klog.FromContext(ctx)
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml event set: %w", nvmlErr(ret))
	}
	defer func() { _ = set.Free() }()
	registered := 0
	for i, d := range n.devs {
		ret := d.RegisterEvents(watchedEvents, set)
		if ret == nvml.ERROR_NOT_SUPPORTED {
			logger.Info("GPU does not support health events; relying on the periodic probe", "gpu", n.gpus[i].UUID)
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml register events on %s: %w", n.gpus[i].UUID, nvmlErr(ret))
		}
		registered++
	}
	n.watched.Store(int32(registered))
	defer n.watched.Store(0)
	if registered == 0 {
		<-ctx.Done()
		return nil
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(waitMillis)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			// Which GPU is not said; the periodic probe finds it.
			continue
		default:
			return fmt.Errorf("nvml event wait: %w", nvmlErr(ret))
		}
		ev := Event{Kind: KindXID, XID: data.EventData}
		if data.EventType&nvml.EventTypeDoubleBitEccError != 0 {
			ev = Event{Kind: KindECC}
		}
		if data.Device == nil {
			// An event without a device concerns all of them.
			for _, g := range n.gpus {
				ev.UUID = g.UUID
				emit(ev)
			}
			continue
		}
		uuid, ret := data.Device.GetUUID()
		if ret != nvml.SUCCESS {
			logger.Error(nvmlErr(ret), "Cannot name the GPU of an NVML event", "xid", data.EventData)
			continue
		}
		ev.UUID = uuid
		emit(ev)
	}
	return nil
}

// Probe implements Backend: the GPU must answer its UUID and memory queries.
func (n *NVML) Probe(uuid string) error {
	for i, g := range n.gpus {
		if g.UUID != uuid {
			continue
		}
		got, ret := n.devs[i].GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("probe %s: %w", uuid, nvmlErr(ret))
		}
		if got != uuid {
			return fmt.Errorf("probe %s: device now reports uuid %s", uuid, got)
		}
		if _, ret := n.devs[i].GetMemoryInfo(); ret != nvml.SUCCESS {
			return fmt.Errorf("probe %s memory: %w", uuid, nvmlErr(ret))
		}
		return nil
	}
	return fmt.Errorf("probe %s: unknown GPU", uuid)
}

// Close implements Backend.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %w", nvmlErr(ret))
	}
	return nil
}

// nvmlErr turns an NVML return code into an error.
func nvmlErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return errors.New(nvml.ErrorString(ret))
}
