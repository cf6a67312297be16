package report

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// PodUse is one GPU pod's use of its GPUs, as the device plugin of its node
// publishes it on the pod: the gpu-utilization annotation (written at most
// once a minute, on a change of 5 points or more, so it lags) and the idle
// mark (idle-since annotation, GPUIdle condition). kubectl reads nothing
// but the API server; the live per-GPU values are the device plugin's
// rota_device_plugin_pod_gpu_utilization_ratio metric.
type PodUse struct {
	Pod  string `json:"pod"` // namespace/name
	Node string `json:"node"`
	// GPUs is the number of GPUs assigned; Whole says they are owned whole,
	// else the pod holds AssignedMiB on one GPU.
	GPUs        int          `json:"gpus"`
	Whole       bool         `json:"whole"`
	AssignedMiB contract.MiB `json:"assignedMiB"`
	// Utilization is nil when the device plugin published none (the
	// feature is off, the node has no per-process sampling, or the pod is new).
	Utilization *contract.PodUtilization `json:"utilization,omitempty"`
	// Idle is set when the pod carries the idle mark; IdleSince and
	// IdleFor say since when, IdleMessage is the GPUIdle condition's.
	Idle        bool       `json:"idle"`
	IdleSince   *time.Time `json:"idleSince,omitempty"`
	IdleFor     string     `json:"idleFor,omitempty"`
	IdleMessage string     `json:"idleMessage,omitempty"`
	// Problem says what could not be read (an invalid annotation).
	Problem string `json:"problem,omitempty"`
}

// Pods is the `top pods` report.
type Pods struct {
	Pods []PodUse `json:"pods"`
	// Idle counts the pods marked idle; Unpublished those without a
	// utilization annotation.
	Idle        int `json:"idle"`
	Unpublished int `json:"unpublished"`
}

// TopPods lists the running pods holding Rota GPUs in namespace ("" all)
// and on node ("" all), idle pods first, then by lowest utilization, then
// by name.
func TopPods(in Input, o Options, namespace, node string) Pods {
	r := Pods{Pods: []PodUse{}}
	for i := range in.Pods {
		pod := &in.Pods[i]
		if (namespace != "" && pod.Namespace != namespace) || (node != "" && pod.Spec.NodeName != node) ||
			pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		as, err := podreq.Assignment(pod, o.Names)
		if err != nil || as == nil || len(as.GPUs) == 0 {
			continue // not a Rota GPU pod (or ledger's problem to report)
		}
		u := PodUse{Pod: pod.Namespace + "/" + pod.Name, Node: pod.Spec.NodeName, GPUs: len(as.GPUs), Whole: as.Whole}
		for _, g := range as.GPUs {
			u.AssignedMiB += g.MemoryMiB
		}
		if v, ok := pod.Annotations[o.Names.GPUUtilizationAnnotation]; ok {
			if pu, err := contract.ParsePodUtilization(v); err != nil {
				u.Problem = err.Error()
			} else {
				u.Utilization = &pu
			}
		} else {
			r.Unpublished++
		}
		if v := pod.Annotations[o.Names.IdleSinceAnnotation]; v != "" {
			u.Idle = true
			r.Idle++
			if t, err := time.Parse(time.RFC3339, v); err != nil {
				u.Problem = fmt.Sprintf("%s %q is not an RFC 3339 time", o.Names.IdleSinceAnnotation, v)
			} else {
				u.IdleSince = &t
				if !in.Now.IsZero() {
					u.IdleFor = in.Now.Sub(t).Round(time.Minute).String()
				}
			}
			for _, c := range pod.Status.Conditions {
				if string(c.Type) == o.Names.GPUIdleCondition && c.Status == corev1.ConditionTrue {
					u.IdleMessage = c.Message
				}
			}
		}
		r.Pods = append(r.Pods, u)
	}
	slices.SortFunc(r.Pods, func(a, b PodUse) int {
		if a.Idle != b.Idle {
			if a.Idle {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(smOf(a), smOf(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Pod, b.Pod)
	})
	return r
}

// smOf sorts pods without a published value last.
func smOf(u PodUse) int {
	if u.Utilization == nil {
		return 101
	}
	return u.Utilization.SMPercent
}
