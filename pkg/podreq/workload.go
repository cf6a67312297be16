package podreq

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// ControlledBy returns obj's controller reference when it names an object
// of kind in API group group (any version), or ok false.
func ControlledBy(obj metav1.Object, group, kind string) (*metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != kind || apiGroup(ref.APIVersion) != group {
		return nil, false
	}
	return ref, true
}

// TrainingJobOwner returns the pod's controller reference when it names a
// training operator's job whose gang Rota reads (KubeflowKinds).
func TrainingJobOwner(pod *corev1.Pod) (*metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || apiGroup(ref.APIVersion) != KubeflowGroup {
		return nil, false
	}
	_, known := KubeflowKinds[ref.Kind]
	return ref, known
}

// apiGroup is the group of an apiVersion ("" for the core group).
func apiGroup(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// gangSized reports whether n pods make a gang Rota places: two or more,
// and no more than contract.MaxGangSize.
func gangSized(n int) bool { return n >= 2 && n <= contract.MaxGangSize }

// namesOwnGang reports whether an object (a workload or a pod template)
// opts out of the gang its workload's shape makes: it names a gang itself,
// or carries NoGangAnnotation "true".
func namesOwnGang(m *metav1.ObjectMeta, names contract.Names) bool {
	_, named := m.Labels[names.GangLabel]
	return named || m.Annotations[names.NoGangAnnotation] == "true"
}

// PodGroupGang is the gang of the pods of a PodGroup of Kubernetes' gang
// API (scheduling.k8s.io): the PodGroup, of its gang policy's minCount
// (nil: not a gang policy).
func PodGroupGang(name string, minCount *int32) (string, int, bool) {
	if minCount == nil || !gangSized(int(*minCount)) {
		return "", 0, false
	}
	return name, int(*minCount), true
}

// JobSetShape is what a JobSet (jobset.x-k8s.io) says about the gangs of
// its pods, read from the object: Rota does not import JobSet's module.
type JobSetShape struct {
	Name string
	// NoGang is the JobSet's NoGangAnnotation.
	NoGang bool
	// InOrder is startupPolicy.startupPolicyOrder InOrder: each replicated
	// job's pods are created only once the one before is ready.
	InOrder bool
	// ReplicatedJobs in the JobSet's order.
	ReplicatedJobs []ReplicatedJobShape
}

// ReplicatedJobShape is one of a JobSet's replicated jobs: Replicas Jobs
// made from Template.
type ReplicatedJobShape struct {
	Name     string
	Replicas int32
	// DependsOn is set when its Jobs start only after another replicated
	// job's are ready (or done).
	DependsOn bool
	Template  batchv1.JobTemplateSpec
}

// JobSetGang is the gang a pod of replicated job rjob of a JobSet belongs
// to by the JobSet's shape, when the pod names none. A JobSet whose
// replicated jobs all start together (no in-order startup, no dependsOn)
// and whose Jobs all run every index at once (Indexed, completions equal to
// parallelism) is one gang of all its pods, named after the JobSet. Where
// replicated jobs start one after another, a gang of the whole JobSet
// would wait for pods that are created only once the first ones run, so
// each such replicated job is a gang of its own (Replicas x parallelism
// pods, named JobSet-replicatedjob), when its Jobs run every index at once.
// Only replicated jobs whose pods ask for Rota's resources count: the
// others never reach Rota, and a gang that counted them would never be
// whole.
// A pod template that names a gang, or NoGangAnnotation "true" on the
// JobSet, its Job template or its pod template, opts out.
func JobSetGang(js JobSetShape, rjob string, names contract.Names) (name string, size int, ok bool) {
	if js.NoGang {
		return "", 0, false
	}
	staged := js.InOrder
	var mine *ReplicatedJobShape
	total := 0
	for i := range js.ReplicatedJobs {
		r := &js.ReplicatedJobs[i]
		staged = staged || r.DependsOn
		if r.Name == rjob {
			mine = r
		}
	}
	if mine == nil {
		return "", 0, false
	}
	if !templateWants(&mine.Template.Spec.Template, names) {
		return "", 0, false
	}
	for i := range js.ReplicatedJobs {
		r := &js.ReplicatedJobs[i]
		if (staged && r != mine) || !templateWants(&r.Template.Spec.Template, names) {
			continue // Rota sees only the pods that ask for its resources
		}
		n, ok := allAtOnce(&r.Template, names)
		if !ok {
			return "", 0, false
		}
		total += int(r.Replicas) * n
	}
	if !gangSized(total) {
		return "", 0, false
	}
	if staged {
		return js.Name + "-" + mine.Name, total, true
	}
	return js.Name, total, true
}

// templateWants reports whether a pod template asks for Rota's resources:
// only such pods reach Rota, so only they can count in a gang's size.
func templateWants(t *corev1.PodTemplateSpec, names contract.Names) bool {
	return Wants(&corev1.Pod{Spec: t.Spec}, names)
}

// allAtOnce returns the parallelism of a Job template whose pods all run at
// once (Indexed, completions equal to parallelism) and that does not opt
// out or name its own gang.
func allAtOnce(t *batchv1.JobTemplateSpec, names contract.Names) (int, bool) {
	s := &t.Spec
	if t.Annotations[names.NoGangAnnotation] == "true" || namesOwnGang(&s.Template.ObjectMeta, names) {
		return 0, false
	}
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || s.Parallelism == nil ||
		s.Completions == nil || *s.Completions != *s.Parallelism || *s.Parallelism < 1 {
		return 0, false
	}
	return int(*s.Parallelism), true
}

// JobGang is the gang a Job's pods form by the Job's own shape, when their
// template names none: an Indexed Job whose completions equal its
// parallelism, more than one, is a gang of that many pods, named after the
// Job (every index must run at once for the Job to make progress). A plain
// parallel Job (NonIndexed, or fewer pods at a time than completions) is a
// batch of independent pods, not a gang. A Job that another workload
// controls (a JobSet's) is left to that workload. The annotation
// NoGangAnnotation "true" on the Job or its pod template opts out.
func JobGang(job *batchv1.Job, names contract.Names) (name string, size int, ok bool) {
	if job == nil || metav1.GetControllerOfNoCopy(job) != nil {
		return "", 0, false
	}
	n, ok := allAtOnce(&batchv1.JobTemplateSpec{ObjectMeta: job.ObjectMeta, Spec: job.Spec}, names)
	if !ok || !gangSized(n) {
		return "", 0, false
	}
	return job.Name, n, true
}

// JobSetGroup is the API group of JobSet (sigs.k8s.io/jobset).
const JobSetGroup = "jobset.x-k8s.io"

// ReplicatedJobLabel is the label JobSet puts on its Jobs (and their
// pods) with the name of the replicated job they belong to.
const ReplicatedJobLabel = "jobset.sigs.k8s.io/replicatedjob-name"

// ParseJobSet reads a JobSet object (JSON, any served version) into the
// shape JobSetGang needs. A replicated job without replicas has one, as
// JobSet defaults it.
func ParseJobSet(raw []byte, names contract.Names) (JobSetShape, error) {
	o, err := ReadJobSet(raw)
	if err != nil {
		return JobSetShape{}, err
	}
	return o.Shape(names)
}

// LeaderWorkerSet (sigs.k8s.io/lws): its API group and the labels and
// annotation its pods and objects carry.
const (
	LWSGroup           = "leaderworkerset.x-k8s.io"
	LWSNameLabel       = "leaderworkerset.sigs.k8s.io/name"
	LWSGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	lwsExclusive       = "leaderworkerset.sigs.k8s.io/exclusive-topology"
	lwsSubGroupExcl    = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
)

// LWSShape is what a LeaderWorkerSet says about the gangs of its groups.
type LWSShape struct {
	Name string
	// NoGang is set by NoGangAnnotation on the LeaderWorkerSet, or by a
	// pod template that opts out (namesOwnGang).
	NoGang bool
	// LeaderReady is startupPolicy LeaderReady: a group's workers are
	// created only once its leader is ready.
	LeaderReady bool
	// Exclusive is exclusive placement (one group per topology domain, the
	// workers following their leader's domain).
	Exclusive bool
	// Size is the pods of one group that ask for Rota's resources: the
	// group's size, less its leader when the leader's own template asks
	// for none.
	Size int32
}

// LWSGang is the gang of the pods of group groupIndex of a LeaderWorkerSet:
// the group's leader and workers, Size pods, named <lws>-<group index>,
// when they are created together (startupPolicy LeaderCreated). Where the
// workers come only after the leader is ready (LeaderReady), or follow the
// leader's placement (exclusive topology), a gang would wait for pods that
// the running leader brings: the group is no gang then. NoGangAnnotation
// "true" on the LeaderWorkerSet, or a template that names its own gang,
// opts out.
func LWSGang(lws LWSShape, groupIndex string) (name string, size int, ok bool) {
	if lws.NoGang || lws.LeaderReady || lws.Exclusive || groupIndex == "" {
		return "", 0, false
	}
	for _, c := range groupIndex {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	if !gangSized(int(lws.Size)) {
		return "", 0, false
	}
	return lws.Name + "-" + groupIndex, int(lws.Size), true
}

// lwsObject is the part of a LeaderWorkerSet that LWSShape reads.
type lwsObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		StartupPolicy        string `json:"startupPolicy"`
		LeaderWorkerTemplate struct {
			LeaderTemplate *corev1.PodTemplateSpec `json:"leaderTemplate"`
			WorkerTemplate corev1.PodTemplateSpec  `json:"workerTemplate"`
			Size           *int32                  `json:"size"`
		} `json:"leaderWorkerTemplate"`
	} `json:"spec"`
}

