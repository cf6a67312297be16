package queue

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	pkgqueue "github.com/rota-sched/rota/pkg/queue"
)

// HistoryKey is the key of the usage history in its ConfigMap.
const HistoryKey = "history.json"

// historyTimeout bounds one read or write of the history.
const historyTimeout = 5 * time.Second

// pastUse is fair share's memory for this pass (Input.Past): nil when it
// is off or not read yet. The first pass of a leader reads the history
// kept by the last; until that read succeeds (or finds none), no history
// is used and none is written, so a failed read never overwrites it.
func (c *Controller) pastUse(ctx context.Context) map[string]float64 {
	if c.o.FairShareHalfLife <= 0 || c.o.HistoryConfigMap == "" {
		return nil
	}
	if !c.historyLoaded {
		c.loadHistory(ctx)
	}
	return c.history.Share
}

func (c *Controller) loadHistory(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	cm, err := c.o.Client.CoreV1().ConfigMaps(c.o.HistoryNamespace).Get(ctx, c.o.HistoryConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.history = pkgqueue.History{HalfLife: c.o.FairShareHalfLife}
		logger.Info("No fair-share usage history kept yet; starting one", "configMap", klog.KRef(c.o.HistoryNamespace, c.o.HistoryConfigMap))
	case err != nil:
		logger.Error(err, "Reading the fair-share usage history failed; fair share uses current use only until it is read",
			"configMap", klog.KRef(c.o.HistoryNamespace, c.o.HistoryConfigMap))
		return
	default:
		h, err := pkgqueue.ParseHistory([]byte(cm.Data[HistoryKey]), c.o.FairShareHalfLife)
		if err != nil {
			// Rota's own soft state: said, then started afresh.
			logger.Error(err, "The fair-share usage history does not parse; starting a new one",
				"configMap", klog.KRef(c.o.HistoryNamespace, c.o.HistoryConfigMap))
			h = pkgqueue.History{HalfLife: c.o.FairShareHalfLife}
		} else {
			logger.Info("Fair-share usage history read", "teams", len(h.Share), "at", h.At)
		}
		c.history = h
	}
	c.historyLoaded = true
}

// observeHistory adds what each team holds after this pass's admissions to
// the history, and keeps it in its ConfigMap at most every
// HistoryWriteInterval.
func (c *Controller) observeHistory(ctx context.Context, in pkgqueue.Input, res pkgqueue.Result, now time.Time) {
	if c.o.FairShareHalfLife <= 0 || !c.historyLoaded {
		return
	}
	use := make(map[string]pkgqueue.Use, len(in.TeamUse))
	for t, u := range in.TeamUse {
		use[t] = u
	}
	for _, a := range res.Admitted {
		w := a.Workload
		u := use[w.Team]
		need := w.Need()
		u.GPUs += need.GPUs
		u.MemoryMiB += int64(need.MemoryMiB)
		u.CPUMilli += w.CPUMilli * int64(w.Members)
		use[w.Team] = u
	}
	shares := make(map[string]float64, len(use))
	for t, u := range use {
		shares[t] = pkgqueue.DominantShare(u, in.Capacity)
	}
	c.history = c.history.Observe(shares, now)
	every := c.o.HistoryWriteInterval
	if every <= 0 {
		every = 10 * time.Second
	}
	if now.Sub(c.historySaved) < every {
		return
	}
	c.historySaved = now
	c.saveHistory(ctx)
}

func (c *Controller) saveHistory(ctx context.Context) {
	logger := klog.FromContext(ctx)
	data, err := pkgqueue.MarshalHistory(c.history)
	if err != nil {
		logger.Error(err, "Encoding the fair-share usage history failed")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	cms := c.o.Client.CoreV1().ConfigMaps(c.o.HistoryNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.o.HistoryConfigMap, Namespace: c.o.HistoryNamespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "rota-extender"}},
		Data: map[string]string{HistoryKey: string(data)}}
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "rota-queue"})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "rota-queue"})
	}
	if err != nil {
		logger.V(2).Info("Keeping the fair-share usage history failed; retried later", "err", err)
	}
}
