package podreq

import (
	kjson "sigs.k8s.io/json"
)

// Decode reads a Kubernetes object (JSON) as the API server does: field
// names match case-sensitively. encoding/json would read "speC" as spec;
// the API server drops such a key, so the object it stores, and the patch
// written against it, would not be the one read.
func Decode(raw []byte, v any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(raw, v)
}
