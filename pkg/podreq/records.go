package podreq

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// Records decides which of Rota's records on a pod to believe: with a key,
// only those rota-extender signed for that pod (contract.RecordKey), and,
// on pods created before Since, unsigned ones too (written before the key
// existed). Without a key every record is believed, as before signatures.
type Records struct {
	Key contract.RecordKey
	// Since is when the extender began to sign (the key's creation); zero
	// means every pod's records must be signed.
	Since time.Time
}

// AssignmentBelieved reports whether the pod's assignment is Rota's.
func (r Records) AssignmentBelieved(pod *corev1.Pod, a contract.Assignment) bool {
	return r.believe(pod, a.Signature, func() bool { return r.Key.VerifyAssignment(string(pod.UID), a) })
}

// Admission reads the pod's admission record (AdmissionOf) and splits it
// by belief: adm is the record when it is believed, unbelieved the one the
// pod carries but Rota did not sign; both nil when the pod has none or it
// does not parse.
func (r Records) Admission(pod *corev1.Pod, names contract.Names) (adm, unbelieved *contract.Admission) {
	a, err := AdmissionOf(pod, names)
	if err != nil || a == nil {
		return nil, nil
	}
	if !r.AdmissionBelieved(pod, *a) {
		return nil, a
	}
	return a, nil
}

// AdmissionBelieved reports whether the pod's admission record is Rota's.
func (r Records) AdmissionBelieved(pod *corev1.Pod, a contract.Admission) bool {
	return r.believe(pod, a.Signature, func() bool { return r.Key.VerifyAdmission(string(pod.UID), a) })
}

func (r Records) believe(pod *corev1.Pod, sig string, verify func() bool) bool {
	switch {
	case !r.Key.On():
		return true
	case sig != "":
		return verify()
	default:
		return !r.Since.IsZero() && pod.CreationTimestamp.Time.Before(r.Since)
	}
}
