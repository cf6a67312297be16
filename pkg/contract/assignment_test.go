package contract

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

func validAssignment() Assignment {
	return Assignment{Version: Version, Node: "node-1", Whole: true, Gang: "ml/train-7", GPUs: []AssignedGPU{
		{Index: 0, UUID: "GPU-0", MemoryMiB: 81920}, {Index: 1, UUID: "GPU-1", MemoryMiB: 81920},
	}}
}

func TestParseAssignmentValid(t *testing.T) {
	tests := []struct {
		name string
		give Assignment
	}{
		{"whole GPUs", validAssignment()},
		{"memory share", Assignment{Version: Version, Node: "n", GPUs: []AssignedGPU{{Index: 5, UUID: "GPU-5", MemoryMiB: 20480}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.give.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseAssignment(b)
			if err != nil {
				t.Fatalf("ParseAssignment() error = %v", err)
			}
			want := tc.give
			want.Preview.stamp(want.Version) // what Marshal adds in a rotanext build
			if !reflect.DeepEqual(want, got) {
				t.Errorf("round trip = %+v, want %+v", got, want)
			}
		})
	}
	if got, want := validAssignment().UUIDs(), []string{"GPU-0", "GPU-1"}; !slices.Equal(got, want) {
		t.Errorf("UUIDs() = %v, want %v", got, want)
	}
}

func TestParseAssignmentErrors(t *testing.T) {
	tests := []struct {
		name      string
		giveEdit  func(*Assignment)
		wantField string
		wantParts []string
	}{
		{"missing version", func(a *Assignment) { a.Version = "" }, "assignment.version", []string{"is missing", fmt.Sprintf("write %q", Version)}},
		{"empty node", func(a *Assignment) { a.Node = "" }, "assignment.node", []string{"is empty", "write the name of the node"}},
		{"no GPUs", func(a *Assignment) { a.GPUs = nil }, "assignment.gpus", []string{"is empty", "list at least one GPU"}},
		{"too many GPUs", func(a *Assignment) {
			a.GPUs = nil
			for i := range MaxGPUsPerNode + 1 {
				a.GPUs = append(a.GPUs, AssignedGPU{Index: i, UUID: "u", MemoryMiB: 1})
			}
		}, "assignment.gpus", []string{`"65" lists too many GPUs`, "list at most 64"}},
		{"share on two GPUs", func(a *Assignment) { a.Whole = false }, "assignment.gpus", []string{"several GPUs for a memory share", "set whole: true"}},
		{"negative index", func(a *Assignment) { a.GPUs[1].Index = -1 }, "assignment.gpus[1].index", []string{"is out of range", "use 0..63"}},
		{"duplicate index", func(a *Assignment) { a.GPUs[1].Index = 0 }, "assignment.gpus[1].index", []string{"is a duplicate GPU index", "list each GPU once"}},
		{"empty UUID", func(a *Assignment) { a.GPUs[0].UUID = "" }, "assignment.gpus[0].uuid", []string{"is empty", "topology annotation"}},
		{"zero memory", func(a *Assignment) { a.GPUs[1].MemoryMiB = 0 }, "assignment.gpus[1].memoryMiB", []string{"is not positive", "write the assigned memory in MiB"}},
		{"negative memory", func(a *Assignment) { a.GPUs[1].MemoryMiB = -5 }, "assignment.gpus[1].memoryMiB", []string{`"-5" is not positive`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := validAssignment()
			tc.giveEdit(&a)
			_, err := ParseAssignment(mustJSON(t, a))
			wantFieldError(t, err, tc.wantField, tc.wantParts...)
			if _, err := a.Marshal(); err == nil {
				t.Errorf("Marshal() accepted an invalid assignment")
			}
		})
	}
}

func TestParseAssignmentUnsupportedVersion(t *testing.T) {
	a := validAssignment()
	a.Version = "v0"
	_, err := ParseAssignment(mustJSON(t, a))
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("error = %v, want errors.Is ErrUnsupportedVersion", err)
	}
	wantFieldError(t, err, "assignment.version", `"v0"`, readsWhat(), fmt.Sprintf("write %q", Version))
}

func TestParseAssignmentDocumentErrors(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantParts []string
	}{
		{"unknown field", `{"version":"v1","node":"n","gpus":[{"index":0,"uuid":"u","memoryMiB":1}],"pod":"x"}`, []string{`unknown field "pod"`}},
		{"trailing data", `{"version":"v1","node":"n","gpus":[{"index":0,"uuid":"u","memoryMiB":1}]}{}`, []string{"has data after"}},
		{"memory as string", `{"version":"v1","node":"n","gpus":[{"index":0,"uuid":"u","memoryMiB":"20Gi"}]}`, []string{"is not valid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAssignment([]byte(tc.give))
			wantFieldError(t, err, "assignment", tc.wantParts...)
		})
	}
}
