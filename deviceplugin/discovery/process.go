package discovery

import (
	"fmt"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rota-sched/rota/pkg/contract"
)

// Process is one process holding a CUDA context on a GPU, as NVML lists it.
// PIDs are in the host's PID namespace.
type Process struct {
	PID uint32
	// UsedMiB is the GPU memory the process holds; 0 when NVML cannot say
	// (it reports "not available" for some setups, e.g. without permission).
	UsedMiB contract.MiB
	// MPS is set for MPS clients (NVML's separate MPS list).
	MPS bool
}

// Processes lists the compute processes and MPS clients on the GPU, sorted
// by PID; a PID in both lists is listed once (as an MPS client).
func (n *NVML) Processes(uuid string) ([]Process, error) {
	d, err := n.device(uuid)
	if err != nil {
		return nil, err
	}
	byPID := map[uint32]Process{}
	add := func(list []nvml.ProcessInfo, mps bool) {
		for _, p := range list {
			var mib contract.MiB
			if p.UsedGpuMemory != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				mib = contract.MiB(p.UsedGpuMemory >> 20)
			}
			old, seen := byPID[p.Pid]
			if seen && old.UsedMiB > mib {
				mib = old.UsedMiB
			}
			byPID[p.Pid] = Process{PID: p.Pid, UsedMiB: mib, MPS: mps || old.MPS}
		}
	}
	compute, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml compute processes of %s: %w", uuid, nvmlErr(ret))
	}
	add(compute, false)
	switch mps, ret := d.GetMPSComputeRunningProcesses(); ret {
	case nvml.SUCCESS:
		add(mps, true)
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
	default:
		return nil, fmt.Errorf("nvml MPS processes of %s: %w", uuid, nvmlErr(ret))
	}
	out := make([]Process, 0, len(byPID))
	for _, p := range byPID {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Process) int { return int(a.PID) - int(b.PID) })
	return out, nil
}

// MinorNumber is the GPU's device node number: /dev/nvidia<minor>.
func (n *NVML) MinorNumber(uuid string) (int, error) {
	d, err := n.device(uuid)
	if err != nil {
		return 0, err
	}
	m, ret := d.GetMinorNumber()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("nvml minor number of %s: %w", uuid, nvmlErr(ret))
	}
	return m, nil
}

// SetComputeMode sets the GPU to EXCLUSIVE_PROCESS (only one process, the
// MPS server, may hold a context) or back to DEFAULT. It needs root.
func (n *NVML) SetComputeMode(uuid string, exclusive bool) error {
	d, err := n.device(uuid)
	if err != nil {
		return err
	}
	mode := nvml.COMPUTEMODE_DEFAULT
	if exclusive {
		mode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	}
	if ret := d.SetComputeMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml set compute mode of %s: %w", uuid, nvmlErr(ret))
	}
	return nil
}

func (n *NVML) device(uuid string) (nvml.Device, error) {
	for i, g := range n.gpus {
		if g.UUID == uuid {
			return n.devs[i], nil
		}
	}
	return nil, fmt.Errorf("unknown GPU %s", uuid)
}
