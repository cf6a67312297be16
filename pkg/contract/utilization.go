package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// PodUtilization is what the device plugin publishes on a pod in
// GPUUtilizationAnnotation: the SM utilization of the pod's GPUs (the mean
// over its GPUs of its processes' share, averaged over the sampling window)
// in whole percent, and the GPU memory its processes hold. The value reads
// "sm=37,usedMiB=2048".
type PodUtilization struct {
	SMPercent int
	UsedMiB   MiB
}

// String renders the annotation value.
func (u PodUtilization) String() string {
	return fmt.Sprintf("sm=%d,usedMiB=%d", u.SMPercent, int64(u.UsedMiB))
}

// ParsePodUtilization reads a GPUUtilizationAnnotation value. Unknown keys
// are ignored (a later plugin may publish more).
func ParsePodUtilization(s string) (PodUtilization, error) {
	var u PodUtilization
	var sawSM bool
	for f := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return PodUtilization{}, fmt.Errorf("gpu utilization %q: %q is not key=value", s, f)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return PodUtilization{}, fmt.Errorf("gpu utilization %q: %s=%q is not a non-negative integer", s, k, v)
		}
		switch k {
		case "sm":
			if n > 100 {
				return PodUtilization{}, fmt.Errorf("gpu utilization %q: sm=%d is over 100", s, n)
			}
			u.SMPercent, sawSM = int(n), true
		case "usedMiB":
			u.UsedMiB = MiB(n)
		}
	}
	if !sawSM {
		return PodUtilization{}, fmt.Errorf("gpu utilization %q: no sm=", s)
	}
	return u, nil
}
