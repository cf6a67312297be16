package podreq

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

// With a key, a record is believed when it carries the key's signature
// for the pod, or when it is unsigned on a pod older than the key; without
// a key, always.
func TestRecordsBelieved(t *testing.T) {
	key, _ := contract.NewRecordKey(bytes.Repeat([]byte{1}, 32))
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pod := func(uid string, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: k8stypes.UID("uid-" + uid), CreationTimestamp: metav1.NewTime(created)}}
	}
	as := contract.Assignment{Version: contract.Version, Node: "n", Whole: true, GPUs: []contract.AssignedGPU{{UUID: "GPU-0"}}}
	newPod, oldPod := pod("new", since.Add(time.Hour)), pod("old", since.Add(-time.Hour))
	signedNew, _ := key.SignAssignment(string(newPod.UID), as)
	signedOld, _ := key.SignAssignment(string(oldPod.UID), as)
	forged := signedNew
	forged.GPUs = []contract.AssignedGPU{{UUID: "GPU-1"}}
	r := Records{Key: key, Since: since}
	for _, tc := range []struct {
		name string
		r    Records
		pod  *corev1.Pod
		a    contract.Assignment
		want bool
	}{
		{"signed", r, newPod, signedNew, true},
		{"changed after signing", r, newPod, forged, false},
		{"signed for another pod", r, newPod, signedOld, false},
		{"unsigned on a pod newer than the key", r, newPod, as, false},
		{"unsigned on a pod older than the key", r, oldPod, as, true},
		{"changed on a pod older than the key", r, oldPod, forged, false},
		{"unsigned, every pod must sign", Records{Key: key}, oldPod, as, false},
		{"no key", Records{}, newPod, forged, true},
	} {
		if got := tc.r.AssignmentBelieved(tc.pod, tc.a); got != tc.want {
			t.Errorf("%s: believed %t, want %t", tc.name, got, tc.want)
		}
	}
}

// A pod's workload key is its gang's key, else its own namespace/name.
func TestWorkloadKey(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p-0"}}
	if got := WorkloadKey(p, nil); got != "ml/p-0" {
		t.Errorf("a pod alone: %q", got)
	}
	if got := WorkloadKey(p, &GangRef{Key: "ml/train"}); got != "ml/train" {
		t.Errorf("a gang member: %q", got)
	}
}

// Admission reads a pod's admission record and splits it by belief.
func TestRecordsAdmission(t *testing.T) {
	key, _ := contract.NewRecordKey(bytes.Repeat([]byte{2}, 32))
	names := contract.Default
	r := Records{Key: key}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-a", Annotations: map[string]string{}}}
	if adm, un := r.Admission(pod, names); adm != nil || un != nil {
		t.Fatalf("no record: %v, %v", adm, un)
	}
	rec := contract.Admission{Version: contract.Version, AdmittedAt: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC), Team: "vision"}
	signed, _ := key.SignAdmission("uid-a", rec)
	for name, tc := range map[string]struct {
		rec      contract.Admission
		believed bool
	}{"signed": {signed, true}, "unsigned": {rec, false}} {
		data, _ := tc.rec.Marshal()
		pod.Annotations[names.AdmissionAnnotation] = string(data)
		adm, un := r.Admission(pod, names)
		if (adm != nil) != tc.believed || (un != nil) == tc.believed {
			t.Errorf("%s: believed %v, unbelieved %v", name, adm, un)
		}
	}
}
