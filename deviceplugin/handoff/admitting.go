package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PodLister returns what the kubelet's PodResources API (v1 List) reports
// now. The kubelet lists its active pods: those in its pod manager that are
// not terminal, which during the admission of a pod includes that pod (the
// kubelet adds it to its pod manager before admitting it) but not the pods
// of the same batch it has not reached yet.
type PodLister func(ctx context.Context) ([]PodDevices, error)

// SetPodLister lets the matcher ask the kubelet which pod it is admitting
// when several pending pods ask for the same shape (see deviceplugin/README.md, "The
// Allocate handoff"). nil turns it off. Call before serving.
func (m *Matcher) SetPodLister(l PodLister) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lister = l
}

// PodGetter reads one pod from the API server.
type PodGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// SetPodGetter lets the matcher read from the API server a pod the kubelet
// is admitting that its informer has not delivered yet. The kubelet learns
// of a pod from its own watch; after a broken watch (an API server restart)
// the plugin's informer can relist seconds later than the kubelet, and
// without this the kubelet's admission fails with UnexpectedAdmissionError.
// nil turns it off. Call before serving.
func (m *Matcher) SetPodGetter(g PodGetter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.getter = g
}

// refreshEvery is how often one wait reads missing pods from the API
// server; refreshMax bounds the pods read at once.
const (
	refreshEvery = time.Second
	refreshMax   = 8
)

// refresh reads the pods the kubelet's list names that the matcher does not
// know (the informer only holds pods bound to this node, and the kubelet
// lists only those), and records those bound to this node. It returns how many
// it recorded. The pod read is the API server's, as authoritative as the
// informer's; a later informer event overwrites it.
func (m *Matcher) refresh(ctx context.Context, get PodGetter, a *admission) int {
	if !a.usable() {
		return 0
	}
	m.mu.Lock()
	known := make(map[string]bool, len(m.pods))
	for _, e := range m.pods {
		known[e.key] = true
	}
	m.mu.Unlock()
	var missing []string
	for key := range a.pods {
		if !known[key] {
			missing = append(missing, key)
		}
	}
	slices.Sort(missing)
	got := 0
	for _, key := range missing[:min(len(missing), refreshMax)] {
		ns, name, _ := strings.Cut(key, "/")
		gctx, cancel := context.WithTimeout(ctx, listTimeout)
		pod, err := get(gctx, ns, name)
		cancel()
		if err != nil || pod.Spec.NodeName != m.node {
			continue
		}
		m.Upsert(pod)
		got++
	}
	return got
}

// listTimeout bounds one PodResources List call; listTries and listBackoff
// ride out the kubelet's rate limit on the API (100 calls/s, burst 10,
// answered at once with an error when exceeded).
const (
	listTimeout = 2 * time.Second
	listTries   = 4
	listBackoff = 25 * time.Millisecond
)

// admission is what one PodResources List said, fetched at most once per
// GetPreferredAllocation or Allocate call: the kubelet is blocked in that
// call, admitting one pod, so its answer does not change meanwhile.
type admission struct {
	fetched bool
	pods    map[string]map[string]map[string][]string // ns/name → container → resource → IDs
	err     error                                     // List failed: the matcher falls back to its own rules
}

// errNeedAdmission is returned by a try function that needs the kubelet's
// PodResources list before it can decide; waitLocked fetches it without the
// lock held and runs try again.
var errNeedAdmission = errors.New("need the kubelet's PodResources list")

// fetch calls the lister (outside the matcher's lock).
func (a *admission) fetch(ctx context.Context, l PodLister) {
	a.fetched = true
	if l == nil {
		a.err = errors.New("PodResources not configured")
		return
	}
	var list []PodDevices
	var err error
	retry := wait.Backoff{Duration: listBackoff, Steps: listTries}
	werr := wait.ExponentialBackoffWithContext(ctx, retry, func(ctx context.Context) (bool, error) {
		lctx, cancel := context.WithTimeout(ctx, listTimeout)
		defer cancel()
		list, err = l(lctx)
		return err == nil, nil
	})
	switch {
	case werr == nil:
	case err == nil: // ctx was done before the first List
		a.err = werr
		return
	case ctx.Err() != nil:
		a.err = fmt.Errorf("%w (%w)", err, ctx.Err())
		return
	default: // every try failed: the last error
		a.err = err
		return
	}
	a.pods = make(map[string]map[string]map[string][]string, len(list))
	for _, p := range list {
		a.pods[p.Namespace+"/"+p.Name] = p.Containers
	}
}

// usable reports whether the list can narrow candidates.
func (a *admission) usable() bool { return a.fetched && a.err == nil }

// admittingLocked keeps the candidates the kubelet can be admitting now:
// the pod is in its active list and the container the matcher expects next
// for k holds no devices of k yet (regular init containers are not listed,
// which counts as holding none).
func (m *Matcher) admittingLocked(k Kind, a *admission, es []*entry) []*entry {
	res := m.resourceName(k)
	var out []*entry
	for _, e := range es {
		cs, ok := a.pods[e.key]
		if !ok {
			continue
		}
		if s := e.next(k); s == nil || len(cs[s.container][res]) > 0 {
			continue
		}
		out = append(out, e)
	}
	return out
}

// admittedLocked returns the pods among shape (the pending pods of a
// request's shape, n devices of k) that the kubelet's PodResources list
// shows being admitted. It returns nil when there is no lister, and when
// the list could not be had, saying why in *podResourcesErr: the matcher's
// own rules decide. An error is the try's (not final) answer: fetch the list
// first, or none of shape is being admitted yet.
func (m *Matcher) admittedLocked(k Kind, n int, a *admission, shape []*entry, podResourcesErr *string) ([]*entry, error) {
	switch {
	case m.lister == nil:
		return nil, nil
	case !a.fetched:
		return nil, errNeedAdmission
	case !a.usable():
		*podResourcesErr = a.err.Error()
		return nil, nil
	}
	adm := m.admittingLocked(k, a, shape)
	if len(adm) == 0 {
		return nil, m.noneAdmittingLocked(k, n, shape)
	}
	return adm, nil
}
