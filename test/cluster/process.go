package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one binary running as a child in its own process group, its
// stdout and stderr appended to a log file. On Linux the kernel kills it if
// the test process dies first (Pdeathsig). It can be stopped (SIGTERM, then
// SIGKILL), killed (SIGKILL, as in kill -9) and started again with the same
// arguments. A Process is safe for concurrent use.
//
// The control plane (test/cluster), Rota's binaries in the e2e harness and
// the real-node suite's children all run as a Process.
type Process struct {
	Name    string // e.g. "kube-apiserver"; used in errors
	Path    string // the binary; a bare name is looked up in $PATH
	Args    []string
	LogPath string
	// Env is added to the test process's environment (KEY=value).
	Env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run has exited
	err  error         // exit status of the last run; valid after done is closed
}

// NewProcess returns a Process, not yet started, that runs path with args and
// appends its output to logPath.
func NewProcess(name, path, logPath string, args []string) *Process {
	return &Process{Name: name, Path: path, Args: args, LogPath: logPath}
}

// Start launches the process. The log file is appended to, so a restarted
// process keeps its earlier output above a marker line.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		if p.done == done {
			p.err = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// PID returns the process id of the current or last run, or 0 when it was
// never started.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *Process) runningLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the current run ends, or nil if the
// process was never started.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Kill sends SIGKILL to the process group (kill -9) and waits for the exit.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL. It returns once the process has exited; stopping a process that is
// not running only clears what is left in its group.
func (p *Process) Stop(grace time.Duration) error { return p.signal(syscall.SIGTERM, grace) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid // Setpgid makes the group id the child's pid.
	select {
	case <-done:
	default:
		_ = syscall.Kill(-pgid, sig)
		if sig != syscall.SIGKILL {
			select {
			case <-done:
			case <-time.After(grace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, pgid)
		}
	}
	// Anything the process left behind in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// ExitError describes how the last run ended, with the end of its log, for
// errors raised while waiting for the process to become ready.
func (p *Process) ExitError() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err == nil {
		err = errors.New("exited with status 0")
	}
	return fmt.Errorf("%s exited: %w\n%s", p.Name, err, p.LogTail(30))
}

// LogTail returns the last n lines of the log, indented, for error messages.
func (p *Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  --- last %d lines of %s\n", len(lines), p.LogPath)
	for _, l := range lines {
		b.WriteString("  ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