// ParseLWS reads a LeaderWorkerSet object (JSON) into the shape LWSGang
// needs. A group without a size has one pod, as LeaderWorkerSet defaults
// it.
func ParseLWS(raw []byte, names contract.Names) (LWSShape, error) {
	var o lwsObject
	if err := Decode(raw, &o); err != nil {
		return LWSShape{}, fmt.Errorf("reading the LeaderWorkerSet: %w", err)
	}
	t := &o.Spec.LeaderWorkerTemplate
	lws := LWSShape{Name: o.Metadata.Name, NoGang: o.Metadata.Annotations[names.NoGangAnnotation] == "true",
		LeaderReady: o.Spec.StartupPolicy == "LeaderReady",
		Exclusive:   o.Metadata.Annotations[lwsExclusive] != "" || o.Metadata.Annotations[lwsSubGroupExcl] != "", Size: 1}
	if t.Size != nil {
		lws.Size = *t.Size
	}
	switch {
	case !templateWants(&t.WorkerTemplate, names):
		lws.Size = 0 // the workers never reach Rota: no gang
	case t.LeaderTemplate != nil && !templateWants(t.LeaderTemplate, names):
		lws.Size-- // a leader without GPUs (a coordinator) is not in the gang
	}
	for _, pt := range []*corev1.PodTemplateSpec{t.LeaderTemplate, &t.WorkerTemplate} {
		if pt != nil && namesOwnGang(&pt.ObjectMeta, names) {
			lws.NoGang = true
		}
	}
	return lws, nil
}

