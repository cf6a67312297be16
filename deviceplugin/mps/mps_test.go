package mps

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/deviceplugin/mps/mpsfake"
)

// TestMain makes this test binary the nvidia-cuda-mps-control stand-in
// when run by the daemons (mpsfake.Env is set for every child).
func TestMain(m *testing.M) { mpsfake.RunTests(m) }

type modes struct {
	mu  sync.Mutex
	log []string
}

func (m *modes) set(uuid string, exclusive bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mode := "DEFAULT"
	if exclusive {
		mode = "EXCLUSIVE_PROCESS"
	}
	m.log = append(m.log, uuid+"="+mode)
	return nil
}

func (m *modes) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.log, ",")
}

// newDaemons serves the stand-in from a fresh root; every daemon still
// running at the end of the test is killed.
func newDaemons(t *testing.T, cfg Config) (*Daemons, *modes) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Binary == "" {
		cfg.Binary = self
	}
	// Short root: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Root = root
	cfg.CheckInterval = 20 * time.Millisecond
	cfg.Backoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: 100}
	m := &modes{}
	d, err := New(cfg, m.set, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if pid := d.readPID(e.Name()); pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(root)
	})
	return d, m
}

func controlLog(t *testing.T, d *Daemons, uuid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.LogDir(uuid), "control.log"))
	if err != nil {
		t.Fatalf("control log of %s: %v", uuid, err)
	}
	return string(b)
}

func TestEnsureStartsOneDaemonPerShareGPU(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, m := newDaemons(t, Config{ActiveThreadPercentage: 40})
	if st := d.Status(); !st.Available || st.Reason != "" {
		t.Fatalf("Status() = %+v, want available", st)
	}
	for _, u := range []string{"GPU-a", "GPU-b"} {
		if err := d.Ensure(ctx, u); err != nil {
			t.Fatalf("Ensure(%s): %v", u, err)
		}
	}
	run := d.Running()
	if len(run) != 2 || run["GPU-a"] == 0 || run["GPU-b"] == 0 || run["GPU-a"] == run["GPU-b"] {
		t.Fatalf("Running() = %v, want two daemons with their own PIDs", run)
	}
	for u, pid := range run {
		if !alive(pid) {
			t.Errorf("daemon of %s (pid %d) is not alive", u, pid)
		}
		log := controlLog(t, d, u)
		for _, want := range []string{"visible=" + u + " ", "pipe=" + d.PipeDir(u), "log=" + d.LogDir(u),
			"command set_default_active_thread_percentage 40"} {
			if !strings.Contains(log, want) {
				t.Errorf("control log of %s lacks %q:\n%s", u, want, log)
			}
		}
	}
	// A GPU that holds no share gets no daemon and no folder.
	if _, err := os.Stat(filepath.Join(d.cfg.Root, "GPU-c")); !os.IsNotExist(err) {
		t.Errorf("GPU-c has an MPS folder: %v", err)
	}
	if got := m.String(); got != "GPU-a=EXCLUSIVE_PROCESS,GPU-b=EXCLUSIVE_PROCESS" {
		t.Errorf("compute modes = %s", got)
	}
	// Ensure on a running daemon starts nothing.
	if err := d.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	if got := d.Running()["GPU-a"]; got != run["GPU-a"] {
		t.Errorf("second Ensure changed the daemon: pid %d, was %d", got, run["GPU-a"])
	}
	if n := strings.Count(controlLog(t, d, "GPU-a"), "start pid="); n != 1 {
		t.Errorf("GPU-a daemon started %d times", n)
	}
}

