package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fakeKubelet is a PodResources lister: the pods the kubelet lists (its pod
// manager's active pods) and the devices their containers hold.
type fakeKubelet struct {
	pods  []PodDevices
	err   error
	calls atomic.Int32
	// during runs inside List, to check the matcher's lock is not held.
	during func()
}

func (f *fakeKubelet) list(context.Context) ([]PodDevices, error) {
	f.calls.Add(1)
	if f.during != nil {
		f.during()
	}
	return f.pods, f.err
}

// listed is a pod as PodResources shows it; devs maps container to the
// devices of res it holds (none: the container is listed without devices).
func listed(name string, res string, devs map[string][]string) PodDevices {
	p := PodDevices{Namespace: "ns", Name: name, Containers: map[string]map[string][]string{"c0": {}}}
	for c, ids := range devs {
		p.Containers[c] = map[string][]string{res: ids}
	}
	return p
}

// sameShape returns a matcher with two pending 48-unit memory shares on
// GPUs 0 (a, bound first) and 1 (b): nothing in a request tells them apart.
func sameShape(t *testing.T, k *fakeKubelet) *Matcher {
	t.Helper()
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("a", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 0)))
	m.Upsert(pod("b", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 1)))
	if k != nil {
		m.SetPodLister(k.list)
	}
	return m
}

func units(gpu, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = MemoryDeviceID(uuid(gpu), i)
	}
	return out
}

func availBoth() []string { return append(units(0, 80), units(1, 80)...) }

func TestPodResourcesPicksThePodBeingAdmitted(t *testing.T) {
	ctx := context.Background()
	// The kubelet admits b first (same creation second, random tie order):
	// b is in its pod manager, a not yet.
	k := &fakeKubelet{pods: []PodDevices{listed("b", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	pref, err := m.Preferred(ctx, KindMemory, availBoth(), nil, 48, time.Millisecond)
	if err != nil || pref.Pod != "ns/b" || !pref.Admitting || !slices.Equal(pref.NotAdmitting, []string{"ns/a"}) {
		t.Fatalf("Preferred = %+v, %v; want pod ns/b by PodResources", pref, err)
	}
	if !slices.Equal(pref.IDs, units(1, 48)) {
		t.Fatalf("Preferred IDs = %v, want b's GPU units", pref.IDs)
	}
	g, err := m.Allocate(ctx, KindMemory, pref.IDs, time.Millisecond)
	if err != nil || g.Pod != "ns/b" || !g.Admitting || g.UUIDs[0] != uuid(1) {
		t.Fatalf("Allocate = %+v, %v", g, err)
	}
	// Then a: the kubelet lists both, b's container holding its units.
	k.pods = []PodDevices{listed("b", names.GPUMemory, map[string][]string{"c0": units(1, 48)}), listed("a", names.GPUMemory, nil)}
	avail := append(units(0, 80), MemoryDeviceID(uuid(1), 79))
	pref, err = m.Preferred(ctx, KindMemory, avail, nil, 48, time.Millisecond)
	if err != nil || pref.Pod != "ns/a" {
		t.Fatalf("second Preferred = %+v, %v", pref, err)
	}
	if g, err := m.Allocate(ctx, KindMemory, pref.IDs, time.Millisecond); err != nil || g.Pod != "ns/a" || !g.Admitting || len(g.NotAdmitting) != 0 {
		t.Fatalf("second Allocate = %+v, %v", g, err)
	}
	if got := k.calls.Load(); got != 4 {
		t.Errorf("List called %d times for 2 pods, want 4 (once per call)", got)
	}
}

func TestPodResourcesSingleKnownCandidate(t *testing.T) {
	// The informer has delivered b but not yet c; the kubelet admits c
	// (same shape). Steering to b's devices would hand c b's GPU: wait for c.
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("b", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 1)))
	m.SetPodLister((&fakeKubelet{pods: []PodDevices{listed("c", names.GPUMemory, nil)}}).list)
	go func() {
		time.Sleep(20 * time.Millisecond)
		m.Upsert(pod("c", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 2)))
	}()
	avail := append(availBoth(), units(2, 80)...)
	pref, err := m.Preferred(context.Background(), KindMemory, avail, nil, 48, 5*time.Second)
	if err != nil || pref.Pod != "ns/c" || !slices.Equal(pref.NotAdmitting, []string{"ns/b"}) {
		t.Fatalf("Preferred = %+v, %v; want ns/c", pref, err)
	}
	// A pod without an assignment (not scheduled by Rota) being admitted
	// never gets b's devices.
	m = NewMatcher(node, names, 1024)
	m.Upsert(pod("b", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 1)))
	m.Upsert(pod("foreign", 1, container(names.GPUMemory, 48, false)))
	m.SetPodLister((&fakeKubelet{pods: []PodDevices{listed("foreign", names.GPUMemory, nil)}}).list)
	if _, err := m.Allocate(context.Background(), KindMemory, units(1, 48), time.Millisecond); !errors.Is(err, ErrNoMatch) ||
		!strings.Contains(err.Error(), "lists none of them as being admitted") {
		t.Fatalf("Allocate for a foreign pod: %v", err)
	}
}

