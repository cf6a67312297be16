package queue

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

func TestOwnedAge(t *testing.T) {
	owner := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name     string
		pod      time.Time
		min, max time.Time
	}{
		{"pod in the owner's second", owner, owner, owner},
		{"pod before its owner (skewed clocks)", owner.Add(-time.Minute), owner, owner},
		{"pod a second later", owner.Add(time.Second), owner.Add(time.Nanosecond), owner.Add(time.Second - 1)},
		{"pod a month later", owner.Add(30 * 24 * time.Hour), owner.Add(time.Nanosecond), owner.Add(time.Second - 1)},
		{"pod in the owner's second, after it", owner.Add(300 * time.Millisecond), owner, owner.Add(time.Second - 1)},
	} {
		got := ownedAge(owner, tc.pod)
		if got.Before(tc.min) || got.After(tc.max) {
			t.Errorf("%s: ownedAge = %s, want in [%s, %s]", tc.name, got, tc.min, tc.max)
		}
	}
	// An owner's creation is taken to the second (the API's resolution).
	if got := ownedAge(owner.Add(700*time.Millisecond), owner.Add(700*time.Millisecond)); got.Before(owner) || !got.Before(owner.Add(time.Second)) {
		t.Errorf("owner created at .7 s: ownedAge = %s, want in its second", got)
	}
}

// TestOwnedAgeOrder: workloads created in different seconds never swap,
// whatever their pods' ages; pods of one workload created in different
// seconds keep their order, for pods up to three weeks younger than it.
func TestOwnedAgeOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const threeWeeks = 21 * 24 * 3600
	for range 100000 {
		o1 := t0.Add(time.Duration(r.IntN(1e6)) * time.Second)
		o2 := o1.Add(time.Duration(1+r.IntN(1e5)) * time.Second)
		p1 := o1.Add(time.Duration(r.IntN(threeWeeks)) * time.Second)
		p2 := o2.Add(time.Duration(r.IntN(threeWeeks)) * time.Second)
		if a, b := ownedAge(o1, p1), ownedAge(o2, p2); !a.Before(b) {
			t.Fatalf("owner %s's pod (%s) ordered at %s, not before owner %s's pod (%s) at %s", o1, p1, a, o2, p2, b)
		}
		q1 := o1.Add(time.Duration(r.IntN(threeWeeks)) * time.Second)
		q2 := q1.Add(time.Duration(1+r.IntN(3600)) * time.Second)
		if a, b := ownedAge(o1, q1), ownedAge(o1, q2); !a.Before(b) {
			t.Fatalf("pods of one owner created %s and %s ordered at %s and %s", q1, q2, a, b)
		}
	}
}

func meta(apiVersion, kind, name, uid string, created time.Time, owner *metav1.OwnerReference) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{}}}
	if owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "cm"},
			*owner,
		}
	}
	return m
}

func controllerRef(apiVersion, kind, name, uid string) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}
}

// ownerFixture is a metadata client with Job "train" (of JobSet "suite"),
// Job "solo", their pods, and a discovery client without the JobSet API.
type ownerFixture struct {
	meta                                   *metafake.FakeMetadataClient
	disc                                   *lockedDiscovery
	jobCreated, jobSetCreated, soloCreated time.Time
}

func newOwnerFixture(t *testing.T) *ownerFixture {
	t.Helper()
	f := &ownerFixture{jobSetCreated: t0.Add(-3 * time.Hour), jobCreated: t0.Add(-2 * time.Hour), soloCreated: t0.Add(-90 * time.Minute)}
	scheme := metafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{
		meta(podreq.JobSetGroup+"/v1alpha2", "JobSet", "suite", "uid-suite", f.jobSetCreated, nil),
		meta("batch/v1", "Job", "train", "uid-train", f.jobCreated, controllerRef(podreq.JobSetGroup+"/v1alpha2", "JobSet", "suite", "uid-suite")),
		meta("batch/v1", "Job", "solo", "uid-solo", f.soloCreated, nil),
		meta("v1", "Pod", "train-a", "uid-train-a", t0.Add(-10*time.Minute), controllerRef("batch/v1", "Job", "train", "uid-train")),
		meta("v1", "Pod", "solo-a", "uid-solo-a", t0.Add(-5*time.Minute), controllerRef("batch/v1", "Job", "solo", "uid-solo")),
		// A pod whose Job was replaced by another of the same name.
		meta("v1", "Pod", "stale-a", "uid-stale-a", t0.Add(-5*time.Minute), controllerRef("batch/v1", "Job", "solo", "uid-old-solo")),
		// A pod controlled by something that is not a Job.
		meta("v1", "Pod", "rs-a", "uid-rs-a", t0.Add(-5*time.Minute), controllerRef("apps/v1", "ReplicaSet", "web", "uid-web")),
	}
	for _, o := range objs {
		if m := o.(*metav1.PartialObjectMetadata); m.Kind == "Pod" {
			m.Labels[batchv1.ControllerUidLabel] = "x"
		}
	}
	f.meta = metafake.NewSimpleMetadataClient(scheme, objs...)
	f.disc = &lockedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	f.disc.Resources = []*metav1.APIResourceList{{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{{Name: "jobs"}}}}
	return f
}

