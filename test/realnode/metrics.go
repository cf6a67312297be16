package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// PluginMetric returns the sum of the device plugin's series of metric name
// whose labels contain every one of labels (e.g. `result="ok"`), 0 when it
// has none yet.
func (e *Env) PluginMetric(ctx context.Context, name string, labels ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.PluginMetricsURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", e.PluginMetricsURL, resp.Status)
	}
	var sum float64
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // a longer name with this prefix
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(rest, l)
		}
		if !matches {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, s.Err()
}