// KubeflowGroup is the API group of the Kubeflow training operator's jobs
// (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob in kubeflow.org/v1;
// MPIJob in kubeflow.org/v2beta1).
const KubeflowGroup = "kubeflow.org"

// KubeflowKinds are the training jobs whose pods' gang Rota reads, by kind,
// with the field that holds their replica specs.
var KubeflowKinds = map[string]string{
	"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
	"JAXJob": "jaxReplicaSpecs", "PaddleJob": "paddleReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
}

// TrainingJobShape is what a training operator's job says about the gang
// of its pods.
type TrainingJobShape struct {
	Name string
	// NoGang is set by the job's NoGangAnnotation, a pod template that opts
	// out (namesOwnGang), or an elastic job (its pods may run with fewer
	// than all replicas).
	NoGang bool
	// Replicas are the replica types (Master, Worker, Launcher, ...).
	Replicas []TrainingReplica
}

// TrainingReplica is one replica type of a training job.
type TrainingReplica struct {
	Type     string
	Replicas int32
	// Wants is set when its pods ask for Rota's resources.
	Wants bool
	// Late is set when its pods are created only once the others run (an
	// MPIJob launcher with launcherCreationPolicy WaitForWorkersReady).
	Late bool
}

// TrainingJobGang is the gang of a training job's pods: every pod of every
// replica type that asks for Rota's resources and is created with the
// others, named after the job. An elastic job, or one that opts out (on
// the job or a pod template), is no gang.
func TrainingJobGang(j TrainingJobShape) (name string, size int, ok bool) {
	if j.NoGang {
		return "", 0, false
	}
	for _, r := range j.Replicas {
		if r.Wants && !r.Late {
			size += int(r.Replicas)
		}
	}
	if !gangSized(size) {
		return "", 0, false
	}
	return j.Name, size, true
}

