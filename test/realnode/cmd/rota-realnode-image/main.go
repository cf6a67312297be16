// Command rota-realnode-image is the only program in the container images
// the real-node tests run (test/realnode packs it, statically linked, into
// an image tarball that containerd imports; there is no registry):
//
//	rota-realnode-image pause     the pod sandbox: waits for SIGTERM/SIGINT
//	rota-realnode-image env       prints its environment, sorted, one
//	                              VAR=value a line, then "rota-realnode: ready",
//	                              then waits for SIGTERM/SIGINT
//	rota-realnode-image env DIR   the same, and after the ready line prints
//	                              "rota-realnode: ls DIR: ENTRY ..." at once and
//	                              whenever DIR's listing changes (polled every
//	                              100ms); ENTRY is NAME=CONTENT for a regular
//	                              file of up to 64 bytes, else NAME[T], T the
//	                              type letter of Go's FileMode (S a socket, d a
//	                              folder, ...), or the whole list is "error MESSAGE"
//	rota-realnode-image env-exit  prints its environment the same way and exits 0
//	                              (for init containers)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
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
			if len(os.Args) > 2 {
				go watch(os.Args[2])
			}
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

// watch prints dir's listing at once and whenever it changes.
func watch(dir string) {
	last := ""
	for {
		if l := listing(dir); l != last {
			fmt.Printf("rota-realnode: ls %s: %s\n", dir, l)
			last = l
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listing is dir's entries, sorted by name, with the content of small
// regular files (such as a PID file).
func listing(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "error " + err.Error()
	}
	var out []string
	for _, e := range entries {
		entry := e.Name() + "[" + e.Type().String()[:1] + "]"
		if e.Type().IsRegular() {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && len(b) <= 64 {
				entry = e.Name() + "=" + strings.TrimSpace(string(b))
			}
		}
		out = append(out, entry)
	}
	return strings.Join(out, " ")
}
