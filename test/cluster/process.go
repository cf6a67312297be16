package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane binary running as a child in its own process
// group, with stdout and stderr appended to a log file. A process is used from
// one goroutine at a time (the Cluster's lock serializes start and stop).
type process struct {
	name    string // e.g. "kube-apiserver"; also the log file's base name
	path    string
	args    []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status; valid after done is closed
}

func newProcess(binDir, name, dir string, args []string) *process {
	return &process{
		name:    name,
		path:    filepath.Join(binDir, name),
		args:    args,
		logPath: filepath.Join(dir, name+".log"),
	}
}

// start launches the process. The log file is appended to, so a restarted
// process keeps its earlier output above a marker line.
func (p *process) start() error {
	if p.running() {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	p.err = nil
	go func(done chan struct{}) {
		err := cmd.Wait()
		logFile.Close()
		p.err = err
		close(done)
	}(p.done)
	return nil
}

func (p *process) running() bool {
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

// exited returns a channel closed when the process exits, or nil if it was
// never started.
func (p *process) exited() <-chan struct{} { return p.done }

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL. It returns once the process has exited; stopping a process that is
// not running is a no-op.
func (p *process) stop(grace time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	pgid := p.cmd.Process.Pid // Setpgid makes the group id the child's pid.
	if p.running() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
			}
		}
	}
	// Anything the process left behind in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// exitError describes how the process ended, for errors raised while waiting
// for it to become ready.
func (p *process) exitError() error {
	err := p.err
	if err == nil {
		err = errors.New("exited with status 0")
	}
	return fmt.Errorf("%s exited: %w\n%s", p.name, err, p.logTail(30))
}

// logTail returns the last n lines of the log, indented, for error messages.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  --- last %d lines of %s\n", len(lines), p.logPath)
	for _, l := range lines {
		b.WriteString("  ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