func TestDaemonRestartedAfterKill(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, _ := newDaemons(t, Config{})
	if err := d.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(ctx, "GPU-b"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	first := d.Running()
	if err := syscall.Kill(first["GPU-a"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var now map[string]int
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		now = d.Running()
		return now["GPU-a"] != 0 && now["GPU-a"] != first["GPU-a"] && alive(now["GPU-a"]), nil
	})
	if err != nil {
		t.Fatalf("daemon of GPU-a not restarted after kill -9: running %v, first %v", now, first)
	}
	if now["GPU-b"] != first["GPU-b"] {
		t.Errorf("GPU-b's daemon changed (%d → %d) though only GPU-a's was killed", first["GPU-b"], now["GPU-b"])
	}
	if n := strings.Count(controlLog(t, d, "GPU-a"), "start pid="); n != 2 {
		t.Errorf("GPU-a daemon started %d times, want 2", n)
	}
	// Cancel: Run stops both daemons (quit), leaving no PID file.
	cancel()
	<-done
	for u, pid := range now {
		if alive(pid) {
			t.Errorf("daemon of %s (pid %d) still alive after Run returned", u, pid)
		}
		if _, err := os.Stat(filepath.Join(d.PipeDir(u), PIDFile)); !os.IsNotExist(err) {
			t.Errorf("PID file of %s left after quit: %v", u, err)
		}
	}
}

func TestReleaseStopsDaemonAndRestoresComputeMode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, m := newDaemons(t, Config{})
	if err := d.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	pid := d.Running()["GPU-a"]
	if err := d.Release(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("daemon %d alive after Release", pid)
	}
	if !strings.Contains(controlLog(t, d, "GPU-a"), "command quit") {
		t.Errorf("daemon was not told to quit:\n%s", controlLog(t, d, "GPU-a"))
	}
	if got := m.String(); got != "GPU-a=EXCLUSIVE_PROCESS,GPU-a=DEFAULT" {
		t.Errorf("compute modes = %s", got)
	}
	// A released daemon is not restarted.
	d.Check(ctx)
	if len(d.Running()) != 0 {
		t.Errorf("Running() = %v after Release and Check", d.Running())
	}
	// Released twice, or never started: nothing to do.
	if err := d.Release(ctx, "GPU-a"); err != nil {
		t.Error(err)
	}
	if err := d.Release(ctx, "GPU-z"); err != nil {
		t.Error(err)
	}
}

func TestAdoptsDaemonOfEarlierProcess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, _ := newDaemons(t, Config{})
	if err := d.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	pid := d.Running()["GPU-a"]
	// A new plugin process over the same root.
	again, err := New(d.cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Ensure(ctx, "GPU-a"); err != nil {
		t.Fatal(err)
	}
	if got := again.Running()["GPU-a"]; got != pid {
		t.Errorf("new process runs daemon %d, want the adopted %d", got, pid)
	}
}

func TestUnavailableAndFailingDaemon(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, _ := newDaemons(t, Config{Binary: "/nonexistent/nvidia-cuda-mps-control"})
	st := d.Status()
	if st.Available || !strings.Contains(st.Reason, "/nonexistent/nvidia-cuda-mps-control not found") {
		t.Errorf("Status() = %+v, want unavailable naming the binary", st)
	}
	if err := d.Ensure(ctx, "GPU-a"); err == nil || !strings.Contains(err.Error(), "MPS is not available on this node") {
		t.Errorf("Ensure() = %v", err)
	}

	t.Setenv(mpsfake.FailEnv, "1")
	f, _ := newDaemons(t, Config{})
	err := f.Ensure(ctx, "GPU-a")
	if err == nil || !strings.Contains(err.Error(), "An instance of this daemon is already running") {
		t.Fatalf("Ensure() with a failing daemon = %v, want its message", err)
	}
	// Check retries after the backoff delay, and succeeds once the daemon can start.
	f.Check(ctx)
	os.Unsetenv(mpsfake.FailEnv)
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		f.Check(ctx)
		return f.Running()["GPU-a"] != 0, nil
	})
	if err != nil {
		t.Fatalf("daemon not started after the failure cleared: %v", f.Running())
	}
	if err := f.Ensure(ctx, "../evil"); err == nil {
		t.Error("Ensure accepted a UUID that escapes the root")
	}
}

func TestContainerMountsAndEnv(t *testing.T) {
	d, _ := newDaemons(t, Config{ShmDir: "/run/rota/mps/shm", ActiveThreadPercentage: 25})
	mounts, env := d.Container("GPU-a")
	if len(mounts) != 2 || mounts[0].HostPath != d.PipeDir("GPU-a") || mounts[0].ContainerPath != "/run/nvidia-mps" ||
		mounts[0].ReadOnly || mounts[1].HostPath != "/run/rota/mps/shm" || mounts[1].ContainerPath != "/dev/shm" {
		t.Errorf("mounts = %v", mounts)
	}
	if env["CUDA_MPS_PIPE_DIRECTORY"] != "/run/nvidia-mps" || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" || len(env) != 2 {
		t.Errorf("env = %v", env)
	}
	plain, _ := newDaemons(t, Config{})
	mounts, env = plain.Container("GPU-a")
	if len(mounts) != 1 || len(env) != 1 {
		t.Errorf("without shm and thread percentage: mounts %v env %v", mounts, env)
	}
	for _, bad := range []Config{{Root: "rel"}, {Root: "/r", ContainerPipeDir: "rel"}, {Root: "/r", ActiveThreadPercentage: 101}, {Root: "/r", ShmDir: "x"}} {
		if _, err := New(bad, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}
