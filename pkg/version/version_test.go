package version

import (
	"strings"
	"testing"
)

// The version line names the binary, the stamped version and the Go
// version; the metric's labels are the names LabelNames lists.
func TestString(t *testing.T) {
	old := Version
	Version = "1.2.3"
	defer func() { Version = old }()
	s := String("rota-extender")
	for _, want := range []string{"rota-extender 1.2.3 (revision ", ", go1."} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want it to contain %q", s, want)
		}
	}
	l := Labels("rota-admission")
	if len(l) != len(LabelNames) || l["binary"] != "rota-admission" || l["version"] != "1.2.3" {
		t.Errorf("Labels() = %v", l)
	}
	for _, n := range LabelNames {
		if _, ok := l[n]; !ok {
			t.Errorf("Labels() lacks %q", n)
		}
	}
}
