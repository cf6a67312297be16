//go:build e2e

package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/test/cluster"
)

// alertTests holds the promtool unit tests of the chart's alerts. Each file
// names rules.yaml as its rule file: the test writes the rendered
// PrometheusRule's groups there, beside copies of the files.
const alertTests = "testdata/alerts"

// TestAlertRules renders the chart's PrometheusRule and runs Prometheus' own
// checks on it: promtool check rules (syntax, templates, duplicate rules)
// and promtool test rules with testdata/alerts/*.test.yaml, which feed
// series named and labelled as Rota exports them and say when each alert
// fires and when it stays quiet. Every alert the chart ships must have both
// kinds of case.
func TestAlertRules(t *testing.T) {
	dir := t.TempDir()
	rules := renderedRules(t, []string{"metrics.prometheusRule.enabled=true"})
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(dir, "check", "rules", "--lint-fatal", "rules.yaml"); err != nil {
		t.Fatalf("promtool check rules on the chart's PrometheusRule: %v\n%s\nrules.yaml:\n%s", err, out, rules)
	}

	files, err := filepath.Glob(filepath.Join(alertTests, "*.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no alert tests in %s", alertTests)
	}
	cases := map[string]*alertCases{}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		readAlertTests(t, f, data, cases)
		name := filepath.Base(f)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	out, err := promtool(dir, append([]string{"test", "rules"}, names...)...)
	if err != nil {
		t.Errorf("promtool test rules %s: %v\n%s", strings.Join(names, " "), err, out)
	} else {
		t.Logf("promtool test rules:\n%s", out)
	}

	alerts := alertNames(t, rules)
	if len(alerts) < 11 {
		t.Fatalf("the chart's PrometheusRule has only %d alerts: %v", len(alerts), alerts)
	}
	for _, a := range alerts {
		c := cases[a]
		switch {
		case c == nil:
			t.Errorf("alert %s has no test in %s", a, alertTests)
		case c.fires == 0:
			t.Errorf("alert %s: no test case in %s where it fires", a, alertTests)
		case c.quiet == 0:
			t.Errorf("alert %s: no test case in %s where it stays quiet", a, alertTests)
		}
	}
	for a := range cases {
		if !slices.Contains(alerts, a) {
			t.Errorf("%s tests alert %s, which the chart does not ship", alertTests, a)
		}
	}
}

// alertCases counts one alert's alert_rule_test cases: those that expect it
// to fire and those that expect no alert.
type alertCases struct{ fires, quiet int }

