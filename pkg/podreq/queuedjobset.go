package podreq

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

// A JobSet (jobset.x-k8s.io) is queued suspended as a Job is: rota-admission
// creates it with spec.suspend set and marked with QueuedJobAnnotation; the
// JobSet controller then creates its Jobs suspended, so no pod of it exists
// until the queue admits it by unsuspending it. These functions are the one
// reading of such a JobSet, for rota-admission, the queue controller and
// the invariant checker. Rota does not import JobSet's module: the object
// is read from its JSON.

// JobSet is the part of a JobSet object Rota reads.
type JobSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              JobSetSpec   `json:"spec"`
	Status            JobSetStatus `json:"status"`
}

// JobSetSpec is the part of a JobSet's spec Rota reads.
type JobSetSpec struct {
	Suspend       *bool `json:"suspend,omitempty"`
	StartupPolicy *struct {
		StartupPolicyOrder string `json:"startupPolicyOrder"`
	} `json:"startupPolicy,omitempty"`
	ReplicatedJobs []ReplicatedJob `json:"replicatedJobs"`
}

// ReplicatedJob is one of a JobSet's replicated jobs.
type ReplicatedJob struct {
	Name      string `json:"name"`
	Replicas  *int32 `json:"replicas,omitempty"`
	DependsOn []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"dependsOn,omitempty"`
	Template batchv1.JobTemplateSpec `json:"template"`
}

// JobSetStatus is the part of a JobSet's status Rota reads (the JobSet
// controller writes it, through the status subresource).
type JobSetStatus struct {
	Conditions           []metav1.Condition `json:"conditions,omitempty"`
	ReplicatedJobsStatus []struct {
		Name      string `json:"name"`
		Succeeded int32  `json:"succeeded"`
	} `json:"replicatedJobsStatus,omitempty"`
}

// JobSet labels the JobSet controller puts on its Jobs and their pods.
const (
	JobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"
	JobSetUIDLabel  = "jobset.sigs.k8s.io/jobset-uid"
)

// GroupVersion is the JobSet's apiVersion, v1alpha2 when it names none.
func (o *JobSet) GroupVersion() string {
	if o.APIVersion == "" {
		return JobSetGroup + "/v1alpha2"
	}
	return o.APIVersion
}

// ReadJobSet reads a JobSet object (JSON, any served version).
func ReadJobSet(raw []byte) (*JobSet, error) {
	o := &JobSet{}
	if err := Decode(raw, o); err != nil {
		return nil, fmt.Errorf("reading the JobSet: %w", err)
	}
	for _, r := range o.Spec.ReplicatedJobs {
		if r.Replicas != nil && *r.Replicas < 0 {
			return nil, fmt.Errorf("JobSet %s: replicated job %q has %d replicas", o.Name, r.Name, *r.Replicas)
		}
	}
	return o, nil
}

// replicas is a replicated job's Jobs (one when unset, as JobSet defaults it).
func (r *ReplicatedJob) replicas() int32 {
	if r.Replicas == nil {
		return 1
	}
	return max(0, *r.Replicas)
}

// Shape is what the JobSet says about the gangs of its pods (JobSetGang).
func (o *JobSet) Shape(names contract.Names) (JobSetShape, error) {
	js := JobSetShape{Name: o.Name, NoGang: o.Annotations[names.NoGangAnnotation] == "true",
		InOrder: o.Spec.StartupPolicy != nil && o.Spec.StartupPolicy.StartupPolicyOrder == "InOrder"}
	for _, r := range o.Spec.ReplicatedJobs {
		if r.Replicas != nil && *r.Replicas < 0 {
			return JobSetShape{}, fmt.Errorf("JobSet %s: replicated job %q has %d replicas", o.Name, r.Name, *r.Replicas)
		}
		js.ReplicatedJobs = append(js.ReplicatedJobs, ReplicatedJobShape{Name: r.Name, Replicas: r.replicas(),
			DependsOn: len(r.DependsOn) > 0, Template: r.Template})
	}
	return js, nil
}

// JobSetSuspendable reports whether a new JobSet is queued suspended where
// its namespace asks for it (QueueingSuspend): a top-level JobSet (no
// controlling owner: a training job's JobSet is its to run) that Kueue
// does not queue (no queue-name label) and some of whose pods ask for
// Rota's resources, no more than MaxSuspendedPods of them. JobSetOneShape
// must hold too.
func JobSetSuspendable(o *JobSet, names contract.Names) bool {
	if metav1.GetControllerOfNoCopy(o) != nil || o.Labels[KueueQueueNameLabel] != "" || JobSetMembers(o, names) > MaxSuspendedPods {
		return false
	}
	for i := range o.Spec.ReplicatedJobs {
		if templateWants(&o.Spec.ReplicatedJobs[i].Template.Spec.Template, names) {
			return true
		}
	}
	return false
}

// JobSetOneShape reports why the JobSet's pods that ask for Rota's
// resources cannot wait as one queued workload: the queue charges and
// holds room for a workload of one shape (one request, GPU models and
// priority class per pod). nil when they can. A JobSet whose pods differ
// keeps gated pods instead.
func JobSetOneShape(o *JobSet, opts Options) error {
	var first *ReplicatedJob
	var want placementShape
	for i := range o.Spec.ReplicatedJobs {
		r := &o.Spec.ReplicatedJobs[i]
		t := &r.Template.Spec.Template
		if !templateWants(t, opts.Names) {
			continue
		}
		got, err := shapeOf(t, opts)
		if err != nil {
			return fmt.Errorf("replicated job %q: %w", r.Name, err)
		}
		if first == nil {
			first, want = r, got
			continue
		}
		if got != want {
			return fmt.Errorf("replicated jobs %q and %q ask for different resources per pod (%s; %s)", first.Name, r.Name, want, got)
		}
	}
	return nil
}

// placementShape is what JobSetOneShape compares between pod templates.
type placementShape struct {
	gpus     int
	memory   int64
	cpuMilli int64
	models   string
	priority string
}

func (s placementShape) String() string {
	m := fmt.Sprintf("%d GPUs, %d memory units, %dm CPU", s.gpus, s.memory, s.cpuMilli)
	if s.models != "" {
		m += ", models " + s.models
	}
	if s.priority != "" {
		m += ", priority class " + s.priority
	}
	return m
}

func shapeOf(t *corev1.PodTemplateSpec, opts Options) (placementShape, error) {
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: t.Spec}
	req, err := FromPod(pod, opts)
	if err != nil {
		return placementShape{}, err
	}
	models, err := GPUModels(pod, opts.Names)
	if err != nil {
		return placementShape{}, err
	}
	sorted := slices.Clone(models)
	slices.Sort(sorted)
	return placementShape{gpus: req.GPUs, memory: req.MemoryUnits, cpuMilli: req.CPUMilli,
		models: strings.Join(sorted, ","), priority: t.Spec.PriorityClassName}, nil
}

// JobSetSuspended reports whether the JobSet's spec.suspend is set.
func JobSetSuspended(o *JobSet) bool { return o.Spec.Suspend != nil && *o.Spec.Suspend }

// JobSetFinished reports whether the JobSet ended (its Completed or Failed
// condition is true).
func JobSetFinished(o *JobSet) bool {
	for _, c := range o.Status.Conditions {
		if (c.Type == "Completed" || c.Type == "Failed") && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// JobSetMembers is how many of the JobSet's pods that ask for Rota's
// resources run at once when it starts: per replicated job whose pods ask,
// its replicas times its Jobs' JobMembers (more than MaxSuspendedPods
// reads as MaxSuspendedPods+1).
func JobSetMembers(o *JobSet, names contract.Names) int {
	n := 0
	for i := range o.Spec.ReplicatedJobs {
		r := &o.Spec.ReplicatedJobs[i]
		if templateWants(&r.Template.Spec.Template, names) {
			n += int(r.replicas()) * jobTemplateMembers(&r.Template)
		}
		if n > MaxSuspendedPods {
			return MaxSuspendedPods + 1 // and never overflows
		}
	}
	return n
}

func jobTemplateMembers(t *batchv1.JobTemplateSpec) int {
	return JobMembers(&batchv1.Job{Spec: t.Spec})
}

// JobSetWorkloadKey is the queue's key of a JobSet queued suspended (never
// a pod's, a gang's or a Job's: see JobWorkloadKey).
func JobSetWorkloadKey(o *JobSet) string { return o.Namespace + "/JobSet/" + o.Name }

// JobSetRecordSubject is what the queue signs a JobSet's admission record
// for: the JobSet's UID and JobSetMembers. A record copied to another
// JobSet, or to one whose replicated jobs changed, does not verify.
func JobSetRecordSubject(o *JobSet, names contract.Names) string {
	return "jobset/" + string(o.UID) + "/" + strconv.Itoa(JobSetMembers(o, names))
}

// JobSetPods returns the pods of the JobSet that ask for Rota's resources,
// as the queue plans room for them: per such replicated job, its Jobs not
// yet succeeded (as the JobSet controller counts them in its status) times
// the pods each runs at once, from its template, named after the Job and
// index the JobSet controller gives them, labelled with the JobSet's
// labels, with UIDs made from the JobSet's, controlled by the JobSet, with
// no resourceVersion, without Rota's records, and with the gang label and
// size the webhook gives them (JobSetGang).
func JobSetPods(o *JobSet, names contract.Names) []*corev1.Pod {
	shape, err := o.Shape(names)
	if err != nil || JobSetMembers(o, names) > MaxSuspendedPods {
		return nil
	}
	succeeded := map[string]int32{}
	for _, s := range o.Status.ReplicatedJobsStatus {
		succeeded[s.Name] = s.Succeeded
	}
	yes := true
	owner := metav1.OwnerReference{APIVersion: o.GroupVersion(), Kind: "JobSet", Name: o.Name, UID: o.UID, Controller: &yes, BlockOwnerDeletion: &yes}
	var pods []*corev1.Pod
	for i := range o.Spec.ReplicatedJobs {
		r := &o.Spec.ReplicatedJobs[i]
		if !templateWants(&r.Template.Spec.Template, names) {
			continue
		}
		gang, size, isGang := JobSetGang(shape, r.Name, names)
		per := jobTemplateMembers(&r.Template)
		for j := max(0, succeeded[r.Name]); j < r.replicas(); j++ {
			for k := range per {
				t := r.Template.Spec.Template.DeepCopy()
				pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
				job := o.Name + "-" + r.Name + "-" + strconv.Itoa(int(j))
				pod.Namespace, pod.Name = o.Namespace, job+"-"+strconv.Itoa(k)
				pod.UID = types.UID(string(o.UID) + "-" + r.Name + "-" + strconv.Itoa(int(j)) + "-" + strconv.Itoa(k))
				pod.CreationTimestamp = o.CreationTimestamp
				pod.OwnerReferences = []metav1.OwnerReference{owner}
				if pod.Labels == nil {
					pod.Labels = map[string]string{}
				}
				if pod.Annotations == nil {
					pod.Annotations = map[string]string{}
				}
				pod.Labels[JobSetNameLabel], pod.Labels[JobSetUIDLabel], pod.Labels[ReplicatedJobLabel] = o.Name, string(o.UID), r.Name
				for _, key := range []string{names.AdmissionAnnotation, names.AssignmentAnnotation, names.ReservationAnnotation} {
					delete(pod.Annotations, key) // Rota's records are never the template's to give
				}
				if isGang && pod.Labels[names.GangLabel] == "" {
					pod.Labels[names.GangLabel] = gang
					pod.Annotations[names.GangSizeAnnotation] = strconv.Itoa(size)
				}
				pods = append(pods, pod)
			}
		}
	}
	return pods
}

// OnePerTemplate returns the first of the planned pods (JobSetPods,
// JobPods) of each pod template, in order: pods of one template ask alike,
// so these are the ones to read (one for a Job, one per replicated job for
// a JobSet).
func OnePerTemplate(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	seen := map[string]bool{}
	for _, pod := range pods {
		if rjob := pod.Labels[ReplicatedJobLabel]; !seen[rjob] {
			seen[rjob] = true
			out = append(out, pod)
		}
	}
	return out
}

// JobSetControllerUID is the UID of the JobSet whose Job created the pod,
// as the JobSet controller labels it; "" for any other pod. As with
// JobControllerUID, a user can write the label on a pod of their own:
// readers trust nothing the JobSet's record grants without checking the
// pod against the JobSet's templates.
func JobSetControllerUID(pod *corev1.Pod) types.UID {
	return types.UID(pod.Labels[JobSetUIDLabel])
}

// WorkloadAdmission reads the admission record in a workload object's
// annotations (a Job's or a JobSet's queued suspended), split by belief: a
// record is believed only when Rota signed it for subject (JobRecordSubject,
// JobSetRecordSubject). With records unsigned (no key) every record is
// believed.
func (r Records) WorkloadAdmission(annotations map[string]string, subject string, names contract.Names) (adm, unbelieved *contract.Admission) {
	a, err := admissionIn(annotations, names)
	if err != nil || a == nil {
		return nil, nil
	}
	if r.Key.On() && !r.Key.VerifyAdmission(subject, *a) {
		return nil, a
	}
	return a, nil
}
