package realnode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Host paths outside the node's folder that containerd or the kubelet write
// whatever their configuration says. The device plugin socket folder is
// compiled into the kubelet; /var/log/containers holds its symlinks to the
// pod logs; containerd's shims put their sockets under /run/containerd.
const (
	kubeletDir         = "/var/lib/kubelet"
	DevicePluginDir    = "/var/lib/kubelet/device-plugins/"
	containerLogLinks  = "/var/log/containers"
	containerdRunDir   = "/run/containerd"
	cgroupFSRoot       = "/sys/fs/cgroup"
	kubeletSocketName  = "kubelet.sock"
	iptablesWaitSecond = "5"
)

// kubeletSysctls are the kernel settings the kubelet's container manager
// sets at start (setupKernelTunables) unless protectKernelDefaults is on.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// trackedDirs are the host folders whose new entries are removed again, in
// this order (deepest first). A folder that did not exist is removed whole.
var trackedDirs = []string{
	DevicePluginDir,
	kubeletDir,
	containerLogLinks,
	"/var/log/pods",
	containerdRunDir,
	"/run/netns",
}

// iptablesTables are the tables whose chains and rules are compared.
var iptablesTables = []string{"filter", "nat", "mangle"}

// hostGuard records the host state a real node changes outside its own
// folder (mounts, sysctls, cgroups, iptables rules, files under
// trackedDirs) and puts it back. Not safe for concurrent use.
//
// The baseline is also written to a journal file under /run/rota-realnode
// before anything changes, so that a test binary that dies without
// cleaning up (go test -timeout, SIGKILL, a closed pipe) is cleaned up by
// the next Start: see recoverStale.
type hostGuard struct {
	// Owner identifies the test process (pid and start time) for the journal.
	OwnerPID   int    `json:"ownerPID"`
	OwnerStart string `json:"ownerStart"`
	NodeDir    string `json:"nodeDir"`
	CgroupName string `json:"cgroupName"`
	// ContainerdSocket names the shims to kill (their -address).
	ContainerdSocket string `json:"containerdSocket"`

	Mounts   map[string]bool     `json:"mounts"`
	Sysctls  map[string]string   `json:"sysctls"`
	IPTables map[string][]string `json:"iptables"` // "iptables filter" -> `-S` lines
	Dirs     map[string]dirState `json:"dirs"`
}

type dirState struct {
	Existed bool            `json:"existed"`
	Entries map[string]bool `json:"entries,omitempty"`
}

// journalDir holds one baseline file per running harness.
const journalDir = "/run/rota-realnode"

