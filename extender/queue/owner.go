package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

var (
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
	jobsGVR = batchv1.SchemeGroupVersion.WithResource("jobs")
)

// DefaultJobSetRecheck is the least time between two discovery checks for
// the JobSet API while it is not served.
const DefaultJobSetRecheck = 10 * time.Second

// Owners gives a queued pod the age of its owning workload, so that a pod
// its controller recreates (a failed or evicted member of a Job) keeps its
// place in its team's queue. The owning workload is:
//
//   - the JobSet that controls the pod's Job, when the JobSet API is served
//     (a JobSet that recreates its Jobs keeps its place too);
//   - else the Job (batch/v1) that controls the pod;
//   - else none: the pod's own creation.
//
// It reads metadata only (no pod specs, no Job templates): the pods that a
// Job controls and that are not bound yet (label batch.kubernetes.io/
// controller-uid, field spec.nodeName=""; the extender's own pod informer
// drops owner references), every Job, and every JobSet. The JobSet API may
// be missing, or installed after rota-extender starts: discovery is asked
// again when a Job controlled by a JobSet is seen, at most once per
// JobSetRecheck (with QueueJobSets, also every JobSetRecheck: a JobSet
// queued suspended has no pods). Until an owner is in its cache (informers
// lag by milliseconds), the pod's own creation is used.
//
// Run watches while the queue controller leads; HasSynced is false outside
// Run. A nil *Owners gives every pod its own creation.
type Owners struct {
	client    metadata.Interface
	discovery discovery.DiscoveryInterface
	// dynamic, when set (QueueJobSets), reads JobSets whole: the queue
	// admits the ones queued suspended (jobs.go).
	dynamic dynamic.Interface
	names   contract.Names
	// JobSetRecheck is the least time between two discovery checks for the
	// JobSet API (0: DefaultJobSetRecheck).
	JobSetRecheck time.Duration

	recheck chan struct{}

	mu      sync.RWMutex
	pods    cache.SharedIndexInformer // nil outside Run
	jobs    cache.SharedIndexInformer
	jobSets cache.SharedIndexInformer // nil while the JobSet API is not served
	// jobSetsGVR is the JobSet resource jobSets watches; asked is set once
	// the Run has asked discovery whether it is served.
	jobSetsGVR schema.GroupVersionResource
	asked      bool
}

// NewOwners builds Owners over a metadata client and the discovery client
// that tells whether the JobSet API is served.
func NewOwners(client metadata.Interface, disc discovery.DiscoveryInterface) *Owners {
	return &Owners{client: client, discovery: disc, recheck: make(chan struct{}, 1)}
}

// QueueJobSets has Run read JobSets whole through client (their metadata
// otherwise), so that the queue reads those queued suspended (QueuedJobSets).
func (o *Owners) QueueJobSets(client dynamic.Interface, names contract.Names) {
	o.dynamic, o.names = client, names
}

// JobSetResource is the resource the JobSets are served at (zero while
// the JobSet API is not served).
func (o *Owners) JobSetResource() schema.GroupVersionResource {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.jobSetsGVR
}

// QueuedJobSets returns the JobSets in the cache (those not queued
// suspended with their metadata only). ok is false while a JobSet informer has not synced: a JobSet
// admitted earlier would be missed. Without QueueJobSets, or while the
// JobSet API is not served, it returns none, ok.
func (o *Owners) QueuedJobSets() (list []*podreq.JobSet, ok bool) {
	o.mu.RLock()
	inf := o.jobSets
	o.mu.RUnlock()
	if o.dynamic == nil || inf == nil {
		return nil, true
	}
	if !inf.HasSynced() {
		return nil, false
	}
	for _, obj := range inf.GetStore().List() {
		if js, ok := obj.(*podreq.JobSet); ok {
			list = append(list, js)
		}
	}
	return list, true
}

