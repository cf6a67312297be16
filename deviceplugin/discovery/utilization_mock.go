package discovery

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// AddUtilization queues per-process utilization samples on the GPU at
// index, as NVML's sample buffer holds them (go-nvml's mock servers sample
// nothing). GetProcessUtilization(since) answers the samples newer than
// since, ERROR_NOT_FOUND when there are none.
func (m *MockEvents) AddUtilization(index int, samples ...nvml.ProcessUtilizationSample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.util[index] = append(m.util[index], samples...)
}

// prepareUtilization serves the GPU's utilization samples from m, unless
// the caller set GetProcessUtilization.
func (m *MockEvents) prepareUtilization(index int, md *server.Device) {
	if md.GetProcessUtilizationFunc != nil {
		return
	}
	md.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.lost[index] {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		out := slices.DeleteFunc(slices.Clone(m.util[index]), func(s nvml.ProcessUtilizationSample) bool { return s.TimeStamp <= since })
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
}
