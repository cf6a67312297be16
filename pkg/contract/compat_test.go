package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The version rule (versions.go), for every document kind. Every test here
// is written in terms of Version, NextVersion and SupportedVersions, so it
// holds in the release build and in the rotanext build alike.

// versionAfter is the version after v ("v2" after "v1").
func versionAfter(t testing.TB, v string) string {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	if err != nil || !strings.HasPrefix(v, "v") {
		t.Fatalf("version %q is not v<n>", v)
	}
	return "v" + strconv.Itoa(n+1)
}

// docKind is one kind of annotation document, seen through generic JSON
// members so that fields no struct of this build has can be added.
type docKind struct {
	name string // the document's name in errors: "topology"
	// valid is a valid document of version v.
	valid func(v string) any
	// parse parses a document; AsWritten is cleared, to compare fields.
	parse func([]byte) (any, error)
	// nested adds an unknown member inside an object of the document.
	nested func(m map[string]any)
	// bad breaks one known field; the error names badField with badPart.
	bad               func(m map[string]any)
	badField, badPart string
	// typeKey is a known member that "x" is the wrong type for.
	typeKey string
}

func docKinds() []docKind {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	first := func(m map[string]any, key string) map[string]any {
		return m[key].([]any)[0].(map[string]any)
	}
	return []docKind{{
		name: "topology",
		valid: func(v string) any {
			d := validTopology()
			d.Version = v
			d.MPS = &TopologyMPS{Available: true}
			return d
		},
		parse: func(b []byte) (any, error) { return ParseTopology(b) },
		nested: func(m map[string]any) {
			first(m, "gpus")["futureGPUField"] = "x"
			m["mps"].(map[string]any)["futureMPSField"] = 1
		},
		bad: func(m map[string]any) { first(m, "gpus")["health"] = "Sick" },
		// the same message as for the current version (TestParseTopologyErrors)
		badField: "topology.gpus[0].health", badPart: `"Sick" is not a known health`,
		typeKey: "memoryUnitMiB",
	}, {
		name: "assignment",
		valid: func(v string) any {
			a := validAssignment()
			a.Version = v
			return a
		},
		parse: func(b []byte) (any, error) {
			a, err := ParseAssignment(b)
			a.AsWritten = nil
			return a, err
		},
		nested:   func(m map[string]any) { first(m, "gpus")["futureGPUField"] = []any{1, 2} },
		bad:      func(m map[string]any) { first(m, "gpus")["memoryMiB"] = 0 },
		badField: "assignment.gpus[0].memoryMiB", badPart: "is not positive",
		typeKey: "gpus",
	}, {
		name: "admission",
		valid: func(v string) any {
			hold := validAssignment()
			hold.Version = v
			return Admission{Version: v, AdmittedAt: at, QueuedFor: "5m0s", Team: "vision", Model: "H100",
				Hold: &hold, HoldUntil: at.Add(5 * time.Minute), NarrowedTo: []string{"node-1"}}
		},
		parse: func(b []byte) (any, error) {
			a, err := ParseAdmission(b)
			a.AsWritten = nil
			return a, err
		},
		nested:   func(m map[string]any) { m["hold"].(map[string]any)["futureHoldField"] = map[string]any{"a": true} },
		bad:      func(m map[string]any) { m["narrowedTo"] = []any{"node-1", ""} },
		badField: "admission.narrowedTo[1]", badPart: "is empty",
		typeKey: "admittedAt",
	}, {
		name: "reservation",
		valid: func(v string) any {
			return Reservation{Version: v, Since: at, HoldUntil: at.Add(time.Hour), Domain: "tier 0 leaf-a", ExpectedStart: at.Add(2 * time.Hour)}
		},
		parse:    func(b []byte) (any, error) { return ParseReservation(b) },
		nested:   func(map[string]any) {}, // a reservation holds no object
		bad:      func(m map[string]any) { delete(m, "since") },
		badField: "reservation.domain", badPart: "must be set exactly when since is",
		typeKey: "since",
	}}
}