// ruleTestFile is the part of promtool's test file format the coverage check
// reads.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string            `json:"alertname"`
			ExpAlerts []json.RawMessage `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readAlertTests(t *testing.T, path string, data []byte, cases map[string]*alertCases) {
	t.Helper()
	var f ruleTestFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if diff := cmp.Diff([]string{"rules.yaml"}, f.RuleFiles); diff != "" {
		t.Errorf("%s must test the rendered rules, rule_files: [rules.yaml] (-want +got):\n%s", path, diff)
	}
	for _, tc := range f.Tests {
		if tc.Name == "" {
			t.Errorf("%s: a test group without a name", path)
		}
		for _, a := range tc.AlertRuleTest {
			c := cases[a.Alertname]
			if c == nil {
				c = &alertCases{}
				cases[a.Alertname] = c
			}
			if len(a.ExpAlerts) > 0 {
				c.fires++
			} else {
				c.quiet++
			}
		}
	}
}

// promtoolRules is the part of a Prometheus rule file the tests read.
type promtoolRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert,omitempty"`
			Record string `json:"record,omitempty"`
			Expr   string `json:"expr"`
			For    string `json:"for,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

func alertNames(t *testing.T, rules []byte) []string {
	t.Helper()
	var r promtoolRules
	if err := yaml.Unmarshal(rules, &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				names = append(names, rule.Alert)
			}
		}
	}
	sort.Strings(names)
	return names
}

// renderedRules renders the chart with sets and returns its PrometheusRule's
// spec (the rule groups) as a Prometheus rule file.
func renderedRules(t *testing.T, sets []string) []byte {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range decode(t, render(t, sets)) {
		if o.GetKind() == "PrometheusRule" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the chart rendered %d PrometheusRules, want 1", len(found))
	}
	spec, ok, err := unstructured.NestedMap(found[0].Object, "spec")
	if err != nil || !ok {
		t.Fatalf("PrometheusRule %s has no spec (%v)", found[0].GetName(), err)
	}
	out, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The idle-pod alert applies the device plugin's idle test: its threshold
// and duration follow devicePlugin.idleUtilization and idleAfter.
func TestIdleAlertFollowsDevicePlugin(t *testing.T) {
	for _, tc := range []struct {
		sets           []string
		threshold, dur string
	}{
		{sets: nil, threshold: "0.05", dur: "30m"},
		{sets: []string{"devicePlugin.idleUtilization=0.1", "devicePlugin.idleAfter=45m"}, threshold: "0.1", dur: "45m"},
		{sets: []string{"devicePlugin.idleAfter=0"}, threshold: "0.05", dur: "30m"},
	} {
		var r promtoolRules
		if err := yaml.Unmarshal(renderedRules(t, append([]string{"metrics.prometheusRule.enabled=true"}, tc.sets...)), &r); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range r.Groups {
			for _, rule := range g.Rules {
				if rule.Alert == "RotaGPUPodIdle" {
					got = append(got, rule.Expr, rule.For)
				}
			}
		}
		want := []string{"max by (namespace, pod) (rota_device_plugin_pod_gpu_utilization_ratio) < " + tc.threshold, tc.dur}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("RotaGPUPodIdle with %v (-want +got):\n%s", tc.sets, diff)
		}
	}
}

// TestDashboardQueriesParse checks every query of the chart's Grafana
// dashboard, as the chart installs it, with Prometheus' parser: each becomes
// a recording rule that promtool check rules reads. A query that does not
// parse shows as "No data" only when someone looks at the panel.
func TestDashboardQueriesParse(t *testing.T) {
	var dashboard string
	for _, o := range decode(t, render(t, []string{"metrics.dashboard.enabled=true"})) {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard") {
			dashboard, _, _ = unstructured.NestedString(o.Object, "data", "rota.json")
		}
	}
	var d any
	if err := json.Unmarshal([]byte(dashboard), &d); err != nil {
		t.Fatalf("the dashboard ConfigMap's rota.json: %v", err)
	}
	queries := map[string]string{}
	collectExprs(d, "", queries)
	if len(queries) < 20 {
		t.Fatalf("found only %d queries in the dashboard: %v", len(queries), queries)
	}
	if out, err := checkQueries(t, queries); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}

	// The check itself: a query with a typo must be refused.
	out, err := checkQueries(t, map[string]string{"panels.0.targets.0": "sum by (node (rota_extender_gpus_total)"})
	if err == nil || !strings.Contains(string(out), "parse") {
		t.Errorf("promtool check rules accepted a broken query: %v\n%s", err, out)
	}
}

// collectExprs records every "expr" string under v by its JSON path.
func collectExprs(v any, path string, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				out[strings.TrimPrefix(path, ".")] = s
				continue
			}
			collectExprs(x, path+"."+k, out)
		}
	case []any:
		for i, x := range v {
			collectExprs(x, fmt.Sprintf("%s.%d", path, i), out)
		}
	}
}

// grafanaInterval matches the interval variables Grafana fills in before a
// query reaches Prometheus.
var grafanaInterval = regexp.MustCompile(`\$(__rate_interval|__interval|__range|\{__rate_interval\}|\{__interval\}|\{__range\})`)

// checkQueries runs promtool check rules on the queries (by JSON path), each
// as a recording rule named after its path.
func checkQueries(t *testing.T, queries map[string]string) ([]byte, error) {
	t.Helper()
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	type group struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	}
	paths := make([]string, 0, len(queries))
	for p := range queries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	g := group{Name: "dashboard"}
	for _, p := range paths {
		name := "rota_dashboard:" + strings.NewReplacer(".", "_", "-", "_").Replace(p)
		g.Rules = append(g.Rules, rule{Record: name, Expr: grafanaInterval.ReplaceAllString(queries[p], "5m")})
	}
	data, err := yaml.Marshal(map[string][]group{"groups": {g}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := promtool(dir, "check", "rules", "dashboard.yaml")
	if err != nil {
		out = append(out, "\ndashboard.yaml:\n"...)
		out = append(out, data...)
	}
	return out, err
}

// promtool runs the promtool that hack/promtool.sh built (make promtool) in
// dir and returns its output.
func promtool(dir string, args ...string) ([]byte, error) {
	bin, err := cluster.BinDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(bin, "promtool")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("promtool is not built: run make promtool (hack/promtool.sh): %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.Bytes(), err
}
