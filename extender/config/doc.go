// Package config holds rota-extender's configuration: the Config struct with
// Default and Validate, and SchedulerConfig, which renders the
// KubeSchedulerConfiguration that wires kube-scheduler to the extender.
//
// Precedence is flags > defaults: main binds flags onto a Default() Config
// and validates it once. The package reads no files, environment or flags
// and logs nothing. All types are plain values, safe to copy.
package config
