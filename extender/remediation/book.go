package remediation

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/remediation"
)

// unhandledLocked keeps the pods not yet deleted or marked for good.
func (c *Controller) unhandledLocked(ps []remediation.Pod) []remediation.Pod {
	var out []remediation.Pod
	for _, p := range ps {
		if a := c.handled[types.UID(p.UID)]; a != remediation.Delete && a != remediation.Mark {
			out = append(out, p)
		}
	}
	return out
}

// undeletedLocked keeps the pods not yet deleted.
func (c *Controller) undeletedLocked(ps []remediation.Pod) []remediation.Pod {
	var out []remediation.Pod
	for _, p := range ps {
		if c.handled[types.UID(p.UID)] != remediation.Delete {
			out = append(out, p)
		}
	}
	return out
}

// action returns the last action taken on the pod ("" for none).
func (c *Controller) action(uid types.UID) remediation.Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handled[uid]
}

func (c *Controller) done(uid types.UID, a remediation.Action) {
	c.mu.Lock()
	c.handled[uid] = a
	c.mu.Unlock()
}

// firstReport reports whether the dry-run decision d on its pod is new, and
// remembers it.
func (c *Controller) firstReport(d remediation.Decision) bool {
	k := d.Pod.UID + "/" + string(d.Action)
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.reported[k]
	c.reported[k] = true
	return !seen
}

// forgetGonePods drops bookkeeping of pods the informer no longer holds.
func (c *Controller) forgetGonePods() {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[types.UID]bool{}
	for _, obj := range c.pods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			live[p.UID] = true
		}
	}
	for uid := range c.handled {
		if !live[uid] {
			delete(c.handled, uid)
		}
	}
	for k := range c.reported {
		if uid, _, _ := strings.Cut(k, "/"); !live[types.UID(uid)] {
			delete(c.reported, k)
		}
	}
}
