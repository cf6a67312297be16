package handoff

import (
	"slices"
	"strconv"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
)

// Grant is the result of a successful Allocate match.
type Grant struct {
	Pod       string // namespace/name
	PodUID    string
	Container string // container name from the pod spec
	Kind      Kind
	// UUIDs are the GPUs the container gets, in assignment order.
	UUIDs []string
	// MemoryMiB is the container's memory limit for a memory share (units
	// granted x unit size); 0 for whole GPUs.
	MemoryMiB contract.MiB
	// Twins are other pending pods with an identical memory share on the
	// same GPU; see deviceplugin/README.md for why this is not a guess.
	Twins []string
	// Admitting is set when the kubelet's PodResources list showed this pod
	// as the one being admitted; NotAdmitting names the other pending pods of
	// the same shape, which it showed not being admitted.
	Admitting    bool
	NotAdmitting []string
	// PodResourcesErr says why PodResources could not be asked (the
	// matcher's own rules decided).
	PodResourcesErr string
}

// Env is the container environment for g.
//
//   - NVIDIA_VISIBLE_DEVICES: the GPU UUIDs, comma separated.
//   - CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: for memory shares, "0=<MiB>M"; the
//     container sees exactly one GPU, so its CUDA ordinal is 0.
//   - ROTA_ASSIGNED_POD: the pod whose assignment was matched (namespace/name).
//   - ROTA_GPU_UUIDS, ROTA_GPU_MEMORY_MIB: the assignment as the container
//     sees it.
func (g Grant) Env() map[string]string {
	env := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": strings.Join(g.UUIDs, ","),
		"ROTA_ASSIGNED_POD":      g.Pod,
		"ROTA_GPU_UUIDS":         strings.Join(g.UUIDs, ","),
	}
	if g.Kind == KindMemory {
		mib := strconv.FormatInt(int64(g.MemoryMiB), 10)
		env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + mib + "M"
		env["ROTA_GPU_MEMORY_MIB"] = mib
	}
	return env
}

// grantLocked fills g with the devices ids for the next container of cs[0]
// for k (the other candidates are its twins) and records the container as
// allocated; admitting says the kubelet's PodResources showed the pod.
func (m *Matcher) grantLocked(cs []*entry, k Kind, ids []string, admitting bool, g *Grant) {
	e := cs[0]
	s := e.next(k)
	g.Pod, g.PodUID, g.Container, g.Kind, g.Admitting = e.key, e.uid, s.container, k, admitting
	if k == KindGPU {
		for _, a := range e.assign.GPUs {
			if slices.Contains(ids, a.UUID) {
				g.UUIDs = append(g.UUIDs, a.UUID)
			}
		}
	} else {
		g.UUIDs = []string{e.assign.GPUs[0].UUID}
		g.MemoryMiB = contract.MiB(len(ids)) * m.unitMiB
		for _, t := range cs[1:] {
			g.Twins = append(g.Twins, t.key)
		}
	}
	e.done[k]++
	e.given[k] = append(e.given[k], slices.Clone(ids))
}

// Undo takes back a grant Allocate returned, for a kubelet request with
// several containers that fails at a later one: the kubelet discards the
// whole answer, so none of its containers is allocated. Undo grants in
// reverse order.
func (m *Matcher) Undo(g Grant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.pods[g.PodUID]
	if !ok || e.done[g.Kind] == 0 {
		return
	}
	e.done[g.Kind]--
	if n := len(e.given[g.Kind]); n > 0 {
		e.given[g.Kind] = e.given[g.Kind][:n-1]
	}
	m.notifyLocked()
}
