package contract

import (
	"encoding/json"
	"fmt"
)

// Assignment is the Pod annotation the extender writes before it binds the
// pod: exactly which GPUs (and how much memory of each) the pod owns. The
// device plugin hands the container these GPUs, and a restarted extender
// rebuilds its ledger from these documents.
type Assignment struct {
	Version string `json:"version"`
	Node    string `json:"node"`
	// Whole is true when the pod owns its GPUs exclusively.
	Whole bool `json:"whole,omitempty"`
	// GPUs lists the assigned GPUs. A memory share names exactly one GPU.
	GPUs []AssignedGPU `json:"gpus"`
	// Gang names the gang the pod was placed with, if any.
	Gang string `json:"gang,omitempty"`
	// Signature is rota-extender's signature of the record for this pod
	// (RecordKey), empty where the extender runs without a records key.
	Signature string `json:"signature,omitempty"`
	// Preview holds the next version's test fields (empty in a release).
	Preview
	// AsWritten is the document this value was parsed from, in canonical
	// form (canonicalJSON) without its signature, kept where a signature
	// covers the document as written (a signed document of a version after
	// v1) so that VerifyAssignment can check the fields this build does not
	// know. Nil otherwise; never written (a writer leaves it nil).
	AsWritten []byte `json:"-"`
}

// AssignedGPU is one GPU of an assignment.
type AssignedGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// MemoryMiB is the memory the pod may use on this GPU; for whole GPUs it
	// is the GPU's total memory.
	MemoryMiB MiB `json:"memoryMiB"`
}

// ParseAssignment decodes and validates a pod assignment annotation, under
// the version rule (versions.go).
func ParseAssignment(data []byte) (Assignment, error) {
	a, err := decodeDoc[Assignment](data, "assignment")
	if err != nil {
		return Assignment{}, err
	}
	if err := a.Validate(); err != nil {
		return Assignment{}, err
	}
	if a.AsWritten, err = signedAsWritten("assignment", a.Version, a.Signature, data); err != nil {
		return Assignment{}, err
	}
	return a, nil
}

// Marshal encodes a (after validating it) as the annotation value. A
// document read leniently (NextVersion) is written without the fields this
// build does not know, so a signature it carried no longer verifies.
func (a Assignment) Marshal() ([]byte, error) {
	a.Preview.stamp(a.Version)
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(a)
}

// Validate checks every field and returns the first problem as a *FieldError.
func (a Assignment) Validate() error {
	if err := checkVersion("assignment.version", a.Version); err != nil {
		return err
	}
	if err := a.Preview.check("assignment", a.Version); err != nil {
		return err
	}
	if a.Node == "" {
		return fieldErr("assignment.node", nil, "is empty", "write the name of the node the pod is bound to")
	}
	if len(a.GPUs) == 0 {
		return fieldErr("assignment.gpus", nil, "is empty", "list at least one GPU")
	}
	if len(a.GPUs) > MaxGPUsPerNode {
		return fieldErr("assignment.gpus", len(a.GPUs), "lists too many GPUs", fmt.Sprintf("list at most %d", MaxGPUsPerNode))
	}
	if !a.Whole && len(a.GPUs) != 1 {
		return fieldErr("assignment.gpus", len(a.GPUs), "lists several GPUs for a memory share",
			"a memory share names exactly one GPU; set whole: true for several GPUs")
	}
	seen := map[int]bool{}
	for i, g := range a.GPUs {
		f := fmt.Sprintf("assignment.gpus[%d]", i)
		if g.Index < 0 || g.Index >= MaxGPUsPerNode {
			return fieldErr(f+".index", g.Index, "is out of range", fmt.Sprintf("use 0..%d", MaxGPUsPerNode-1))
		}
		if seen[g.Index] {
			return fieldErr(f+".index", g.Index, "is a duplicate GPU index", "list each GPU once")
		}
		seen[g.Index] = true
		if g.UUID == "" {
			return fieldErr(f+".uuid", nil, "is empty", "write the GPU UUID from the node's topology annotation")
		}
		if g.MemoryMiB <= 0 {
			return fieldErr(f+".memoryMiB", g.MemoryMiB, "is not positive", "write the assigned memory in MiB")
		}
	}
	return nil
}

// UUIDs returns the UUIDs of the assigned GPUs in order.
func (a Assignment) UUIDs() []string {
	out := make([]string, len(a.GPUs))
	for i, g := range a.GPUs {
		out[i] = g.UUID
	}
	return out
}