// Run watches pods, Jobs and (when served) JobSets until ctx ends. It may be
// called again after it returns (a new leadership term): each call starts
// fresh informers.
func (o *Owners) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("owners")
	pods := metadatainformer.NewFilteredMetadataInformer(o.client, podsGVR, metav1.NamespaceAll, 0, cache.Indexers{},
		func(lo *metav1.ListOptions) {
			lo.LabelSelector = batchv1.ControllerUidLabel
			lo.FieldSelector = "spec.nodeName="
		}).Informer()
	jobs := metadatainformer.NewFilteredMetadataInformer(o.client, jobsGVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	for _, inf := range []cache.SharedIndexInformer{pods, jobs} {
		if err := inf.SetTransform(trimOwned); err != nil {
			logger.Error(err, "Setting the owner informers' transform failed")
		}
	}
	o.mu.Lock()
	o.pods, o.jobs, o.jobSets, o.asked = pods, jobs, nil, false
	o.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		o.mu.Lock()
		o.pods, o.jobs, o.jobSets, o.asked = nil, nil, nil, false
		o.mu.Unlock()
	}()
	wg.Go(func() { pods.RunWithContext(ctx) })
	wg.Go(func() { jobs.RunWithContext(ctx) })

	every := o.JobSetRecheck
	if every <= 0 {
		every = DefaultJobSetRecheck
	}
	var last time.Time
	for {
		if last.IsZero() || time.Since(last) >= every {
			last = time.Now()
			gvr, ok, err := o.jobSetResource()
			if !ok {
				o.mu.Lock()
				o.asked = true
				o.mu.Unlock()
			}
			switch {
			case err != nil:
				logger.V(2).Info("Discovery of the JobSet API failed; Jobs of JobSets are ordered by their own creation meanwhile", "err", err)
			case ok:
				inf := o.jobSetInformer(gvr)
				if err := inf.SetTransform(o.trimJobSet); err != nil {
					logger.Error(err, "Setting the JobSet informer's transform failed")
				}
				o.mu.Lock()
				o.jobSets, o.jobSetsGVR, o.asked = inf, gvr, true
				o.mu.Unlock()
				wg.Go(func() { inf.RunWithContext(ctx) })
				logger.Info("Watching JobSets: their pods are queued by the JobSet's creation", "resource", gvr.String())
				<-ctx.Done()
				return
			}
		}
		var tick <-chan time.Time
		if o.dynamic != nil {
			// JobSets queued suspended have no pods to ask for a recheck:
			// discovery is asked again every JobSetRecheck.
			tick = time.After(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-o.recheck:
		case <-tick:
		}
	}
}

// jobSetResource asks discovery whether the JobSet API is served and at
// which version (the group's preferred one).
func (o *Owners) jobSetResource() (schema.GroupVersionResource, bool, error) {
	groups, err := o.discovery.ServerGroups()
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	for _, g := range groups.Groups {
		if g.Name != podreq.JobSetGroup {
			continue
		}
		gv := g.PreferredVersion.GroupVersion
		rs, err := o.discovery.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return schema.GroupVersionResource{}, false, err
		}
		for _, r := range rs.APIResources {
			if r.Name == "jobsets" {
				return schema.GroupVersionResource{Group: podreq.JobSetGroup, Version: g.PreferredVersion.Version, Resource: "jobsets"}, true, nil
			}
		}
	}
	return schema.GroupVersionResource{}, false, nil
}

// jobSetInformer watches JobSets: whole through the dynamic client (the
// queue reads those queued suspended), else their metadata.
func (o *Owners) jobSetInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	if o.dynamic != nil {
		return dynamicinformer.NewFilteredDynamicInformer(o.dynamic, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	}
	return metadatainformer.NewFilteredMetadataInformer(o.client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
}

// trimJobSet keeps of a JobSet what the queue and ownerCreated read, as a
// *podreq.JobSet: a JobSet queued suspended whole but for its managed
// fields, any other its metadata that trimOwned keeps.
func (o *Owners) trimJobSet(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return trimOwned(obj)
	}
	if u.GetAnnotations()[o.names.QueuedJobAnnotation] == "true" {
		js, err := jobSetFrom(u)
		if err != nil {
			return nil, err
		}
		js.ManagedFields = nil
		return js, nil
	}
	return &podreq.JobSet{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}, ObjectMeta: ownedMeta(u)}, nil
}