// lockedDiscovery is a FakeDiscovery whose resources may change while
// Owners.Run reads them.
type lockedDiscovery struct {
	mu sync.Mutex
	*fakediscovery.FakeDiscovery
}

func (d *lockedDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.FakeDiscovery.ServerGroups()
}

func (d *lockedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}

// serveJobSets makes discovery list the JobSet API.
func (f *ownerFixture) serveJobSets() {
	f.disc.mu.Lock()
	defer f.disc.mu.Unlock()
	f.disc.Resources = append(f.disc.Resources, &metav1.APIResourceList{GroupVersion: podreq.JobSetGroup + "/v1alpha2",
		APIResources: []metav1.APIResource{{Name: "jobsets", Kind: "JobSet", Namespaced: true}}})
}

func runOwners(t *testing.T, o *Owners) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { o.Run(ctx) })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return o.HasSynced(), nil }); err != nil {
		t.Fatalf("owners never synced: %v", err)
	}
	return func() { cancel(); wg.Wait() }
}

func trimmedPod(name string, created time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(created)}}
}

func TestOwnersCreated(t *testing.T) {
	f := newOwnerFixture(t)
	o := NewOwners(f.meta, f.disc)
	o.JobSetRecheck = time.Millisecond
	pod := func(name string) *corev1.Pod { return trimmedPod(name, t0.Add(-10*time.Minute)) }

	if got := (*Owners)(nil).Created(pod("train-a")); !got.Equal(t0.Add(-10 * time.Minute)) {
		t.Errorf("nil Owners: Created = %s, want the pod's own creation", got)
	}
	if o.HasSynced() {
		t.Error("HasSynced before Run")
	}
	if got := o.Created(pod("train-a")); !got.Equal(t0.Add(-10 * time.Minute)) {
		t.Errorf("before Run: Created = %s, want the pod's own creation", got)
	}
	stop := runOwners(t, o)
	for _, tc := range []struct {
		pod   *corev1.Pod
		owner time.Time // zero: the pod's own creation
	}{
		{pod("train-a"), f.jobCreated}, // the JobSet API is not served: the Job's
		{pod("solo-a"), f.soloCreated},
		{pod("stale-a"), time.Time{}},
		{pod("rs-a"), time.Time{}},
		{pod("bare"), time.Time{}},
		// The informer's pod is another one of the same name.
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "solo-a", UID: "uid-new",
			CreationTimestamp: metav1.NewTime(t0)}}, time.Time{}},
	} {
		want := tc.pod.CreationTimestamp.Time
		if !tc.owner.IsZero() {
			want = ownedAge(tc.owner, want)
		}
		if got := o.Created(tc.pod); !got.Equal(want) {
			t.Errorf("Created(%s %s) = %s, want %s", tc.pod.Name, tc.pod.UID, got, want)
		}
	}

	// The JobSet API is installed: the next Job of a JobSet seen makes
	// discovery be asked again, and the JobSet's creation is used.
	f.serveJobSets()
	want := ownedAge(f.jobSetCreated, t0.Add(-10*time.Minute))
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return o.Created(pod("train-a")).Equal(want), nil
	}); err != nil {
		t.Errorf("after the JobSet API appeared: Created(train-a) = %s, want the JobSet's %s", o.Created(pod("train-a")), want)
	}
	stop()
	if o.HasSynced() {
		t.Error("HasSynced after Run returned")
	}
	if got := o.Created(pod("train-a")); !got.Equal(t0.Add(-10 * time.Minute)) {
		t.Errorf("after Run: Created = %s, want the pod's own creation", got)
	}
	// A new term starts fresh informers, JobSets included from the start.
	stop = runOwners(t, o)
	defer stop()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return o.Created(pod("train-a")).Equal(want), nil
	}); err != nil {
		t.Errorf("second Run: Created(train-a) = %s, want the JobSet's %s", o.Created(pod("train-a")), want)
	}
}

