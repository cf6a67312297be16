package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Samples is one scrape of a Prometheus text endpoint: each sample line's
// name with its labels as written (`rota_extender_allocations{state="reserved"}`)
// to its value.
type Samples map[string]float64

// Sum adds the samples whose name, before any label, is name.
func (m Samples) Sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// ExtenderMetrics scrapes rota-extender's /metrics.
func (e *Env) ExtenderMetrics(ctx context.Context) (Samples, error) {
	return Scrape(ctx, e.ExtenderURL+"/metrics")
}

// Scrape reads a Prometheus text endpoint (bounded to 5 s).
func Scrape(ctx context.Context, url string) (Samples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseSamples(resp.Body)
}

// ParseSamples reads the Prometheus text format.
func ParseSamples(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
