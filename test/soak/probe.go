package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// proc is one Rota process the soak measures.
type proc struct {
	name string
	pid  int
	// base is the listener serving /debug/pprof/; client reaches it.
	base   string
	client *http.Client
	// role says what the replica does now ("leader" or "standby"); nil
	// for device plugins. A leader holds more (the queue, its informers)
	// than a standby, so leaks are judged within one role.
	role func(context.Context) string
}

// processes lists every running Rota process: both extender replicas, both
// webhook replicas and every device plugin.
func (s *soak) processes() []proc {
	plain := &http.Client{Timeout: 3 * time.Second}
	var out []proc
	for _, r := range s.env.Extenders {
		out = append(out, proc{name: r.Pod, pid: r.PID(), base: r.OpsURL, client: plain, role: func(ctx context.Context) string {
			return roleOf(r.Leading(ctx))
		}})
	}
	for i, w := range s.env.Webhooks {
		out = append(out, proc{name: fmt.Sprintf("rota-admission-%d", i), pid: w.PID(), base: w.URL, client: s.env.WebhookHTTPClient(),
			role: func(ctx context.Context) string { return roleOf(s.env.WebhookReady(ctx, w), nil) }})
	}
	for i := range plugins {
		if n := s.env.GPUNode(evalkit.NodeName(i)); n != nil && n.Plugin != nil {
			out = append(out, proc{name: "rota-device-plugin-" + n.Spec.Name, pid: n.Plugin.PID(), base: n.MetricsURL, client: plain})
		}
	}
	return out
}

// Sample is one measurement of one process.
type Sample struct {
	Process   string
	PID       int
	AtSeconds float64
	// HeapMiB is the live heap right after a collection (HeapAlloc of
	// /debug/pprof/heap?gc=1).
	HeapMiB    float64
	Goroutines int
	FDs        int
	// Role is "leader" or "standby" for the replicated services.
	Role string `json:",omitempty"`
}

func roleOf(leading bool, err error) string {
	switch {
	case err != nil:
		return "unknown"
	case leading:
		return "leader"
	}
	return "standby"
}

var (
	heapAllocRE  = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`)
	goroutinesRE = regexp.MustCompile(`^goroutine profile: total (\d+)`)
)

// sample measures p: its heap after a forced collection, its goroutines
// and its open file descriptors. A paused process answers nothing.
func (s *soak) sample(ctx context.Context, p proc) (Sample, error) {
	sm := Sample{Process: p.name, PID: p.pid, AtSeconds: time.Since(s.start).Seconds()}
	if p.pid == 0 {
		return sm, fmt.Errorf("not running")
	}
	heap, err := fetch(ctx, p.client, p.base+"/debug/pprof/heap?gc=1&debug=1", 1<<24)
	if err != nil {
		return sm, err
	}
	m := heapAllocRE.FindSubmatch(heap)
	if m == nil {
		return sm, fmt.Errorf("no HeapAlloc in the heap profile")
	}
	b, _ := strconv.ParseFloat(string(m[1]), 64)
	sm.HeapMiB = b / (1 << 20)
	gor, err := fetch(ctx, p.client, p.base+"/debug/pprof/goroutine?debug=1", 256)
	if err != nil {
		return sm, err
	}
	if m := goroutinesRE.FindSubmatch(gor); m != nil {
		sm.Goroutines, _ = strconv.Atoi(string(m[1]))
	} else {
		return sm, fmt.Errorf("no goroutine total in the goroutine profile")
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid))
	if err != nil {
		return sm, err
	}
	sm.FDs = len(fds)
	if p.role != nil {
		sm.Role = p.role(ctx)
	}
	return sm, nil
}

// fetch reads up to limit bytes of url.
func fetch(ctx context.Context, c *http.Client, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	if limit <= 256 { // only the first line is wanted
		line, err := bufio.NewReader(io.LimitReader(resp.Body, limit)).ReadString('\n')
		if err != nil && err != io.EOF {
			return nil, err
		}
		return []byte(line), nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}
