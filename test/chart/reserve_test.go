//go:build e2e

package chart

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The extender.reservations values reach rota-extender as flags it
// accepts: on by default with the documented knobs, --reserve=false alone
// when turned off.
func TestChartReservations(t *testing.T) {
	flagRE := regexp.MustCompile(`- (--(?:reserve|default-runtime)[a-z-]*=\S+)`)
	for _, tc := range []struct {
		sets []string
		want []string
	}{
		{nil, []string{"--reserve=true", "--reserve-large-gpus=64", "--reserve-max-age=30m", "--reserve-max-hold=2h",
			"--reserve-cool-off=30m", "--reserve-max=4", "--default-runtime=0s"}},
		{[]string{"extender.reservations.enabled=false"}, []string{"--reserve=false"}},
		{[]string{"extender.reservations.largeGPUs=128", "extender.reservations.defaultRuntime=6h"},
			[]string{"--reserve=true", "--reserve-large-gpus=128", "--reserve-max-age=30m", "--reserve-max-hold=2h",
				"--reserve-cool-off=30m", "--reserve-max=4", "--default-runtime=6h"}},
	} {
		var got []string
		for _, m := range flagRE.FindAllStringSubmatch(string(render(t, tc.sets)), -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v: rendered %v, want %v", tc.sets, got, tc.want)
			continue
		}
		// rota-extender parses them (a bad value or unknown flag fails
		// before --help is reached).
		bin := filepath.Join(repoRoot(t), "bin", "rota-extender")
		out, _ := exec.Command(bin, append(got, "--help")...).CombinedOutput()
		if s := string(out); strings.Contains(s, "invalid value") || strings.Contains(s, "not defined") || !strings.Contains(s, "-reserve-max-hold") {
			t.Errorf("%v: rota-extender refuses the chart's flags: %s", tc.sets, s)
		}
	}
}
