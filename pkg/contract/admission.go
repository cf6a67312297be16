package contract

import (
	"encoding/json"
	"fmt"
	"time"
)

// Admission is the queue controller's record on a pod it admitted (the
// AdmissionAnnotation), written in the same update that removes QueueGate.
// A restarted controller reads it back: the account the pod is charged to,
// when it was admitted, and the room held for it until it binds.
type Admission struct {
	Version string `json:"version"`
	// AdmittedAt is when the gate was removed; QueuedFor how long the pod
	// (or its gang) waited.
	AdmittedAt time.Time `json:"admittedAt"`
	QueuedFor  string    `json:"queuedFor,omitempty"`
	// Team and Model name the quota account (Model empty for a team that
	// counts all its GPUs together; Team empty for a namespace without a
	// team label where unknown teams are unlimited).
	Team  string `json:"team"`
	Model string `json:"model,omitempty"`
	// Hold is where the pod's GPUs are held until it binds, and HoldUntil
	// when the hold lapses (the pod may then go wherever it fits).
	Hold      *Assignment `json:"hold,omitempty"`
	HoldUntil time.Time   `json:"holdUntil,omitzero"`
	// NarrowedTo names the nodes the pod was narrowed to at admission (a
	// required node affinity with one metadata.name term each), the held
	// node first; empty when it was not narrowed.
	NarrowedTo []string `json:"narrowedTo,omitempty"`
	// Signature is rota-extender's signature of the record for this pod
	// (RecordKey), empty where the extender runs without a records key.
	Signature string `json:"signature,omitempty"`
}

// MaxNarrowedTo bounds Admission.NarrowedTo.
const MaxNarrowedTo = 16

// ParseAdmission decodes and validates an admission record.
func ParseAdmission(data []byte) (Admission, error) {
	var a Admission
	if err := strictDecode(data, "admission", &a); err != nil {
		return Admission{}, err
	}
	if err := a.Validate(); err != nil {
		return Admission{}, err
	}
	return a, nil
}

// Marshal encodes a after validating it.
func (a Admission) Marshal() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(a)
}

// Validate checks the record.
func (a Admission) Validate() error {
	if err := checkVersion("admission.version", a.Version); err != nil {
		return err
	}
	if a.AdmittedAt.IsZero() {
		return fieldErr("admission.admittedAt", nil, "is missing", "write the time the pod was admitted")
	}
	if a.Hold != nil {
		if err := a.Hold.Validate(); err != nil {
			return err
		}
		if a.HoldUntil.IsZero() {
			return fieldErr("admission.holdUntil", nil, "is missing", "write when the hold lapses")
		}
	}
	if len(a.NarrowedTo) > MaxNarrowedTo {
		return fieldErr("admission.narrowedTo", len(a.NarrowedTo), "names too many nodes", fmt.Sprintf("name at most %d", MaxNarrowedTo))
	}
	for i, n := range a.NarrowedTo {
		if n == "" {
			return fieldErr(fmt.Sprintf("admission.narrowedTo[%d]", i), nil, "is empty", "name a node")
		}
	}
	return nil
}
