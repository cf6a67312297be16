package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// validTopology is a healthy 4-GPU node in two NVLink islands.
func validTopology() Topology {
	t := Topology{Version: Version, MemoryUnitMiB: 1024, Leaf: "leaf-1", Rack: "r1", Generation: 3}
	for i := range 4 {
		peer := i ^ 1
		t.GPUs = append(t.GPUs, TopologyGPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "H100",
			MemoryMiB: 81920, NUMA: i / 2, Island: i / 2, Peers: []int{peer}, Health: Healthy})
	}
	return t
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantFieldError checks that err is (or wraps) a *FieldError for field whose
// message names the field and says what to write, and contains every part.
func wantFieldError(t *testing.T, err error, field string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one for %s", field)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FieldError", err, err)
	}
	if fe.Field != field {
		t.Errorf("Field = %q, want %q (error %q)", fe.Field, field, err)
	}
	if fe.Problem == "" || fe.Fix == "" {
		t.Errorf("error %q lacks a problem or a fix: %+v", err, fe)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, field+": ") && !strings.Contains(msg, field+": ") {
		t.Errorf("message %q does not name the field %q", msg, field)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("message %q does not contain %q", msg, p)
		}
	}
}

func TestParseTopologyValid(t *testing.T) {
	want := validTopology()
	got, err := ParseTopology(mustJSON(t, want))
	if err != nil {
		t.Fatalf("ParseTopology() error = %v", err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("ParseTopology() = %+v, want %+v", got, want)
	}
	if g, ok := got.GPUByIndex(2); !ok || g.UUID != "GPU-2" {
		t.Errorf("GPUByIndex(2) = %+v, %v", g, ok)
	}
	if _, ok := got.GPUByIndex(7); ok {
		t.Errorf("GPUByIndex(7) found a GPU the node does not have")
	}
}

func TestParseTopologyErrors(t *testing.T) {
	tests := []struct {
		name      string
		giveEdit  func(*Topology)
		wantField string
		wantParts []string
	}{
		{"missing version", func(t *Topology) { t.Version = "" }, "topology.version", []string{"is missing", fmt.Sprintf("write %q", Version)}},
		{"zero unit", func(t *Topology) { t.MemoryUnitMiB = 0 }, "topology.memoryUnitMiB", []string{"is not positive", "1024 for 1 GiB"}},
		{"negative unit", func(t *Topology) { t.MemoryUnitMiB = -1024 }, "topology.memoryUnitMiB", []string{`"-1024" is not positive`}},
		{"too many GPUs", func(t *Topology) {
			for i := range MaxGPUsPerNode + 1 {
				t.GPUs = append(t.GPUs, TopologyGPU{Index: i})
			}
		}, "topology.gpus", []string{"more than 64", "list only the GPUs of this node"}},
		{"negative index", func(t *Topology) { t.GPUs[1].Index = -1 }, "topology.gpus[1].index", []string{"is out of range", "use 0..63"}},
		{"index too large", func(t *Topology) { t.GPUs[1].Index = 64 }, "topology.gpus[1].index", []string{"is out of range"}},
		{"duplicate index", func(t *Topology) { t.GPUs[2].Index = 0 }, "topology.gpus[2].index", []string{`"0" is a duplicate GPU index`, "give every GPU its own index"}},
		{"empty UUID", func(t *Topology) { t.GPUs[3].UUID = "" }, "topology.gpus[3].uuid", []string{"is empty", "write the GPU UUID"}},
		{"duplicate UUID", func(t *Topology) { t.GPUs[3].UUID = "GPU-0" }, "topology.gpus[3].uuid", []string{`"GPU-0" is a duplicate GPU UUID`, "own UUID"}},
		{"zero memory", func(t *Topology) { t.GPUs[0].MemoryMiB = 0 }, "topology.gpus[0].memoryMiB", []string{"is not positive", "total memory in MiB"}},
		{"negative memory", func(t *Topology) { t.GPUs[0].MemoryMiB = -81920 }, "topology.gpus[0].memoryMiB", []string{`"-81920" is not positive`, "e.g. 81920"}},
		{"memory below unit", func(t *Topology) { t.GPUs[0].MemoryMiB = 512 }, "topology.gpus[0].memoryMiB", []string{"smaller than one memory unit", "at most 512 MiB"}},
		{"unknown health", func(t *Topology) { t.GPUs[1].Health = "Sick" }, "topology.gpus[1].health", []string{`"Sick"`, `write "Healthy" or "Unhealthy"`}},
		{"empty health", func(t *Topology) { t.GPUs[1].Health = "" }, "topology.gpus[1].health", []string{"is not a known health"}},
		{"NUMA below -1", func(t *Topology) { t.GPUs[1].NUMA = -2 }, "topology.gpus[1].numa", []string{"is negative", "-1 when unknown"}},
		{"negative island", func(t *Topology) { t.GPUs[1].Island = -1 }, "topology.gpus[1].island", []string{"is negative", "number NVLink islands from 0"}},
		{"peer that does not exist", func(t *Topology) { t.GPUs[1].Peers = []int{0, 9} }, "topology.gpus[1].peers[1]", []string{`"9" names a GPU that does not exist`, "list only indexes of this node's GPUs"}},
		{"negative leaked memory", func(t *Topology) { t.GPUs[2].LeakedMiB = -1 }, "topology.gpus[2].leakedMiB", []string{"is negative", "leave it out when none"}},
		{"MPS reason too long", func(t *Topology) {
			t.MPS = &TopologyMPS{Reason: strings.Repeat("x", MaxReasonBytes+1)}
		}, "topology.mps.reason", []string{"is too long", "1024 bytes"}},
		{"peer is itself", func(t *Topology) { t.GPUs[2].Peers = []int{2} }, "topology.gpus[2].peers[0]", []string{"names the GPU itself", "list only other GPUs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := validTopology()
			tc.giveEdit(&doc)
			_, err := ParseTopology(mustJSON(t, doc))
			wantFieldError(t, err, tc.wantField, tc.wantParts...)
			// Validate and Marshal agree with the parser.
			wantFieldError(t, doc.Validate(), tc.wantField)
			if b, err := doc.Marshal(); err == nil || b != nil {
				t.Errorf("Marshal() = %s, %v; want no bytes and an error", b, err)
			}
		})
	}
}

func TestParseTopologyUnsupportedVersion(t *testing.T) {
	doc := validTopology()
	doc.Version = versionAfter(t, NextVersion) // two ahead of this build
	_, err := ParseTopology(mustJSON(t, doc))
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("ParseTopology(%s) error = %v, want errors.Is ErrUnsupportedVersion", doc.Version, err)
	}
	wantFieldError(t, err, "topology.version", fmt.Sprintf("%q is not a version this Rota reads", doc.Version), readsWhat())
}

