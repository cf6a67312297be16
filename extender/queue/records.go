package queue

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// disbelieved reports an admitted pod whose admission record names another
// team, or an account its team does not have: an edit by someone other
// than the queue (where the records policy is missing), or a namespace
// whose team label changed since. The pod is charged to acct, its own
// team's account, whatever the record says. Each record is reported once
// (a Warning event on the pod, a log line, a metric), not on every pass.
//
// unsigned is a record that Rota did not sign (Options.Records): it is not
// believed at all, and the pod is charged as one without a record.
func (c *Controller) disbelieved(pod *corev1.Pod, adm *contract.Admission, acct quota.Account, unsigned bool) {
	said := adm.Team + "/" + adm.Model + "/" + adm.Signature
	if c.disbelief == nil {
		c.disbelief = map[types.UID]string{}
	}
	if prev, ok := c.disbelief[pod.UID]; ok && prev == said {
		return
	}
	c.disbelief[pod.UID] = said
	if c.o.Metrics != nil {
		c.o.Metrics.DisbelievedRecords.Inc()
	}
	if unsigned {
		msg := fmt.Sprintf("Annotation %s does not carry Rota's signature for this pod: it was written or changed outside Rota and is not believed; "+
			"the pod's GPUs count against its own team %q", c.o.Names.AdmissionAnnotation, acct.Team)
		klog.Background().Info("Admission record not believed: not signed by Rota", "pod", klog.KObj(pod), "recordTeam", adm.Team, "team", acct.Team)
		if c.o.Recorder != nil {
			c.o.Recorder.Event(pod, corev1.EventTypeWarning, contract.ReasonForgedRecord, msg)
		}
		return
	}
	msg := fmt.Sprintf("Annotation %s names team %q (account %q), but the pod's team is %q: the record was changed outside Rota "+
		"(or the namespace's team label changed) and is not believed; the pod's GPUs count against team %q",
		c.o.Names.AdmissionAnnotation, adm.Team, adm.Model, acct.Team, acct.Team)
	if acct.Model != "" {
		msg += fmt.Sprintf(" (account %q)", acct.Model)
	}
	klog.Background().Info("Admission record not believed", "pod", klog.KObj(pod), "recordTeam", adm.Team, "recordModel", adm.Model,
		"team", acct.Team, "model", acct.Model)
	if c.o.Recorder != nil {
		c.o.Recorder.Event(pod, corev1.EventTypeWarning, contract.ReasonForgedRecord, msg)
	}
}

// forgetDisbelief drops what disbelieved remembers of pods the pass did
// not see (gone, or ended).
func (c *Controller) forgetDisbelief(seen map[types.UID]parsedRequest) {
	for uid := range c.disbelief {
		if _, ok := seen[uid]; !ok {
			delete(c.disbelief, uid)
		}
	}
}
