package contract

import (
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
// The zero value (no key) signs nothing and verifies nothing.
type RecordKey []byte

// MinRecordKeyBytes is the shortest key NewRecordKey accepts.
const MinRecordKeyBytes = 32

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

func (k RecordKey) mac(kind, podUID string, doc any) (string, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	h := hmac.New(sha256.New, k)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(podUID))
	h.Write([]byte{0})
	h.Write(data)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

func (k RecordKey) verify(kind, podUID, sig string, doc any) bool {
	if !k.On() || sig == "" {
		return false
	}
	want, err := k.mac(kind, podUID, doc)
	return err == nil && hmac.Equal([]byte(want), []byte(sig))
}

// SignAssignment returns a with its Signature set for the pod with podUID
// (a unchanged without a key).
func (k RecordKey) SignAssignment(podUID string, a Assignment) (Assignment, error) {
	if !k.On() {
		return a, nil
	}
	a.Signature = ""
	sig, err := k.mac("assignment", podUID, a)
	a.Signature = sig
	return a, err
}

// VerifyAssignment reports whether a carries k's signature for the pod.
func (k RecordKey) VerifyAssignment(podUID string, a Assignment) bool {
	sig := a.Signature
	a.Signature = ""
	return k.verify("assignment", podUID, sig, a)
}

// SignAdmission returns a with its Signature set for the pod with podUID
// (a unchanged without a key).
func (k RecordKey) SignAdmission(podUID string, a Admission) (Admission, error) {
	if !k.On() {
		return a, nil
	}
	a.Signature = ""
	sig, err := k.mac("admission", podUID, a)
	a.Signature = sig
	return a, err
}

// VerifyAdmission reports whether a carries k's signature for the pod.
func (k RecordKey) VerifyAdmission(podUID string, a Admission) bool {
	sig := a.Signature
	a.Signature = ""
	return k.verify("admission", podUID, sig, a)
}
