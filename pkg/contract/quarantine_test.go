package contract

import (
	"slices"
	"testing"
)

func TestParseQuarantine(t *testing.T) {
	tests := []struct {
		give        string
		wantNode    bool
		wantGPUs    []string
		wantRelease bool
	}{
		{give: ""},
		{give: "release", wantRelease: true},
		{give: " release ", wantRelease: true},
		{give: "node", wantNode: true},
		{give: "GPU-b, node,GPU-a,,GPU-b", wantNode: true, wantGPUs: []string{"GPU-a", "GPU-b"}},
		{give: "GPU-a", wantGPUs: []string{"GPU-a"}},
	}
	for _, tc := range tests {
		node, gpus, release := ParseQuarantine(tc.give)
		if node != tc.wantNode || !slices.Equal(gpus, tc.wantGPUs) || release != tc.wantRelease {
			t.Errorf("ParseQuarantine(%q) = %v, %v, %v; want %v, %v, %v", tc.give, node, gpus, release,
				tc.wantNode, tc.wantGPUs, tc.wantRelease)
		}
		if tc.wantRelease {
			continue
		}
		// What FormatQuarantine writes parses back to the same.
		n2, g2, _ := ParseQuarantine(FormatQuarantine(node, gpus))
		if n2 != node || !slices.Equal(g2, gpus) {
			t.Errorf("round trip of %q: %v, %v", tc.give, n2, g2)
		}
	}
	if got := FormatQuarantine(true, []string{"GPU-b", "GPU-a"}); got != "GPU-a,GPU-b,node" {
		t.Errorf("FormatQuarantine = %q", got)
	}
}
