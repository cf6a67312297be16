package podreq

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzValidateQuantity feeds Validate a fuzzed quantity string as the GPU
// or memory limit. Validate never panics; every violation names a field and
// says something; a pod without violations yields a request FromPod agrees
// with, whose amounts are small non-negative whole numbers.
func FuzzValidateQuantity(f *testing.F) {
	for _, s := range []string{"1", "20", "20Gi", "20G", "0.5", "-4", "1e3", "500m", "9223372036854775807", "1E18", "1Ei", "0"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, isMem bool) {
		// resource.ParseQuantity itself hangs on huge negative exponents
		// ("9E-23372036854775807"); the API server parses pods before Rota
		// sees them, so such strings never reach Validate.
		if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-")) > 3 {
			return
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return
		}
		name := gpuName
		if isMem {
			name = memName
		}
		c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{name: q}, Requests: corev1.ResourceList{name: q}}}
		p := pod(c)
		o := Options{Names: names, MaxGPUs: 8, MaxGPUMemoryMiB: 80 * 1024}
		vs := Validate(p, o)
		for _, v := range vs {
			if v.Field == "" || v.Message == "" || !strings.HasPrefix(v.Error(), v.Field+": ") {
				t.Fatalf("violation %+v lacks a field or a message", v)
			}
		}
		r, err := FromPod(p, o)
		if (err == nil) != (len(vs) == 0) {
			t.Fatalf("FromPod error %v, Validate %v", err, vs)
		}
		if err != nil {
			return
		}
		if r.GPUs < 0 || r.GPUs > 8 || r.MemoryUnits < 0 || r.MemoryUnits > 80 || (r.GPUs > 0 && r.MemoryUnits > 0) {
			t.Fatalf("accepted %q as %+v", s, r)
		}
		if v := q.Value(); (isMem && r.MemoryUnits != v) || (!isMem && int64(r.GPUs) != v) {
			t.Fatalf("accepted %q but the request is %+v", s, r)
		}
	})
}
