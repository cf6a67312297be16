package handoff

import (
	"testing"
)

func TestMemoryDeviceID(t *testing.T) {
	for _, tc := range []struct {
		give     string
		wantUUID string
		wantN    int
		wantOK   bool
	}{
		{"GPU-a::0", "GPU-a", 0, true},
		{"GPU-a::140", "GPU-a", 140, true},
		{"GPU-a", "", 0, false},
		{"GPU-a::", "", 0, false},
		{"::3", "", 0, false},
		{"GPU-a::-1", "", 0, false},
		{"GPU-a::01", "", 0, false},
		{"GPU-a::1::2", "", 0, false},
	} {
		u, n, ok := ParseMemoryDeviceID(tc.give)
		if u != tc.wantUUID || n != tc.wantN || ok != tc.wantOK {
			t.Errorf("ParseMemoryDeviceID(%q) = %q %d %v", tc.give, u, n, ok)
		}
	}
}
