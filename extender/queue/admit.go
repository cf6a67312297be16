package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// takeUngated hands the pass the pods earlier passes ungated (see
// Controller.ungated); admissions of this pass add to a fresh map.
func (c *Controller) takeUngated() map[types.UID]*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	own := c.ungated
	c.ungated = map[types.UID]*corev1.Pod{}
	return own
}

// keepUngated puts back the written pods the informer still shows gated;
// the others (caught up, or deleted since) are forgotten.
func (c *Controller) keepUngated(still map[types.UID]*corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, w := range still {
		if _, newer := c.ungated[uid]; !newer {
			c.ungated[uid] = w
		}
	}
}

// admit removes the gate from every pod of an admitted workload, in one
// update per pod. A pod whose update fails gives its hold back and stays
// queued (a gang's admitted members are completed by the next pass).
func (c *Controller) admit(ctx context.Context, wl *workload, now time.Time) {
	logger := klog.FromContext(ctx)
	waited := now.Sub(wl.w.Created)
	ok := 0
	for i, pod := range wl.pods {
		var a ledger.Allocation
		if i < len(wl.hold.Allocations) {
			a = wl.hold.Allocations[i]
		}
		if err := c.ungate(ctx, pod, wl, a, now); err != nil {
			logger.Error(err, "Admitting a queued pod failed; it stays queued", "pod", klog.KObj(pod))
			c.o.Holder.ReleaseHold(room.Hold{Allocations: []ledger.Allocation{a}})
			continue
		}
		ok++
		c.events.admitted(pod, wl.acct.String(), lazyString(func() string {
			return fmt.Sprintf("admitted to team %s after %s in the queue%s", wl.acct, waited.Round(time.Second), where(wl.hold))
		}), waited)
	}
	if ok == 0 {
		return
	}
	c.o.Metrics.Admissions.WithLabelValues(wl.w.Team).Add(float64(ok))
	c.o.Metrics.Wait.WithLabelValues(wl.w.Team).Observe(waited.Seconds())
	c.o.Metrics.PoolWait.WithLabelValues(c.scope(wl.acct).Pool).Observe(waited.Seconds())
	logger.V(2).Info("Admitted", "workload", wl.w.Key, "team", wl.w.Team, "account", wl.acct.String(), "pods", ok,
		"waited", waited.Round(time.Millisecond), "where", wl.hold.Where)
}

// complete admits the gated members of a gang that is already partly
// admitted: room is held for them (or they go where they fit) and the gate
// removed, without a quota check.
func (c *Controller) complete(ctx context.Context, key string, acct quota.Account, wl *workload, now time.Time) {
	slices.SortFunc(wl.pods, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	h, reason := c.o.Holder.HoldRoom(wl.pods, c.scope(acct), now.Add(c.o.HoldTTL))
	if reason != "" {
		klog.FromContext(ctx).V(2).Info("Completing a partly admitted gang without holding room", "gang", key, "reason", reason)
	}
	wl.hold, wl.acct = h, acct
	c.admit(ctx, wl, now)
}

func where(h room.Hold) string {
	switch {
	case len(h.Allocations) == 0:
		return ""
	case h.Level == placement.TierNode:
		return "; room held on node " + h.Where
	default:
		return "; room held in " + h.Where
	}
}

// ungate is the one update that admits a pod: the gate removed, the
// admission record written, a gang narrowed to its tier or a single pod to
// its candidate nodes (narrow.go), the declared runtime enforced. The pod's UID is a precondition.
func (c *Controller) ungate(ctx context.Context, pod *corev1.Pod, wl *workload, a ledger.Allocation, now time.Time) error {
	rec := contract.Admission{Version: contract.Version, AdmittedAt: now.UTC().Truncate(time.Second),
		QueuedFor: now.Sub(wl.w.Created).Round(time.Second).String(), Team: wl.acct.Team, Model: wl.acct.Model}
	if a.PodUID == string(pod.UID) && len(a.GPUs) > 0 {
		as := podreq.ToAssignment(a)
		rec.Hold, rec.HoldUntil = &as, a.Expires.UTC()
	}
	spec := map[string]any{
		"schedulingGates": []map[string]any{{"name": c.o.Names.QueueGate, "$patch": "delete"}},
	}
	if sel := c.tierSelector(wl.hold); sel != nil {
		spec["nodeSelector"] = sel
	}
	if rec.Hold != nil && c.narrowable(pod, wl) {
		rec.NarrowedTo = wl.hold.Candidates
		spec["affinity"] = narrowAffinity(rec.NarrowedTo)
	}
	if d, ok, err := podreq.MaxRuntime(pod, c.o.Names); err == nil && ok {
		secs := int64(math.Ceil(d.Seconds()))
		if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds > secs {
			spec["activeDeadlineSeconds"] = secs
		}
	}
	rec, err := c.o.Records.Key.SignAdmission(string(pod.UID), rec)
	if err != nil {
		return err
	}
	data, err := rec.Marshal()
	if err != nil {
		return err
	}
	annotations := map[string]any{c.o.Names.AdmissionAnnotation: string(data)}
	if _, ok := pod.Annotations[c.o.Names.ReservationAnnotation]; ok {
		annotations[c.o.Names.ReservationAnnotation] = nil // the reservation ends with the admission
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID, "annotations": annotations},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	got, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "rota-queue"})
	if err != nil {
		return fmt.Errorf("admit pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if len(rec.NarrowedTo) > 0 {
		c.o.Metrics.Narrowed.Inc()
	}
	c.mu.Lock()
	c.ungated[pod.UID] = got
	delete(c.written, pod.UID)
	delete(c.seen, pod.UID)
	c.mu.Unlock()
	return nil
}

// tierSelector narrows a gang to its planned tier: a node selector on the
// tier label (allowed on a gated pod, as a narrowing). A gang planned onto
// one node, or across the cluster, needs none: each member's hold already
// names its node.
func (c *Controller) tierSelector(h room.Hold) map[string]string {
	if len(h.Allocations) < 2 || h.Level < 0 || h.Level >= len(c.o.TierLabels) {
		return nil
	}
	return map[string]string{c.o.TierLabels[h.Level]: h.Where}
}
