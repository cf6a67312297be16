package cluster

import "syscall"

// sysProcAttr puts the child in its own process group (so it can be signalled
// as a group) and has the kernel kill it if the test process dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
