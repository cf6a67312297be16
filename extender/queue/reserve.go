package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/reserve"
)

// Reserver holds room for queued jobs that do not fit yet
// (*room.Planner).
type Reserver interface {
	// ReservationJob describes a workload's pods for planning, with the
	// nodes they may run on.
	ReservationJob(pods []*corev1.Pod, scope room.Scope) (reserve.Job, []string, error)
	// SetClaims replaces the holds in the ledger.
	SetClaims(claims []ledger.Claim)
}

// reserve runs the reservation pass after an admission pass: the queue
// heads that wait for room, large or old enough, get room held where they
// will fit soonest (pkg/reserve), the holds go into the ledger, and each
// job's record is written back to its pods when it changed. It returns the
// plans by workload key, for the pods' Queued condition.
func (c *Controller) reserve(ctx context.Context, res pkgqueue.Result, byKey map[string]*workload, now time.Time) map[string]*reserve.Plan {
	if c.o.Reserver == nil {
		return nil
	}
	if c.o.Reserve == nil {
		c.o.Reserver.SetClaims(c.heldClaims()) // the room the queue freed
		return nil
	}
	logger := klog.FromContext(ctx)
	var jobs []reserve.Queued
	// The policy keys a job as its pods' requests do (a gang's key, or
	// the pod's), for the held room to be open to them; a Job queued
	// suspended is a workload of another key.
	byJob := map[string]*workload{}
	records := map[string]reserve.Record{}
	for key, st := range res.Waiting {
		wl := byKey[key]
		rec, has := c.record(wl)
		if !has && (st.Reason != pkgqueue.WaitRoom || st.Position != 1) {
			continue
		}
		q, ok := c.queuedJob(wl, st, rec)
		if !ok {
			continue
		}
		byJob[q.Job.Key] = wl
		records[q.Job.Key] = rec
		jobs = append(jobs, q)
	}
	decisions, claims := c.o.Reserve.Pass(jobs, c.o.Snapshot(), now)
	c.o.Reserver.SetClaims(append(claims, c.heldClaims()...)) // on one node, the room moves freed wins
	plans := map[string]*reserve.Plan{}
	gpus := 0
	for _, d := range decisions {
		wl := byJob[d.Key]
		if wl == nil {
			continue
		}
		old := records[d.Key]
		if d.Plan != nil {
			plans[wl.w.Key] = d.Plan
			for _, cl := range d.Plan.Claims {
				gpus += cl.GPUs
			}
			if old.Since.IsZero() {
				msg := "room held: " + d.Plan.Summary()
				for _, p := range told(wl) {
					c.event(p, corev1.EventTypeNormal, "Reserved", msg)
				}
				logger.Info("Reservation held", "workload", wl.w.Key, "domain", d.Plan.Domain(), "nodes", d.Plan.Nodes(),
					"expectedStart", d.Plan.Start, "estimated", d.Plan.Estimated)
			}
		}
		if d.Released {
			c.o.Metrics.ReservationsReleased.Inc()
			msg := fmt.Sprintf("the room held since %s was released: the job did not start by %s; it is not held for again before %s",
				old.Since.UTC().Format(time.RFC3339), c.o.Reserve.Until(old).UTC().Format(time.RFC3339),
				d.Record.CooledUntil.UTC().Format(time.RFC3339))
			for _, p := range told(wl) {
				c.event(p, corev1.EventTypeWarning, "ReservationReleased", msg)
			}
			logger.Info("Reservation released at its maximum", "workload", wl.w.Key, "since", old.Since)
		}
		if d.Record != old {
			start := time.Time{}
			if d.Plan != nil {
				start = d.Plan.Start
			}
			c.writeRecord(ctx, wl, d.Record, start)
		}
	}
	c.o.Metrics.Reservations.Set(float64(len(plans)))
	c.o.Metrics.ReservedGPUs.Set(float64(gpus))
	return plans
}

