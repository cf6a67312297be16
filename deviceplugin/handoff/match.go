package handoff

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Allocate matches one kubelet Allocate container request (resource kind k,
// device IDs ids) to exactly one pending pod, waiting up to wait for the pod
// informer to catch up, and records the container as allocated. With a
// PodResources lister set, the kubelet's list says which of the pending pods
// of this shape it is admitting; the devices must belong to that pod.
func (m *Matcher) Allocate(ctx context.Context, k Kind, ids []string, wait time.Duration) (Grant, error) {
	if len(ids) == 0 {
		return Grant{}, fmt.Errorf("%w: the kubelet asked for zero %s devices", ErrNoMatch, m.resourceName(k))
	}
	var g Grant
	err := m.waitLocked(ctx, wait, func(a *admission) (bool, error) {
		g = Grant{}
		return m.allocateLocked(k, ids, a, &g)
	})
	return g, err
}

// allocateLocked is one try of Allocate: it fills g and reports whether the
// answer is final.
func (m *Matcher) allocateLocked(k Kind, ids []string, a *admission, g *Grant) (bool, error) {
	shape := m.candidatesLocked(k, len(ids), nil)
	cs := slices.DeleteFunc(slices.Clone(shape), func(e *entry) bool {
		return !all(ids, func(id string) bool { return e.owns(k, id) })
	})
	if len(cs) == 0 {
		return false, m.noMatchLocked(k, len(ids), ids)
	}
	adm, err := m.admittedLocked(k, len(ids), a, shape, &g.PodResourcesErr)
	if err != nil {
		return false, err
	}
	admitting := adm != nil
	if admitting {
		narrowed := slices.DeleteFunc(slices.Clone(cs), func(e *entry) bool { return !slices.Contains(adm, e) })
		if len(narrowed) == 0 {
			return true, m.othersDevicesErr(k, ids, adm, cs)
		}
		cs, g.NotAdmitting = narrowed, notIn(shape, adm)
	}
	if len(cs) > 1 && !twins(k, cs) {
		return true, m.ambiguousErr(k, ids, cs, admitting)
	}
	m.grantLocked(cs, k, ids, admitting, g)
	return true, nil
}

// Preference is the answer to one GetPreferredAllocation container request.
type Preference struct {
	// IDs are the devices to prefer: the must-include IDs, then the pod's.
	IDs []string
	// Pod is the pod steered to (namespace/name).
	Pod string
	// Others are other pending pods of the same shape that could also have
	// been meant, when PodResources could not tell (for the caller to log).
	Others []string
	// Admitting is set when the kubelet's PodResources list showed Pod as
	// the pod being admitted; NotAdmitting names the other pending pods of
	// the same shape.
	Admitting    bool
	NotAdmitting []string
	// PodResourcesErr says why PodResources could not be asked.
	PodResourcesErr string
}

// Preferred answers one GetPreferredAllocation container request: the
// devices of the pending pod whose next container for k asks for size
// devices and whose assigned devices are all available (or must be
// included). With a PodResources lister set, the kubelet's list says which
// of them it is admitting (also when only one is known: the pod being
// admitted may not have reached the informer yet); without it, the first in
// bound order is chosen and the others are reported. Allocate still checks
// the final choice.
func (m *Matcher) Preferred(ctx context.Context, k Kind, available, mustInclude []string, size int, wait time.Duration) (Preference, error) {
	avail := make(map[string]bool, len(available)+len(mustInclude))
	for _, id := range available {
		avail[id] = true
	}
	for _, id := range mustInclude {
		avail[id] = true
	}
	var p Preference
	err := m.waitLocked(ctx, wait, func(a *admission) (bool, error) {
		p = Preference{}
		return m.preferLocked(k, avail, mustInclude, size, a, &p)
	})
	return p, err
}

// preferLocked is one try of Preferred: it fills p and reports whether the
// answer is final.
func (m *Matcher) preferLocked(k Kind, avail map[string]bool, mustInclude []string, size int, a *admission, p *Preference) (bool, error) {
	cs := m.candidatesLocked(k, size, mustInclude)
	if len(cs) > 0 {
		adm, err := m.admittedLocked(k, size, a, cs, &p.PodResourcesErr)
		switch {
		case err != nil:
			return false, err
		case len(adm) > 1 && !twins(k, adm):
			return true, m.ambiguousAdmittedErr(k, size, adm)
		case adm != nil:
			p.NotAdmitting = notIn(cs, adm)
			cs, p.Admitting = adm[:1], true
		}
	}
	for _, e := range cs {
		got := m.pickLocked(e, k, avail, mustInclude, size)
		if len(got) < size {
			continue
		}
		if p.IDs == nil {
			p.IDs, p.Pod = got, e.key
			continue
		}
		p.Others = append(p.Others, e.key)
	}
	switch {
	case p.IDs != nil:
		return true, nil
	case p.Admitting:
		// The kubelet's available devices do not change during this
		// call, and steering to another pod's devices would hand them
		// the wrong GPU: fail now.
		e := cs[0]
		return true, m.unavailableErr(e, k, len(m.pickLocked(e, k, avail, mustInclude, size)), size)
	}
	return false, m.noMatchLocked(k, size, mustInclude)
}

// candidatesLocked returns the pending pods whose next container for k asks
// for exactly n devices and whose assignment owns every device in ids,
// sorted by the order this node saw them bound (then creation time, then
// name).
func (m *Matcher) candidatesLocked(k Kind, n int, ids []string) []*entry {
	var out []*entry
	for _, e := range m.pods {
		if !e.pending || !e.kindFits(k) {
			continue
		}
		s := e.next(k)
		if s == nil || s.n != n {
			continue
		}
		if k == KindMemory && e.memoryFits(m.unitMiB) != nil {
			continue
		}
		if !all(ids, func(id string) bool { return e.owns(k, id) }) {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), a.created.Compare(b.created), cmp.Compare(a.key, b.key))
	})
	return out
}

