package discovery

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
)

func TestProcessUtilizationOnMock(t *testing.T) {
	n, ev, err := OpenMock("dgxh100", MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	u0, u1 := n.GPUs()[0].UUID, n.GPUs()[1].UUID
	ev.AddUtilization(0, nvml.ProcessUtilizationSample{Pid: 100, TimeStamp: 1_000_000, SmUtil: 40, MemUtil: 10},
		nvml.ProcessUtilizationSample{Pid: 200, TimeStamp: 2_000_000, SmUtil: 3})
	got, err := n.ProcessUtilization(u0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []UtilizationSample{
		{PID: 100, At: time.UnixMicro(1_000_000), Micros: 1_000_000, SMPercent: 40, MemPercent: 10},
		{PID: 200, At: time.UnixMicro(2_000_000), Micros: 2_000_000, SMPercent: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ProcessUtilization(0) (-want +got):\n%s", diff)
	}
	if got, err := n.ProcessUtilization(u0, 1_000_000); err != nil || len(got) != 1 || got[0].PID != 200 {
		t.Errorf("ProcessUtilization(since the first) = %+v, %v; want pid 200 only", got, err)
	}
	if got, err := n.ProcessUtilization(u0, 2_000_000); err != nil || len(got) != 0 {
		t.Errorf("nothing newer = %+v, %v; want none, no error", got, err)
	}
	if got, err := n.ProcessUtilization(u1, 0); err != nil || len(got) != 0 {
		t.Errorf("GPU without samples = %+v, %v; want none", got, err)
	}
	ev.SetLost(0, true)
	if _, err := n.ProcessUtilization(u0, 0); err == nil {
		t.Error("lost GPU answered")
	}
	if _, err := n.ProcessUtilization("GPU-nope", 0); err == nil {
		t.Error("unknown GPU answered")
	}
}

func TestProcessUtilizationNotSupported(t *testing.T) {
	s, err := MockServer("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Devices {
		d.(*server.Device).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
	}
	PrepareMock(s, MockOptions{})
	n, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.ProcessUtilization(n.GPUs()[0].UUID, 0); !errors.Is(err, ErrUtilizationNotSupported) {
		t.Errorf("ProcessUtilization() = %v, want ErrUtilizationNotSupported", err)
	}
}