// ParseTrainingJob reads a training operator's job of kind (JSON) into
// the shape TrainingJobGang needs. A replica type without replicas has
// one, as the operators default it.
func ParseTrainingJob(kind string, raw []byte, names contract.Names) (TrainingJobShape, error) {
	field, ok := KubeflowKinds[kind]
	if !ok {
		return TrainingJobShape{}, fmt.Errorf("%q is not a training job kind Rota reads", kind)
	}
	var o struct {
		Metadata metav1.ObjectMeta          `json:"metadata"`
		Spec     map[string]json.RawMessage `json:"spec"`
	}
	if err := Decode(raw, &o); err != nil {
		return TrainingJobShape{}, fmt.Errorf("reading the %s: %w", kind, err)
	}
	var specs map[string]struct {
		Replicas *int32                 `json:"replicas"`
		Template corev1.PodTemplateSpec `json:"template"`
	}
	if r, ok := o.Spec[field]; ok {
		if err := Decode(r, &specs); err != nil {
			return TrainingJobShape{}, fmt.Errorf("reading the %s's %s: %w", kind, field, err)
		}
	}
	var launcherPolicy string
	if r, ok := o.Spec["launcherCreationPolicy"]; ok {
		_ = Decode(r, &launcherPolicy) // anything but the string WaitForWorkersReady is the default
	}
	_, elastic := o.Spec["elasticPolicy"]
	j := TrainingJobShape{Name: o.Metadata.Name, NoGang: o.Metadata.Annotations[names.NoGangAnnotation] == "true" || elastic}
	types := make([]string, 0, len(specs))
	for t := range specs {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		s := specs[t]
		n := int32(1)
		if s.Replicas != nil {
			n = *s.Replicas
		}
		if n < 0 {
			return TrainingJobShape{}, fmt.Errorf("%s %s: replica type %s has %d replicas", kind, j.Name, t, n)
		}
		j.Replicas = append(j.Replicas, TrainingReplica{Type: t, Replicas: n, Wants: templateWants(&s.Template, names),
			Late: kind == "MPIJob" && t == "Launcher" && launcherPolicy == "WaitForWorkersReady"})
		j.NoGang = j.NoGang || namesOwnGang(&s.Template.ObjectMeta, names)
	}
	return j, nil
}

// Kueue's scheduling gates and the pod template annotations that ask for
// its topology-aware scheduling.
const (
	// KueueAdmissionGate holds a plain pod Kueue queues.
	KueueAdmissionGate = "kueue.x-k8s.io/admission"
	// KueueTopologyGate holds a pod whose nodes Kueue's topology-aware
	// scheduling has not chosen yet.
	KueueTopologyGate = "kueue.x-k8s.io/topology"
)

// KueueTopologyAnnotations ask for Kueue's topology-aware scheduling.
var KueueTopologyAnnotations = []string{
	"kueue.x-k8s.io/podset-required-topology",
	"kueue.x-k8s.io/podset-preferred-topology",
	"kueue.x-k8s.io/podset-unconstrained-topology",
}

// KueueQueues reports whether a namespace's labels hand its queueing and
// quota to Kueue (<domain>/queueing=kueue).
func KueueQueues(nsLabels map[string]string, names contract.Names) bool {
	return nsLabels[names.QueueingLabel] == contract.QueueingKueue
}
