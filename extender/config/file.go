package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// FileAPIVersion and FileKind head a rota-extender configuration file.
const (
	FileAPIVersion = "rota.config/v1alpha1"
	FileKind       = "ExtenderConfiguration"
)

// File is rota-extender's configuration file (--config): the flags, by
// their names without the dashes, under one versioned header. Every value
// is read by its flag's own parser, so a file and a command line mean the
// same; flags given on the command line override the file.
//
//	apiVersion: rota.config/v1alpha1
//	kind: ExtenderConfiguration
//	flags:
//	  queue: true
//	  bind-ttl: 30s
//	  tier-labels: [example.com/leaf, topology.kubernetes.io/zone]
type File struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Flags      map[string]json.RawMessage `json:"flags"`
}

// ApplyFile reads the configuration file at path and sets each flag it
// names on fs. An unknown field, flag or version, a value its flag does not
// take, or a flag that names another file (config) is an error naming it;
// nothing is half applied.
func ApplyFile(fs *flag.FlagSet, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if f.APIVersion != FileAPIVersion || f.Kind != FileKind {
		return fmt.Errorf("config file %s: apiVersion %q, kind %q; want %s, %s", path, f.APIVersion, f.Kind, FileAPIVersion, FileKind)
	}
	names := make([]string, 0, len(f.Flags))
	values := map[string]string{}
	var errs []error
	for name, v := range f.Flags {
		names = append(names, name)
		if name == "config" || fs.Lookup(name) == nil {
			errs = append(errs, fmt.Errorf("flags.%s: no such flag", name))
			continue
		}
		s, err := scalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("flags.%s: %w", name, err))
			continue
		}
		values[name] = s
	}
	if len(errs) > 0 {
		return fmt.Errorf("config file %s:\n%w", path, errors.Join(errs...))
	}
	slices.Sort(names) // the same order every time
	old := map[string]string{}
	for _, name := range names {
		old[name] = fs.Lookup(name).Value.String()
	}
	for i, name := range names {
		if err := fs.Set(name, values[name]); err != nil {
			for _, set := range names[:i+1] { // put back what the file set (a flag may keep half a value)
				_ = fs.Set(set, old[set])
			}
			return fmt.Errorf("config file %s: flags.%s: %w", path, name, err)
		}
	}
	return nil
}

// scalar turns a field's value into its command-line form: a string, a
// number or a boolean as written, a list of them joined by commas.
func scalar(v json.RawMessage) (string, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err == nil {
		parts := make([]string, len(list))
		for i, item := range list {
			s, err := one(item)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return one(v)
}

func one(v json.RawMessage) (string, error) {
	if string(bytes.TrimSpace(v)) == "null" {
		return "", errors.New("has no value")
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err == nil {
		return strconv.FormatBool(b), nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&n); err == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf("%s is not a string, number, boolean or list of them", v)
}

// ConfigArg finds --config (or -config) in args, as flag would parse it.
func ConfigArg(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ""
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
