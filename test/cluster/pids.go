package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// PIDs returns the process IDs of the running control-plane components by
// name ("etcd", "kube-apiserver", "kube-scheduler",
// "kube-controller-manager"), for tests that account
// for their CPU time or memory.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for name, p := range map[string]*Process{"etcd": c.etcd, "kube-apiserver": c.apiServer, "kube-scheduler": c.scheduler,
		controllerManagerBin: c.controllerManager} {
		if p != nil && p.Running() {
			out[name] = p.PID()
		}
	}
	return out
}

// CPUTime reads the CPU time (user and system) pid has used, from
// /proc/<pid>/stat; false when it cannot be read.
func CPUTime(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, true
}
