package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/reserve"
)

// queuedPod is where a queued pod stands after the last pass; its message
// is formatted when first read.
type queuedPod struct {
	pos Position
	msg *lazyMessage
}

// lazyMessage formats a queued workload's message once, when first asked.
type lazyMessage struct {
	once  sync.Once
	build func() string
	s     string
}

// lazyString is a message formatted when first read.
func lazyString(build func() string) *lazyMessage { return &lazyMessage{build: build} }

func (l *lazyMessage) String() string {
	l.once.Do(func() { l.s = l.build() })
	return l.s
}

// report writes where each waiting pod stands and refreshes the positions
// and metrics.
func (c *Controller) report(ctx context.Context, in pkgqueue.Input, res pkgqueue.Result, byKey map[string]*workload,
	plans map[string]*reserve.Plan, now time.Time) {
	status := make(map[string]queuedPod, len(res.Waiting))
	teams := map[string]TeamStatus{}
	for t, u := range in.TeamUse {
		teams[t] = TeamStatus{Team: t, GPUs: u.GPUs, MemoryMiB: u.MemoryMiB}
	}
	for key, st := range res.Waiting {
		wl := byKey[key]
		ts := teams[wl.w.Team]
		ts.Team = wl.w.Team
		ts.Queued += len(wl.pods)
		teams[wl.w.Team] = ts
		var reservation string
		var start *time.Time
		if p := plans[key]; p != nil {
			reservation = p.Summary()
			if !p.Start.IsZero() {
				t := p.Start.UTC()
				start = &t
			}
		}
		// The message is written out only where it is read: a condition
		// due for a write, a first Queued event, /debug/queue. With a deep
		// queue most pods need none of these in a pass.
		msg := &lazyMessage{build: func() string {
			m := fmt.Sprintf("position %d of %d in team %s; %s", st.Position, st.Of, wl.w.Team, st.Message)
			if st.Ahead > 0 {
				m += fmt.Sprintf("; %d ahead need %s", st.Ahead, st.AheadNeed)
			}
			if reservation != "" {
				m += "; room held: " + reservation
			}
			return m
		}}
		if wl.job != nil {
			// A Job queued suspended has no pods to write on: it is listed
			// as itself, and told once by an event on the Job.
			pos := Position{Pod: key, Workload: key, Team: wl.w.Team, Position: st.Position, Of: st.Of,
				Reason: string(st.Reason), Waiting: now.Sub(wl.w.Created).Seconds(),
				Reservation: reservation, ExpectedStart: start}
			c.deadline(wl.pods[0], wl, st, &pos)
			status[key] = queuedPod{msg: msg, pos: pos}
			c.jobQueued(wl, msg)
			continue
		}
		for _, pod := range wl.pods {
			k := pod.Namespace + "/" + pod.Name
			pos := Position{Pod: k, Workload: key, Team: wl.w.Team, Position: st.Position, Of: st.Of,
				Reason: string(st.Reason), Waiting: now.Sub(wl.w.Created).Seconds(),
				Reservation: reservation, ExpectedStart: start}
			c.deadline(pod, wl, st, &pos)
			status[k] = queuedPod{msg: msg, pos: pos}
			c.condition(ctx, pod, wl.w.Team, string(st.Reason), msg, now)
		}
	}
	oldest := map[string]float64{}
	for key := range res.Waiting {
		wl := byKey[key]
		oldest[wl.w.Team] = max(oldest[wl.w.Team], now.Sub(wl.w.Created).Seconds())
	}
	for t, ts := range teams {
		ts.Share = shareOf(in, t)
		if tm, ok := in.Config.Teams[t]; ok {
			ts.Group = tm.Group
		}
		teams[t] = ts
		c.o.Metrics.Length.WithLabelValues(t).Set(float64(ts.Queued))
		c.o.Metrics.OldestWait.WithLabelValues(t).Set(oldest[t])
	}
	queuedUIDs := map[types.UID]bool{}
	for _, wl := range byKey {
		for _, p := range wl.pods {
			queuedUIDs[p.UID] = true
		}
	}
	groups := queueGroups(in.Config, in.Admitted)
	c.mu.Lock()
	c.status, c.teams, c.groups = status, teams, groups
	// Forget pods that left the queue (admitted, deleted).
	for uid := range c.written {
		if !queuedUIDs[uid] {
			delete(c.written, uid)
		}
	}
	for uid := range c.seen {
		if !queuedUIDs[uid] {
			delete(c.seen, uid)
		}
	}
	for uid := range c.late {
		if !queuedUIDs[uid] {
			delete(c.late, uid)
		}
	}
	c.mu.Unlock()
}

func shareOf(in pkgqueue.Input, team string) float64 {
	return pkgqueue.DominantShare(in.TeamUse[team], in.Capacity)
}

