package app

import (
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/deviceplugin/config"
)

// Main maps a GPU backend that cannot be opened to the runtime-failure exit
// code, before it talks to the API server or serves anything.
func TestMainExitsWhenDiscoveryFails(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := config.Default()
	cfg.NodeName, cfg.NoAPI = "n1", true
	cfg.Backend, cfg.FakeConfig = config.BackendFake, filepath.Join(t.TempDir(), "missing.yaml")
	if code := Main(ctx, cfg); code != ExitRuntime {
		t.Errorf("Main with a missing fake GPU file = %d, want %d (ExitRuntime)", code, ExitRuntime)
	}
}
