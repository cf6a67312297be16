package contract

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPodUtilizationRoundTrip(t *testing.T) {
	for _, u := range []PodUtilization{{}, {SMPercent: 37, UsedMiB: 2048}, {SMPercent: 100}} {
		got, err := ParsePodUtilization(u.String())
		if err != nil {
			t.Fatalf("ParsePodUtilization(%q): %v", u.String(), err)
		}
		if diff := cmp.Diff(u, got); diff != "" {
			t.Errorf("round trip of %q (-want +got):\n%s", u.String(), diff)
		}
	}
}

func TestParsePodUtilization(t *testing.T) {
	tests := []struct {
		give    string
		want    PodUtilization
		wantErr bool
	}{
		{give: "sm=5", want: PodUtilization{SMPercent: 5}},
		{give: "sm=5, usedMiB=10, enc=3", want: PodUtilization{SMPercent: 5, UsedMiB: 10}},
		{give: "", wantErr: true},
		{give: "usedMiB=10", wantErr: true},
		{give: "sm=101", wantErr: true},
		{give: "sm=-1", wantErr: true},
		{give: "sm=x", wantErr: true},
		{give: "sm", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParsePodUtilization(tc.give)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParsePodUtilization(%q) error = %v, want error %v", tc.give, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParsePodUtilization(%q) (-want +got):\n%s", tc.give, diff)
		}
	}
}
