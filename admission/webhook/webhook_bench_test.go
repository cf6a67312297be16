package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// BenchmarkAdmit measures one CREATE review end to end (decode, validate,
// quota decision, reservation, encode) with pods existing pods in 100
// namespaces of 50 teams, a third of them members of 100-pod gangs. It reports the
// median and p99 latency of single calls besides the mean.
func BenchmarkAdmit(b *testing.B) {
	for _, pods := range []int{10_000} {
		v := view.New(view.Options{Names: contract.Default})
		cfg := quota.Config{Teams: map[string]quota.Team{}, SharedPool: quota.Limits{GPUs: 1000}}
		for i := range 50 {
			cfg.Teams[fmt.Sprintf("team-%d", i)] = quota.Team{GPUs: 1 << 20, GPUMemoryGiB: 1 << 20, Borrow: quota.Limits{GPUs: 10}}
		}
		v.SetConfig(cfg)
		for i := range 100 {
			v.UpsertNamespace(at.Namespace(fmt.Sprintf("ns-%d", i), fmt.Sprintf("team-%d", i%50)))
		}
		for i := range 625 {
			_ = v.UpsertNode(at.Node(fmt.Sprintf("n%d", i), 8, 81920))
		}
		for i := range pods {
			p := at.Pod(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("p-%d", i)).GPUs(1 + i%8)
			if i%3 == 0 {
				p = at.Pod(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("p-%d", i)).GPUs(2).Gang(fmt.Sprintf("g-%d", i/300), "100")
			}
			if i%2 == 0 {
				p = p.Node("n1").Phase(corev1.PodRunning)
			}
			v.UpsertPod(p.Obj())
		}
		h := New(Options{Names: contract.Default, View: v})
		// 1,000 distinct pod names, reused: each create of a name replaces
		// the earlier reservation, so the view stays the same size.
		bodies := make([][]byte, 1000)
		gatedBodies := make([][]byte, 1000)
		for i := range bodies {
			bodies[i] = at.Review(admissionv1.Create, at.Pod(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("new-%d", i)).GPUs(1).Obj(), nil)
			gatedBodies[i] = at.Review(admissionv1.Create, at.Pod(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("queued-%d", i)).GPUs(1).Gated().Obj(), nil)
		}
		// A queued pod: the checks of what can never run and the queued-pod
		// cap, no quota decision.
		b.Run(fmt.Sprintf("queued/pods=%d", pods), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(gatedBodies[i%len(gatedBodies)])))
				if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
					b.Fatalf("not queued: %d %s", rec.Code, rec.Body)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			b.ReportAllocs()
			lat := make([]time.Duration, 0, 1<<16)
			i := 0
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(bodies[i%len(bodies)]))
				start := time.Now()
				h.ServeHTTP(rec, req)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
				if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
					b.Fatalf("not admitted: %d %s", rec.Code, rec.Body)
				}
				i++
			}
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			}
		})
	}
}

// BenchmarkNoGPU is the fast path for pods that ask for no Rota resource.
func BenchmarkNoGPU(b *testing.B) {
	h := New(Options{Names: contract.Default, View: view.New(view.Options{Names: contract.Default})})
	body := at.Review(admissionv1.Create, at.Pod("ns", "web").Obj(), nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
	}
}