// members is the document v as generic JSON members.
func members(t *testing.T, v any) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// withUnknown adds members no build knows, at the top and nested.
func (k docKind) withUnknown(t *testing.T, v any) []byte {
	t.Helper()
	m := members(t, v)
	m["futureField"] = map[string]any{"mode": "fast", "n": 3}
	k.nested(m)
	return mustJSON(t, m)
}

// A document of a version this build reads strictly refuses a member it
// does not know, at the top or nested, as it always did.
func TestStrictVersionsRefuseUnknownFields(t *testing.T) {
	for _, k := range docKinds() {
		for _, v := range SupportedVersions {
			t.Run(k.name+"/"+v, func(t *testing.T) {
				if _, err := k.parse(mustJSON(t, k.valid(v))); err != nil {
					t.Fatalf("the valid document does not parse: %v", err)
				}
				top := members(t, k.valid(v))
				top["futureField"] = 1
				_, err := k.parse(mustJSON(t, top))
				wantFieldError(t, err, k.name, `unknown field "futureField"`)
				_, err = k.parse(k.withUnknown(t, k.valid(v)))
				wantFieldError(t, err, k.name, "unknown field")
			})
		}
	}
}

// A document of NextVersion with members this build does not know parses,
// and every field it knows reads as written. This is the lenient path: it
// fails if NextVersion is read strictly.
func TestNextVersionIsReadLeniently(t *testing.T) {
	for _, k := range docKinds() {
		t.Run(k.name, func(t *testing.T) {
			want := k.valid(NextVersion)
			got, err := k.parse(k.withUnknown(t, want))
			if err != nil {
				t.Fatalf("a %s document with unknown fields: %v", NextVersion, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read as\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// In a NextVersion document every known field is still validated exactly
// as in this build's own version: a bad value, a wrong type.
func TestNextVersionValidatesKnownFields(t *testing.T) {
	for _, k := range docKinds() {
		for _, v := range append([]string{NextVersion}, SupportedVersions...) {
			t.Run(k.name+"/"+v, func(t *testing.T) {
				m := members(t, k.valid(v))
				if v == NextVersion {
					m = members(t, json.RawMessage(k.withUnknown(t, k.valid(v))))
				}
				k.bad(m)
				_, err := k.parse(mustJSON(t, m))
				wantFieldError(t, err, k.badField, k.badPart)

				m = members(t, k.valid(v))
				m["futureField"] = true
				m[k.typeKey] = "x"
				_, err = k.parse(mustJSON(t, m))
				wantFieldError(t, err, k.name, "is not valid JSON")
			})
		}
	}
}

// Any version but those this build reads is refused with
// ErrUnsupportedVersion and a message that says what this build reads,
// whatever else the document holds (unknown fields included).
func TestOtherVersionsAreRefused(t *testing.T) {
	twoAhead := versionAfter(t, NextVersion)
	for _, k := range docKinds() {
		for _, v := range []string{twoAhead, versionAfter(t, twoAhead), "v0", "V1", "v1 ", "v2beta1", "2", "banana"} {
			t.Run(k.name+"/"+v, func(t *testing.T) {
				for what, data := range map[string][]byte{
					"plain":          mustJSON(t, k.valid(v)),
					"unknown fields": k.withUnknown(t, k.valid(v)),
				} {
					_, err := k.parse(data)
					if !errors.Is(err, ErrUnsupportedVersion) {
						t.Fatalf("%s: error = %v, want ErrUnsupportedVersion", what, err)
					}
					wantFieldError(t, err, k.name+".version", strconv.Quote(v), "is not a version this Rota reads", readsWhat())
				}
			})
		}
	}
}

// The version a document carries, read as the decoders read it (the last
// of repeated keys, keys matched without regard to case), decides how it is
// read: the peek cannot be fooled into the lenient rule.
func TestVersionDecidesTheRule(t *testing.T) {
	body := `"memoryUnitMiB":1024,"gpus":[],"futureField":1`
	for _, tc := range []struct {
		give        string
		wantVersion string // "" when refused
	}{
		{fmt.Sprintf(`{"version":%q,"version":%q,%s}`, Version, NextVersion, body), NextVersion},
		{fmt.Sprintf(`{"version":%q,"version":%q,%s}`, NextVersion, Version, body), ""},
		{fmt.Sprintf(`{"Version":%q,%s}`, NextVersion, body), NextVersion},
		{fmt.Sprintf(`{"version":%q,%s}`, Version, body), ""},
		{fmt.Sprintf(`{%s}`, body), ""},
		{fmt.Sprintf(`{"version":2,%s}`, body), ""},
	} {
		got, err := ParseTopology([]byte(tc.give))
		switch {
		case tc.wantVersion == "" && err == nil:
			t.Errorf("%s: accepted as %s", tc.give, got.Version)
		case tc.wantVersion != "" && (err != nil || got.Version != tc.wantVersion):
			t.Errorf("%s: %+v, %v; want version %s", tc.give, got, err, tc.wantVersion)
		}
	}
}

// An admission record is read under one rule, its hold included.
func TestAdmissionHoldHasTheRecordsVersion(t *testing.T) {
	k := docKinds()[2]
	for _, tc := range []struct{ record, hold string }{{Version, NextVersion}, {NextVersion, Version}} {
		a := k.valid(tc.record).(Admission)
		a.Hold.Version = tc.hold
		_, err := ParseAdmission(mustJSON(t, a))
		wantFieldError(t, err, "admission.hold.version", strconv.Quote(tc.hold), "is not the record's version")
	}
}

var (
	testRecordKey = RecordKey("0123456789abcdef0123456789abcdef")
	testPodUID    = "pod-uid-1"
)

// signAsNextWriter signs the members m the way the next version's
// rota-extender signs a record it wrote (over the canonical form), fields
// this build does not know included, and returns the annotation value.
func signAsNextWriter(t *testing.T, kind string, m map[string]any) map[string]any {
	t.Helper()
	c, err := canonicalJSON(mustJSON(t, m))
	if err != nil {
		t.Fatal(err)
	}
	m["signature"] = testRecordKey.mac(kind, testPodUID, true, c)
	return m
}

// clone copies JSON members.
func clone(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	return members(t, json.RawMessage(mustJSON(t, m)))
}

// A signed NextVersion record verifies with the fields this build does not
// know, in any layout; none of them can be added, changed or removed
// without the key, and what the record means to this build is what was
// signed.
func TestSignedNextVersionRecords(t *testing.T) {
	type signedKind struct {
		docKind
		verify func(data []byte, uid string, edit func(*Assignment, *Admission)) (parsed, verified bool)
	}
	ks := docKinds()
	kinds := []signedKind{{ks[1], func(data []byte, uid string, edit func(*Assignment, *Admission)) (bool, bool) {
		a, err := ParseAssignment(data)
		if err != nil {
			return false, false
		}
		if edit != nil {
			edit(&a, nil)
		}
		return true, testRecordKey.VerifyAssignment(uid, a)
	}}, {ks[2], func(data []byte, uid string, edit func(*Assignment, *Admission)) (bool, bool) {
		a, err := ParseAdmission(data)
		if err != nil {
			return false, false
		}
		if edit != nil {
			edit(nil, &a)
		}
		return true, testRecordKey.VerifyAdmission(uid, a)
	}}}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			signed := signAsNextWriter(t, k.name, members(t, json.RawMessage(k.withUnknown(t, k.valid(NextVersion)))))
			data := mustJSON(t, signed)
			var indented bytes.Buffer
			if err := json.Indent(&indented, data, "", "  "); err != nil {
				t.Fatal(err)
			}
			for name, d := range map[string][]byte{"compact": data, "indented": indented.Bytes()} {
				if parsed, ok := k.verify(d, testPodUID, nil); !parsed || !ok {
					t.Errorf("%s: the signed record: parsed %v, verified %v", name, parsed, ok)
				}
			}
			if _, ok := k.verify(data, "pod-uid-2", nil); ok {
				t.Error("the record verifies for another pod")
			}

			// Edits of the annotation, none of them signed again.
			edits := map[string]func(m map[string]any){
				"unknown field added":   func(m map[string]any) { m["futureOther"] = "x" },
				"unknown field changed": func(m map[string]any) { m["futureField"].(map[string]any)["mode"] = "slow" },
				"unknown field removed": func(m map[string]any) { delete(m, "futureField") },
				"nested unknown field changed": func(m map[string]any) {
					if k.name == "assignment" {
						m["gpus"].([]any)[0].(map[string]any)["futureGPUField"] = []any{1}
					} else {
						m["hold"].(map[string]any)["futureHoldField"] = map[string]any{"a": false}
					}
				},
				"nested unknown field added": func(m map[string]any) {
					if k.name == "assignment" {
						m["gpus"].([]any)[0].(map[string]any)["futureOther"] = 1
					} else {
						m["hold"].(map[string]any)["futureOther"] = 1
					}
				},
				"known field changed": func(m map[string]any) {
					if k.name == "assignment" {
						m["node"] = "node-2"
					} else {
						m["team"] = "nlp"
					}
				},
				"made this build's version": func(m map[string]any) {
					m["version"] = Version
					if h, ok := m["hold"].(map[string]any); ok {
						h["version"] = Version
					}
				},
			}
			for name, edit := range edits {
				m := clone(t, signed)
				edit(m)
				if parsed, ok := k.verify(mustJSON(t, m), testPodUID, nil); ok {
					t.Errorf("%s: verifies (parsed %v)", name, parsed)
				}
			}

			// Values changed after parsing: a field, or the signed form
			// dropped (the fields this build knows alone were not signed).
			for name, edit := range map[string]func(*Assignment, *Admission){
				"node changed": func(a *Assignment, b *Admission) {
					if a != nil {
						a.Node = "node-2"
					} else {
						b.Hold.Node = "node-2"
					}
				},
				"signed form dropped": func(a *Assignment, b *Admission) {
					if a != nil {
						a.AsWritten = nil
					} else {
						b.AsWritten = nil
					}
				},
			} {
				if parsed, ok := k.verify(data, testPodUID, edit); !parsed || ok {
					t.Errorf("%s: parsed %v, verified %v", name, parsed, ok)
				}
			}
		})
	}
}

// A repeated key decodes into a struct by merging, into the canonical form
// by replacing: a record whose canonical form is the signed one but that
// reads differently (an extra hold field slipped in before the real hold)
// does not verify.
func TestSignedRecordMergedKeyDoesNotVerify(t *testing.T) {
	k := docKinds()[2]
	a := k.valid(NextVersion).(Admission)
	a.Hold.Whole, a.Hold.Gang = false, ""
	a.Hold.GPUs = a.Hold.GPUs[:1]
	signed := mustJSON(t, signAsNextWriter(t, "admission", members(t, a)))
	if _, ok := signedAdmission(t, signed); !ok {
		t.Fatal("the signed record does not verify")
	}
	forged := append([]byte(`{"hold":{"gang":"other/gang"},`), signed[1:]...)
	got, ok := signedAdmission(t, forged)
	if got.Hold == nil || got.Hold.Gang != "other/gang" {
		t.Fatalf("the decoder no longer merges repeated objects (hold %+v): this test shows nothing", got.Hold)
	}
	if ok {
		t.Error("a record that reads differently from what was signed verifies")
	}
}

func signedAdmission(t *testing.T, data []byte) (Admission, bool) {
	t.Helper()
	a, err := ParseAdmission(data)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return a, testRecordKey.VerifyAdmission(testPodUID, a)
}

// Records this build signs itself, of its own version and of the next,
// verify after their trip through the annotation text.
func TestSignRoundTripEveryVersion(t *testing.T) {
	ks := docKinds()
	for _, v := range append([]string{NextVersion}, SupportedVersions...) {
		as, err := testRecordKey.SignAssignment(testPodUID, ks[1].valid(v).(Assignment))
		if err != nil {
			t.Fatal(err)
		}
		data, err := as.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseAssignment(data)
		if err != nil || !testRecordKey.VerifyAssignment(testPodUID, back) {
			t.Errorf("%s assignment: %v, verified %v", v, err, err == nil && testRecordKey.VerifyAssignment(testPodUID, back))
		}
		if (back.AsWritten == nil) != (v == legacySignedVersion) {
			t.Errorf("%s assignment: AsWritten %q", v, back.AsWritten)
		}
		ad, err := testRecordKey.SignAdmission(testPodUID, ks[2].valid(v).(Admission))
		if err != nil {
			t.Fatal(err)
		}
		data, err = ad.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		backAd, err := ParseAdmission(data)
		if err != nil || !testRecordKey.VerifyAdmission(testPodUID, backAd) {
			t.Errorf("%s admission: %v", v, err)
		}
	}
}

// Documents as each build writes them, read by this build: the release
// build (v1) and the rotanext build (v2, with "writer"). Whichever build
// runs this test reads both, so a rolling upgrade and a rollback between
// the two work in either order. The signatures are those the builds
// compute with testRecordKey for testPodUID; the v1 ones are also what
// every Rota since signatures computes (the v1 signing is unchanged).
var writtenByBuild = map[string]map[string]string{
	"release": {
		"topology":    `{"version":"v1","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"GPU-0","model":"H100","memoryMiB":81920,"numa":0,"island":0,"peers":[1],"health":"Healthy"},{"index":1,"uuid":"GPU-1","model":"H100","memoryMiB":81920,"numa":0,"island":0,"peers":[0],"health":"Healthy"},{"index":2,"uuid":"GPU-2","model":"H100","memoryMiB":81920,"numa":1,"island":1,"peers":[3],"health":"Healthy"},{"index":3,"uuid":"GPU-3","model":"H100","memoryMiB":81920,"numa":1,"island":1,"peers":[2],"health":"Healthy"}],"leaf":"leaf-1","rack":"r1","generation":3}`,
		"assignment":  `{"version":"v1","node":"node-1","whole":true,"gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":81920},{"index":1,"uuid":"GPU-1","memoryMiB":81920}],"gang":"ml/train","signature":"vZf4wGqfQNcVlMXo8KX4_vQutjydOQFUGvWe5QKoA-4"}`,
		"admission":   `{"version":"v1","admittedAt":"2026-12-01T10:00:00Z","queuedFor":"5m0s","team":"vision","model":"H100","hold":{"version":"v1","node":"node-1","gpus":[{"index":2,"uuid":"GPU-2","memoryMiB":20480}]},"holdUntil":"2026-12-01T10:05:00Z","narrowedTo":["node-1"],"signature":"abzHBH1wqxvN06gWvc7vgDxvo9q_J-bXSYMQvuW2nNE"}`,
		"reservation": `{"version":"v1","since":"2026-12-01T10:00:00Z","holdUntil":"2026-12-01T10:30:00Z","domain":"tier 0 leaf-a","expectedStart":"2026-12-01T11:00:00Z"}`,
	},
	"rotanext": {
		"topology":    `{"version":"v2","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"GPU-0","model":"H100","memoryMiB":81920,"numa":0,"island":0,"peers":[1],"health":"Healthy"},{"index":1,"uuid":"GPU-1","model":"H100","memoryMiB":81920,"numa":0,"island":0,"peers":[0],"health":"Healthy"},{"index":2,"uuid":"GPU-2","model":"H100","memoryMiB":81920,"numa":1,"island":1,"peers":[3],"health":"Healthy"},{"index":3,"uuid":"GPU-3","model":"H100","memoryMiB":81920,"numa":1,"island":1,"peers":[2],"health":"Healthy"}],"leaf":"leaf-1","rack":"r1","generation":3,"writer":{"build":"next"}}`,
		"assignment":  `{"version":"v2","node":"node-1","whole":true,"gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":81920},{"index":1,"uuid":"GPU-1","memoryMiB":81920}],"gang":"ml/train","signature":"EPkdH9bchvyd8mh0dlcDvt-GziiUUGUb6mVHgcjYlSo","writer":{"build":"next"}}`,
		"admission":   `{"version":"v2","admittedAt":"2026-12-01T10:00:00Z","queuedFor":"5m0s","team":"vision","model":"H100","hold":{"version":"v2","node":"node-1","gpus":[{"index":2,"uuid":"GPU-2","memoryMiB":20480}]},"holdUntil":"2026-12-01T10:05:00Z","narrowedTo":["node-1"],"signature":"Yyo0lfhcYYUtY96P05M2WebM79KCabXyqCVCQ22JrVU","writer":{"build":"next"}}`,
		"reservation": `{"version":"v2","since":"2026-12-01T10:00:00Z","holdUntil":"2026-12-01T10:30:00Z","domain":"tier 0 leaf-a","expectedStart":"2026-12-01T11:00:00Z","writer":{"build":"next"}}`,
	},
}

// writtenDocs are the documents of writtenByBuild as values (without the
// rotanext build's writer, which only that build reads).
func writtenDocs(v string) map[string]any {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	top := validTopology()
	top.Version = v
	return map[string]any{
		"topology": top,
		"assignment": Assignment{Version: v, Node: "node-1", Whole: true, Gang: "ml/train",
			GPUs: []AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 81920}, {Index: 1, UUID: "GPU-1", MemoryMiB: 81920}}},
		"admission": Admission{Version: v, AdmittedAt: at, QueuedFor: "5m0s", Team: "vision", Model: "H100",
			Hold:      &Assignment{Version: v, Node: "node-1", GPUs: []AssignedGPU{{Index: 2, UUID: "GPU-2", MemoryMiB: 20480}}},
			HoldUntil: at.Add(5 * time.Minute), NarrowedTo: []string{"node-1"}},
		"reservation": Reservation{Version: v, Since: at, HoldUntil: at.Add(30 * time.Minute), Domain: "tier 0 leaf-a", ExpectedStart: at.Add(time.Hour)},
	}
}

func TestReadsWhatEitherBuildWrites(t *testing.T) {
	for build, docs := range writtenByBuild {
		for kind, doc := range docs {
			t.Run(build+"/"+kind, func(t *testing.T) {
				var got any
				var err error
				verified := true
				switch kind {
				case "topology":
					got, err = ParseTopology([]byte(doc))
				case "assignment":
					var a Assignment
					a, err = ParseAssignment([]byte(doc))
					verified = testRecordKey.VerifyAssignment(testPodUID, a)
					a.Signature, a.AsWritten, a.Preview = "", nil, Preview{}
					got = a
				case "admission":
					var a Admission
					a, err = ParseAdmission([]byte(doc))
					verified = testRecordKey.VerifyAdmission(testPodUID, a)
					a.Signature, a.AsWritten, a.Preview = "", nil, Preview{}
					got = a
				case "reservation":
					got, err = ParseReservation([]byte(doc))
				}
				if err != nil {
					t.Fatalf("does not parse: %v", err)
				}
				if !verified {
					t.Error("does not verify")
				}
				var v string
				if err := json.Unmarshal([]byte(doc), &struct {
					V *string `json:"version"`
				}{&v}); err != nil {
					t.Fatal(err)
				}
				want := writtenDocs(v)[kind]
				// The rotanext build reads the writer; compare the rest.
				switch g := got.(type) {
				case Topology:
					g.Preview = Preview{}
					got = g
				case Reservation:
					g.Preview = Preview{}
					got = g
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("read as\n%+v\nwant\n%+v", got, want)
				}
			})
		}
	}
}

// writeAll writes writtenDocs(Version) as this build's writers do: the
// assignment and the admission record signed.
func writeAll(t *testing.T) map[string]string {
	t.Helper()
	docs := writtenDocs(Version)
	as, err := testRecordKey.SignAssignment(testPodUID, docs["assignment"].(Assignment))
	if err != nil {
		t.Fatal(err)
	}
	ad, err := testRecordKey.SignAdmission(testPodUID, docs["admission"].(Admission))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for kind, m := range map[string]interface{ Marshal() ([]byte, error) }{
		"topology": docs["topology"].(Topology), "assignment": as, "admission": ad, "reservation": docs["reservation"].(Reservation),
	} {
		b, err := m.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		out[kind] = string(b)
	}
	return out
}

// checkWrites asserts that this build writes exactly want.
func checkWrites(t *testing.T, want map[string]string) {
	t.Helper()
	for kind, got := range writeAll(t) {
		if got != want[kind] {
			t.Errorf("%s written as\n%s\nwant\n%s", kind, got, want[kind])
		}
	}
}
