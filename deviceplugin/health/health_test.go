package health

import (
	"errors"
	"testing"
	"time"

	"github.com/rota-sched/rota/deviceplugin/discovery"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := NewTracker([]string{"a", "b"}, []uint64{13, 43}, time.Minute)
	ok := func(string) error { return nil }
	if _, changed := tr.Observe(discovery.Event{UUID: "a", Kind: discovery.KindXID, XID: 13}, t0); changed {
		t.Fatal("ignored XID 13 changed health")
	}
	c, changed := tr.Observe(discovery.Event{UUID: "a", Kind: discovery.KindXID, XID: 79}, t0)
	if !changed || c.Healthy || c.Reason != "XID 79" {
		t.Fatalf("Observe(XID 79) = %+v %v", c, changed)
	}
	if _, changed := tr.Observe(discovery.Event{UUID: "a", Kind: discovery.KindECC}, t0.Add(30*time.Second)); changed {
		t.Fatal("second fault reported a change")
	}
	// Quiet period restarted at +30 s: not back at +60 s, back at +90 s.
	if cs := tr.Check(t0.Add(60*time.Second), ok); len(cs) != 0 {
		t.Fatalf("Check(+60s) = %+v", cs)
	}
	if cs := tr.Check(t0.Add(90*time.Second), ok); len(cs) != 1 || !cs[0].Healthy {
		t.Fatalf("Check(+90s) = %+v", cs)
	}
	// A failing probe fails a healthy GPU and keeps it down.
	lost := func(u string) error {
		if u == "b" {
			return errors.New("GPU is lost")
		}
		return nil
	}
	if cs := tr.Check(t0.Add(100*time.Second), lost); len(cs) != 1 || cs[0].UUID != "b" || cs[0].Healthy {
		t.Fatalf("Check(lost) = %+v", cs)
	}
	if cs := tr.Check(t0.Add(time.Hour), lost); len(cs) != 0 {
		t.Fatalf("lost GPU came back: %+v", cs)
	}
	if c, ok := tr.Override("b"); !ok || !c.Healthy {
		t.Fatalf("Override = %+v %v", c, ok)
	}
	if _, ok := tr.Override("b"); ok {
		t.Fatal("Override of a healthy GPU reported a change")
	}
	if s := tr.Snapshot(); !s["a"].Healthy || !s["b"].Healthy {
		t.Fatalf("Snapshot = %+v", s)
	}
}