func TestTrimOwned(t *testing.T) {
	in := meta("v1", "Pod", "p", "uid-p", t0, controllerRef("batch/v1", "Job", "j", "uid-j"))
	in.Annotations = map[string]string{"big": "value"}
	in.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
	in.ResourceVersion = "7"
	out, err := trimOwned(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{TypeMeta: in.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", UID: "uid-p",
		ResourceVersion: "7", CreationTimestamp: metav1.NewTime(t0), OwnerReferences: []metav1.OwnerReference{*controllerRef("batch/v1", "Job", "j", "uid-j")}}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("trimOwned (-want +got):\n%s", diff)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ml/p"}
	if got, _ := trimOwned(tomb); got != tomb {
		t.Errorf("trimOwned(tombstone) = %v, want it unchanged", got)
	}
}

// TestPassOrdersByOwner: a Job's pod that its controller recreated after a
// bare pod was queued keeps the Job's place, ahead of the bare pod.
func TestPassOrdersByOwner(t *testing.T) {
	f := newOwnerFixture(t)
	o := NewOwners(f.meta, f.disc)
	defer runOwners(t, o)()

	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 1}}}
	bare := gpuPod("bare", 1, time.Hour, true)            // queued an hour ago
	recreated := gpuPod("solo-a", 1, 5*time.Minute, true) // its Job is 90 minutes old
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{names.TeamLabel: "vision"}}}
	client := fake.NewClientset(bare, recreated, ns)
	inf := informers.NewSharedInformerFactory(client, 0)
	pods, nss := inf.Core().V1().Pods().Informer(), inf.Core().V1().Namespaces().Informer()
	inf.Start(t.Context().Done())
	cache.WaitForCacheSync(t.Context().Done(), pods.HasSynced, nss.HasSynced)
	r := &fakeRoom{free: 8}
	c, err := New(Options{Names: names, Client: client, Pods: pods, Namespaces: nss, Holder: r, Owners: o,
		Snapshot: func() *ledger.Snapshot { return ledger.New().Snapshot() },
		Quota:    func() (*quota.Config, bool) { return cfg, true }, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	c.Pass(t.Context())
	if diff := cmp.Diff([]string{"solo-a"}, r.held); diff != "" {
		t.Errorf("admitted (-want +got):\n%s", diff)
	}
	ps, _ := c.Positions()
	if len(ps) != 1 || ps[0].Pod != "ml/bare" || ps[0].Position != 1 {
		t.Errorf("Positions() = %+v, want ml/bare first in line", ps)
	}
}

// With QueueJobSets, Owners reads JobSets whole: a JobSet queued
// suspended keeps its spec in the cache, any other only its metadata; the
// JobSet API installed after Run starts is found without any pod asking
// (a JobSet queued suspended has none), and its creation orders the pods
// of its Jobs as before.
func TestOwnersQueuedJobSets(t *testing.T) {
	f := newOwnerFixture(t)
	names := contract.Default
	jobSet := func(name string, queued bool, created time.Time) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": podreq.JobSetGroup + "/v1alpha2", "kind": "JobSet",
			"metadata": map[string]any{"namespace": "ml", "name": name, "uid": "uid-" + name, "creationTimestamp": created.UTC().Format(time.RFC3339)},
			"spec":     map[string]any{"suspend": true, "replicatedJobs": []any{map[string]any{"name": "w", "replicas": int64(2)}}}}}
		if queued {
			u.SetAnnotations(map[string]string{names.QueuedJobAnnotation: "true"})
		}
		return u
	}
	gvr := schema.GroupVersionResource{Group: podreq.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "JobSetList"},
		jobSet("llm", true, f.jobSetCreated), jobSet("suite", false, f.jobSetCreated))
	o := NewOwners(f.meta, f.disc)
	o.JobSetRecheck = time.Millisecond
	o.QueueJobSets(dyn, names)
	stop := runOwners(t, o)
	defer stop()
	if got, ok := o.QueuedJobSets(); !ok || len(got) != 0 {
		t.Fatalf("QueuedJobSets without the JobSet API = %d, %v; want none, ok", len(got), ok)
	}
	f.serveJobSets()
	var got []*podreq.JobSet
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		got, ok = o.QueuedJobSets()
		return ok && len(got) == 2, nil
	}); err != nil {
		t.Fatalf("the JobSets never came (no pod asked for a recheck): %d", len(got))
	}
	for _, js := range got {
		switch js.Name {
		case "llm":
			if !podreq.JobSetSuspended(js) || len(js.Spec.ReplicatedJobs) != 1 || js.Spec.ReplicatedJobs[0].Name != "w" || js.UID != "uid-llm" {
				t.Errorf("the queued JobSet lost its spec in the cache: %+v", js)
			}
		case "suite":
			if js.Spec.ReplicatedJobs != nil || js.UID != "uid-suite" || !js.CreationTimestamp.Time.Equal(f.jobSetCreated.Truncate(time.Second)) {
				t.Errorf("a JobSet not queued keeps more than its metadata: %+v", js)
			}
		}
	}
	if got := o.Created(trimmedPod("train-a", t0.Add(-10*time.Minute))); !got.Truncate(time.Second).Equal(f.jobSetCreated.Truncate(time.Second)) {
		t.Errorf("Created(train-a) = %s, want its JobSet's %s", got, f.jobSetCreated)
	}
}
