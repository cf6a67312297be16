package discovery

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// SetProcesses sets what NVML lists on the GPU at index: compute processes
// and MPS clients (go-nvml's mock servers list none).
func (m *MockEvents) SetProcesses(index int, compute, mps []nvml.ProcessInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs[index] = [2][]nvml.ProcessInfo{slices.Clone(compute), slices.Clone(mps)}
}

// ComputeMode is the compute mode last set on the GPU at index (DEFAULT
// until set).
func (m *MockEvents) ComputeMode(index int) nvml.ComputeMode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mode[index]
}

// prepareProcesses serves the process lists and compute mode of the GPU at
// index from m, unless the caller set them.
func (m *MockEvents) prepareProcesses(index int, md *server.Device) {
	list := func(which int) ([]nvml.ProcessInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.lost[index] {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return slices.Clone(m.procs[index][which]), nvml.SUCCESS
	}
	if md.GetComputeRunningProcessesFunc == nil {
		md.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return list(0) }
	}
	if md.GetMPSComputeRunningProcessesFunc == nil {
		md.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return list(1) }
	}
	if md.SetComputeModeFunc == nil {
		md.SetComputeModeFunc = func(c nvml.ComputeMode) nvml.Return {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.mode[index] = c
			return nvml.SUCCESS
		}
	}
	if md.GetComputeModeFunc == nil {
		md.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.mode[index], nvml.SUCCESS
		}
	}
}
