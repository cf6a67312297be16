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
	// Preview holds the next version's test fields (empty in a release).
	Preview
	// AsWritten is the record this value was parsed from, as for
	// Assignment.AsWritten; VerifyAdmission reads it. Never written.
	AsWritten []byte `json:"-"`
}

// MaxNarrowedTo bounds Admission.NarrowedTo.
const MaxNarrowedTo = 16

// ParseAdmission decodes and validates an admission record, under the
// version rule (versions.go).
func ParseAdmission(data []byte) (Admission, error) {
	a, err := decodeDoc[Admission](data, "admission")
	if err != nil {
		return Admission{}, err
	}
	if err := a.Validate(); err != nil {
		return Admission{}, err
	}
	if a.AsWritten, err = signedAsWritten("admission", a.Version, a.Signature, data); err != nil {
		return Admission{}, err
	}
	return a, nil
}

// Marshal encodes a after validating it; as Assignment.Marshal, without
// the fields this build does not know.
func (a Admission) Marshal() ([]byte, error) {
	a.Preview.stamp(a.Version)
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
	if err := a.Preview.check("admission", a.Version); err != nil {
		return err
	}
	if a.AdmittedAt.IsZero() {
		return fieldErr("admission.admittedAt", nil, "is missing", "write the time the pod was admitted")
	}
	if a.Hold != nil {
		if err := a.Hold.Validate(); err != nil {
			return err
		}
		// The record is read under the rule of its own version (strictly or
		// leniently, versions.go), the hold in it included; a hold of
		// another version would be read under the wrong rule.
		if a.Hold.Version != a.Version {
			return fieldErr("admission.hold.version", a.Hold.Version, "is not the record's version",
				fmt.Sprintf("write the record's version, %q", a.Version))
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