// newHostGuard takes the baseline and writes the journal: call it before
// anything is started.
func newHostGuard(nodeDir, cgroupName, containerdSocket string) (*hostGuard, error) {
	g := &hostGuard{OwnerPID: os.Getpid(), OwnerStart: processStart(os.Getpid()), NodeDir: nodeDir,
		CgroupName: cgroupName, ContainerdSocket: containerdSocket}
	var err error
	if g.Mounts, err = mountPoints(); err != nil {
		return nil, err
	}
	if g.Sysctls, err = readSysctls(); err != nil {
		return nil, err
	}
	g.IPTables = iptablesState()
	g.Dirs = map[string]dirState{}
	for _, d := range trackedDirs {
		g.Dirs[d] = readDir(d)
	}
	data, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(journalDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(g.journalFile(), data, 0o600); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *hostGuard) journalFile() string {
	return filepath.Join(journalDir, filepath.Base(g.NodeDir)+".json")
}

// forget removes the journal (after a successful revert).
func (g *hostGuard) forget() error {
	if err := os.Remove(g.journalFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = syscall.Rmdir(journalDir) // only when empty: another harness may run
	return nil
}

// recoverStale reverts what harnesses that died without cleaning up left on
// the host, from their journals: it kills their containers (by the PIDs in
// their cgroups) and shims (by the containerd socket on their command
// line), then reverts as Stop would. Their folders (logs) are kept. It
// returns what it did, one line per stale harness.
func recoverStale() ([]string, error) {
	entries, err := os.ReadDir(journalDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, e := range entries {
		path := filepath.Join(journalDir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var g hostGuard
		if err := json.Unmarshal(data, &g); err != nil {
			errs = append(errs, fmt.Errorf("journal %s: %w", path, err))
			continue
		}
		if g.OwnerStart != "" && processStart(g.OwnerPID) == g.OwnerStart {
			continue // its harness is alive
		}
		err = errors.Join(killPIDs(g.cgroupPIDs()), killPIDs(shimPIDs(g.ContainerdSocket)), g.revert())
		if left := g.diff(); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("still changed: %s", strings.Join(left, ", ")))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reverting the host changes of a dead harness (pid %d, folder %s): %w", g.OwnerPID, g.NodeDir, err))
			continue
		}
		errs = append(errs, g.forget())
		done = append(done, fmt.Sprintf("reverted the host changes of a harness that died (pid %d, logs kept in %s)", g.OwnerPID, g.NodeDir))
	}
	return done, errors.Join(errs...)
}

// processStart returns the start time of pid (field 22 of /proc/pid/stat),
// "" when there is no such process; with the pid it names a process uniquely.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// createdCgroups are the cgroup folders named CgroupName, one per
// mounted hierarchy.
func (g *hostGuard) createdCgroups() []string {
	hierarchies, _ := cgroupHierarchies()
	var out []string
	for _, h := range hierarchies {
		out = append(out, filepath.Join(h, g.CgroupName))
	}
	return out
}

// createCgroupRoot creates /<cgroupName> in every mounted cgroup hierarchy
// (the kubelet requires its cgroupRoot to exist) and returns its name as
// the kubelet's cgroupRoot.
func (g *hostGuard) createCgroupRoot() (string, error) {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return "", err
	}
	if len(hierarchies) == 0 {
		return "", errors.New("no cgroup hierarchy mounted under " + cgroupFSRoot)
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, g.CgroupName)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		// A new cpuset cgroup starts with no CPUs and no memory nodes;
		// copy the parent's so that children can hold tasks.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return "", fmt.Errorf("initialising %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return "/" + g.CgroupName, nil
}

// cgroupPIDs returns the ids of every process in the node's cgroups.
func (g *hostGuard) cgroupPIDs() []int {
	seen := map[int]bool{}
	var pids []int
	for _, root := range g.createdCgroups() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// revert puts everything back: unmounts what was mounted under the node's
// folder and the tracked folders, removes the cgroups, restores the sysctls,
// deletes the iptables rules and chains that were added, and removes the
// files added under the tracked folders. Every process must be gone.
func (g *hostGuard) revert() error {
	var errs []error
	// Mounts, newest (deepest) first.
	now, err := mountPoints()
	if err != nil {
		errs = append(errs, err)
	}
	var added []string
	for mp := range now {
		if !g.Mounts[mp] && g.ownsPath(mp) {
			added = append(added, mp)
		}
	}
	slices.SortFunc(added, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range added {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	// Cgroups, children first. The kubelet and runc create sub-cgroups.
	for _, root := range g.createdCgroups() {
		errs = append(errs, removeCgroupTree(root))
	}
	// Sysctls.
	cur, err := readSysctls()
	if err != nil {
		errs = append(errs, err)
	}
	for k, v := range g.Sysctls {
		if cur[k] != v {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, v, err))
			}
		}
	}
	// iptables.
	errs = append(errs, g.revertIPTables())
	// Files.
	for _, d := range trackedDirs {
		errs = append(errs, revertDir(d, g.Dirs[d]))
	}
	return errors.Join(errs...)
}

// ownsPath reports whether a new mount at path is the node's to remove.
func (g *hostGuard) ownsPath(path string) bool {
	for _, p := range append([]string{g.NodeDir}, trackedDirs...) {
		p = strings.TrimRight(p, "/")
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// diff compares the host with the baseline and describes every difference
// that revert should have removed; empty means the host is as it was.
func (g *hostGuard) diff() []string {
	var out []string
	if now, err := mountPoints(); err == nil {
		for mp := range now {
			if !g.Mounts[mp] {
				out = append(out, "mount "+mp)
			}
		}
	}
	if cur, err := readSysctls(); err == nil {
		for k, v := range g.Sysctls {
			if cur[k] != v {
				out = append(out, fmt.Sprintf("sysctl %s=%s (was %s)", k, cur[k], v))
			}
		}
	}
	for _, dir := range g.createdCgroups() {
		if _, err := os.Stat(dir); err == nil {
			out = append(out, "cgroup "+dir)
		}
	}
	now := iptablesState()
	for key, before := range g.IPTables {
		for _, l := range now[key] {
			if !slices.Contains(before, l) {
				out = append(out, key+": "+l)
			}
		}
	}
	for _, d := range trackedDirs {
		before, after := g.Dirs[d], readDir(d)
		if after.Existed && !before.Existed {
			out = append(out, "folder "+d)
			continue
		}
		for e := range after.Entries {
			if !before.Entries[e] {
				out = append(out, "file "+filepath.Join(d, e))
			}
		}
	}
	slices.Sort(out)
	return out
}

func (g *hostGuard) revertIPTables() error {
	var errs []error
	now := iptablesState()
	for key, before := range g.IPTables {
		cmd, table, _ := strings.Cut(key, " ")
		var rules, chains []string
		for _, l := range now[key] {
			if slices.Contains(before, l) {
				continue
			}
			switch {
			case strings.HasPrefix(l, "-A "):
				rules = append(rules, strings.TrimPrefix(l, "-A "))
			case strings.HasPrefix(l, "-N "):
				chains = append(chains, strings.TrimPrefix(l, "-N "))
			}
		}
		for _, r := range slices.Backward(rules) {
			args := append([]string{"-w", iptablesWaitSecond, "-t", table, "-D"}, splitRule(r)...)
			if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w: %s", cmd, strings.Join(args, " "), err, out))
			}
		}
		for _, c := range chains {
			for _, op := range []string{"-F", "-X"} {
				args := []string{"-w", iptablesWaitSecond, "-t", table, op, c}
				if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %w: %s", cmd, strings.Join(args, " "), err, out))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// splitRule splits an `iptables -S` rule into arguments, keeping quoted
// strings (comments) whole.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, has := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, has = !quoted, true
		case r == ' ' && !quoted:
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if has {
		out = append(out, cur.String())
	}
	return out
}

// iptablesState returns `<cmd> -t <table> -S` for iptables and ip6tables;
// a command or table that is not there is left out.
func iptablesState() map[string][]string {
	out := map[string][]string{}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			continue
		}
		for _, t := range iptablesTables {
			b, err := exec.Command(cmd, "-w", iptablesWaitSecond, "-t", t, "-S").Output()
			if err != nil {
				continue
			}
			out[cmd+" "+t] = strings.Split(strings.TrimSpace(string(b)), "\n")
		}
	}
	return out
}

// mountPoints returns the mount points in /proc/self/mountinfo.
func mountPoints() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			out[unescapeMount(fields[4])] = true
		}
	}
	return out, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupHierarchies returns the mount points of the cgroup (v1 and v2)
// file systems under /sys/fs/cgroup.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// mountinfo: id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		line := s.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 1 {
			continue
		}
		if tail[0] != "cgroup" && tail[0] != "cgroup2" {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, cgroupFSRoot) && !slices.Contains(out, mp) {
			out = append(out, mp)
		}
	}
	return out, s.Err()
}

// removeCgroupTree removes a cgroup folder and its children, deepest first.
// A cgroup that still holds a process cannot be removed; it is retried for
// a few seconds while the last processes exit.
func removeCgroupTree(root string) error {
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var last error
	for _, d := range slices.Backward(dirs) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				last = fmt.Errorf("removing cgroup %s: %w", d, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return last
}

func readSysctls() (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

func readDir(dir string) dirState {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dirState{}
	}
	st := dirState{Existed: true, Entries: map[string]bool{}}
	for _, e := range entries {
		st.Entries[e.Name()] = true
	}
	return st
}

// revertDir removes dir if it did not exist, else the entries it did not have.
func revertDir(dir string, before dirState) error {
	after := readDir(dir)
	if !after.Existed {
		return nil
	}
	if !before.Existed {
		return os.RemoveAll(dir)
	}
	var errs []error
	for e := range after.Entries {
		if !before.Entries[e] {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e)))
		}
	}
	return errors.Join(errs...)
}