// jobSetFrom reads a JobSet the API server answered.
func jobSetFrom(u *unstructured.Unstructured) (*podreq.JobSet, error) {
	js := &podreq.JobSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, js); err != nil {
		return nil, fmt.Errorf("reading JobSet %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return js, nil
}

// HasSynced reports whether the pod and Job caches of the current Run have
// synced (false outside Run), discovery has been asked once whether the
// JobSet API is served, and, if it was then, the JobSet cache has synced.
// A JobSet informer started later is not waited for here (QueuedJobSets
// says whether it has synced).
func (o *Owners) HasSynced() bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.pods != nil && o.pods.HasSynced() && o.jobs.HasSynced() && o.asked && (o.jobSets == nil || o.jobSets.HasSynced())
}

// Created is the time a queued pod is ordered by: its owning workload's
// creation where it has one, else its own.
//
// Every pod of one workload shares the workload's place; among themselves
// they keep their own creation order. The API's timestamps have a
// resolution of one second, so the owner's creation is taken to the second
// and a fraction of a second is added that grows with how long after the
// owner the pod was created (ownedAge): two workloads created in different
// seconds never swap, and neither do two pods of one workload created in
// different seconds.
func (o *Owners) Created(pod *corev1.Pod) time.Time {
	if o == nil {
		return pod.CreationTimestamp.Time
	}
	owner, ok := o.ownerCreated(pod)
	if !ok {
		return pod.CreationTimestamp.Time
	}
	return ownedAge(owner, pod.CreationTimestamp.Time)
}

// ownedAge is the owner's creation (to the second) plus under a second,
// increasing with the pod's creation after it.
func ownedAge(owner, pod time.Time) time.Time {
	base := owner.Truncate(time.Second)
	d := pod.Sub(base)
	if d <= 0 {
		return base
	}
	// d/(d+1h) is in [0, 1) and increasing; whole seconds apart stay
	// distinct nanoseconds for pods up to about three weeks younger than
	// their owner.
	frac := float64(d) / float64(d+time.Hour)
	return base.Add(time.Duration(frac * float64(time.Second-1)))
}

// ownerCreated finds the creation of the pod's owning workload.
func (o *Owners) ownerCreated(pod *corev1.Pod) (time.Time, bool) {
	o.mu.RLock()
	pods, jobs, jobSets := o.pods, o.jobs, o.jobSets
	o.mu.RUnlock()
	if pods == nil {
		return time.Time{}, false
	}
	pm, ok := metaOf(pods, pod.Namespace, pod.Name)
	if !ok || pm.GetUID() != pod.UID {
		return time.Time{}, false
	}
	ref, ok := podreq.ControlledBy(pm, batchv1.GroupName, "Job")
	if !ok {
		return time.Time{}, false
	}
	job, ok := metaOf(jobs, pod.Namespace, ref.Name)
	if !ok || job.GetUID() != ref.UID {
		return time.Time{}, false
	}
	created := job.GetCreationTimestamp().Time
	ref, ok = podreq.ControlledBy(job, podreq.JobSetGroup, "JobSet")
	if !ok {
		return created, true
	}
	if jobSets == nil {
		select { // the JobSet API may have been installed since
		case o.recheck <- struct{}{}:
		default:
		}
		return created, true
	}
	if js, ok := metaOf(jobSets, pod.Namespace, ref.Name); ok && js.GetUID() == ref.UID {
		return js.GetCreationTimestamp().Time, true
	}
	return created, true
}

func metaOf(inf cache.SharedIndexInformer, namespace, name string) (metav1.Object, bool) {
	obj, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	m, ok := obj.(metav1.Object)
	return m, ok
}

// trimOwned keeps what ownerCreated reads: name, namespace, UID,
// resourceVersion, creation and the controller reference.
func trimOwned(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // DeletedFinalStateUnknown and friends
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: ownedMeta(m)}, nil
}

// ownedMeta is what trimOwned keeps of an object's metadata.
func ownedMeta(m metav1.Object) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		CreationTimestamp: m.GetCreationTimestamp()}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name,
			UID: ref.UID, Controller: ref.Controller}}
	}
	return out
}
