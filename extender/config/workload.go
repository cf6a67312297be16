package config

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/pkg/placement"
)

// LoadWorkload reads the pod shapes the fragmentation-aware policies keep
// room for, as a YAML or JSON list:
//
//   - {milli: 500, weight: 0.2}   # half a GPU
//   - {gpus: 1, weight: 0.5}      # one whole GPU
//   - {gpus: 8, weight: 0.05}
//
// The weights are the shapes' shares of the pod population (normalised).
// The built-in default is a generic guess; list the shapes your pods really
// have: on the openb trace the replay in test/replay measured about 15
// points of GPU allocation lost with the built-in mix against the trace's
// own. An empty path returns nil (the default).
func LoadWorkload(path string) (placement.Workload, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload file: %w", err)
	}
	var w placement.Workload
	if err := yaml.UnmarshalStrict(data, &w); err != nil {
		return nil, fmt.Errorf("workload file %s: %w", path, err)
	}
	if len(w) == 0 {
		return nil, fmt.Errorf("workload file %s lists no shapes", path)
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("workload file %s: %w", path, err)
	}
	return w, nil
}
