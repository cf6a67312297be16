// Command golangci-lint is golangci-lint v2 with Kubernetes' logcheck
// linked in as a module plugin (.golangci.yml: linters.settings.custom.
// logcheck, type "module"). It is what `golangci-lint custom` would build,
// without that command's git checkout of golangci-lint: the versions are
// pinned in this folder's go.mod and come from the Go module proxy. Built by
// `make lint` into .cache/tools/.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// logcheck registers itself as the "logcheck" module plugin.
	_ "sigs.k8s.io/logtools/logcheck/gclplugin"
)

func main() {
	info := commands.BuildInfo{Version: "unknown", Commit: "?", Date: "(unknown)", GoVersion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		for _, m := range bi.Deps {
			if m.Path == "github.com/golangci/golangci-lint/v2" {
				info.Version = m.Version + " with logcheck"
			}
		}
	}
	if err := commands.Execute(info); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}