// TestStrictDecode covers the document-level errors every parser shares.
func TestStrictDecode(t *testing.T) {
	valid := string(mustJSON(t, validTopology()))
	tests := []struct {
		name      string
		give      string
		wantParts []string
	}{
		{"empty", "", []string{"is empty", "write a JSON object"}},
		{"not JSON", "not json", []string{"is not valid JSON"}},
		{"array", "[]", []string{"is not valid JSON"}},
		{"unknown field", strings.Replace(valid, `"version"`, `"color":"red","version"`, 1), []string{`unknown field "color"`}},
		{"unknown GPU field", strings.Replace(valid, `"index":0`, `"index":0,"watts":700`, 1), []string{`unknown field "watts"`}},
		{"wrong type", strings.Replace(valid, `"memoryUnitMiB":1024`, `"memoryUnitMiB":"1Gi"`, 1), []string{"is not valid JSON"}},
		{"trailing object", valid + ` {}`, []string{"has data after the JSON object", "write exactly one JSON object"}},
		{"trailing garbage", valid + `x`, []string{"has data after the JSON object"}},
		{"trailing brace", valid + `}`, []string{"has data after the JSON object"}},
		{"trailing bracket", valid + `]`, []string{"has data after the JSON object"}},
		{"truncated", valid[:len(valid)-1], []string{"is not valid JSON"}},
		{"oversized", valid + strings.Repeat(" ", MaxAnnotationBytes), []string{"is too large", fmt.Sprintf("keep it under %d bytes", MaxAnnotationBytes)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tc.give))
			wantFieldError(t, err, "topology", tc.wantParts...)
			_, err = ParseAssignment([]byte(tc.give))
			if err == nil {
				t.Fatalf("ParseAssignment() accepted %q", tc.name)
			}
		})
	}
	// Trailing white space is not data.
	if _, err := ParseTopology([]byte(valid + " \n\t")); err != nil {
		t.Errorf("trailing white space: %v", err)
	}
}

