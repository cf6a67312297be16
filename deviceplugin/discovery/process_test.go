package discovery

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestProcessesOnMock(t *testing.T) {
	n, ev, err := OpenMock("dgxh100", MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	u0, u1 := n.GPUs()[0].UUID, n.GPUs()[1].UUID
	ev.SetProcesses(0,
		[]nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: 2 << 30}, {Pid: 100, UsedGpuMemory: 512 << 20}, {Pid: 200, UsedGpuMemory: math.MaxUint64}},
		[]nvml.ProcessInfo{{Pid: 400, UsedGpuMemory: 1 << 30}, {Pid: 100, UsedGpuMemory: 256 << 20}})
	got, err := n.Processes(u0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{{PID: 100, UsedMiB: 512, MPS: true}, {PID: 200, UsedMiB: 0}, {PID: 300, UsedMiB: 2048}, {PID: 400, UsedMiB: 1024, MPS: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Processes() = %+v\nwant %+v", got, want)
	}
	if got, err := n.Processes(u1); err != nil || len(got) != 0 {
		t.Errorf("Processes(GPU 1) = %v, %v; want none", got, err)
	}
	ev.SetLost(0, true)
	if _, err := n.Processes(u0); err == nil || !strings.Contains(err.Error(), "compute processes") {
		t.Errorf("lost GPU: %v", err)
	}
	if _, err := n.Processes("GPU-nope"); err == nil {
		t.Error("unknown GPU listed")
	}

	if err := n.SetComputeMode(u1, true); err != nil {
		t.Fatal(err)
	}
	if ev.ComputeMode(1) != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode = %v", ev.ComputeMode(1))
	}
	if err := n.SetComputeMode(u1, false); err != nil || ev.ComputeMode(1) != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode back: %v %v", err, ev.ComputeMode(1))
	}
	if m, err := n.MinorNumber(u1); err != nil || m != 1 {
		t.Errorf("MinorNumber = %d, %v", m, err)
	}
}