// deadline fills a queued pod's deadline in its position, and says once,
// with a Warning event, that it can no longer end by its deadline.
func (c *Controller) deadline(pod *corev1.Pod, wl *workload, st pkgqueue.Status, pos *Position) {
	if wl.w.LatestStart.IsZero() {
		return
	}
	ls := wl.w.LatestStart.UTC()
	pos.LatestStart = &ls
	switch {
	case st.Late:
		pos.Deadline = "missed"
		c.mu.Lock()
		told := c.late[pod.UID]
		c.late[pod.UID] = true
		c.mu.Unlock()
		if !told {
			c.event(pod, corev1.EventTypeWarning, "DeadlineMissed", fmt.Sprintf(
				"it cannot end by its deadline even if it started now: it had to start by %s (its deadline less its declared runtime)",
				ls.Format("2006-01-02 15:04:05 MST")))
		}
	case st.Urgent:
		pos.Deadline = "urgent"
	}
}

// jobQueued notes a Job queued suspended's first Queued event (on the Job).
func (c *Controller) jobQueued(wl *workload, msg *lazyMessage) {
	first := wl.pods[0]
	c.mu.Lock()
	seen := c.seen[first.UID]
	c.seen[first.UID] = true
	c.mu.Unlock()
	if !seen {
		c.events.jobQueued(wl.job.eventObject(), wl.job.kind(), wl.w.Team, len(wl.pods), msg)
	}
}

// condition writes the Queued condition when its message changed, at most
// once per ConditionInterval per pod and within the cluster-wide rate.

func (c *Controller) condition(ctx context.Context, pod *corev1.Pod, team, reason string, lazy *lazyMessage, now time.Time) {
	c.mu.Lock()
	last, wrote := c.written[pod.UID]
	first := !c.seen[pod.UID]
	c.seen[pod.UID] = true
	c.mu.Unlock()
	if first {
		c.events.queued(pod, team, lazy)
	}
	if wrote && now.Sub(last.at) < c.o.ConditionInterval {
		return
	}
	if c.limiter.TokensAt(now) < 1 {
		return // the cluster-wide rate is spent: no write, so no message
	}
	msg := lazy.String()
	if wrote && last.msg == msg {
		return
	}
	if !c.limiter.AllowN(now, 1) {
		return
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodConditionType(c.o.Names.QueuedCondition), Status: corev1.ConditionTrue,
		Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now)}}}})
	if err != nil {
		return
	}
	_, err = c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: "rota-queue"}, "status")
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Writing the Queued condition failed", "pod", klog.KObj(pod), "reason", err.Error())
		return
	}
	c.o.Metrics.ConditionWrites.Inc()
	c.mu.Lock()
	c.written[pod.UID] = condWrite{at: now, msg: msg}
	c.mu.Unlock()
}

func (c *Controller) event(pod *corev1.Pod, typ, reason, msg string) {
	if c.o.Recorder == nil {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && pod.ResourceVersion == "" {
		// A planned member of a Job queued suspended (podreq.JobPods): the
		// API holds no such pod, so the event goes to its Job.
		c.o.Recorder.Event(&corev1.ObjectReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name,
			Namespace: pod.Namespace, UID: ref.UID}, typ, reason, msg)
		return
	}
	c.o.Recorder.Event(pod, typ, reason, msg)
}

// queueGroups is the quota tree for /debug/queue and /ui: each group,
// parents first, siblings by name, with what its subtree borrows now and
// from where (pkg/quota.Config.GroupFlows).
func queueGroups(cfg quota.Config, admitted map[quota.Account]quota.Usage) []contract.QueueGroup {
	flows, _, _ := cfg.GroupFlows(admitted)
	if flows == nil {
		return nil
	}
	var out []contract.QueueGroup
	for _, at := range cfg.GroupsTopDown() {
		g, f := cfg.Groups[at.Name], flows[at.Name]
		qg := contract.QueueGroup{Group: at.Name, Parent: g.Parent, Depth: at.Depth, PoolGPUs: g.GPUs, BorrowedGPUs: f.Borrowed.GPUs,
			FromPoolGPUs: f.FromPool.GPUs, FromLentGPUs: f.FromLent.GPUs, AboveGPUs: f.Above.GPUs, LentGPUs: f.Lent.GPUs}
		if g.Borrow != nil {
			b := g.Borrow.GPUs
			qg.BorrowLimitGPUs = &b
		}
		out = append(out, qg)
	}
	return out
}

// View is what /debug/queue and /ui show: the positions, the teams and the
// quota tree after the last pass; leader says whether this replica runs
// the controller.
func (c *Controller) View(leader bool) contract.QueueView {
	pods, teams := c.Positions()
	c.mu.Lock()
	groups := slices.Clone(c.groups)
	c.mu.Unlock()
	return contract.QueueView{Leader: leader, Teams: teams, Pods: pods, Groups: groups}
}
