package contract

import (
	"bytes"
	"testing"
	"time"
)

// A signed record verifies for its pod after a round trip through its
// annotation text, and not after any change: another field, another pod,
// another kind, no signature, another key.
func TestRecordSignatures(t *testing.T) {
	key, err := NewRecordKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRecordKey([]byte("short")); err == nil {
		t.Error("a 5-byte key was accepted")
	}
	as := Assignment{Version: Version, Node: "n", GPUs: []AssignedGPU{{Index: 1, UUID: "GPU-1", MemoryMiB: 80 * 1024}}, Whole: true}
	signed, err := key.SignAssignment("uid-1", as)
	if err != nil || signed.Signature == "" {
		t.Fatalf("SignAssignment = %+v, %v", signed, err)
	}
	data, err := signed.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseAssignment(data)
	if err != nil {
		t.Fatal(err)
	}
	if !key.VerifyAssignment("uid-1", back) {
		t.Fatal("a signed assignment does not verify after its round trip")
	}
	other := back
	other.GPUs = []AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 80 * 1024}}
	unsigned := back
	unsigned.Signature = ""
	otherKey, _ := NewRecordKey(bytes.Repeat([]byte{8}, 32))
	for name, ok := range map[string]bool{
		"another GPU":   key.VerifyAssignment("uid-1", other),
		"another pod":   key.VerifyAssignment("uid-2", back),
		"no signature":  key.VerifyAssignment("uid-1", unsigned),
		"another key":   otherKey.VerifyAssignment("uid-1", back),
		"no key at all": RecordKey(nil).VerifyAssignment("uid-1", back),
	} {
		if ok {
			t.Errorf("%s: verifies", name)
		}
	}

	adm := Admission{Version: Version, AdmittedAt: time.Date(2026, 12, 5, 10, 0, 0, 123, time.UTC), Team: "vision", Model: "A"}
	sa, err := key.SignAdmission("uid-1", adm)
	if err != nil {
		t.Fatal(err)
	}
	data, err = sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ba, err := ParseAdmission(data)
	if err != nil {
		t.Fatal(err)
	}
	if !key.VerifyAdmission("uid-1", ba) {
		t.Fatal("a signed admission record does not verify after its round trip")
	}
	ba.Team = "nlp"
	if key.VerifyAdmission("uid-1", ba) {
		t.Error("an admission record with another team verifies")
	}
	// The kind is signed: an admission signature does not sign an assignment.
	crossed := back
	crossed.Signature = sa.Signature
	if key.VerifyAssignment("uid-1", crossed) {
		t.Error("an admission record's signature verifies an assignment")
	}
	if s, _ := RecordKey(nil).SignAssignment("uid-1", as); s.Signature != "" {
		t.Error("no key signed a record")
	}
}
