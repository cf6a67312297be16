package discovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// UtilizationSample is one NVML per-process utilization sample.
type UtilizationSample struct {
	PID uint32
	// At is when NVML took the sample; Micros is the same time as NVML's
	// timestamp (microseconds since the epoch), to pass back as "since".
	At     time.Time
	Micros uint64
	// SMPercent and MemPercent are the process's share of the GPU's SM time
	// and memory bandwidth over the sample, in percent.
	SMPercent  uint32
	MemPercent uint32
}

// ErrUtilizationNotSupported is returned by ProcessUtilization on GPUs
// whose driver does not sample per-process utilization.
var ErrUtilizationNotSupported = errors.New("per-process utilization is not supported")

// ProcessUtilization returns the GPU's per-process utilization samples
// taken after since (an earlier sample's Micros; 0 for all NVML keeps). No
// sample (no process ran on the GPU since) is an empty list.
func (n *NVML) ProcessUtilization(uuid string, since uint64) ([]UtilizationSample, error) {
	d, err := n.device(uuid)
	if err != nil {
		return nil, err
	}
	raw, ret := d.GetProcessUtilization(since)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND: // no sample newer than since
		return nil, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return nil, fmt.Errorf("nvml process utilization of %s: %w", uuid, ErrUtilizationNotSupported)
	default:
		return nil, fmt.Errorf("nvml process utilization of %s: %w", uuid, nvmlErr(ret))
	}
	out := make([]UtilizationSample, 0, len(raw))
	for _, s := range raw {
		out = append(out, UtilizationSample{PID: s.Pid, At: time.UnixMicro(int64(s.TimeStamp)), Micros: s.TimeStamp, //nolint:gosec // NVML timestamps fit int64 until the year 294247
			SMPercent: s.SmUtil, MemPercent: s.MemUtil})
	}
	return out, nil
}
