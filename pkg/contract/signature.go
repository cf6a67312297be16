package contract

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// RecordKey signs Rota's records on pods (the assignment and the admission
// record) with HMAC-SHA256. Only rota-extender holds the key, so a record
// whose signature does not verify was written, or changed, by someone
// else. The signature covers the record's kind and the pod's UID, so a
// record cannot be copied from another pod either.
//
// What the signature covers depends on the record's version:
//
//   - v1: the record as this build encodes it (json.Marshal of the struct,
//     Signature empty), as every Rota since signatures has signed it. A v1
//     record is read strictly, so it has no field the struct lacks, and
//     the encoding is the record's whole meaning.
//   - later versions: the record as written, in canonical form
//     (canonicalJSON: the document's members, keys sorted, signature
//     dropped), after a separator that no v1 input has. An older reader
//     reads such a record leniently (versions.go) and does not know all of
//     its fields, so it could not encode them again; the canonical form of
//     what it read holds them all, so a field it does not know cannot be
//     added, changed or removed without the key. The reader then checks that
//     the value it acts on is exactly what those verified bytes say, read
//     again by this build's parser, so a document that reads differently
//     from its canonical form (a repeated key merged into an object) or a
//     value changed after parsing does not verify.
//
// Ignoring an unknown field is safe because it is signed and then unread:
// the fields this build acts on are the ones it checked, and a newer writer
// adds only optional fields whose absence means what it meant before.
//
// The zero value (no key) signs nothing and verifies nothing.
type RecordKey []byte

// MinRecordKeyBytes is the shortest key NewRecordKey accepts.
const MinRecordKeyBytes = 32

// legacySignedVersion is the version whose records are signed over their
// struct encoding; every later one is signed over its canonical form.
const legacySignedVersion = "v1"

// canonicalScheme separates the input of the canonical form from that of
// the struct encoding, which starts with '{'.
const canonicalScheme = "canonical-json"

// NewRecordKey checks a key's length.
func NewRecordKey(key []byte) (RecordKey, error) {
	if len(key) < MinRecordKeyBytes {
		return nil, fieldErr("records key", fmt.Sprintf("%d bytes", len(key)), "is too short",
			fmt.Sprintf("use at least %d random bytes", MinRecordKeyBytes))
	}
	return RecordKey(key), nil
}

// On reports whether k is a key (records are signed and verified).
func (k RecordKey) On() bool { return len(k) > 0 }

// signedAsWritten returns what a parser keeps in AsWritten for the record
// doc of version v with signature sig read from data: its canonical form
// where that is what the signature covers, else nil.
func signedAsWritten(doc, v, sig string, data []byte) ([]byte, error) {
	if sig == "" || v == legacySignedVersion {
		return nil, nil
	}
	c, err := canonicalJSON(data)
	if err != nil {
		return nil, &FieldError{Field: doc, Problem: "is not a JSON object: " + err.Error(),
			Fix: "write the JSON document Rota documents for this annotation"}
	}
	return c, nil
}

// signedBytes returns what the signature of a record of version v whose
// struct is doc (Signature empty) covers, and whether that is the
// canonical form.
func signedBytes(v string, doc any) ([]byte, bool, error) {
	data, err := json.Marshal(doc)
	if err != nil || v == legacySignedVersion {
		return data, false, err
	}
	data, err = canonicalJSON(data)
	return data, true, err
}

func (k RecordKey) mac(kind, podUID string, canonical bool, data []byte) string {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(podUID))
	h.Write([]byte{0})
	if canonical {
		h.Write([]byte(canonicalScheme))
		h.Write([]byte{0})
	}
	h.Write(data)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func (k RecordKey) check(kind, podUID, sig string, canonical bool, data []byte) bool {
	return hmac.Equal([]byte(k.mac(kind, podUID, canonical, data)), []byte(sig))
}

// sameJSON reports whether a and b encode alike.
func sameJSON(a, b any) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

// SignAssignment returns a with its Signature set for the pod with podUID
// (a unchanged without a key). The signature covers what a.Marshal writes.
func (k RecordKey) SignAssignment(podUID string, a Assignment) (Assignment, error) {
	if !k.On() {
		return a, nil
	}
	a.Signature, a.AsWritten = "", nil
	a.Preview.stamp(a.Version)
	data, canonical, err := signedBytes(a.Version, a)
	if err != nil {
		return a, err
	}
	a.Signature = k.mac("assignment", podUID, canonical, data)
	return a, nil
}

// VerifyAssignment reports whether a carries k's signature for the pod: a
// says exactly what rota-extender signed (RecordKey).
func (k RecordKey) VerifyAssignment(podUID string, a Assignment) bool {
	sig, read := a.Signature, a.AsWritten
	if !k.On() || sig == "" {
		return false
	}
	a.Signature, a.AsWritten = "", nil
	if a.Version == legacySignedVersion || read == nil {
		data, canonical, err := signedBytes(a.Version, a)
		return err == nil && k.check("assignment", podUID, sig, canonical, data)
	}
	// a is the document read, and read is what was signed: they must say
	// the same, as this build reads them.
	b, err := ParseAssignment(read)
	return err == nil && sameJSON(a, b) && k.check("assignment", podUID, sig, true, read)
}

// SignAdmission returns a with its Signature set for the pod with podUID
// (a unchanged without a key). The signature covers what a.Marshal writes.
func (k RecordKey) SignAdmission(podUID string, a Admission) (Admission, error) {
	if !k.On() {
		return a, nil
	}
	a.Signature, a.AsWritten = "", nil
	a.Preview.stamp(a.Version)
	data, canonical, err := signedBytes(a.Version, a)
	if err != nil {
		return a, err
	}
	a.Signature = k.mac("admission", podUID, canonical, data)
	return a, nil
}

// VerifyAdmission reports whether a carries k's signature for the pod, as
// VerifyAssignment.
func (k RecordKey) VerifyAdmission(podUID string, a Admission) bool {
	sig, read := a.Signature, a.AsWritten
	if !k.On() || sig == "" {
		return false
	}
	a.Signature, a.AsWritten = "", nil
	if a.Version == legacySignedVersion || read == nil {
		data, canonical, err := signedBytes(a.Version, a)
		return err == nil && k.check("admission", podUID, sig, canonical, data)
	}
	b, err := ParseAdmission(read)
	return err == nil && sameJSON(a, b) && k.check("admission", podUID, sig, true, read)
}