func TestPodResourcesRefusesAnotherPodsDevices(t *testing.T) {
	// The kubelet admits b but chose a's devices (it did not follow the
	// preferred allocation): refused, never handed to b.
	k := &fakeKubelet{pods: []PodDevices{listed("b", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	_, err := m.Allocate(context.Background(), KindMemory, units(0, 48), time.Millisecond)
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "the kubelet is admitting ns/b") ||
		!strings.Contains(err.Error(), "belong to the assignment of ns/a") {
		t.Fatalf("Allocate(a's devices while admitting b) error = %v", err)
	}
	if m.Allocated("uid-a", KindMemory) != 0 || m.Allocated("uid-b", KindMemory) != 0 {
		t.Fatal("a refused Allocate marked a container allocated")
	}
}

func TestPodResourcesPreferredFailsWhenAdmittedPodsDevicesAreGone(t *testing.T) {
	// b is admitted but the kubelet does not offer its GPU (its checkpoint
	// still counts them for a pod that is gone): fail, do not steer to a.
	k := &fakeKubelet{pods: []PodDevices{listed("b", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	_, err := m.Preferred(context.Background(), KindMemory, units(0, 80), nil, 48, time.Second)
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "the kubelet is admitting ns/b") {
		t.Fatalf("Preferred error = %v", err)
	}
}

func TestPodResourcesStillAmbiguous(t *testing.T) {
	// Both listed without devices (e.g. the kubelet's List does not filter
	// to active pods): never guess.
	k := &fakeKubelet{pods: []PodDevices{listed("a", names.GPUMemory, nil), listed("b", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	_, err := m.Preferred(context.Background(), KindMemory, availBoth(), nil, 48, time.Millisecond)
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "ns/a, ns/b") {
		t.Fatalf("Preferred error = %v, want ErrAmbiguous naming both", err)
	}
	// Allocate: the devices still tell them apart (only a owns them).
	if g, err := m.Allocate(context.Background(), KindMemory, units(0, 48), time.Millisecond); err != nil || g.Pod != "ns/a" {
		t.Fatalf("Allocate = %+v, %v", g, err)
	}
}

func TestPodResourcesOverlappingWholeGPUsStillRefused(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0)))
	m.Upsert(pod("b", 2, container(names.GPU, 1, false), assigned(true, 81920, 0)))
	k := &fakeKubelet{pods: []PodDevices{listed("a", names.GPU, nil), listed("b", names.GPU, nil)}}
	m.SetPodLister(k.list)
	_, err := m.Allocate(context.Background(), KindGPU, []string{uuid(0)}, time.Millisecond)
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "ns/a, ns/b") {
		t.Fatalf("Allocate error = %v", err)
	}
	// With PodResources showing only b: b gets it.
	k.pods = []PodDevices{listed("b", names.GPU, nil)}
	if g, err := m.Allocate(context.Background(), KindGPU, []string{uuid(0)}, time.Millisecond); err != nil || g.Pod != "ns/b" {
		t.Fatalf("Allocate = %+v, %v", g, err)
	}
}

func TestPodResourcesTwinsNameTheRightPod(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("t1", 1, container(names.GPUMemory, 2, false), assigned(false, 2048, 4)))
	m.Upsert(pod("t2", 2, container(names.GPUMemory, 2, false), assigned(false, 2048, 4)))
	m.SetPodLister((&fakeKubelet{pods: []PodDevices{listed("t2", names.GPUMemory, nil)}}).list)
	g, err := m.Allocate(context.Background(), KindMemory, mem(4, 0, 1), time.Millisecond)
	if err != nil || g.Pod != "ns/t2" || len(g.Twins) != 0 || !slices.Equal(g.NotAdmitting, []string{"ns/t1"}) {
		t.Fatalf("Allocate = %+v, %v; want ns/t2, not its twin", g, err)
	}
}

func TestPodResourcesContainerAlreadyHoldingDevices(t *testing.T) {
	// After a plugin restart the matcher may not know a was allocated; the
	// kubelet lists a's container with devices, so a is not being admitted.
	k := &fakeKubelet{pods: []PodDevices{
		listed("a", names.GPUMemory, map[string][]string{"c0": units(0, 48)}),
		listed("b", names.GPUMemory, nil),
	}}
	m := sameShape(t, k)
	pref, err := m.Preferred(context.Background(), KindMemory, availBoth(), nil, 48, time.Millisecond)
	if err != nil || pref.Pod != "ns/b" {
		t.Fatalf("Preferred = %+v, %v", pref, err)
	}
}

func TestPodResourcesUnavailableFallsBack(t *testing.T) {
	k := &fakeKubelet{err: errors.New("rpc error: code = ResourceExhausted desc = rejected by rate limit")}
	m := sameShape(t, k)
	pref, err := m.Preferred(context.Background(), KindMemory, availBoth(), nil, 48, time.Millisecond)
	if err != nil || pref.Pod != "ns/a" || pref.Admitting || !slices.Equal(pref.Others, []string{"ns/b"}) ||
		!strings.Contains(pref.PodResourcesErr, "rate limit") {
		t.Fatalf("Preferred = %+v, %v; want the bound-order rule", pref, err)
	}
	if got := k.calls.Load(); got != listTries {
		t.Errorf("List called %d times, want %d (retries for the rate limit)", got, listTries)
	}
	g, err := m.Allocate(context.Background(), KindMemory, pref.IDs, time.Millisecond)
	if err != nil || g.Pod != "ns/a" || g.PodResourcesErr == "" {
		t.Fatalf("Allocate = %+v, %v", g, err)
	}
	// Without a lister: the same, no error recorded.
	m = sameShape(t, nil)
	pref, err = m.Preferred(context.Background(), KindMemory, availBoth(), nil, 48, time.Millisecond)
	if err != nil || pref.Pod != "ns/a" || pref.PodResourcesErr != "" {
		t.Fatalf("Preferred without lister = %+v, %v", pref, err)
	}
}

func TestPodResourcesWaitsForTheInformer(t *testing.T) {
	// The kubelet admits c, which the informer has not delivered yet; a and b
	// are pending with the same shape. The matcher waits for c instead of
	// steering to a.
	k := &fakeKubelet{pods: []PodDevices{listed("c", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	go func() {
		time.Sleep(20 * time.Millisecond)
		m.Upsert(pod("c", 1, container(names.GPUMemory, 48, false), assigned(false, 48*1024, 2)))
	}()
	avail := append(availBoth(), units(2, 80)...)
	pref, err := m.Preferred(context.Background(), KindMemory, avail, nil, 48, 5*time.Second)
	if err != nil || pref.Pod != "ns/c" || !slices.Equal(pref.IDs, units(2, 48)) {
		t.Fatalf("Preferred = %+v, %v", pref, err)
	}
	if got := k.calls.Load(); got != 1 {
		t.Errorf("List called %d times in one call, want 1", got)
	}
	// Nobody ever shows up: the wait ends with the reason.
	k2 := &fakeKubelet{pods: []PodDevices{listed("zzz", names.GPUMemory, nil)}}
	m = sameShape(t, k2)
	_, err = m.Preferred(context.Background(), KindMemory, availBoth(), nil, 48, 10*time.Millisecond)
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "lists none of them as being admitted") {
		t.Fatalf("Preferred error = %v", err)
	}
}

func TestPodResourcesListedWithoutTheLock(t *testing.T) {
	k := &fakeKubelet{pods: []PodDevices{listed("b", names.GPUMemory, nil)}}
	m := sameShape(t, k)
	// A List that needs the matcher (as the reconcile loop might, at the
	// same time) would deadlock if the lock were held.
	k.during = func() { m.Upsert(pod("x", 9, phase(corev1.PodRunning))) }
	done := make(chan error, 1)
	go func() {
		_, err := m.Allocate(context.Background(), KindMemory, units(1, 48), time.Second)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Allocate hung: PodResources was listed with the matcher's lock held")
	}
}

// apiServer is a PodGetter over a fixed set of pods, counting reads.
type apiServer struct {
	pods  map[string]*corev1.Pod // by namespace/name
	reads atomic.Int32
}

func (s *apiServer) get(_ context.Context, ns, name string) (*corev1.Pod, error) {
	s.reads.Add(1)
	if p, ok := s.pods[ns+"/"+name]; ok {
		return p.DeepCopy(), nil
	}
	return nil, errors.New("not found")
}

func TestPodResourcesReadsAMissingPodFromTheAPIServer(t *testing.T) {
	// After a broken watch the informer never delivers c while the kubelet
	// admits it (it is the only pod asking for 8 whole GPUs). Without a
	// getter the wait runs out and the kubelet fails the pod; with one, the
	// matcher reads c from the API server and grants its devices.
	c := pod("c", 3, container(names.GPU, 2, false), assigned(true, 81920, 2, 3))
	api := &apiServer{pods: map[string]*corev1.Pod{"ns/c": c,
		"ns/elsewhere": pod("elsewhere", 4, func(p *corev1.Pod) { p.Spec.NodeName = "other" })}}
	avail := []string{uuid(0), uuid(1), uuid(2), uuid(3)}
	kubelet := func() *fakeKubelet {
		return &fakeKubelet{pods: []PodDevices{
			listed("running", names.GPU, map[string][]string{"c0": {uuid(0)}}),
			listed("c", names.GPU, nil), listed("elsewhere", names.GPU, nil), listed("gone", names.GPU, nil)}}
	}
	newMatcher := func(k *fakeKubelet) *Matcher {
		m := NewMatcher(node, names, 1024)
		m.Upsert(pod("running", 1, container(names.GPU, 1, false), assigned(true, 81920, 0), phase(corev1.PodRunning)))
		m.SetPodLister(k.list)
		return m
	}

	m := newMatcher(kubelet())
	if _, err := m.Preferred(context.Background(), KindGPU, avail, nil, 2, 50*time.Millisecond); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("without a getter Preferred = %v, want ErrNoMatch", err)
	}

	m = newMatcher(kubelet())
	m.SetPodGetter(api.get)
	pref, err := m.Preferred(context.Background(), KindGPU, avail, nil, 2, 3*time.Second)
	if err != nil || pref.Pod != "ns/c" || !slices.Equal(pref.IDs, []string{uuid(2), uuid(3)}) {
		t.Fatalf("Preferred = %+v, %v; want c's GPUs read from the API server", pref, err)
	}
	// running is known (not read); c, elsewhere and gone are read once.
	if got := api.reads.Load(); got != 3 {
		t.Errorf("API reads = %d, want 3 (the pods the matcher did not know)", got)
	}
	g, err := m.Allocate(context.Background(), KindGPU, pref.IDs, time.Second)
	if err != nil || g.Pod != "ns/c" {
		t.Fatalf("Allocate = %+v, %v", g, err)
	}
	// A pod the API server places on another node is not recorded.
	m.mu.Lock()
	for _, e := range m.pods {
		if e.key == "ns/elsewhere" {
			t.Error("a pod bound to another node was recorded")
		}
	}
	m.mu.Unlock()
}

func TestPodResourcesAPIReadsAreBounded(t *testing.T) {
	// A kubelet listing many unknown pods, none of which asks for the
	// request: at most refreshMax reads a second, and the wait still ends.
	k := &fakeKubelet{}
	for i := range 40 {
		k.pods = append(k.pods, listed(fmt.Sprintf("p%02d", i), names.GPU, nil))
	}
	api := &apiServer{pods: map[string]*corev1.Pod{}}
	m := NewMatcher(node, names, 1024)
	m.SetPodLister(k.list)
	m.SetPodGetter(api.get)
	start := time.Now()
	_, err := m.Preferred(context.Background(), KindGPU, []string{uuid(0)}, nil, 1, 1500*time.Millisecond)
	if !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Preferred = %v, want ErrNoMatch", err)
	}
	secs := int32(time.Since(start)/refreshEvery) + 1
	if got := api.reads.Load(); got > secs*refreshMax {
		t.Errorf("%d API reads in %v, want at most %d a second", got, time.Since(start), refreshMax)
	}
}
