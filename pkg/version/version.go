// Package version is the version of Rota every binary reports: stamped at
// build (make build sets Version from the chart's appVersion with
// -ldflags "-X github.com/rota-sched/rota/pkg/version.Version=..."), "dev"
// for a plain go build, with the VCS revision Go records in the binary.
package version

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// Version is Rota's version, set at build.
var Version = "dev"

// revision is the VCS revision make build stamps (git rev-parse); empty:
// the one Go recorded, where it did (GOFLAGS=-buildvcs=false records none).
var revision = ""

// Revision is the VCS revision the binary was built from ("unknown" when Go
// recorded none), with "-dirty" for a tree with changes.
func Revision() string {
	if revision != "" {
		return revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String is the line --version prints: "rota-extender 0.1.0 (revision
// 1a2b..., go1.26.8)".
func String(binary string) string {
	return fmt.Sprintf("%s %s (revision %s, %s)", binary, Version, Revision(), runtime.Version())
}

// AddFlag registers --version on fs: it prints String(binary) and exits.
func AddFlag(fs *flag.FlagSet, binary string) {
	fs.BoolFunc("version", "print the version and exit", func(string) error {
		fmt.Println(String(binary))
		os.Exit(0)
		return nil
	})
}

// Labels are the labels of a binary's rota_build_info metric.
func Labels(binary string) map[string]string {
	return map[string]string{"binary": binary, "version": Version, "revision": Revision(), "goversion": runtime.Version()}
}

// LabelNames are Labels' keys, in a fixed order.
var LabelNames = []string{"binary", "version", "revision", "goversion"}