func TestTopologyMarshalRoundTrip(t *testing.T) {
	want := validTopology()
	want.GPUs[3].Health, want.GPUs[3].Reason = Unhealthy, "XID 79"
	b, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTopology(b)
	if err != nil {
		t.Fatalf("ParseTopology(Marshal()) error = %v", err)
	}
	want.Preview.stamp(want.Version) // what Marshal adds in a rotanext build
	if !reflect.DeepEqual(want, got) {
		t.Errorf("round trip = %+v, want %+v", got, want)
	}
}

func TestFieldErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		give FieldError
		want string
	}{
		{"all parts", FieldError{Field: "a.b", Value: "x", Problem: "is bad", Fix: "write y"}, `a.b: "x" is bad; write y`},
		{"no value", FieldError{Field: "a", Problem: "is missing", Fix: "write y"}, `a: is missing; write y`},
		{"no fix", FieldError{Field: "a", Value: "1", Problem: "is odd"}, `a: "1" is odd`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.give.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTopologyMPSAndLeaksOptional: a document without the MPS and leak
// fields encodes exactly as before they existed (readers built before them
// reject unknown fields, so a plugin that neither manages MPS nor sees a
// leak must not write them), and documents with them round-trip.
func TestTopologyMPSAndLeaksOptional(t *testing.T) {
	doc := validTopology()
	b, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"mps", "leakedMiB", "available"} {
		if strings.Contains(string(b), `"`+field+`"`) {
			t.Errorf("document without MPS or leaks mentions %q: %s", field, b)
		}
	}
	old := `{"version":"v1","memoryUnitMiB":1024,"gpus":[{"index":0,"uuid":"GPU-a","model":"H200","memoryMiB":144384,"numa":-1,"island":0,"health":"Healthy"}]}`
	got, err := ParseTopology([]byte(old))
	if err != nil {
		t.Fatalf("a document of the earlier shape: %v", err)
	}
	if got.MPS != nil || got.GPUs[0].LeakedMiB != 0 {
		t.Errorf("earlier document read as MPS %+v, leaked %d", got.MPS, got.GPUs[0].LeakedMiB)
	}
	if again, _ := got.Marshal(); string(again) != old {
		t.Errorf("earlier document re-encodes as\n%s\nwant\n%s", again, old)
	}

	doc.MPS = &TopologyMPS{Available: false, Reason: "nvidia-cuda-mps-control not found"}
	doc.GPUs[1].LeakedMiB = 2048
	doc.GPUs[1].MemoryMiB -= 2048
	b, err = doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"mps":{"available":false,"reason":"nvidia-cuda-mps-control not found"}`, `"leakedMiB":2048`} {
		if !strings.Contains(string(b), part) {
			t.Errorf("document %s lacks %s", b, part)
		}
	}
	back, err := ParseTopology(b)
	if err != nil {
		t.Fatal(err)
	}
	doc.Preview.stamp(doc.Version)
	if !reflect.DeepEqual(back, doc) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, doc)
	}
	// available:true without a reason keeps the explicit false/true.
	doc.MPS = &TopologyMPS{Available: true}
	b, _ = doc.Marshal()
	if !strings.Contains(string(b), `"mps":{"available":true}`) {
		t.Errorf("document %s lacks the available MPS", b)
	}
}
