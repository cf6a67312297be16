package realnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child (containerd, kubelet, rota-device-plugin,
// rota-extender) in its own process group, with stdout and stderr appended
// to <dir>/<name>.log. The kernel kills it if the test binary dies
// (Pdeathsig). Safe for concurrent use.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func newProcess(name, path, dir string, args []string) *process {
	return &process{name: name, path: path, args: args, logPath: filepath.Join(dir, name+".log")}
}

// start launches the process; a restarted process appends to its log below
// a marker line.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *process) runningLocked() bool {
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

// pid returns the process id, 0 if it was never started.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited is closed when the current run ends (nil before the first start).
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// for the exit. Stopping a stopped process is a no-op.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid // Setpgid: the group id is the child's pid
	select {
	case <-done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
			}
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // anything left in its group
	return nil
}

// exitError describes how the process ended, with the end of its log.
func (p *process) exitError() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err == nil {
		err = errors.New("exited with status 0")
	}
	return fmt.Errorf("%s exited: %w\n%s", p.name, err, p.logTail(30))
}

// logTail returns the last n lines of the log, indented.
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
