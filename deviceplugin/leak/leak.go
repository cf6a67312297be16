// Package leak finds GPU memory held by processes that belong to no live pod
// assigned to the GPU: a container that exited while the driver kept its
// memory, a process left behind by a deleted pod, a process outside
// Kubernetes, or a pod using a GPU it was not given.
//
// NVML lists the processes of each GPU (compute processes and MPS clients,
// with host PIDs); each PID's pod comes from its cgroup path in the host's
// /proc (the kubelet names pod cgroups after the pod UID, "pod<uid>" with
// cgroupfs and "kubepods-…-pod<uid_with_underscores>.slice" with systemd).
// A process is leaked once it has been seen without an owning assigned pod
// for longer than the grace period (a pod's containers start a moment before
// the informer shows it running, and exit a moment after it finished); it
// stops counting when NVML no longer lists it. MPS servers and control
// daemons (comm nvidia-cuda-mps*) are infrastructure and never counted: their
// clients are listed, with their memory, on their own.
//
// Without the host's PID namespace (hostPID) a PID NVML names may simply not
// be visible: such processes are counted only when Config.HostPID is set.
package leak

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/pkg/contract"
)

// Owner is what /proc says about a PID.
type Owner struct {
	// Gone is set when the PID has no /proc entry.
	Gone bool
	// PodUID is the pod the process's cgroup belongs to; "" when none.
	PodUID string
	// Cgroup is the process's cgroup path (the unified or the first line).
	Cgroup string
	// Comm is the process's command name.
	Comm string
}

// ProcFS reads owners from a /proc tree (the host's, with hostPID).
type ProcFS struct{ Root string }

var podUIDRE = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// Owner reads /proc/<pid>/cgroup and comm.
func (p ProcFS) Owner(pid uint32) Owner {
	dir := filepath.Join(p.Root, strconv.FormatUint(uint64(pid), 10))
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return Owner{Gone: true}
	}
	comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
	o := Owner{Comm: string(bytes.TrimSpace(comm))}
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		// hierarchy-ID:controllers:path; cgroup v2 is "0::/path".
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if o.Cgroup == "" || parts[0] == "0" {
			o.Cgroup = parts[2]
		}
		if m := podUIDRE.FindStringSubmatch(parts[2]); m != nil && o.PodUID == "" {
			o.PodUID = strings.ReplaceAll(m[1], "_", "-")
		}
	}
	return o
}

// Config configures detection.
type Config struct {
	// Grace is how long a process must be seen without an owning assigned
	// pod before its memory counts as leaked.
	Grace time.Duration
	// HostPID says the plugin sees the host's PIDs: a PID NVML lists with no
	// /proc entry then is a process the driver still accounts after it went.
	HostPID bool
}

// Process is one process holding memory on a GPU without an owning pod.
type Process struct {
	PID     uint32
	UsedMiB contract.MiB
	// Pod is the process's pod (namespace/name when live, else its UID), if any.
	Pod   string
	Why   string
	Since time.Time
}

// GPU is the leaked memory of one GPU.
type GPU struct {
	UUID      string
	LeakedMiB contract.MiB
	// Processes are the leaked processes (past the grace period), by PID.
	Processes []Process
	// Pending are processes without an owning pod still within the grace period.
	Pending []Process
}

// Detector remembers since when each unowned process has been seen. It is
// not safe for concurrent use (one scanning loop).
type Detector struct {
	cfg   Config
	list  func(uuid string) ([]discovery.Process, error)
	owner func(pid uint32) Owner
	since map[string]map[uint32]time.Time // GPU -> PID -> first seen unowned
}

// NewDetector lists processes with list and finds their owners with owner.
func NewDetector(cfg Config, list func(uuid string) ([]discovery.Process, error), owner func(pid uint32) Owner) *Detector {
	return &Detector{cfg: cfg, list: list, owner: owner, since: map[string]map[uint32]time.Time{}}
}

// Scan looks at every GPU once at now. assigned are the live pods per GPU
// (handoff.Matcher.GPUPods) and live every live pod on the node by UID
// (LivePods). A GPU whose list fails keeps its earlier state out of the
// result and is reported in the error slice.
func (d *Detector) Scan(now time.Time, gpus []string, assigned map[string][]handoff.GPUPod, live map[string]string) (map[string]GPU, []error) {
	out := map[string]GPU{}
	var errs []error
	for _, u := range gpus {
		procs, err := d.list(u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		owners := map[string]bool{}
		for _, p := range assigned[u] {
			owners[p.UID] = true
		}
		seen := d.since[u]
		if seen == nil {
			seen = map[uint32]time.Time{}
			d.since[u] = seen
		}
		g := GPU{UUID: u}
		listed := map[uint32]bool{}
		for _, p := range procs {
			listed[p.PID] = true
			why, pod, counts := d.classify(p.PID, owners, live)
			if !counts {
				delete(seen, p.PID)
				continue
			}
			first, ok := seen[p.PID]
			if !ok {
				first = now
				seen[p.PID] = now
			}
			lp := Process{PID: p.PID, UsedMiB: p.UsedMiB, Pod: pod, Why: why, Since: first}
			if now.Sub(first) >= d.cfg.Grace {
				g.Processes = append(g.Processes, lp)
				g.LeakedMiB += p.UsedMiB
			} else {
				g.Pending = append(g.Pending, lp)
			}
		}
		for pid := range seen {
			if !listed[pid] {
				delete(seen, pid) // freed: NVML no longer lists it
			}
		}
		slices.SortFunc(g.Processes, func(a, b Process) int { return int(a.PID) - int(b.PID) })
		out[u] = g
	}
	return out, errs
}

// classify says why the process counts as unowned (counts false: it is owned,
// MPS infrastructure, or not visible without host PIDs).
func (d *Detector) classify(pid uint32, owners map[string]bool, live map[string]string) (why, pod string, counts bool) {
	o := d.owner(pid)
	switch {
	case o.Gone && !d.cfg.HostPID:
		return "", "", false
	case o.Gone:
		return "the process no longer exists; the driver still accounts its memory", "", true
	case strings.HasPrefix(o.Comm, "nvidia-cuda-mps"):
		return "", "", false
	case o.PodUID == "":
		return fmt.Sprintf("not in a pod (cgroup %s, command %s)", o.Cgroup, o.Comm), "", true
	case owners[o.PodUID]:
		return "", "", false
	}
	if name, ok := live[o.PodUID]; ok {
		return fmt.Sprintf("pod %s is not assigned this GPU", name), name, true
	}
	return fmt.Sprintf("pod %s is gone or finished", o.PodUID), o.PodUID, true
}

// Summary renders a GPU's leaked processes for logs and events:
// "pid 4242 2048 MiB (pod 1234… is gone or finished)".
func (g GPU) Summary() string {
	var parts []string
	for _, p := range g.Processes {
		parts = append(parts, fmt.Sprintf("pid %d %d MiB (%s)", p.PID, int64(p.UsedMiB), p.Why))
	}
	return strings.Join(parts, "; ")
}
