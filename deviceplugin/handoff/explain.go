package handoff

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoMatch is wrapped by errors for requests no pending pod matches.
var ErrNoMatch = errors.New("no pod matches")

// ErrAmbiguous is wrapped by errors for requests several pods match.
var ErrAmbiguous = errors.New("several pods match")

// maxListed bounds how many pods an error message names.
const maxListed = 6

// noMatchLocked explains why no pod matched: which pods wait for the
// resource on this node and what each of them lacks.
func (m *Matcher) noMatchLocked(k Kind, n int, ids []string) error {
	res := m.resourceName(k)
	var why []string
	es := make([]*entry, 0, len(m.pods))
	for _, e := range m.pods {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range es {
		if !e.pending || len(e.steps[k]) == 0 {
			continue
		}
		why = append(why, e.key+": "+m.whyNot(e, k, n))
	}
	if len(why) == 0 {
		return fmt.Errorf("%w: no pending pod on node %s asks for %s (request: %d devices %s)", ErrNoMatch, m.node, res, n, list(ids))
	}
	if len(why) > maxListed {
		why = append(why[:maxListed], fmt.Sprintf("and %d more", len(why)-maxListed))
	}
	return fmt.Errorf("%w: no pending pod on node %s has an assignment for %d %s devices %s; %s",
		ErrNoMatch, m.node, n, res, list(ids), strings.Join(why, "; "))
}

// whyNot says why the pending pod e does not match a request for n devices
// of k.
func (m *Matcher) whyNot(e *entry, k Kind, n int) string {
	s := e.next(k)
	switch {
	case e.assign == nil && e.assignErr != "":
		return e.assignErr
	case e.assign == nil:
		return "has no " + m.names.AssignmentAnnotation + " annotation (was it scheduled by the Rota extender?)"
	case !e.kindFits(k) && k == KindGPU:
		return "its assignment is a memory share, not whole GPUs"
	case !e.kindFits(k):
		return "its assignment is whole GPUs, not a memory share"
	case s == nil:
		return "every container already got its devices"
	case s.n != n:
		return fmt.Sprintf("container %s asks for %d, not %d", s.container, s.n, n)
	case k == KindMemory && e.memoryFits(m.unitMiB) != nil:
		return e.memoryFits(m.unitMiB).Error()
	}
	return "its assignment " + strings.Join(e.assign.UUIDs(), ",") + " does not hold these devices"
}

// noneAdmittingLocked explains that several pending pods ask for a shape but
// the kubelet's PodResources list shows none of them being admitted (the
// pod it admits may not have reached the informer yet).
func (m *Matcher) noneAdmittingLocked(k Kind, n int, es []*entry) error {
	return fmt.Errorf("%w: pending pods %s on node %s ask for %d %s devices, but the kubelet's PodResources lists none of them as being admitted",
		ErrNoMatch, keys(es), m.node, n, m.resourceName(k))
}

// othersDevicesErr explains an Allocate whose devices belong to the
// assignments of owners, none of which the kubelet is admitting (adm).
func (m *Matcher) othersDevicesErr(k Kind, ids []string, adm, owners []*entry) error {
	return fmt.Errorf("%w: the kubelet is admitting %s (PodResources), but the %s devices %s it chose belong to the assignment of %s; refusing to hand another pod's GPU",
		ErrNoMatch, keys(adm), m.resourceName(k), list(ids), keys(owners))
}

// ambiguousErr explains an Allocate whose devices several pods' assignments
// own; admitting says the kubelet's PodResources lists each as admitted.
func (m *Matcher) ambiguousErr(k Kind, ids []string, cs []*entry, admitting bool) error {
	by := ""
	if admitting {
		by = " (the kubelet's PodResources lists each of them as being admitted)"
	}
	return fmt.Errorf("%w on node %s for %s devices %s: %s%s; refusing to guess (each pod's assignment must name distinct devices)",
		ErrAmbiguous, m.node, m.resourceName(k), list(ids), keys(cs), by)
}

// ambiguousAdmittedErr explains a GetPreferredAllocation for which the
// kubelet's PodResources lists several different pods as being admitted.
func (m *Matcher) ambiguousAdmittedErr(k Kind, size int, adm []*entry) error {
	return fmt.Errorf("%w on node %s for %d %s devices: %s, and the kubelet's PodResources lists each of them as being admitted; refusing to guess",
		ErrAmbiguous, m.node, size, m.resourceName(k), keys(adm))
}

// unavailableErr explains a GetPreferredAllocation for the pod being
// admitted, e, when only got of the size devices it needs are available.
func (m *Matcher) unavailableErr(e *entry, k Kind, got, size int) error {
	return fmt.Errorf("%w: the kubelet is admitting %s (PodResources), but only %d of the %d %s devices it needs from its assignment %s are available to it (held by pods the kubelet still counts?)",
		ErrNoMatch, e.key, got, size, m.resourceName(k), strings.Join(e.assign.UUIDs(), ","))
}

func keys(es []*entry) string {
	ks := make([]string, 0, len(es))
	for _, e := range es {
		ks = append(ks, e.key)
	}
	if len(ks) > maxListed {
		ks = append(ks[:maxListed], fmt.Sprintf("and %d more", len(ks)-maxListed))
	}
	return strings.Join(ks, ", ")
}

func list(ids []string) string {
	if len(ids) > maxListed {
		return "[" + strings.Join(ids[:maxListed], " ") + fmt.Sprintf(" … %d in all]", len(ids))
	}
	return "[" + strings.Join(ids, " ") + "]"
}
