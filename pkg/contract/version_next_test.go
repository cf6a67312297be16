//go:build rotanext

package contract

import (
	"fmt"
	"strings"
	"testing"
)

// The rotanext build writes v2 with the writer, as writtenByBuild says (the
// release build's tests read those documents).
func TestNextBuildWrites(t *testing.T) {
	checkWrites(t, writtenByBuild["rotanext"])
	for kind, doc := range writtenByBuild["rotanext"] {
		if !strings.Contains(doc, `"writer":{"build":"next"}`) {
			t.Errorf("%s lacks the writer: %s", kind, doc)
		}
	}
}

// The rotanext build reads its own field strictly: it validates the
// writer, and a v1 document carries none (the field came with v2).
func TestNextBuildValidatesWriter(t *testing.T) {
	for _, k := range docKinds() {
		t.Run(k.name, func(t *testing.T) {
			for _, tc := range []struct {
				version string
				writer  any
				field   string
				part    string
			}{
				{"v1", map[string]any{"build": "next"}, k.name + ".writer", "is not part of a v1 document"},
				{Version, map[string]any{"build": ""}, k.name + ".writer.build", "is empty"},
				{Version, map[string]any{"build": strings.Repeat("x", maxWriterBuildBytes+1)}, k.name + ".writer.build", "is too long"},
				{NextVersion, map[string]any{}, k.name + ".writer.build", "is empty"},
			} {
				m := members(t, k.valid(tc.version))
				m["writer"] = tc.writer
				_, err := k.parse(mustJSON(t, m))
				wantFieldError(t, err, tc.field, tc.part)
			}
			m := members(t, k.valid(Version))
			m["writer"] = map[string]any{"build": "release-2", "extra": 1}
			_, err := k.parse(mustJSON(t, m))
			wantFieldError(t, err, k.name, `unknown field "extra"`)
		})
	}
}

// A v1 document read by the rotanext build has no writer, and writing a v1
// value adds none (the field is not part of v1).
func TestNextBuildReadsV1(t *testing.T) {
	top, err := ParseTopology([]byte(writtenByBuild["release"]["topology"]))
	if err != nil || top.Writer != nil {
		t.Fatalf("%+v, %v", top, err)
	}
	b, err := top.Marshal()
	if err != nil || string(b) != writtenByBuild["release"]["topology"] {
		t.Errorf("a v1 document re-written as %s, %v", b, err)
	}
	if got := fmt.Sprint(SupportedVersions); got != "[v1 v2]" {
		t.Errorf("SupportedVersions = %s", got)
	}
}
