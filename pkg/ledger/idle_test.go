package ledger_test

import "testing"

// TestRestoreUpdatesIdle: the device plugin's idle mark comes and goes on a
// pod whose GPUs stay the same; Restore keeps the ledger's copy current.
func TestRestoreUpdatesIdle(t *testing.T) {
	l := newLedger(t, "n1")
	a := share("p", "n1", 0, 1024)
	for _, idle := range []bool{false, true, false} {
		a.Idle = idle
		if err := l.Restore(a); err != nil {
			t.Fatal(err)
		}
		if got, ok := l.Get("p"); !ok || got.Idle != idle {
			t.Errorf("after Restore with Idle %v: Get() = %+v, %v", idle, got, ok)
		}
		if got := l.Snapshot().Node("n1").Allocs["p"]; got == nil || got.Idle != idle {
			t.Errorf("after Restore with Idle %v: snapshot holds %+v", idle, got)
		}
		mustCheck(t, l)
	}
}
