package quota

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// ParseYAML reads the quota document as an admin writes it in the quota
// ConfigMap: YAML or JSON, strict (duplicate keys and unknown fields are
// errors), then Parse. An empty document is an empty configuration. The
// webhook and kubectl-rota both read quota through it, so they agree.
func ParseYAML(data []byte) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, fmt.Errorf("quota document is %d bytes, more than %d", len(data), MaxConfigBytes)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Config{}, fmt.Errorf("quota document is not valid YAML: %w", err)
	}
	if string(js) == "null" { // an empty document
		js = []byte("{}")
	}
	return Parse(js)
}
