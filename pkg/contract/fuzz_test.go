package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// checkParseError asserts the parsers' error contract: every error is (or
// wraps) a *FieldError with a field and a problem.
func checkParseError(t *testing.T, err error) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FieldError", err, err)
	}
	if fe.Field == "" || fe.Problem == "" {
		t.Fatalf("FieldError %+v lacks a field or a problem", fe)
	}
	if errors.Is(err, ErrUnsupportedVersion) != (fe.Problem == "is not a version this Rota reads") {
		t.Fatalf("error %v: ErrUnsupportedVersion wrapping does not match the problem", err)
	}
}

// checkVersionRule asserts the version rule (versions.go) on a document
// that parsed: the same members plus one this build does not know parse
// exactly when the document's version is NextVersion, and then read the
// same. parse returns the document's version and its fields encoded.
func checkVersionRule(t *testing.T, data []byte, parse func([]byte) (string, []byte, error)) {
	t.Helper()
	// The canonical form holds the same members; a repeated key in data
	// may read differently from it, so compare with the form itself.
	c, err := canonicalJSON(data)
	if err != nil {
		t.Fatalf("a parsed document has no canonical form: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(c, &m); err != nil {
		t.Fatal(err)
	}
	if s, ok := m["signature"]; ok { // only the top-level one is dropped
		t.Fatalf("canonical form keeps the signature %v", s)
	}
	version, base, err := parse(c)
	if err != nil {
		return // read differently, e.g. a repeated key merged
	}
	m["zzFutureField"] = []any{1, "two"}
	more, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v2, got, err := parse(more)
	if version != NextVersion {
		if err == nil {
			t.Fatalf("a %s document with an unknown field parsed: %s", version, more)
		}
		checkParseError(t, err)
		return
	}
	if err != nil {
		t.Fatalf("a %s document with an unknown field: %v (%s)", NextVersion, err, more)
	}
	if v2 != version || !bytes.Equal(got, base) {
		t.Fatalf("an unknown field changed what a %s document says:\n%s\n%s", NextVersion, base, got)
	}
}

// checkSigned asserts that a record this build signs verifies after its
// trip through the annotation, and not with a member added.
func checkSigned(t *testing.T, signAndMarshal func() ([]byte, error), verify func([]byte) (bool, error)) {
	t.Helper()
	out, err := signAndMarshal()
	if err != nil {
		t.Fatalf("a parsed record does not sign: %v", err)
	}
	if ok, err := verify(out); err != nil || !ok {
		t.Fatalf("a signed record: %v, verified %v (%s)", err, ok, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	m["zzFutureField"] = true
	more, _ := json.Marshal(m)
	if ok, err := verify(more); err == nil && ok {
		t.Fatalf("a signed record with a member added verifies: %s", more)
	}
}

// nextVersionSeeds are documents of NextVersion with members no build
// knows and of the version two ahead, for each parser's corpus.
func nextVersionSeeds(f *testing.F, valid []byte) {
	twoAhead := versionAfter(f, NextVersion)
	var m map[string]any
	if err := json.Unmarshal(valid, &m); err != nil {
		f.Fatal(err)
	}
	for _, v := range []string{NextVersion, twoAhead} {
		m["version"] = v
		if h, ok := m["hold"].(map[string]any); ok {
			h["version"] = v
		}
		plain, _ := json.Marshal(m)
		f.Add(plain)
		m["futureField"] = map[string]any{"mode": "fast"}
		more, _ := json.Marshal(m)
		f.Add(more)
		delete(m, "futureField")
	}
}

var fuzzKey = RecordKey("fuzz-key-fuzz-key-fuzz-key-fuzz-key")

func FuzzParseTopology(f *testing.F) {
	good := validTopology()
	b, _ := good.Marshal()
	f.Add(b)
	f.Add([]byte(`{"version":"v1","memoryUnitMiB":1024,"gpus":[]}`))
	f.Add([]byte(`{"version":"v1","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"GPU-a","model":"H200","memoryMiB":144384,"numa":-1,"island":0,"health":"Unhealthy","reason":"XID 79"}]}`))
	f.Add([]byte(`{"version":"v2","memoryUnitMiB":1024,"gpus":[]}`))
	f.Add([]byte(`{"version":"v1","memoryUnitMiB":1024,"mps":{"available":false,"reason":"no binary"},"gpus":[{"index":0,"uuid":"GPU-a","model":"H200","memoryMiB":140288,"leakedMiB":4096,"numa":0,"island":0,"health":"Healthy"}]}`))
	f.Add([]byte(`{"version":"v1","memoryUnitMiB":1024,"mps":{"available":true},"gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024,"leakedMiB":-1,"health":"Healthy"}]}`))
	f.Add([]byte(`{"version":"v1","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"a","memoryMiB":1024,"health":"Healthy","peers":[1]}]}`))
	f.Add([]byte(`{}}`))
	f.Add([]byte(`null`))
	nextVersionSeeds(f, b)
	f.Add([]byte(`{"version":"` + NextVersion + `","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024,"health":"Healthy","watts":700}],"mps":{"available":true,"servers":2}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseTopology(data)
		if err != nil {
			checkParseError(t, err)
			return
		}
		checkVersionRule(t, data, func(b []byte) (string, []byte, error) {
			d, err := ParseTopology(b)
			return d.Version, mustJSON(t, normTopology(d)), err
		})
		// A parsed document is valid, re-encodes, and parses back equal.
		if err := got.Validate(); err != nil {
			t.Fatalf("parsed document does not validate: %v", err)
		}
		out, err := got.Marshal()
		if err != nil {
			t.Fatalf("Marshal() of a parsed document: %v", err)
		}
		again, err := ParseTopology(out)
		if err != nil {
			t.Fatalf("ParseTopology(Marshal()) = %v for %s", err, out)
		}
		got.Preview.stamp(got.Version) // what Marshal adds in a rotanext build
		if !reflect.DeepEqual(normTopology(got), normTopology(again)) {
			t.Fatalf("round trip changed the document:\n got %+v\nwant %+v", again, got)
		}
	})
}

// normTopology maps empty peer lists to nil (omitempty drops them).
func normTopology(t Topology) Topology {
	if len(t.GPUs) == 0 {
		t.GPUs = nil
	}
	for i := range t.GPUs {
		if len(t.GPUs[i].Peers) == 0 {
			t.GPUs[i].Peers = nil
		}
	}
	return t
}

func FuzzParseAssignment(f *testing.F) {
	b, _ := validAssignment().Marshal()
	f.Add(b)
	f.Add([]byte(`{"version":"v1","node":"n","gpus":[{"index":3,"uuid":"GPU-3","memoryMiB":20480}]}`))
	f.Add([]byte(`{"version":"v1","node":"n","whole":true,"gpus":[{"index":0,"uuid":"a","memoryMiB":1},{"index":0,"uuid":"b","memoryMiB":1}]}`))
	f.Add([]byte(`{"version":"v9","node":"n","gpus":[]}`))
	f.Add([]byte(`[]`))
	nextVersionSeeds(f, b)
	signed, _ := fuzzKey.SignAssignment("uid-1", validAssignment())
	b, _ = signed.Marshal()
	f.Add(b)
	f.Add([]byte(`{"version":"` + NextVersion + `","node":"n","gpus":[{"index":3,"uuid":"GPU-3","memoryMiB":20480,"mig":"1g.10gb"}],"signature":"x","priority":"high"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseAssignment(data)
		if err != nil {
			checkParseError(t, err)
			return
		}
		checkVersionRule(t, data, func(b []byte) (string, []byte, error) {
			a, err := ParseAssignment(b)
			return a.Version, mustJSON(t, a), err
		})
		checkSigned(t, func() ([]byte, error) {
			s, err := fuzzKey.SignAssignment("uid-1", got)
			if err != nil {
				return nil, err
			}
			return s.Marshal()
		}, func(b []byte) (bool, error) {
			a, err := ParseAssignment(b)
			return fuzzKey.VerifyAssignment("uid-1", a), err
		})
		out, err := got.Marshal()
		if err != nil {
			t.Fatalf("Marshal() of a parsed assignment: %v", err)
		}
		again, err := ParseAssignment(out)
		if err != nil {
			t.Fatalf("ParseAssignment(Marshal()) = %v for %s", err, out)
		}
		got.Preview.stamp(got.Version)            // what Marshal adds in a rotanext build
		got.AsWritten, again.AsWritten = nil, nil // the form read, not the fields
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("round trip changed the assignment:\n got %+v\nwant %+v", again, got)
		}
		if len(got.UUIDs()) != len(got.GPUs) || (!got.Whole && len(got.GPUs) != 1) {
			t.Fatalf("parsed assignment breaks its own rules: %+v", got)
		}
	})
}

func FuzzParseGangSize(f *testing.F) {
	for _, s := range []string{"", "0", "1", "16", "10000", "10001", "-3", "1e3", "007", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseGangSize("annotation example.com/gang-size", s)
		if err != nil {
			checkParseError(t, err)
			return
		}
		if n < 1 || n > MaxGangSize {
			t.Fatalf("ParseGangSize(%q) = %d, outside 1..%d", s, n, MaxGangSize)
		}
		for _, c := range s {
			if c < '0' || c > '9' {
				t.Fatalf("ParseGangSize(%q) accepted a non-digit", s)
			}
		}
	})
}

func FuzzNewNames(f *testing.F) {
	for _, s := range []string{"", "example.com", "a.b", "A.com", "kubernetes.io", "x.kubernetes.io", "requests.a.b", "a..b", "-a.b", "gpu.rota-sched.io"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, domain string) {
		n, err := NewNames(domain)
		if err != nil {
			checkParseError(t, err)
			return
		}
		// Every name is "<domain>/<name>" for a valid DNS domain.
		if domain != "" && n.Domain != domain {
			t.Fatalf("Domain = %q, want %q", n.Domain, domain)
		}
		if len(n.Domain) > 253 || n.GPU != n.Domain+"/gpu" || n.GPUMemory != n.Domain+"/gpu-memory" {
			t.Fatalf("NewNames(%q) = %+v", domain, n)
		}
		if again, err := NewNames(n.Domain); err != nil || again != n {
			t.Fatalf("NewNames is not stable: %+v, %v", again, err)
		}
	})
}

func FuzzParseAdmission(f *testing.F) {
	f.Add([]byte(`{"version":"v1","admittedAt":"2026-12-01T10:00:00Z","team":"vision","hold":{"version":"v1","node":"n1","gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024}]},"holdUntil":"2026-12-01T10:05:00Z"}`))
	f.Add([]byte(`{"version":"v1","admittedAt":"2026-12-01T10:00:00Z","team":"t"}`))
	f.Add([]byte(`{"version":"v1","admittedAt":"2026-12-01T10:00:00Z","team":"t","narrowedTo":["n1","n2",""]}`))
	f.Add([]byte(`{}`))
	nextVersionSeeds(f, []byte(`{"version":"v1","admittedAt":"2026-12-01T10:00:00Z","team":"vision","hold":{"version":"v1","node":"n1","gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024}]},"holdUntil":"2026-12-01T10:05:00Z"}`))
	f.Add([]byte(`{"version":"` + NextVersion + `","admittedAt":"2026-12-01T10:00:00Z","team":"t","hold":{"version":"` + NextVersion + `","node":"n1","gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024}],"lease":"x"},"holdUntil":"2026-12-01T10:05:00Z","priority":3}`))
	f.Add([]byte(`{"version":"` + NextVersion + `","admittedAt":"2026-12-01T10:00:00Z","team":"t","hold":{"version":"v1","node":"n1","gpus":[{"index":0,"uuid":"GPU-a","memoryMiB":1024}]},"holdUntil":"2026-12-01T10:05:00Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAdmission(data)
		if err != nil {
			checkParseError(t, err)
			return
		}
		checkVersionRule(t, data, func(b []byte) (string, []byte, error) {
			a, err := ParseAdmission(b)
			return a.Version, mustJSON(t, a), err
		})
		checkSigned(t, func() ([]byte, error) {
			s, err := fuzzKey.SignAdmission("uid-1", a)
			if err != nil {
				return nil, err
			}
			return s.Marshal()
		}, func(b []byte) (bool, error) {
			a, err := ParseAdmission(b)
			return fuzzKey.VerifyAdmission("uid-1", a), err
		})
		out, err := a.Marshal()
		if err != nil {
			t.Fatalf("a parsed admission does not marshal: %v", err)
		}
		b, err := ParseAdmission(out)
		if err != nil {
			t.Fatalf("a marshalled admission does not parse: %v (%s)", err, out)
		}
		if !a.AdmittedAt.Equal(b.AdmittedAt) || a.Team != b.Team || (a.Hold == nil) != (b.Hold == nil) || !slices.Equal(a.NarrowedTo, b.NarrowedTo) {
			t.Fatalf("round trip changed the record: %+v -> %+v", a, b)
		}
	})
}

func FuzzParseReservation(f *testing.F) {
	f.Add([]byte(`{"version":"v1","since":"2026-12-01T10:00:00Z","domain":"tier 0 leaf-a","expectedStart":"2026-12-01T11:00:00Z"}`))
	f.Add([]byte(`{"version":"v1","cooledUntil":"2026-12-01T10:30:00Z"}`))
	f.Add([]byte(`{"version":"v1","domain":"x"}`))
	nextVersionSeeds(f, []byte(`{"version":"v1","since":"2026-12-01T10:00:00Z","domain":"tier 0 leaf-a","expectedStart":"2026-12-01T11:00:00Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseReservation(data)
		if err != nil {
			checkParseError(t, err)
			return
		}
		checkVersionRule(t, data, func(b []byte) (string, []byte, error) {
			r, err := ParseReservation(b)
			return r.Version, mustJSON(t, r), err
		})
		out, err := r.Marshal()
		if err != nil {
			t.Fatalf("a parsed reservation does not marshal: %v", err)
		}
		b, err := ParseReservation(out)
		if err != nil {
			t.Fatalf("a marshalled reservation does not parse: %v (%s)", err, out)
		}
		if !r.Since.Equal(b.Since) || r.Domain != b.Domain || !r.CooledUntil.Equal(b.CooledUntil) {
			t.Fatalf("round trip changed the record: %+v -> %+v", r, b)
		}
	})
}
