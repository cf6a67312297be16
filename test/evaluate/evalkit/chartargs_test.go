package evalkit

import (
	"os"
	"strings"
	"testing"
)

// The Rota stack runs the chart's defaults: every flag it adds to the
// harness's is one deploy/rota.yaml (the chart rendered with its defaults)
// gives rota-extender, with the same value.
func TestRotaStackRunsTheChartDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/rota.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart []string
	for _, line := range strings.Split(string(raw), "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "- --"); ok {
			chart = append(chart, "--"+a)
		}
	}
	for _, a := range ChartExtenderArgs {
		found := false
		for _, c := range chart {
			found = found || c == a
		}
		if !found {
			t.Errorf("%s is not among the chart's flags (deploy/rota.yaml)", a)
		}
	}
}
