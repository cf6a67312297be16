package podreq

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// Bounds of the queue's pod annotations.
const (
	// MaxGPUModels is the most GPU models one pod may list.
	MaxGPUModels = 32
	// MaxGPUModelLen bounds one model name (the quota configuration's bound).
	MaxGPUModelLen = 253
	// MaxRuntimeLimit is the longest max-runtime a pod may declare.
	MaxRuntimeLimit = 365 * 24 * time.Hour
	// maxRuntimeChars bounds the max-runtime annotation before it is parsed.
	maxRuntimeChars = 64
)

const modelsExample = `"NVIDIA H100 80GB HBM3,NVIDIA A100-SXM4-80GB"`

// GPUModels reads the pod's GPU models annotation: the models it may run
// on, in the pod's order of preference, each trimmed, duplicates dropped.
// Nil means any model (no annotation, or one that is blank). An empty entry
// ("A,,B"), a name with control characters or longer than MaxGPUModelLen,
// and more than MaxGPUModels distinct names are errors
// (*contract.FieldError naming the annotation).
func GPUModels(pod *corev1.Pod, names contract.Names) ([]string, error) {
	s, ok := pod.Annotations[names.GPUModelsAnnotation]
	if !ok || strings.TrimSpace(s) == "" {
		return nil, nil
	}
	field := "metadata.annotations[" + names.GPUModelsAnnotation + "]"
	shown := s
	if len(shown) > 200 {
		shown = shown[:200] + "..."
	}
	bad := func(problem, fix string) error {
		return &contract.FieldError{Field: field, Value: shown, Problem: problem, Fix: fix}
	}
	if !utf8.ValidString(s) {
		return nil, bad("is not valid UTF-8", "write model names as the device plugin reports them, separated by commas, e.g. "+modelsExample)
	}
	// Bound the work before splitting: a 256 KiB annotation of commas is
	// refused without allocating a slice per entry.
	if n := strings.Count(s, ",") + 1; n > 4*MaxGPUModels {
		return nil, bad(fmt.Sprintf("lists %d entries", n), fmt.Sprintf("list at most %d GPU models", MaxGPUModels))
	}
	var out []string
	i := 0
	for entry := range strings.SplitSeq(s, ",") {
		i++
		m := strings.TrimSpace(entry)
		switch {
		case m == "":
			return nil, bad(fmt.Sprintf("has an empty model name at position %d", i),
				"write model names separated by single commas, e.g. "+modelsExample+", or remove the annotation to accept any model")
		case len(m) > MaxGPUModelLen:
			return nil, bad(fmt.Sprintf("has a model name of %d bytes at position %d", len(m), i),
				fmt.Sprintf("a model name has at most %d bytes; write it as the device plugin reports it", MaxGPUModelLen))
		case strings.ContainsFunc(m, unicode.IsControl):
			return nil, bad(fmt.Sprintf("has a control character in the model name at position %d", i),
				"write model names as the device plugin reports them, e.g. "+modelsExample)
		}
		dup := false
		for _, o := range out {
			if o == m {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, m)
		}
	}
	if len(out) > MaxGPUModels {
		return nil, bad(fmt.Sprintf("lists %d GPU models", len(out)), fmt.Sprintf("list at most %d", MaxGPUModels))
	}
	return out, nil
}

// MaxRuntime is the longest the pod says it runs: the max-runtime
// annotation (a Go duration such as "90m"), else the pod's own
// spec.activeDeadlineSeconds; when both are set, the shorter (the pod is
// stopped at whichever comes first). ok is false when the pod declares
// neither. The annotation must be a whole number of seconds from 1s to
// MaxRuntimeLimit; activeDeadlineSeconds must be positive and at most
// math.MaxInt32 (the API server's own bound). Errors are
// *contract.FieldError.
func MaxRuntime(pod *corev1.Pod, names contract.Names) (d time.Duration, ok bool, err error) {
	var ads time.Duration
	if p := pod.Spec.ActiveDeadlineSeconds; p != nil {
		if *p <= 0 || *p > math.MaxInt32 {
			return 0, false, &contract.FieldError{Field: "spec.activeDeadlineSeconds", Value: strconv.FormatInt(*p, 10),
				Problem: "is out of range", Fix: fmt.Sprintf("write a whole number of seconds from 1 to %d", math.MaxInt32)}
		}
		ads = time.Duration(*p) * time.Second
	}
	s, has := pod.Annotations[names.MaxRuntimeAnnotation]
	if !has {
		return ads, ads > 0, nil
	}
	field := "metadata.annotations[" + names.MaxRuntimeAnnotation + "]"
	bad := func(v, problem string) error {
		return &contract.FieldError{Field: field, Value: v, Problem: problem,
			Fix: fmt.Sprintf("write a duration from 1s to %s such as \"90m\" or \"12h\"", MaxRuntimeLimit)}
	}
	if len(s) > maxRuntimeChars {
		return 0, false, bad(s[:maxRuntimeChars]+"...", fmt.Sprintf("is longer than %d characters", maxRuntimeChars))
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, false, bad(s, "is empty")
	}
	d, perr := time.ParseDuration(t)
	switch {
	case perr != nil:
		return 0, false, bad(s, "is not a duration")
	case d <= 0:
		return 0, false, bad(s, "is not positive")
	case d > MaxRuntimeLimit:
		return 0, false, bad(s, "is longer than a year; leave the annotation out if the pod has no time limit")
	case d%time.Second != 0:
		return 0, false, &contract.FieldError{Field: field, Value: s, Problem: "is not a whole number of seconds",
			Fix: fmt.Sprintf("write whole seconds, e.g. %q (Kubernetes counts activeDeadlineSeconds in seconds)", (d.Truncate(time.Second) + time.Second).String())}
	}
	if ads > 0 && ads < d {
		d = ads
	}
	return d, true, nil
}

// Deadline is the time the pod says it must end by (DeadlineAnnotation,
// RFC 3339); ok is false when it declares none. Errors are
// *contract.FieldError.
func Deadline(pod *corev1.Pod, names contract.Names) (t time.Time, ok bool, err error) {
	s, has := pod.Annotations[names.DeadlineAnnotation]
	if !has {
		return time.Time{}, false, nil
	}
	field := "metadata.annotations[" + names.DeadlineAnnotation + "]"
	t, perr := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if len(s) > maxRuntimeChars || perr != nil {
		v := s
		if len(v) > maxRuntimeChars {
			v = v[:maxRuntimeChars] + "..."
		}
		return time.Time{}, false, &contract.FieldError{Field: field, Value: v, Problem: "is not an RFC 3339 time",
			Fix: "write the time the pod must end by, such as \"2026-12-06T18:00:00Z\""}
	}
	return t, true, nil
}

// LatestStart is the latest the pod may start to end by its deadline: the
// deadline less its declared maximum runtime (MaxRuntime), or the deadline
// itself when it declares none; zero without a readable deadline.
func LatestStart(pod *corev1.Pod, names contract.Names) time.Time {
	d, ok, err := Deadline(pod, names)
	if err != nil || !ok {
		return time.Time{}
	}
	if r, ok, err := MaxRuntime(pod, names); err == nil && ok {
		return d.Add(-r)
	}
	return d
}
