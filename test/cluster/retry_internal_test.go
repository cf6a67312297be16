//go:build e2e

package cluster

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestStartAgainOnATakenPort: the API server's drawn port is taken by
// another listener before it binds (as another test process can take
// it); Start draws another and the control plane comes up there.
func TestStartAgainOnATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	defer func(f func(int) ([]int, error)) { drawPorts = f }(drawPorts)
	drawPorts = func(n int) ([]int, error) {
		ports, err := FreePorts(n)
		if err == nil {
			ports[2] = taken // the API server's
		}
		return ports, err
	}
	c, err := Start(t.Context(), Options{Dir: t.TempDir(), NoScheduler: true, NoPodSimulator: true})
	if err != nil {
		t.Fatalf("Start with the API server's port taken: %v", err)
	}
	defer func() { _ = c.Stop() }()
	if strings.HasSuffix(c.APIServerURL, ":"+strconv.Itoa(taken)) {
		t.Fatalf("API server at %s, the taken port", c.APIServerURL)
	}
	if _, err := c.Version(); err != nil {
		t.Fatalf("API server at %s does not answer: %v", c.APIServerURL, err)
	}
	if n := len(c.apiServerRuns); n != 1 {
		t.Errorf("%d API server runs recorded, want 1 (the failed start left out)", n)
	}
}
