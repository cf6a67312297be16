package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rota-sched/rota/deviceplugin/dra"
	"github.com/rota-sched/rota/deviceplugin/mps"
	"github.com/rota-sched/rota/deviceplugin/server"
	pdra "github.com/rota-sched/rota/pkg/dra"
)

// runDRA serves the DRA mode (deviceplugin/dra) until ctx is done: it
// registers the kubelet plugin, publishes the node's ResourceSlice from
// the GPUs' current state (again whenever their health changes), and
// prepares claims. The device-plugin API is not served.
func runDRA(ctx context.Context, d Deps, state *server.State, conts server.Containers, daemons *mps.Daemons) error {
	cfg := d.Config
	logger := klog.FromContext(ctx)
	name := cfg.DRADriverName()
	dataDir := filepath.Join(cfg.KubeletDir, "plugins", name)
	registry := filepath.Join(cfg.KubeletDir, "plugins_registry")
	for _, dir := range []string{dataDir, cfg.CDIDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA mode: %w", err)
		}
	}
	driver := dra.NewDriver(name, cfg.CDIDir, conts)
	doc, _ := state.Document()
	driver.SetGPUs(doc.GPUs)
	ensureClaimDaemons(ctx, daemons, cfg.CDIDir, driver.CDIKind())

	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.KubeClient(d.Client), kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.DriverName(name),
		kubeletplugin.RegistrarDirectoryPath(registry), kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false))
	if err != nil {
		return fmt.Errorf("DRA mode: starting the kubelet plugin %s: %w", name, err)
	}
	defer helper.Stop()
	logger.Info("Serving GPUs through DRA", "driver", name, "registry", registry, "cdiDir", cfg.CDIDir,
		"cdiKind", driver.CDIKind())

	var last []byte
	for {
		doc, changed := state.Document()
		driver.SetGPUs(doc.GPUs)
		spec := pdra.SliceFor(cfg.NodeName, name, doc)
		key, err := json.Marshal(spec.Devices)
		if err != nil {
			return err
		}
		if !bytes.Equal(key, last) {
			res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
				cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: spec.Devices}}},
			}}
			if err := helper.PublishResources(ctx, res); err != nil {
				return fmt.Errorf("DRA mode: publishing the ResourceSlice: %w", err)
			}
			last = key
			logger.Info("Published the node's ResourceSlice", "driver", name, "devices", len(spec.Devices))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// ensureClaimDaemons starts the MPS daemons of the GPUs that prepared
// claims share (their CDI specs carry CUDA_MPS_PIPE_DIRECTORY): after a
// plugin restart, their containers are running, and the kubelet does not
// prepare them again.
func ensureClaimDaemons(ctx context.Context, d *mps.Daemons, dir, kind string) {
	if d == nil || !d.Available() {
		return
	}
	logger := klog.FromContext(ctx)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var spec cdispec.Spec
		if json.Unmarshal(data, &spec) != nil || spec.Kind != kind {
			continue
		}
		for _, dev := range spec.Devices {
			env := map[string]string{}
			for _, kv := range dev.ContainerEdits.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if env["CUDA_MPS_PIPE_DIRECTORY"] == "" {
				continue
			}
			u := env["NVIDIA_VISIBLE_DEVICES"]
			if err := d.Ensure(ctx, u); err != nil {
				logger.Error(err, "Could not start the MPS daemon of a prepared claim's GPU", "gpu", u, "spec", f)
			}
		}
	}
}
