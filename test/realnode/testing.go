package realnode

import (
	"context"
	"os"
	"testing"
	"time"
)

// StartT starts an Env for test t and stops it in t.Cleanup, failing the
// test when it does not start (never skipping: a missing host package is a
// failure naming hack/realnode-deps.sh) or when Stop leaves a host change
// behind. When the test fails the folder is kept and the end of every log
// printed. ROTA_KEEP_CLUSTER=1 keeps the folder always.
func StartT(t testing.TB, opts Options) *Env {
	t.Helper()
	if os.Getenv("ROTA_KEEP_CLUSTER") == "1" {
		opts.KeepDir = true
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	e, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the real node: %v", err)
	}
	t.Logf("real node %s ready in %s (folder %s)", e.NodeName, time.Since(began).Round(time.Millisecond), e.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			e.opts.KeepDir = true
			t.Log(e.LogTails(40))
		}
		began := time.Now()
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the real node: %v", err)
		}
		t.Logf("real node stopped and host reverted in %s", time.Since(began).Round(time.Millisecond))
		if e.opts.KeepDir {
			t.Logf("real node folder kept: %s", e.Dir)
		}
	})
	return e
}
