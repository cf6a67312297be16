package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// StartT starts a cluster for test t and stops it in t.Cleanup. It fails the
// test (t.Fatal) when the cluster does not start, including when the binaries
// are missing. When the test fails, the folder is kept and the end of each
// log is printed, so the failure can be read next to what the API server and
// scheduler saw. Set ROTA_KEEP_CLUSTER=1 to keep the folder always.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if os.Getenv("ROTA_KEEP_CLUSTER") == "1" {
		opts.KeepDir = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Logf("control plane ready in %s (folder %s)", time.Since(began).Round(time.Millisecond), c.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			c.removeDir = false
			t.Log(c.logTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
		if !c.removeDir {
			t.Logf("control plane folder kept: %s", c.Dir)
		}
	})
	return c
}

func (c *Cluster) logTails(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s string
	for _, p := range []*Process{c.etcd, c.apiServer, c.scheduler, c.controllerManager} {
		if p != nil {
			s += fmt.Sprintf("\n%s", p.LogTail(n))
		}
	}
	return s
}
