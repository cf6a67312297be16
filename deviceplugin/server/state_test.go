package server

import (
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/health"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

func h200(t *testing.T) []topology.GPU {
	t.Helper()
	return topology.FromSpec(topology.Spec{Name: "n", Model: "H200", Count: 8, MemoryMiB: 144384, IslandSize: 8}).GPUs
}

func TestCheckMessageSize(t *testing.T) {
	tests := []struct {
		name     string
		giveUnit contract.MiB
		wantErr  string
	}{
		{"1 GiB", 1024, ""},
		{"64 MiB", 64, ""},
		{"16 MiB", 16, "use --memory-unit-mib 32 or larger"},
		{"1 MiB: 1.15 M devices", 1, "gives 1155072 gpu-memory devices"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMessageSize(h200(t), tc.giveUnit)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("CheckMessageSize(%d) = %v, want %q", tc.giveUnit, err, tc.wantErr)
			}
		})
	}
}

func TestMessageSizeNearLimit(t *testing.T) {
	// The real encoded size: about 73,000 UUID-named devices fill 4 MiB.
	gpus := h200(t)
	devs := Devices(handoff.KindMemory, gpus, 1024)
	per := float64(MessageSize(devs)) / float64(len(devs))
	if n := int(KubeletMaxMessage / per); n < 60000 || n > 80000 {
		t.Errorf("%.1f bytes per device: %d devices fit in 4 MiB, want 60,000..80,000", per, n)
	}
	t.Logf("%.1f bytes per gpu-memory device; %d fit in 4 MiB; 141 GiB x 8 at 1 GiB = %d bytes", per, int(KubeletMaxMessage/per), MessageSize(devs))
}

func TestDevicesFollowHealth(t *testing.T) {
	s := NewState(h200(t), 1024)
	uuid := h200(t)[3].UUID
	if !s.Apply(health.Change{UUID: uuid, Status: health.Status{Reason: "XID 79"}}) {
		t.Fatal("Apply reported no change")
	}
	gpus, _ := s.Snapshot()
	for _, k := range []handoff.Kind{handoff.KindGPU, handoff.KindMemory} {
		bad := 0
		for _, d := range Devices(k, gpus, 1024) {
			if d.Health == pluginapi.Unhealthy {
				bad++
				if !strings.HasPrefix(d.ID, uuid) {
					t.Errorf("device %s unhealthy", d.ID)
				}
			}
		}
		if want := map[handoff.Kind]int{handoff.KindGPU: 1, handoff.KindMemory: 141}[k]; bad != want {
			t.Errorf("kind %d: %d unhealthy devices, want %d", k, bad, want)
		}
	}
	doc, _ := s.Document()
	if doc.GPUs[3].Health != contract.Unhealthy || doc.GPUs[3].Reason != "XID 79" {
		t.Errorf("document gpu 3 = %+v", doc.GPUs[3])
	}
	if s.Apply(health.Change{UUID: uuid, Status: health.Status{Reason: "XID 79"}}) {
		t.Error("same change applied twice")
	}
}

func TestSocketName(t *testing.T) {
	if got := SocketName("example.com/gpu-memory"); got != "rota-gpu-memory.sock" {
		t.Errorf("SocketName = %q", got)
	}
}
