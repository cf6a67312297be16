package remediation

import (
	"testing"
	"time"
)

func TestRecoveryQuietPeriod(t *testing.T) {
	f := newFixture(t, onConfig(), nodeObj("n1"))
	gpu0 := func() bool { return f.led.Snapshot().Node("n1").Node.GPUs[0].Healthy }
	f.ctl.Sync(f.ctx)
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	if gpu0() {
		t.Fatal("unhealthy GPU is placeable")
	}
	f.advance(10 * time.Second)
	f.setNode(nodeObj("n1"))
	f.ctl.Sync(f.ctx)
	if gpu0() {
		t.Errorf("recovered GPU placeable before the quiet period")
	}
	f.advance(time.Minute)
	f.ctl.Sync(f.ctx)
	if !gpu0() {
		t.Errorf("recovered GPU not placeable after the quiet period")
	}
}
