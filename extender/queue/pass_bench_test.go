package queue

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rota-sched/rota/pkg/quota"
)

// BenchmarkPass10kQueued is one queue pass as rota-extender runs it every
// second with a deep queue: 10,000 queued pods of team vision, whose quota
// 6,000 running pods use up, so each pass reads every pod, orders the
// queue, admits nothing and reports every position (the conditions' writes
// are rate-limited to the first pass's burst).
func BenchmarkPass10kQueued(b *testing.B) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 6000}}}
	var objs []runtime.Object
	for i := range 6000 {
		p := gpuPod(fmt.Sprintf("run-%05d", i), 1, 2*time.Hour, false)
		p.Spec.NodeName, p.ResourceVersion = "n1", "1"
		objs = append(objs, p)
	}
	for i := range 10000 {
		p := gpuPod(fmt.Sprintf("q-%05d", i), 1, time.Duration(i)*time.Second, true)
		p.ResourceVersion = "1" // as informers give them: the pass's parse cache keys on it
		objs = append(objs, p)
	}
	c, _ := start(b, cfg, &fakeRoom{}, objs...)
	c.Pass(b.Context())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.Pass(b.Context())
	}
}
