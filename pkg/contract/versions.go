package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Versions of the annotation documents, and how a reader treats each.
//
// Rota's parts are upgraded one at a time (helm upgrade rolls the device
// plugin DaemonSet and the extender and webhook Deployments independently),
// so for a while an older reader meets documents a newer writer wrote, and
// after a rollback a newer reader meets an older writer's. The rule:
//
//   - A writer writes Version.
//   - A later Rota may add fields to a document only as optional fields
//     (absent means what it meant before), and a document that may carry
//     them is written as the next version. Nothing is renamed, removed or
//     given a new meaning within the supported versions.
//   - A reader reads the versions in SupportedVersions (its own and the
//     older ones it still supports) strictly: an unknown field is refused,
//     as it is a typo, junk or a forgery, never a newer writer's.
//   - A reader reads NextVersion, and only that, leniently: fields it does
//     not know are ignored (they are the next version's optional fields),
//     and every field it knows is validated exactly as in its own version.
//     So a newer writer can roll out before or after its readers, and a
//     rollback to this build reads what the newer build wrote meanwhile.
//   - Any other version (two ahead, or a string that is no version) is
//     refused with ErrUnsupportedVersion, whatever else the document holds.
//
// Signed records (the assignment and the admission record) keep their
// signatures sound under this rule: see RecordKey. In short, a signature
// of a version after v1 covers the whole document as written, fields the
// reader does not know included, so an unknown field cannot be added,
// changed or dropped without the key; and a reader checks that the record
// it acts on is exactly what that document says (the fields it knows), so
// what a verified record means to it is what the writer signed.
//
// Version, NextVersion and SupportedVersions are in version_default.go;
// the test build of the next version (build tag rotanext) has its own in
// version_next.go, so a rolling upgrade between the two builds can be
// exercised.

// reads reports whether this build reads documents of version v at all,
// and whether it reads them strictly.
func reads(v string) (ok, strict bool) {
	switch {
	case slices.Contains(SupportedVersions, v):
		return true, true
	case v == NextVersion:
		return true, false
	}
	return false, false
}

// readsWhat says, for error messages, which versions this build reads.
func readsWhat() string {
	return fmt.Sprintf("this Rota reads %s, and %s ignoring the fields it does not know",
		strings.Join(SupportedVersions, ", "), NextVersion)
}

func checkVersion(field, v string) error {
	if v == "" {
		return fieldErr(field, nil, "is missing", fmt.Sprintf("write %q", Version))
	}
	if ok, _ := reads(v); !ok {
		return unsupportedVersion(field, v)
	}
	return nil
}

func unsupportedVersion(field, v string) error {
	return fmt.Errorf("%w: %w", ErrUnsupportedVersion,
		fieldErr(field, v, "is not a version this Rota reads",
			fmt.Sprintf("%s: write %q, or read it with a Rota that reads %q", readsWhat(), Version, v)))
}

// decodeDoc decodes one annotation document under the version rule: it
// rejects empty and oversized input and trailing data, and unknown fields
// unless the document's version is NextVersion. doc names the document in
// errors. The caller validates the result (Validate checks the version).
func decodeDoc[T any](data []byte, doc string) (T, error) {
	var zero T
	if len(data) == 0 {
		return zero, fieldErr(doc, nil, "is empty", "write a JSON object")
	}
	if len(data) > MaxAnnotationBytes {
		return zero, fieldErr(doc, fmt.Sprintf("%d bytes", len(data)), "is too large",
			fmt.Sprintf("keep it under %d bytes", MaxAnnotationBytes))
	}
	// Strict first: every document this build writes, and every document of
	// a supported version, decodes here in one pass.
	v, err := decodeJSON[T](data, doc, true)
	if err == nil {
		return v, nil
	}
	// Only the version decides whether unknown fields may be ignored, so a
	// document is never read leniently because of what else it holds. The
	// peek and the decode read the version alike (same decoder, same
	// matching of keys, last one wins), so the document is read under the
	// rule of the version it then carries.
	switch ver := peekVersion(data); {
	case ver == NextVersion:
		return decodeJSON[T](data, doc, false)
	case ver != "":
		if ok, _ := reads(ver); !ok {
			return zero, unsupportedVersion(doc+".version", ver)
		}
	}
	return zero, err
}

func decodeJSON[T any](data []byte, doc string, strict bool) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&v); err != nil {
		var zero T
		return zero, &FieldError{Field: doc, Problem: "is not valid JSON: " + err.Error(),
			Fix: "write the JSON document Rota documents for this annotation"}
	}
	// dec.More reports false for a stray '}' or ']', so read one more token:
	// anything but the end of input is trailing data.
	if _, err := dec.Token(); err != io.EOF {
		var zero T
		return zero, &FieldError{Field: doc, Problem: "has data after the JSON object", Fix: "write exactly one JSON object"}
	}
	return v, nil
}

// peekVersion returns the version a document says it is, "" when it says
// none or is not a JSON object with a string version.
func peekVersion(data []byte) string {
	var head struct {
		Version string `json:"version"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&head); err != nil {
		return ""
	}
	return head.Version
}

// canonicalJSON re-encodes one JSON object in a canonical form: keys sorted
// at every level, numbers exactly as written, no white space, strings
// escaped as encoding/json escapes them, a repeated key as its last value
// (as the decoders here read it). Its top-level "signature" key, if any, is
// dropped. Two documents have the same canonical form exactly when they
// hold the same members with the same values, whatever their layout, and
// the form keeps every member, also those no struct of this build knows.
func canonicalJSON(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	delete(m, "signature")
	return json.Marshal(m)
}
