package app_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/deviceplugin/app"
	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/pkg/topology"
)

// TestFakeBackendHealthFile runs the plugin on the fake backend without the
// API server, the way the e2e harness runs many simulated nodes, and fails a
// GPU by writing the health file.
func TestFakeBackendHealthFile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir := t.TempDir()
	spec := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(spec, []byte("model: NVIDIA H100 80GB HBM3\ncount: 4\nmemoryMiB: 81920\nislandSize: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var healthyGPUs atomic.Int32 // what a harness would patch into Node allocatable
	stub, err := kubeletstub.Start(dir, kubeletstub.WithUpdateFunc(func(res string, healthy, _ int) {
		if res == names.GPU {
			healthyGPUs.Store(int32(healthy))
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	b, err := discovery.OpenFake(spec, "sim-3")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.NodeName, cfg.NoAPI, cfg.DevicePluginDir, cfg.MetricsListen = "sim-3", true, dir, ""
	cfg.Backend, cfg.FakeConfig = config.BackendFake, spec
	cfg.KubeletPoll, cfg.HealthInterval, cfg.AllocateWait = 50*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, app.Deps{Config: cfg, Backend: b}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := stub.WaitRegistered(wctx, names.GPUMemory, 0); err != nil {
		t.Fatal(err)
	}
	want := topology.FromSpec(topology.Spec{Name: "sim-3", Model: "x", Count: 4, MemoryMiB: 81920}).GPUs
	if err := stub.WaitFor(wctx, func(s *kubeletstub.Stub) bool {
		_, g := s.Count(names.GPU)
		_, m := s.Count(names.GPUMemory)
		return g == 4 && m == 4*80
	}); err != nil {
		t.Fatal(err)
	}
	if got := stub.Devices(names.GPU)[2].ID; got != want[2].UUID {
		t.Fatalf("fake UUID %s, want %s (topology.FromSpec)", got, want[2].UUID)
	}
	if err := os.WriteFile(filepath.Join(dir, "health"), []byte("2=xid:79\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := stub.WaitFor(wctx, func(s *kubeletstub.Stub) bool { h, _ := s.Count(names.GPU); return h == 3 }); err != nil {
		t.Fatal(err)
	}
	if got := healthyGPUs.Load(); got != 3 {
		t.Errorf("update callback saw %d healthy GPUs, want 3", got)
	}
	// Without the API server there are no assignments: Allocate refuses.
	if _, err := stub.Allocate(ctx, names.GPU, 1, nil); err == nil {
		t.Error("Allocate succeeded without assignments")
	}
}
