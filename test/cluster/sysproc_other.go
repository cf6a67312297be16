//go:build unix && !linux

package cluster

import "syscall"

// sysProcAttr puts the child in its own process group so it can be signalled
// as a group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
