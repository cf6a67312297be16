// Package mpsfake is a stand-in for nvidia-cuda-mps-control in tests. A test
// binary calls Main from TestMain when Env is set to "1" and points the MPS
// daemons at its own executable. It behaves as the real control program does
// towards rota-device-plugin:
//
//   - "-d": starts a daemon process of its own (the parent exits at once),
//     which listens on <CUDA_MPS_PIPE_DIRECTORY>/control, writes its PID to
//     nvidia-cuda-mps-control.pid there and appends what it was started with
//     (CUDA_VISIBLE_DEVICES, the folders) to <CUDA_MPS_LOG_DIRECTORY>/control.log;
//   - no arguments: sends each stdin line to the daemon and prints its
//     answer; "quit" stops the daemon and removes its PID file; other
//     commands are logged to control.log;
//   - with FailEnv set to "1", "-d" fails with a message.
//
// kill -9 of the daemon's PID leaves the PID file behind, as with the real
// daemon.
package mpsfake

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Env turns a test binary into the stand-in; FailEnv makes "-d" fail.
const (
	Env     = "ROTA_FAKE_MPS_CONTROL"
	FailEnv = "ROTA_FAKE_MPS_FAIL"
)

const serveArg = "__rota_fake_mps_serve"

// RunTests is a TestMain for packages whose tests start MPS daemons: run
// as a daemon (Env set), the test binary is the stand-in; otherwise it
// sets Env for every child and runs the tests.
func RunTests(m *testing.M) {
	if os.Getenv(Env) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Setenv(Env, "1")
	os.Exit(m.Run())
}

// Main runs the stand-in with args (os.Args[1:]) and returns the exit code.
func Main(args []string) int {
	pipe, logs := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	switch {
	case len(args) == 1 && args[0] == "-d":
		if os.Getenv(FailEnv) == "1" {
			fmt.Fprintln(os.Stderr, "An instance of this daemon is already running")
			return 1
		}
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cmd := exec.Command(self, serveArg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		_ = cmd.Process.Release()
		return 0
	case len(args) == 1 && args[0] == serveArg:
		return serve(pipe, logs)
	case len(args) == 0:
		return client(pipe)
	}
	fmt.Fprintf(os.Stderr, "usage: nvidia-cuda-mps-control [-d]\n")
	return 2
}

func serve(pipe, logs string) int {
	sock := filepath.Join(pipe, "control")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return 1
	}
	logf := func(format string, a ...any) {
		if logs == "" {
			return
		}
		f, err := os.OpenFile(filepath.Join(logs, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return
		}
		fmt.Fprintf(f, format+"\n", a...)
		f.Close()
	}
	logf("start pid=%d visible=%s pipe=%s log=%s", os.Getpid(), os.Getenv("CUDA_VISIBLE_DEVICES"), pipe, logs)
	pidFile := filepath.Join(pipe, "nvidia-cuda-mps-control.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return 1
	}
	for {
		c, err := lis.Accept()
		if err != nil {
			return 1
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
		logf("command %s", line)
		if line == "quit" {
			_, _ = io.WriteString(c, "\n")
			c.Close()
			_ = os.Remove(pidFile)
			lis.Close()
			return 0
		}
		_, _ = io.WriteString(c, "\n")
		c.Close()
	}
}

func client(pipe string) int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		c, err := net.Dial("unix", filepath.Join(pipe, "control"))
		if err != nil {
			fmt.Println("Cannot find MPS control daemon process")
			return 1
		}
		fmt.Fprintln(c, sc.Text())
		reply, _ := io.ReadAll(c)
		c.Close()
		fmt.Print(string(reply))
	}
	return 0
}
