//go:build tools

// Package tools pins Prometheus' promtool, which the chart tests use to unit-test
// the chart's alerting rules (promtool test rules) and to check its rules and
// dashboard queries (promtool check rules); hack/promtool.sh builds it into
// .cache/k8s/bin.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
