package handoff

import "slices"

// PodDevices is what the kubelet PodResources API reports for one pod.
type PodDevices struct {
	Namespace, Name string
	// Containers maps container name to resource name to device IDs.
	Containers map[string]map[string][]string
}

// Mismatch is a container that holds devices its pod's assignment does not
// name (the kubelet did not follow GetPreferredAllocation).
type Mismatch struct {
	Pod, Container, Resource string
	DeviceIDs                []string
}

// Reconcile marks the containers the kubelet reports as allocated (after a
// plugin restart the matcher would otherwise offer them again) and returns
// the containers whose devices contradict their pod's assignment.
func (m *Matcher) Reconcile(list []PodDevices) []Mismatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := make(map[string]*entry, len(m.pods))
	for _, e := range m.pods {
		byKey[e.key] = e
	}
	var out []Mismatch
	changed := false
	for _, p := range list {
		e, ok := byKey[p.Namespace+"/"+p.Name]
		if !ok {
			continue
		}
		for _, k := range []Kind{KindGPU, KindMemory} {
			mm, done := m.reconcileKind(e, k, p)
			out = append(out, mm...)
			if done > e.done[k] {
				e.done[k] = done
				changed = true
			}
		}
	}
	if changed {
		m.notifyLocked()
	}
	return out
}

// reconcileKind reads what the kubelet reports for e's containers asking for
// k: how many of them (counted up to the last one holding devices) are
// allocated, and those whose devices contradict the assignment.
func (m *Matcher) reconcileKind(e *entry, k Kind, p PodDevices) ([]Mismatch, int) {
	res := m.resourceName(k)
	var out []Mismatch
	done := 0
	for i, s := range e.steps[k] {
		ids := p.Containers[s.container][res]
		if len(ids) == 0 {
			continue
		}
		done = i + 1
		if e.assign != nil && e.kindFits(k) && !all(ids, func(id string) bool { return e.owns(k, id) }) {
			out = append(out, Mismatch{Pod: e.key, Container: s.container, Resource: res, DeviceIDs: slices.Clone(ids)})
		}
	}
	return out, done
}