// twins reports whether every candidate would give the container the same
// thing: a memory share of the same GPU with the same unit count. Whole-GPU
// candidates are never twins: two pending pods cannot own the same GPU.
func twins(k Kind, es []*entry) bool {
	if k != KindMemory {
		return false
	}
	for _, e := range es[1:] {
		if e.assign.GPUs[0].UUID != es[0].assign.GPUs[0].UUID || e.next(k).n != es[0].next(k).n {
			return false
		}
	}
	return true
}

// notIn returns the keys of the entries of es that are not in of, or nil.
func notIn(es, of []*entry) []string {
	var out []string
	for _, e := range es {
		if !slices.Contains(of, e) {
			out = append(out, e.key)
		}
	}
	return out
}

// pickLocked chooses size devices of e's assignment among avail, starting
// with mustInclude: GPUs in assignment order, memory units in unit order.
func (m *Matcher) pickLocked(e *entry, k Kind, avail map[string]bool, mustInclude []string, size int) []string {
	out := slices.Clone(mustInclude)
	if k == KindGPU {
		for _, a := range e.assign.GPUs {
			if len(out) >= size {
				break
			}
			if avail[a.UUID] && !slices.Contains(out, a.UUID) {
				out = append(out, a.UUID)
			}
		}
		return out
	}
	uuid := e.assign.GPUs[0].UUID
	var units []int
	for id := range avail {
		if u, n, ok := ParseMemoryDeviceID(id); ok && u == uuid && !slices.Contains(mustInclude, id) {
			units = append(units, n)
		}
	}
	slices.Sort(units)
	for _, n := range units {
		if len(out) >= size {
			break
		}
		out = append(out, MemoryDeviceID(uuid, n))
	}
	return out
}

// waitLocked runs try under the lock until it reports done or the wait
// (bounded by ctx) runs out, re-running it after every pod update. When try
// asks for the kubelet's PodResources list (errNeedAdmission), it is fetched
// once, without the lock, and try runs again at once. When try finds no pod
// and a PodGetter is set, the pods the kubelet lists that the informer has
// not shown pending are read from the API server, at most once a second
// (refresh). It returns try's last error.
func (m *Matcher) waitLocked(ctx context.Context, wait time.Duration, try func(*admission) (bool, error)) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var a admission
	var refreshed time.Time
	for {
		m.mu.Lock()
		done, err := try(&a)
		ch, lister, getter := m.changed, m.lister, m.getter
		m.mu.Unlock()
		if errors.Is(err, errNeedAdmission) && !a.fetched {
			a.fetch(ctx, lister)
			continue
		}
		if done || err == nil {
			return err
		}
		if getter != nil && lister != nil && time.Since(refreshed) >= refreshEvery {
			refreshed = time.Now()
			if !a.fetched {
				a.fetch(ctx, lister)
			}
			if m.refresh(ctx, getter, &a) > 0 {
				continue
			}
		}
		select {
		case <-ch:
		case <-time.After(refreshEvery):
		case <-timer.C:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		}
	}
}
