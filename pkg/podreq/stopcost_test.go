package podreq

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestStopFacts(t *testing.T) {
	n := contract.Default
	start := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	pod := func(ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann},
			Status: corev1.PodStatus{StartTime: &metav1.Time{Time: start}}}
	}
	f, err := StopFacts(pod(map[string]string{n.CheckpointIntervalAnnotation: "20m", n.LastCheckpointAnnotation: "2026-12-06T09:00:00Z",
		n.MinRuntimeAnnotation: "15m"}), n)
	if err != nil || f.Interval != 20*time.Minute || !f.LastCheckpoint.Equal(start.Add(time.Hour)) || f.MinRuntime != 15*time.Minute || !f.Started.Equal(start) {
		t.Fatalf("StopFacts = %+v, %v", f, err)
	}
	for _, bad := range []map[string]string{
		{n.CheckpointIntervalAnnotation: "soon"},
		{n.CheckpointIntervalAnnotation: "0s"},
		{n.CheckpointIntervalAnnotation: "-5m"},
		{n.CheckpointIntervalAnnotation: "9999h"},
		{n.LastCheckpointAnnotation: "yesterday"},
		{n.MinRuntimeAnnotation: "-1s"},
		{n.MinRuntimeAnnotation: string(make([]byte, 100))},
	} {
		f, err := StopFacts(pod(bad), n)
		var fe *contract.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v: err %v, want a FieldError", bad, err)
		}
		if f.Interval != 0 || !f.LastCheckpoint.IsZero() || f.MinRuntime != 0 {
			t.Errorf("%v: a bad declaration counted: %+v", bad, f)
		}
	}
	if f, err := StopFacts(pod(map[string]string{n.MinRuntimeAnnotation: "0s"}), n); err != nil || f.MinRuntime != 0 {
		t.Errorf("a zero minimum runtime: %+v, %v", f, err)
	}
}

// A container restart begins a new run: work before it is already lost.
func TestRunStarted(t *testing.T) {
	start := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	p := &corev1.Pod{Status: corev1.PodStatus{StartTime: &metav1.Time{Time: start}, ContainerStatuses: []corev1.ContainerStatus{
		{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: start.Add(time.Hour)}}}},
	}}}
	if got := RunStarted(p); !got.Equal(start.Add(time.Hour)) {
		t.Errorf("RunStarted = %v, want the restart", got)
	}
	p.Status.ContainerStatuses[0].RestartCount = 0
	if got := RunStarted(p); !got.Equal(start) {
		t.Errorf("RunStarted = %v, want the pod's start", got)
	}
	if got := RunStarted(&corev1.Pod{}); !got.IsZero() {
		t.Errorf("not started: %v", got)
	}
}

func FuzzStopFacts(f *testing.F) {
	n := contract.Default
	f.Add("20m", "2026-12-06T09:00:00Z", "1h")
	f.Add("", "", "")
	f.Add("-1s", "not a time", "99999999h")
	f.Fuzz(func(t *testing.T, interval, last, minRun string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			n.CheckpointIntervalAnnotation: interval, n.LastCheckpointAnnotation: last, n.MinRuntimeAnnotation: minRun}}}
		got, err := StopFacts(p, n)
		if got.Interval < 0 || got.Interval > StopDurationLimit || got.MinRuntime < 0 || got.MinRuntime > StopDurationLimit {
			t.Fatalf("out of bounds: %+v", got)
		}
		if err != nil {
			var fe *contract.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FieldError", err)
			}
		}
	})
}

func TestCheckpointGraceAndMovable(t *testing.T) {
	names := contract.Default
	for _, c := range []struct {
		ann  map[string]string
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{map[string]string{names.CheckpointGraceAnnotation: "2m"}, 2 * time.Minute, true},
		{map[string]string{names.CheckpointGraceAnnotation: " 90s "}, 90 * time.Second, true},
		{map[string]string{names.CheckpointGraceAnnotation: "2h"}, 10 * time.Minute, true}, // capped
		{map[string]string{names.CheckpointGraceAnnotation: "0s"}, 0, true},
		{map[string]string{names.CheckpointGraceAnnotation: "-1m"}, 0, false},
		{map[string]string{names.CheckpointGraceAnnotation: "soon"}, 0, false},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: c.ann}}
		if got, ok := CheckpointGrace(p, names, 10*time.Minute); got != c.want || ok != c.ok {
			t.Errorf("%v: %v, %v; want %v, %v", c.ann, got, ok, c.want, c.ok)
		}
	}
	for v, want := range map[string]bool{"true": true, " true": true, "false": false, "yes": false, "": false} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{names.MovableAnnotation: v}}}
		if Movable(p, names) != want {
			t.Errorf("movable %q: %v, want %v", v, !want, want)
		}
	}
}
