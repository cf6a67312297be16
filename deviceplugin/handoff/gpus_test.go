package handoff

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestGPUPodsAndLivePods(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("whole", 1, container(names.GPU, 1, false), assigned(true, 81920, 0), phase(corev1.PodRunning)))
	m.Upsert(pod("s1", 2, container(names.GPUMemory, 10, false), assigned(false, 10240, 1)))
	m.Upsert(pod("s2", 3, container(names.GPUMemory, 20, false), assigned(false, 20480, 1), phase(corev1.PodRunning)))
	m.Upsert(pod("done", 4, container(names.GPUMemory, 20, false), assigned(false, 20480, 1), phase(corev1.PodSucceeded)))
	m.Upsert(pod("failed", 5, container(names.GPU, 1, false), assigned(true, 81920, 2), phase(corev1.PodFailed)))
	m.Upsert(pod("plain", 6, phase(corev1.PodRunning)))

	want := map[string][]GPUPod{
		uuid(0): {{UID: "uid-whole", Pod: "ns/whole", Whole: true, MemoryMiB: 81920}},
		uuid(1): {{UID: "uid-s1", Pod: "ns/s1", MemoryMiB: 10240}, {UID: "uid-s2", Pod: "ns/s2", MemoryMiB: 20480}},
	}
	if got := m.GPUPods(); !reflect.DeepEqual(got, want) {
		t.Errorf("GPUPods() = %+v\nwant %+v", got, want)
	}
	wantLive := map[string]string{"uid-whole": "ns/whole", "uid-s1": "ns/s1", "uid-s2": "ns/s2", "uid-plain": "ns/plain"}
	if got := m.LivePods(); !reflect.DeepEqual(got, wantLive) {
		t.Errorf("LivePods() = %v, want %v", got, wantLive)
	}
	m.Delete("uid-s2")
	if got := m.GPUPods()[uuid(1)]; len(got) != 1 || got[0].UID != "uid-s1" {
		t.Errorf("after delete: %+v", got)
	}
}
