// Command rota-realnode-image is the only program in the container images
// the real-node tests run (test/realnode packs it, statically linked, into
// an image tarball that containerd imports; there is no registry):
//
//	rota-realnode-image pause     the pod sandbox: waits for SIGTERM/SIGINT
//	rota-realnode-image env       prints its environment, sorted, one
//	                              VAR=value a line, then "rota-realnode: ready",
//	                              then waits for SIGTERM/SIGINT
//	rota-realnode-image env-exit  prints its environment the same way and exits 0
//	                              (for init containers)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// ReadyLine ends the environment dump.
const readyLine = "rota-realnode: ready"

func main() {
	mode := "pause"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "pause":
		wait()
	case "env", "env-exit":
		env := os.Environ()
		slices.Sort(env)
		for _, kv := range env {
			fmt.Println(kv)
		}
		fmt.Println(readyLine)
		if mode == "env" {
			wait()
		}
	default:
		fmt.Fprintf(os.Stderr, "rota-realnode-image: unknown mode %q (pause, env, env-exit)\n", mode)
		os.Exit(2)
	}
}

// wait blocks until SIGTERM or SIGINT. As PID 1 of its container the
// process gets no default signal handlers, so it must catch them to stop.
func wait() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
