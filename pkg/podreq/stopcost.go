package podreq

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// StopDurationLimit is the longest checkpoint interval or minimum runtime
// a pod may declare.
const StopDurationLimit = 30 * 24 * time.Hour

// StopFacts reads what a running pod says about stopping it
// (pkg/stopcost): its current run's start, its checkpoint interval or last
// checkpoint, and its own minimum runtime. GPUs is left to the caller (it
// depends on the GPUs the pod holds). A declaration that does not parse
// counts as not made, and is returned in the error (errors.Join of
// FieldErrors) for the caller to report.
func StopFacts(pod *corev1.Pod, names contract.Names) (stopcost.Facts, error) {
	f := stopcost.Facts{Started: RunStarted(pod)}
	var errs []error
	if s, ok := pod.Annotations[names.CheckpointIntervalAnnotation]; ok {
		d, err := stopDuration(names.CheckpointIntervalAnnotation, s, false)
		if err != nil {
			errs = append(errs, err)
		}
		f.Interval = d
	}
	if s, ok := pod.Annotations[names.LastCheckpointAnnotation]; ok {
		field := "metadata.annotations[" + names.LastCheckpointAnnotation + "]"
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
		if len(s) > maxRuntimeChars || err != nil {
			errs = append(errs, &contract.FieldError{Field: field, Value: truncate(s), Problem: "is not an RFC 3339 time",
				Fix: "write the time of the last checkpoint, such as \"2026-12-06T09:30:00Z\""})
		} else {
			f.LastCheckpoint = t
		}
	}
	if s, ok := pod.Annotations[names.MinRuntimeAnnotation]; ok {
		d, err := stopDuration(names.MinRuntimeAnnotation, s, true)
		if err != nil {
			errs = append(errs, err)
		}
		f.MinRuntime = d
	}
	return f, errors.Join(errs...)
}

// CheckpointGrace is the grace period Rota gives a pod it evicts: its
// checkpoint-grace annotation, at most max. ok is false when the pod
// declares none or one that does not parse; then the caller's default
// applies.
func CheckpointGrace(pod *corev1.Pod, names contract.Names, max time.Duration) (time.Duration, bool) {
	s, ok := pod.Annotations[names.CheckpointGraceAnnotation]
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0, false
	}
	return min(d, max), true
}

// Movable reports whether the pod declares that the queue may move it
// (MovableAnnotation "true").
func Movable(pod *corev1.Pod, names contract.Names) bool {
	return strings.TrimSpace(pod.Annotations[names.MovableAnnotation]) == "true"
}

// RunStarted is when the pod's current run began: the latest start of a
// running container (a restart begins a new run), else the pod's start
// time; zero when it has not started.
func RunStarted(pod *corev1.Pod) time.Time {
	var t time.Time
	if pod.Status.StartTime != nil {
		t = pod.Status.StartTime.Time
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil && cs.RestartCount > 0 && r.StartedAt.After(t) {
			t = r.StartedAt.Time
		}
	}
	return t
}

func truncate(s string) string {
	if len(s) > maxRuntimeChars {
		return s[:maxRuntimeChars] + "..."
	}
	return s
}

// stopDuration parses a declared duration from 1s (0s too when zero is
// allowed) to StopDurationLimit; on error it returns 0.
func stopDuration(annotation, s string, zero bool) (time.Duration, error) {
	field := "metadata.annotations[" + annotation + "]"
	bad := func(problem string) error {
		return &contract.FieldError{Field: field, Value: truncate(s), Problem: problem,
			Fix: fmt.Sprintf("write a duration up to %s such as \"20m\"", StopDurationLimit)}
	}
	if len(s) > maxRuntimeChars {
		return 0, bad(fmt.Sprintf("is longer than %d characters", maxRuntimeChars))
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, bad("is not a duration")
	case d < 0 || (d == 0 && !zero):
		return 0, bad("is not positive")
	case d > StopDurationLimit:
		return 0, bad("is longer than 30 days")
	}
	return d, nil
}
