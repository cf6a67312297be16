package remediation

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkSync5kNodes is one remediation pass (every --remediation-interval,
// default 1s) over 5,000 healthy nodes of 4 GPUs: it reads each node's
// Ready condition and Lease and the GPU health the state cache parsed from
// its topology annotation.
func BenchmarkSync5kNodes(b *testing.B) {
	objs := make([]runtime.Object, 0, 5000)
	for i := range 5000 {
		objs = append(objs, nodeObj(fmt.Sprintf("node-%05d", i)))
	}
	f := newFixture(b, Default(), objs...)
	f.ctl.Sync(f.ctx)
	b.ReportAllocs()
	for b.Loop() {
		f.ctl.Sync(f.ctx)
	}
}