// restoreClaims holds, before a new leader's first admissions, the room of
// the reservations its pods' records name (a restart or a takeover): the
// ledger starts without holds, and an admission in the first pass would
// otherwise take the held GPUs before the reservation pass after it.
func (c *Controller) restoreClaims(ctx context.Context, byKey map[string]*workload, now time.Time) {
	if c.o.Reserve == nil || c.o.Reserver == nil || c.restored {
		return
	}
	c.restored = true
	var jobs []reserve.Queued
	for _, wl := range byKey {
		rec, has := c.record(wl)
		if !has || rec.Since.IsZero() {
			continue
		}
		if q, ok := c.queuedJob(wl, pkgqueue.Status{Reason: pkgqueue.WaitRoom, Position: 1}, rec); ok {
			jobs = append(jobs, q)
		}
	}
	if len(jobs) == 0 {
		return
	}
	_, claims := c.o.Reserve.Pass(jobs, c.o.Snapshot(), now)
	c.o.Reserver.SetClaims(claims)
	klog.FromContext(ctx).Info("Reservations restored from their records", "jobs", len(jobs), "nodes", len(claims))
}

// queuedJob describes a queued workload for the reservation policy,
// charged to its first quota account's GPU model.
func (c *Controller) queuedJob(wl *workload, st pkgqueue.Status, rec reserve.Record) (reserve.Queued, bool) {
	job, candidates, err := c.o.Reserver.ReservationJob(wl.pods, c.scopeOf(wl))
	if err != nil || (wl.job != nil && !job.Gang && len(wl.pods) > 1) {
		// A Job queued suspended of several pods that is not a gang: its
		// pods' requests have keys of their own, none of which would be
		// let into room held under one.
		return reserve.Queued{}, false
	}
	return reserve.Queued{Job: job, Priority: wl.w.Priority, Created: wl.w.Created, Status: st,
		Candidates: candidates, Record: rec}, true
}

// told is where a workload's reservation events go: each of its pods, or
// once for a Job queued suspended (its planned pods' events go to the Job).
func told(wl *workload) []*corev1.Pod {
	if wl.job != nil {
		return wl.pods[:1]
	}
	return wl.pods
}

// record reads a workload's reservation record: from the Job for a Job
// queued suspended (its pods do not exist yet), else from its pods (the
// first that carries a valid one).
func (c *Controller) record(wl *workload) (reserve.Record, bool) {
	if wl.job != nil {
		return c.recordIn(wl.job.GetAnnotations())
	}
	for _, p := range wl.pods {
		if r, ok := c.recordIn(p.Annotations); ok {
			return r, true
		}
	}
	return reserve.Record{}, false
}

// recordIn reads a valid reservation record from an object's annotations.
func (c *Controller) recordIn(annotations map[string]string) (reserve.Record, bool) {
	v, ok := annotations[c.o.Names.ReservationAnnotation]
	if !ok {
		return reserve.Record{}, false
	}
	r, err := contract.ParseReservation([]byte(v))
	if err != nil {
		return reserve.Record{}, false
	}
	return reserve.Record{Since: r.Since, Until: r.HoldUntil, Domain: r.Domain, CooledUntil: r.CooledUntil}, true
}

// writeRecord writes (or, for an empty record, removes) the reservation
// record on every pod of the workload, or on the Job of a Job queued
// suspended. A failed write is retried by the
// next pass, which finds the old record.
func (c *Controller) writeRecord(ctx context.Context, wl *workload, r reserve.Record, start time.Time) {
	var value any // nil removes the annotation
	if r != (reserve.Record{}) {
		data, err := contract.Reservation{Version: contract.Version, Since: r.Since.UTC(), HoldUntil: r.Until.UTC(), Domain: r.Domain,
			ExpectedStart: start.UTC(), CooledUntil: r.CooledUntil.UTC()}.Marshal()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reservation record does not validate", "workload", wl.w.Key)
			return
		}
		value = string(data)
	}
	if wl.job != nil {
		c.writeJobRecord(ctx, wl.job, value)
		return
	}
	for _, p := range wl.pods {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID,
			"annotations": map[string]any{c.o.Names.ReservationAnnotation: value}}})
		if err != nil {
			return
		}
		if _, err := c.o.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: "rota-queue"}); err != nil {
			klog.FromContext(ctx).V(2).Info("Writing the reservation record failed; the next pass retries", "pod", klog.KObj(p),
				"reason", err.Error())
		}
	}
}
