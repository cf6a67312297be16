package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// recorder keeps what the API server says about the evaluation's pods as
// it happens: a pod preempted or evicted is deleted, and the record of
// when it ran would go with it.
type recorder struct {
	gpuMemoryGiB int64
	shape        evalkit.Shape
	jobs         map[string]evaluate.Job

	mu   sync.Mutex
	pods map[types.UID]*podSeen
}

type podSeen struct {
	evaluate.PodRecord
	done bool
}

func newRecorder(s evalkit.Shape, jobs []evaluate.Job, gpuMemoryGiB int64) *recorder {
	r := &recorder{gpuMemoryGiB: max(gpuMemoryGiB, 1), shape: s, jobs: map[string]evaluate.Job{}, pods: map[types.UID]*podSeen{}}
	for _, j := range jobs {
		r.jobs[j.Name] = j
	}
	return r
}

// start watches the pods carrying the job label until ctx ends.
func (r *recorder) start(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = evalkit.JobLabel }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.seen(obj, false) },
		UpdateFunc: func(_, obj any) { r.seen(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			r.seen(obj, true)
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

func (r *recorder) seen(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	j, ok := r.jobs[pod.Labels[evalkit.JobLabel]]
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[pod.UID]
	if p == nil {
		gpus, mem := r.shape.Held(j)
		p = &podSeen{PodRecord: evaluate.PodRecord{Job: j.Name, GPUs: gpus, MemoryGiB: mem,
			Asked: float64(j.GPUs) + float64(j.MemoryGiB)/float64(r.gpuMemoryGiB)}}
		r.pods[pod.UID] = p
	}
	if p.done {
		return
	}
	if p.Started.IsZero() && pod.Status.Phase == corev1.PodRunning {
		p.Started = now
		if pod.Status.StartTime != nil {
			p.Started = pod.Status.StartTime.Time
		}
		p.Node = pod.Spec.NodeName
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			p.Disrupted = true
		}
	}
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		p.done, p.Finished = true, now
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && !t.FinishedAt.IsZero() {
				p.Finished = t.FinishedAt.Time
			}
		}
	case deleted:
		// Deleted before it ended: preempted, evicted or removed by its job.
		// It stopped when the API server marked it for deletion, not when
		// this watch heard of it (the preemptor may start in between).
		p.done = true
		if !p.Started.IsZero() {
			p.Finished, p.Disrupted = now, true
			if pod.DeletionTimestamp != nil {
				p.Finished = pod.DeletionTimestamp.Time
			}
		}
	}
}

// records is every pod seen so far.
func (r *recorder) records() []evaluate.PodRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]evaluate.PodRecord, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, p.PodRecord)
	}
	return out
}

// progress counts the pods running now and the GPUs they hold.
func (r *recorder) progress() (running int, gpus float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if !p.Started.IsZero() && !p.done {
			running++
			gpus += float64(p.GPUs) + float64(p.MemoryGiB)/float64(r.gpuMemoryGiB)
		}
	}
	return running, gpus
}

// jobRecords reads the Jobs' outcomes from the API server.
func jobRecords(ctx context.Context, client kubernetes.Interface, jobs map[string]evaluate.Job, namespaces []string) ([]evaluate.JobRecord, error) {
	var out []evaluate.JobRecord
	for _, ns := range namespaces {
		list, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			obj := &list.Items[i]
			j, ok := jobs[obj.Labels[evalkit.JobLabel]]
			if !ok {
				continue
			}
			rec := evaluate.JobRecord{Job: j, Created: obj.CreationTimestamp.Time}
			if obj.Status.CompletionTime != nil {
				rec.Completed = obj.Status.CompletionTime.Time
			}
			for _, c := range obj.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					rec.Failed, rec.FailReason = true, c.Reason+": "+c.Message
				}
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

// writesByUser counts the mutating requests in the API server's audit
// logs by user.
func writesByUser(files []string) (map[string]int, error) {
	out := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var ev struct {
				Stage string `json:"stage"`
				Verb  string `json:"verb"`
				User  struct {
					Username string `json:"username"`
				} `json:"user"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" {
				continue
			}
			switch ev.Verb {
			case "create", "update", "patch", "delete", "deletecollection":
				out[ev.User.Username]++
			}
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// writesPolicy logs every write, by anyone, at Metadata level.
const writesPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
`
