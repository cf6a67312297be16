package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// FuzzMatch drives the matcher like a kubelet would (preferred allocation
// from the devices not in use, then Allocate, falling back to arbitrary free
// devices when there is no preference) over pods built from the input, plus
// one pod carrying an arbitrary annotation. Invariants: no panic; every
// error is ErrNoMatch or ErrAmbiguous; every grant names a pod whose
// assignment owns the devices; no pod gets more grants than containers;
// the same whole GPU is never granted twice.
func FuzzMatch(f *testing.F) {
	f.Add([]byte{0, 1, 0x03, 1, 2, 0x0c, 2, 1, 0x10}, `{"version":"v1","node":"n1","gpus":[{"index":0,"uuid":"GPU-0000","memoryMiB":1024}]}`)
	f.Add([]byte{1, 4, 0x01, 1, 4, 0x01, 0, 1, 0x01}, "")
	f.Add([]byte{0, 2, 0xff, 0, 2, 0xff}, "not json")
	f.Fuzz(func(t *testing.T, data []byte, raw string) {
		m := NewMatcher(node, names, 1024)
		ctx := context.Background()
		type want struct {
			kind  Kind
			n     int
			owned []string
		}
		pods := map[string]want{}
		var order []string
		for i := 0; i+2 < len(data) && i < 30; i += 3 {
			kind := Kind(data[i] % 2)
			n := int(data[i+1]%4) + 1
			var idx []int
			for g := range 8 {
				if data[i+2]&(1<<g) != 0 {
					idx = append(idx, g)
				}
			}
			if len(idx) == 0 {
				idx = []int{0}
			}
			name := fmt.Sprintf("p%d", i)
			var opts []podOpt
			if kind == KindGPU {
				opts = []podOpt{container(names.GPU, int64(n), false), assigned(true, 81920, idx...)}
				var owned []string
				for _, g := range idx {
					owned = append(owned, uuid(g))
				}
				pods["ns/"+name] = want{kind, n, owned}
			} else {
				opts = []podOpt{container(names.GPUMemory, int64(n), false), assigned(false, contract1024(n), idx[0])}
				pods["ns/"+name] = want{kind, n, []string{uuid(idx[0])}}
			}
			m.Upsert(pod(name, i, opts...))
			order = append(order, name)
		}
		rawPod := pod("raw", 99, container(names.GPU, 1, false))
		rawPod.Annotations[names.AssignmentAnnotation] = raw
		m.Upsert(rawPod)
		rawPod2 := rawPod.DeepCopy()
		rawPod2.ObjectMeta = metav1.ObjectMeta{Name: "raw2", Namespace: "ns", UID: "uid-raw2", Annotations: rawPod.Annotations}
		rawPod2.Spec.Containers[0].Name = "c0"
		rawPod2.Status.Phase = corev1.PodPending
		m.Upsert(rawPod2)

		inUse := map[Kind]map[string]bool{KindGPU: {}, KindMemory: {}}
		all := map[Kind][]string{}
		for g := range 8 {
			all[KindGPU] = append(all[KindGPU], uuid(g))
			for u := range 4 {
				all[KindMemory] = append(all[KindMemory], MemoryDeviceID(uuid(g), u))
			}
		}
		grants := map[string]int{}
		for _, name := range append(order, "raw") {
			w, ok := pods["ns/"+name]
			if !ok {
				w = want{kind: KindGPU, n: 1}
			}
			var avail []string
			for _, id := range all[w.kind] {
				if !inUse[w.kind][id] {
					avail = append(avail, id)
				}
			}
			if len(avail) < w.n {
				continue
			}
			pref, err := m.Preferred(ctx, w.kind, avail, nil, w.n, time.Nanosecond)
			ids := pref.IDs
			if err != nil && !errors.Is(err, ErrNoMatch) {
				t.Fatalf("Preferred error %v is neither ErrNoMatch nor ErrAmbiguous", err)
			}
			if len(ids) != w.n {
				ids = avail[:w.n] // the kubelet's fallback
			}
			g, err := m.Allocate(ctx, w.kind, ids, time.Nanosecond)
			if err != nil {
				if !errors.Is(err, ErrNoMatch) && !errors.Is(err, ErrAmbiguous) {
					t.Fatalf("Allocate error %v is neither ErrNoMatch nor ErrAmbiguous", err)
				}
				continue
			}
			gw, ok := pods[g.Pod]
			if !ok && g.Pod != "ns/raw" && g.Pod != "ns/raw2" {
				t.Fatalf("grant for unknown pod %s", g.Pod)
			}
			grants[g.Pod]++
			if ok && grants[g.Pod] > 1 {
				t.Fatalf("pod %s granted twice", g.Pod)
			}
			if ok {
				for _, u := range g.UUIDs {
					if !slices.Contains(gw.owned, u) {
						t.Fatalf("pod %s granted %s outside its assignment %v", g.Pod, u, gw.owned)
					}
				}
			}
			for _, id := range ids {
				if inUse[w.kind][id] {
					t.Fatalf("device %s granted twice", id)
				}
				inUse[w.kind][id] = true
			}
		}
	})
}

func contract1024(n int) contract.MiB { return contract.MiB(n) * 1024 }
