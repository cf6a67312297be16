package queue

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// disbelieved reports an admitted pod whose admission record the queue
// does not believe (problem says why: not signed by Rota, or naming another
// team or an account the team does not have). The pod is charged to acct,
// its own team's account, whatever the record says. Each record is
// reported once (a Warning event on the pod, a log line, a metric), not on
// every pass.
func (c *Controller) disbelieved(logger klog.Logger, pod *corev1.Pod, adm *contract.Admission, acct quota.Account, problem string) {
	if !c.firstDisbelief(pod.UID, adm) {
		return
	}
	logger.Info("Admission record not believed", "pod", klog.KObj(pod), "problem", problem,
		"recordTeam", adm.Team, "recordModel", adm.Model, "team", acct.Team, "model", acct.Model)
	if c.o.Recorder != nil {
		c.o.Recorder.Eventf(pod, corev1.EventTypeWarning, contract.ReasonForgedRecord,
			"Annotation %s %s: it was written or changed outside Rota and is not believed; the pod's GPUs count against team %q%s",
			c.o.Names.AdmissionAnnotation, problem, acct.Team, modelNote(acct))
	}
}

// firstDisbelief reports whether the object's unbelieved record is new
// (not reported yet), remembers it and counts it in the metric.
func (c *Controller) firstDisbelief(uid types.UID, adm *contract.Admission) bool {
	said := adm.Team + "/" + adm.Model + "/" + adm.Signature
	if c.disbelief == nil {
		c.disbelief = map[types.UID]string{}
	}
	if prev, ok := c.disbelief[uid]; ok && prev == said {
		return false
	}
	c.disbelief[uid] = said
	if c.o.Metrics != nil {
		c.o.Metrics.DisbelievedRecords.Inc()
	}
	return true
}

func modelNote(acct quota.Account) string {
	if acct.Model == "" {
		return ""
	}
	return fmt.Sprintf(" (account %q)", acct.Model)
}

// forgetDisbelief drops what disbelieved remembers of pods the pass did
// not see (gone, or ended).
func (c *Controller) forgetDisbelief(seen map[types.UID]bool) {
	for uid := range c.disbelief {
		if _, ok := seen[uid]; !ok {
			delete(c.disbelief, uid)
		}
	}
}
