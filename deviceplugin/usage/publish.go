package usage

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
)

// PublishConfig says what the Publisher writes on pods.
type PublishConfig struct {
	// Utilization writes GPUUtilizationAnnotation (contract.PodUtilization),
	// at most once per MinInterval per pod and only when the SM percent
	// moved by MinChange points or more since the value on the pod.
	Utilization bool
	MinInterval time.Duration
	MinChange   int
	// Idle writes IdleSinceAnnotation and the GPUIdle condition when a pod
	// becomes Idle, and takes the annotation away (condition False) when it
	// is Busy again.
	Idle bool
	// IdleBelow and IdleAfter are the Sampler's, for the messages.
	IdleBelow float64
	IdleAfter time.Duration
}

// Reasons of the GPUIdle condition.
const (
	ReasonIdle = "GPUUtilizationLow"
	ReasonBusy = "GPUUtilizationRecovered"
)

// view is what the informer last showed of a pod's marks.
type view struct {
	namespace, name string
	util, idleSince string
	idle            corev1.ConditionStatus // "" when the pod has no GPUIdle condition
}

// Publisher writes the Sampler's results onto pods. It learns what the pods
// carry from the device plugin's pod informer (it is a
// cache.ResourceEventHandler) and from its own patches' answers, so it
// writes only what differs. It is safe for concurrent use.
type Publisher struct {
	client kubernetes.Interface
	names  contract.Names
	cfg    PublishConfig

	mu       sync.Mutex
	pods     map[string]view      // pod UID -> marks
	lastUtil map[string]time.Time // pod UID -> last utilization write
}

var _ cache.ResourceEventHandler = (*Publisher)(nil)

// NewPublisher patches pods through client.
func NewPublisher(client kubernetes.Interface, names contract.Names, cfg PublishConfig) *Publisher {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = time.Minute
	}
	if cfg.MinChange <= 0 {
		cfg.MinChange = 5
	}
	return &Publisher{client: client, names: names, cfg: cfg, pods: map[string]view{}, lastUtil: map[string]time.Time{}}
}

// OnAdd records the pod's marks.
func (p *Publisher) OnAdd(obj any, _ bool) { p.observe(obj) }

// OnUpdate records the pod's marks.
func (p *Publisher) OnUpdate(_, obj any) { p.observe(obj) }

// OnDelete forgets the pod.
func (p *Publisher) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.pods, string(pod.UID))
		delete(p.lastUtil, string(pod.UID))
	}
}

func (p *Publisher) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	v := view{namespace: pod.Namespace, name: pod.Name,
		util: pod.Annotations[p.names.GPUUtilizationAnnotation], idleSince: pod.Annotations[p.names.IdleSinceAnnotation]}
	for _, c := range pod.Status.Conditions {
		if string(c.Type) == p.names.GPUIdleCondition {
			v.idle = c.Status
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[string(pod.UID)] = v
}

// Sync writes what changed for each pod at now. Pods the informer has not
// shown yet, and pods in State Unknown, are left for a later Sync.
func (p *Publisher) Sync(ctx context.Context, now time.Time, pods []Pod) {
	if !p.cfg.Utilization && !p.cfg.Idle {
		return
	}
	for _, pod := range pods {
		if pod.State == Unknown {
			continue
		}
		p.mu.Lock()
		v, ok := p.pods[pod.UID]
		last := p.lastUtil[pod.UID]
		p.mu.Unlock()
		if !ok {
			continue
		}
		p.sync(ctx, now, pod, v, last)
	}
}

func (p *Publisher) sync(ctx context.Context, now time.Time, pod Pod, v view, last time.Time) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KRef(v.namespace, v.name))
	ann := map[string]any{}
	util := contract.PodUtilization{SMPercent: int(math.Round(pod.SM * 100)), UsedMiB: pod.UsedMiB}
	if p.cfg.Utilization && now.Sub(last) >= p.cfg.MinInterval && p.utilChanged(v.util, util) {
		ann[p.names.GPUUtilizationAnnotation] = util.String()
	}
	var cond *corev1.PodCondition
	if p.cfg.Idle {
		switch pod.State {
		case Idle:
			if v.idleSince == "" {
				ann[p.names.IdleSinceAnnotation] = pod.BelowSince.UTC().Format(time.RFC3339)
			}
			if v.idle != corev1.ConditionTrue {
				cond = &corev1.PodCondition{Type: corev1.PodConditionType(p.names.GPUIdleCondition), Status: corev1.ConditionTrue,
					Reason: ReasonIdle, LastTransitionTime: metav1.NewTime(now),
					Message: fmt.Sprintf("GPU utilization %s has stayed below %s for %s (since %s)",
						percent(pod.Max()), percent(p.cfg.IdleBelow), now.Sub(pod.BelowSince).Round(time.Second), pod.BelowSince.UTC().Format(time.RFC3339))}
			}
		case Busy:
			if v.idleSince != "" {
				ann[p.names.IdleSinceAnnotation] = nil
			}
			if v.idle == corev1.ConditionTrue {
				cond = &corev1.PodCondition{Type: corev1.PodConditionType(p.names.GPUIdleCondition), Status: corev1.ConditionFalse,
					Reason: ReasonBusy, LastTransitionTime: metav1.NewTime(now),
					Message: fmt.Sprintf("GPU utilization %s is at or above %s again", percent(pod.Max()), percent(p.cfg.IdleBelow))}
			}
		}
	}
	if len(ann) > 0 {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}}) // maps of strings and nil marshal
		got, err := p.client.CoreV1().Pods(v.namespace).Patch(ctx, v.name, types.MergePatchType, body, metav1.PatchOptions{})
		if err != nil {
			logger.Error(err, "Writing the pod's GPU utilization annotations failed")
		} else {
			p.record(pod.UID, got, ann[p.names.GPUUtilizationAnnotation] != nil, now)
			if s, ok := ann[p.names.IdleSinceAnnotation]; ok {
				logger.Info("Pod GPU idle mark changed", "idleSince", s, "utilization", util.SMPercent)
			}
		}
	}
	if cond != nil {
		body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{*cond}}})
		got, err := p.client.CoreV1().Pods(v.namespace).Patch(ctx, v.name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		if err != nil {
			logger.Error(err, "Writing the pod's GPUIdle condition failed")
		} else {
			p.record(pod.UID, got, false, now)
		}
	}
}

// utilChanged says whether the value on the pod (cur) is worth replacing.
func (p *Publisher) utilChanged(cur string, want contract.PodUtilization) bool {
	old, err := contract.ParsePodUtilization(cur)
	if cur == "" || err != nil {
		return true
	}
	d := old.SMPercent - want.SMPercent
	return d >= p.cfg.MinChange || -d >= p.cfg.MinChange
}

// record takes the patched pod as the new view.
func (p *Publisher) record(uid string, got *corev1.Pod, wroteUtil bool, now time.Time) {
	if got != nil && string(got.UID) == uid {
		p.observe(got)
	}
	if wroteUtil {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.lastUtil[uid] = now
	}
}

// percent renders a ratio as "4.5%".
func percent(r float64) string {
	s := fmt.Sprintf("%.1f", r*100)
	return strings.TrimSuffix(s, ".0") + "%"
}
