package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// MaxReviewBytes bounds an AdmissionReview body. A pod is at most about
// 1.5 MiB (etcd's limit) and an UPDATE review carries two of them.
const MaxReviewBytes = 6 << 20

// Reasons the webhook decides on its own (the view's reasons cover quota).
const (
	reasonNotPod         view.Reason = "not_a_pod"
	reasonOtherOperation view.Reason = "other_operation"
	reasonNoGPU          view.Reason = "no_gpu"
	reasonInvalid        view.Reason = "invalid_request"
	reasonImmutable      view.Reason = "immutable_field"
	reasonUpdate         view.Reason = "update"
	reasonNotActive      view.Reason = "not_active"
	reasonBadObject      view.Reason = "bad_object"
	reasonNamespace      view.Reason = "namespace_unreadable"
	// The queue gate.
	reasonGated              view.Reason = "gated"
	reasonJobSuspended       view.Reason = "job_suspended"
	reasonNotSuspended       view.Reason = "job_not_suspended"
	reasonSeveralShapes      view.Reason = "jobset_several_shapes"
	reasonAlreadyGated       view.Reason = "already_gated"
	reasonBoundAtCreate      view.Reason = "bound_at_creation"
	reasonQueueingOff        view.Reason = "queueing_off"
	reasonWorkloadUnreadable view.Reason = "workload_unreadable"
	// reasonKueue: the namespace is Kueue's to queue (<domain>/queueing=kueue).
	reasonKueue       view.Reason = "kueue_queues"
	reasonGateRemoved view.Reason = "queue_gate_removed"
)

// NamespaceGetter reads a namespace from the API server. The webhook uses it
// only for a namespace its informer has not shown yet (one created a moment
// before its first pod). It returns an error satisfying
// apierrors.IsNotFound when there is none.
type NamespaceGetter interface {
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
}

// JobGetter reads a Job from the API server, or from a cache of it. It
// returns an error satisfying apierrors.IsNotFound when there is none or
// when the Job of that name has another UID (the pod's owner is gone).
type JobGetter interface {
	Job(ctx context.Context, namespace, name, uid string) (*batchv1.Job, error)
}

// JobSetGetter reads a JobSet, as JobSetGang needs it, from the API server
// or a cache of it. It returns an error satisfying apierrors.IsNotFound
// when there is none, when the JobSet of that name has another UID, or
// when the JobSet API is not served.
type JobSetGetter interface {
	JobSet(ctx context.Context, namespace, name, uid string) (podreq.JobSetShape, error)
}

// LWSGetter reads a LeaderWorkerSet, as LWSGang needs it, by name. It
// returns an error satisfying apierrors.IsNotFound when there is none, or
// when the LeaderWorkerSet API is not served.
type LWSGetter interface {
	LeaderWorkerSet(ctx context.Context, namespace, name string) (podreq.LWSShape, error)
}

// TrainingJobGetter reads a training operator's job (apiVersion, kind,
// name and UID of the pod's controller reference). It returns an error
// satisfying apierrors.IsNotFound when there is none, when the job of that
// name has another UID, or when its API is not served.
type TrainingJobGetter interface {
	TrainingJob(ctx context.Context, namespace string, ref metav1.OwnerReference) (podreq.TrainingJobShape, error)
}

// PodGroupGetter reads a PodGroup's gang minCount: nil when its scheduling
// policy is not a gang. It returns an error satisfying apierrors.IsNotFound
// when there is none, or when the API is not served.
type PodGroupGetter interface {
	PodGroupGang(ctx context.Context, namespace, name string) (minCount *int32, err error)
}

// Options configure a Handler.
type Options struct {
	Names contract.Names
	View  *view.View
	// Active reports whether this replica may admit GPU pods (it holds the
	// leader lease); nil means always.
	Active func() bool
	// Namespaces reads namespaces the view has not seen; nil treats them as
	// unlabelled.
	Namespaces NamespaceGetter
	// Jobs reads the Job that controls a new pod, for the gang its shape
	// makes (podreq.JobGang); nil reads none.
	Jobs JobGetter
	// JobSets reads the JobSet that controls such a Job (podreq.JobSetGang);
	// nil reads none.
	JobSets JobSetGetter
	// LeaderWorkerSets reads the LeaderWorkerSet a new pod's labels name
	// (podreq.LWSGang); nil reads none.
	LeaderWorkerSets LWSGetter
	// TrainingJobs reads the training operator's job that controls a new
	// pod (podreq.TrainingJobGang); nil reads none.
	TrainingJobs TrainingJobGetter
	// PodGroups reads the PodGroup (scheduling.k8s.io, Kubernetes' gang
	// API) a new pod's spec.schedulingGroup names; nil reads none.
	PodGroups PodGroupGetter
	Metrics   *Metrics
	// QueueControllers are the user names (AdmissionReview userInfo) that
	// may remove the queue gate from a pod: Rota's queue controller.
	QueueControllers []string
	// Now is the clock for latency metrics; nil means time.Now.
	Now func() time.Time
}

// Handler answers AdmissionReviews on POST. Build it with New (the
// validating webhook) or NewMutating (the queue gate).
type Handler struct {
	o      Options
	mutate bool
}

var _ http.Handler = (*Handler)(nil)

// New returns the validating webhook's Handler.
func New(o Options) *Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Handler{o: o}
}

// NewMutating returns the mutating webhook's Handler: on CREATE it adds the
// queue gate to every pod that asks for Rota's resources, unless queueing
// is off for the pod's namespace or in the quota configuration, or the pod
// is bound at creation (spec.nodeName set). A pod that has the gate already
// is left alone. It never refuses a well-formed pod.
func NewMutating(o Options) *Handler {
	h := New(o)
	h.mutate = true
	return h
}

// result is the webhook's decision before it is encoded.
type result struct {
	allowed bool
	reason  view.Reason
	team    string
	message string
	// internal marks failures of the webhook rather than of the request.
	internal bool
	// patch is a JSON patch for the mutating webhook to return.
	patch []byte
	// warnings go back to the client (kubectl prints them).
	warnings []string
}

func allow(r view.Reason) result { return result{allowed: true, reason: r} }

func deny(r view.Reason, msg string) result { return result{reason: r, message: msg} }

// ServeHTTP decodes one AdmissionReview and answers it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.o.Now()
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("AdmissionReview is larger than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	review, err := DecodeReview(body)
	if err != nil {
		logger.Error(err, "Bad AdmissionReview")
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := review.Request
	var res result
	if h.mutate {
		res = h.decideMutation(r.Context(), req)
	} else {
		res = h.decide(r.Context(), req)
	}

	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: res.allowed, Warnings: res.warnings}
	if res.patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = res.patch, &pt
	}
	if !res.allowed {
		code, reason := int32(http.StatusForbidden), metav1.StatusReasonForbidden
		if res.internal {
			code, reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
		}
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: res.message}
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	if err != nil {
		logger.Error(err, "Encoding AdmissionReview")
		http.Error(w, "encoding the response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out); err != nil {
		logger.V(2).Info("Writing the admission response failed", "err", err)
	}

	outcome := "allowed"
	switch {
	case res.internal:
		outcome = "error"
	case !res.allowed:
		outcome = "denied"
	}
	switch {
	case h.o.Metrics == nil:
	case h.mutate:
		h.o.Metrics.mutations.WithLabelValues(outcome, string(res.reason)).Inc()
	default:
		h.o.Metrics.admissions.WithLabelValues(string(req.Operation), outcome, string(res.reason)).Inc()
		h.o.Metrics.latency.WithLabelValues(outcome).Observe(h.o.Now().Sub(start).Seconds())
	}
	if res.reason != reasonNoGPU && res.reason != reasonNotPod {
		logger.V(4).Info("Admission", "pod", klog.KRef(req.Namespace, req.Name), "uid", req.UID,
			"operation", req.Operation, "team", res.team, "allowed", res.allowed, "reason", res.reason, "message", res.message,
			"mutating", h.mutate)
	}
}

// DecodeReview parses an admission.k8s.io/v1 AdmissionReview request.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := podreq.Decode(body, &review); err != nil {
		return nil, fmt.Errorf("decoding AdmissionReview: %w", err)
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("got %s %s, want %s AdmissionReview", review.APIVersion, review.Kind, admissionv1.SchemeGroupVersion)
	}
	if review.Request == nil {
		return nil, errors.New("AdmissionReview has no request")
	}
	if review.Request.UID == "" {
		return nil, errors.New("AdmissionReview request has no uid")
	}
	return &review, nil
}

func (h *Handler) decide(ctx context.Context, req *admissionv1.AdmissionRequest) result {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return allow(reasonNotPod)
	}
	switch req.Operation {
	case admissionv1.Create:
		return h.create(ctx, req)
	case admissionv1.Update:
		return h.update(req)
	default:
		return allow(reasonOtherOperation)
	}
}

// carriesObject refuses a request's object the API server never sends:
// none, not a JSON object, or one without metadata (a patch that writes a
// label or an annotation could not apply to it).
func carriesObject(raw []byte, what string) error {
	if len(raw) == 0 {
		return fmt.Errorf("the request carries no %s", what)
	}
	var o struct {
		Metadata *struct{} `json:"metadata"`
	}
	if err := podreq.Decode(raw, &o); err != nil {
		return fmt.Errorf("decoding the %s: %w", what, err)
	}
	if o.Metadata == nil {
		return fmt.Errorf("the %s has no metadata", what)
	}
	return nil
}

func decodePod(raw []byte, req *admissionv1.AdmissionRequest) (*corev1.Pod, error) {
	if err := carriesObject(raw, "pod"); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := podreq.Decode(raw, pod); err != nil {
		return nil, fmt.Errorf("decoding the pod: %w", err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if pod.Name == "" {
		pod.Name = req.Name
	}
	return pod, nil
}

func (h *Handler) create(ctx context.Context, req *admissionv1.AdmissionRequest) result {
	pod, err := decodePod(req.Object.Raw, req)
	if err != nil {
		return deny(reasonBadObject, err.Error())
	}
	names := h.o.Names
	if !podreq.Wants(pod, names) {
		return allow(reasonNoGPU)
	}
	// The request itself: well formed, in units, no larger than the
	// cluster's largest GPU and node; the queue's annotations readable.
	v := h.o.View
	opts, models, bad := h.checkRequest(pod)
	if bad != "" {
		return deny(reasonInvalid, bad)
	}
	if h.o.Active != nil && !h.o.Active() {
		return result{reason: reasonNotActive, internal: true, message: "this Rota admission replica is not the active one " +
			"(another replica holds the lease) and does not admit GPU pods; try again in a few seconds"}
	}
	// A gated pod waits in Rota's queue; one without the gate (queueing is
	// off for it) is admitted now within quota, or refused.
	gated := view.Gated(pod, names)
	vr, bad := h.viewRequest(pod, opts, models, gated)
	if bad != "" {
		return deny(reasonInvalid, bad)
	}
	if err := h.learnNamespace(ctx, pod.Namespace); err != nil {
		return result{reason: reasonNamespace, internal: true, message: err.Error()}
	}
	if !gated && v.KueueQueues(pod.Namespace) {
		// Kueue queues this namespace and its ClusterQueues are the quota:
		// Rota checks the request (above) and places the pod, nothing more.
		res := allow(reasonKueue)
		if vr.Gang != nil {
			res.warnings = kueueTopologyWarning(pod, vr.Gang.Name)
		}
		return res
	}
	// Quota and gangs.
	// The API server assigns the pod's UID before it calls validating
	// webhooks; when it is missing the reservation matches by name only.
	vr.UID, vr.Priority, vr.DryRun = string(pod.UID), pod.Spec.Priority, req.DryRun != nil && *req.DryRun
	var out view.Outcome
	if gated {
		out = v.Queue(vr)
	} else {
		out = v.Admit(vr)
	}
	return result{allowed: out.Allowed, reason: out.Reason, team: out.Team, message: out.Message}
}

// violation turns a field error into a Violation that names the field once.
// checkRequest reads a pod's request the way every GPU pod is checked at
// creation: well formed, in units, no larger than the cluster's largest
// GPU and node, the queue's annotations readable. bad joins what is wrong
// ("" when nothing is).
func (h *Handler) checkRequest(pod *corev1.Pod) (opts podreq.Options, models []string, bad string) {
	names, v := h.o.Names, h.o.View
	caps := v.Caps()
	opts = podreq.Options{Names: names, MemoryUnitMiB: v.MemoryUnitMiB(),
		MaxGPUMemoryMiB: caps.MaxGPUMemoryMiB, MaxGPUs: caps.MaxGPUs}
	vs := podreq.Validate(pod, opts)
	models, err := podreq.GPUModels(pod, names)
	if err != nil {
		vs = append(vs, violation(err))
	}
	if _, _, err := podreq.MaxRuntime(pod, names); err != nil {
		vs = append(vs, violation(err))
	}
	if _, _, err := podreq.Deadline(pod, names); err != nil {
		vs = append(vs, violation(err))
	}
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.Error()
	}
	return opts, models, strings.Join(msgs, "; ")
}

func violation(err error) podreq.Violation {
	var fe *contract.FieldError
	if errors.As(err, &fe) {
		return podreq.Violation{Field: fe.Field, Message: strings.TrimPrefix(fe.Error(), fe.Field+": ")}
	}
	return podreq.Violation{Field: "metadata", Message: err.Error()}
}

// modelFit checks a queued pod against the largest node and GPU of the
// models it accepts, when the cluster has nodes of them.
func modelFit(pr placement.Request, v *view.View, models []string, names contract.Names) string {
	caps, perModel := v.CapsFor(models)
	if !perModel {
		return ""
	}
	unit := v.MemoryUnitMiB()
	which := "GPU model " + quoteList(models)
	if len(models) > 1 {
		which = "the GPU models it accepts (" + quoteList(models) + ")"
	}
	fix := fmt.Sprintf("accept more GPU models (annotation %s) or", names.GPUModelsAnnotation)
	if caps.MaxGPUs > 0 && pr.GPUs > caps.MaxGPUs {
		return fmt.Sprintf("the pod asks for %d GPUs but the largest node with %s has %d, so it can never run; %s split the job into a gang of smaller pods",
			pr.GPUs, which, caps.MaxGPUs, fix)
	}
	if mem := contract.MiB(pr.MemoryUnits) * unit; caps.MaxGPUMemoryMiB > 0 && pr.MemoryUnits > 0 && mem > caps.MaxGPUMemoryMiB {
		return fmt.Sprintf("the pod asks for %s of GPU memory on one GPU but the largest GPU of %s has %s, so it can never run; %s ask for at most %d units",
			mem, which, caps.MaxGPUMemoryMiB, fix, int64(caps.MaxGPUMemoryMiB/unit))
	}
	return ""
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// learnNamespace makes sure the view knows the namespace's team label.
func (h *Handler) learnNamespace(ctx context.Context, name string) error {
	v := h.o.View
	if h.o.Namespaces == nil || v.NamespaceKnown(name) {
		return nil
	}
	ns, err := h.o.Namespaces.Namespace(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil // charged to no team; Admit says so
	case err != nil:
		return fmt.Errorf("reading namespace %s to find its team: %w", name, err)
	}
	v.UpsertNamespace(ns)
	return nil
}

// update refuses changes to what quota and gangs are keyed on.
func (h *Handler) update(req *admissionv1.AdmissionRequest) result {
	pod, err := decodePod(req.Object.Raw, req)
	if err != nil {
		return deny(reasonBadObject, err.Error())
	}
	old, err := decodePod(req.OldObject.Raw, req)
	if err != nil {
		return deny(reasonBadObject, "old object: "+err.Error())
	}
	names := h.o.Names
	if !podreq.Wants(pod, names) && !podreq.Wants(old, names) {
		return allow(reasonNoGPU)
	}
	if view.Gated(old, names) && !view.Gated(pod, names) && !slices.Contains(h.o.QueueControllers, req.UserInfo.Username) {
		return deny(reasonGateRemoved, fmt.Sprintf(
			"only Rota's queue controller may remove scheduling gate %s; the pod is queued: kubectl rota why %s -n %s says where it stands and what it waits for",
			names.QueueGate, pod.Name, pod.Namespace))
	}
	var msgs []string
	for _, f := range []struct {
		kind, key string
		before    map[string]string
		after     map[string]string
	}{
		{"label", names.GangLabel, old.Labels, pod.Labels},
		{"label", names.PodGroupLabel, old.Labels, pod.Labels},
		{"label", names.TeamLabel, old.Labels, pod.Labels},
		{"annotation", names.GangSizeAnnotation, old.Annotations, pod.Annotations},
	} {
		b, hadB := f.before[f.key]
		a, hadA := f.after[f.key]
		if b == a && hadB == hadA {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s %s cannot change on an existing GPU pod (was %s, now %s)",
			f.kind, f.key, show(b, hadB), show(a, hadA)))
	}
	if len(msgs) > 0 {
		return deny(reasonImmutable, strings.Join(msgs, "; ")+
			"; Rota charges quota and plans gangs by it when the pod is created: delete the pod and create it again")
	}
	return allow(reasonUpdate)
}

func show(v string, ok bool) string {
	if !ok {
		return "unset"
	}
	return fmt.Sprintf("%q", v)
}

// decideMutation is the mutating webhook: the queue gate on CREATE.
func (h *Handler) decideMutation(ctx context.Context, req *admissionv1.AdmissionRequest) result {
	if req.Kind.Group == batchv1.GroupName && req.Kind.Kind == "Job" && req.SubResource == "" && req.Operation == admissionv1.Create {
		return h.suspendJob(ctx, req)
	}
	if req.Kind.Group == podreq.JobSetGroup && req.Kind.Kind == "JobSet" && req.SubResource == "" && req.Operation == admissionv1.Create {
		return h.suspendJobSet(ctx, req)
	}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return allow(reasonNotPod)
	}
	if req.Operation != admissionv1.Create {
		return allow(reasonOtherOperation)
	}
	pod, err := decodePod(req.Object.Raw, req)
	if err != nil {
		return deny(reasonBadObject, err.Error())
	}
	names := h.o.Names
	switch {
	case !podreq.Wants(pod, names):
		return allow(reasonNoGPU)
	case view.Gated(pod, names):
		return allow(reasonAlreadyGated)
	case pod.Spec.NodeName != "":
		// Bound by its creator (a static pod's mirror, or a pod that names
		// its node): the API server refuses a scheduling gate on it. The
		// validating webhook charges it as with queueing off.
		return allow(reasonBoundAtCreate)
	}
	ops, err := h.workloadGangOps(ctx, pod)
	if err != nil {
		return result{reason: reasonWorkloadUnreadable, internal: true, message: err.Error()}
	}
	if err := h.learnNamespace(ctx, pod.Namespace); err != nil {
		return result{reason: reasonNamespace, internal: true, message: err.Error()}
	}
	reason := reasonGated
	if off, _ := h.o.View.QueueingOff(pod.Namespace); off {
		reason = reasonQueueingOff
	} else {
		ops = append(ops, gateOp(pod.Spec.SchedulingGates, names.QueueGate))
	}
	if len(ops) == 0 {
		return allow(reason)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return result{reason: reasonBadObject, internal: true, message: err.Error()}
	}
	return result{allowed: true, reason: reason, patch: patch}
}

// suspendJob queues a new Job suspended where its namespace asks for it
// (podreq.Suspendable, View.SuspendsJobs): spec.suspend set and the Job
// marked with QueuedJobAnnotation, so that only the queue controller
// starts it (the records policy refuses anyone else's unsuspend). A Job
// that is not for Rota, or whose namespace queues pods, is left alone.
func (h *Handler) suspendJob(ctx context.Context, req *admissionv1.AdmissionRequest) result {
	job := &batchv1.Job{}
	if err := carriesObject(req.Object.Raw, "Job"); err != nil {
		return deny(reasonBadObject, err.Error())
	}
	if err := podreq.Decode(req.Object.Raw, job); err != nil {
		return deny(reasonBadObject, "decoding the Job: "+err.Error())
	}
	if job.Namespace == "" {
		job.Namespace = req.Namespace
	}
	names := h.o.Names
	if !podreq.Suspendable(job, names) {
		return allow(reasonNoGPU)
	}
	if r, ok := h.suspendsIn(ctx, job.Namespace); !ok {
		return r
	}
	// Its pods do not exist while it waits: what the webhook would refuse
	// of each pod at its creation is refused of the Job now, rather than
	// left to wait for ever.
	if pods := podreq.JobPods(job, names); len(pods) > 0 {
		opts, models, bad := h.checkRequest(pods[0])
		if bad != "" {
			return deny(reasonInvalid, "the Job's pod template: "+bad)
		}
		if r, ok := h.workloadEverRuns(pods[0], opts, models, "the Job:"); !ok {
			return r
		}
	}
	return h.suspendOps(job.Annotations)
}

// suspendJobSet queues a new JobSet suspended as suspendJob does a Job
// (podreq.JobSetSuspendable): the JobSet controller then creates its Jobs
// suspended, and none of its pods exists until the queue unsuspends it. A
// JobSet whose GPU pods differ in what they ask for (podreq.JobSetOneShape)
// keeps gated pods: the queue holds room for workloads of one shape.
func (h *Handler) suspendJobSet(ctx context.Context, req *admissionv1.AdmissionRequest) result {
	if err := carriesObject(req.Object.Raw, "JobSet"); err != nil {
		return deny(reasonBadObject, err.Error())
	}
	o, err := podreq.ReadJobSet(req.Object.Raw)
	if err != nil {
		return deny(reasonBadObject, "decoding the JobSet: "+err.Error())
	}
	if o.Namespace == "" {
		o.Namespace = req.Namespace
	}
	names := h.o.Names
	if !podreq.JobSetSuspendable(o, names) {
		return allow(reasonNoGPU)
	}
	if r, ok := h.suspendsIn(ctx, o.Namespace); !ok {
		return r
	}
	// Its pods do not exist while it waits: what the webhook would refuse
	// of each replicated job's pods is refused of the JobSet now.
	var opts podreq.Options
	templates := podreq.OnePerTemplate(podreq.JobSetPods(o, names))
	var models []string
	for i, pod := range templates {
		podOpts, podModels, bad := h.checkRequest(pod)
		if bad != "" {
			return deny(reasonInvalid, fmt.Sprintf("the JobSet's replicated job %q: %s", pod.Labels[podreq.ReplicatedJobLabel], bad))
		}
		if i == 0 {
			opts, models = podOpts, podModels
		}
	}
	if err := podreq.JobSetOneShape(o, opts); err != nil {
		klog.FromContext(ctx).V(2).Info("A JobSet keeps gated pods: its GPU pods are of several shapes", "jobset", klog.KObj(o), "reason", err.Error())
		return allow(reasonSeveralShapes)
	}
	for _, pod := range templates {
		what := fmt.Sprintf("the JobSet's replicated job %q:", pod.Labels[podreq.ReplicatedJobLabel])
		if r, ok := h.workloadEverRuns(pod, opts, models, what); !ok {
			return r
		}
	}
	return h.suspendOps(o.Annotations)
}

// workloadEverRuns refuses a Job or JobSet queued suspended that can never
// run, as the pod webhook refuses such a gated pod (view.Queue): judged on
// one of its planned pods (podreq.JobPods, JobSetPods), which carries the
// gang its pods will form. what names the template in the message. The
// planned pod's priority is not resolved yet: the priority ceiling is
// checked on each pod as the Job controller creates it.
func (h *Handler) workloadEverRuns(pod *corev1.Pod, opts podreq.Options, models []string, what string) (result, bool) {
	vr, bad := h.viewRequest(pod, opts, models, true)
	if bad != "" {
		return deny(reasonInvalid, what+" "+bad), false
	}
	out := h.o.View.WorkloadEverRuns(vr)
	if !out.Allowed {
		return result{reason: out.Reason, team: out.Team, message: what + " " + out.Message}, false
	}
	return result{}, true
}

// viewRequest is what the view judges of a GPU pod (one the webhook
// creates, or one a Job or JobSet queued suspended plans): its request in
// the quota's units, its gang and its team label, the GPU models it
// accepts checked against the cluster's when it will queue. bad says why
// it can never be judged. The caller adds what only a real pod has (UID,
// resolved priority, dry run).
func (h *Handler) viewRequest(pod *corev1.Pod, opts podreq.Options, models []string, queued bool) (vr view.Request, bad string) {
	v, names := h.o.View, h.o.Names
	pr, err := podreq.FromPod(pod, opts)
	if err != nil {
		return vr, err.Error()
	}
	if queued && len(models) > 0 {
		if msg := modelFit(pr, v, models, names); msg != "" {
			return vr, msg
		}
	}
	gang, err := podreq.GangOf(pod, names)
	if err != nil {
		return vr, err.Error()
	}
	return view.Request{Namespace: pod.Namespace, Name: pod.Name, PodTeam: pod.Labels[names.TeamLabel],
		Amount: quota.AmountOf(pr.GPUs, pr.MemoryUnits, v.MemoryUnitMiB()), Gang: gang, Models: models}, ""
}

// suspendsIn reports whether the namespace queues its Jobs and JobSets
// suspended; when not (or unreadable), r is the answer to give.
func (h *Handler) suspendsIn(ctx context.Context, namespace string) (r result, ok bool) {
	if err := h.learnNamespace(ctx, namespace); err != nil {
		return result{reason: reasonNamespace, internal: true, message: err.Error()}, false
	}
	if !h.o.View.SuspendsJobs(namespace) {
		return allow(reasonNotSuspended), false
	}
	return result{}, true
}

// suspendOps is the patch that queues a new Job or JobSet suspended:
// spec.suspend set and the object marked with QueuedJobAnnotation.
func (h *Handler) suspendOps(annotations map[string]string) result {
	ops := []patchOp{
		{Op: "add", Path: "/spec/suspend", Value: true},
		mapEntryOp(annotations, "/metadata/annotations", h.o.Names.QueuedJobAnnotation, "true"),
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return result{reason: reasonBadObject, internal: true, message: err.Error()}
	}
	return result{allowed: true, reason: reasonJobSuspended, patch: patch}
}

// patchOp is one JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// gateOp sets spec.schedulingGates to gates plus gate. It writes the whole
// list ("add" of an existing member replaces it), so it is right whether
// the pod has no list, an empty one or gates of its own.
func gateOp(gates []corev1.PodSchedulingGate, gate string) patchOp {
	return patchOp{Op: "add", Path: "/spec/schedulingGates", Value: append(slices.Clone(gates), corev1.PodSchedulingGate{Name: gate})}
}

// workloadGangOps names, on a new pod, the gang its workload's shape makes:
// its PodGroup, LeaderWorkerSet group, training job, Job or JobSet
// (pkg/podreq's rules), with Rota's gang label and size, unless the pod
// names a gang (or a pod group) itself: the rest of Rota reads gangs from
// those. Each workload is read through its getter (nil: not read).
func (h *Handler) workloadGangOps(ctx context.Context, pod *corev1.Pod) ([]patchOp, error) {
	names := h.o.Names
	if _, ok := pod.Labels[names.GangLabel]; ok {
		return nil, nil
	}
	if _, ok := pod.Labels[names.PodGroupLabel]; ok {
		return nil, nil
	}
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" && h.o.PodGroups != nil {
		group := *g.PodGroupName
		minCount, err := h.o.PodGroups.PodGroupGang(ctx, pod.Namespace, group)
		return shapeGangOps(pod, names, "PodGroup "+group, minCount, err, func(n *int32) (string, int, bool) { return podreq.PodGroupGang(group, n) })
	}
	if lws := pod.Labels[podreq.LWSNameLabel]; lws != "" && h.o.LeaderWorkerSets != nil {
		shape, err := h.o.LeaderWorkerSets.LeaderWorkerSet(ctx, pod.Namespace, lws)
		return shapeGangOps(pod, names, "LeaderWorkerSet "+lws, shape, err, func(s podreq.LWSShape) (string, int, bool) {
			return podreq.LWSGang(s, pod.Labels[podreq.LWSGroupIndexLabel])
		})
	}
	if ref, ok := podreq.TrainingJobOwner(pod); ok && h.o.TrainingJobs != nil {
		j, err := h.o.TrainingJobs.TrainingJob(ctx, pod.Namespace, *ref)
		return shapeGangOps(pod, names, ref.Kind+" "+ref.Name, j, err, podreq.TrainingJobGang)
	}
	ref, ok := podreq.ControlledBy(pod, batchv1.GroupName, "Job")
	if !ok || h.o.Jobs == nil {
		return nil, nil
	}
	job, err := h.o.Jobs.Job(ctx, pod.Namespace, ref.Name, string(ref.UID))
	if err == nil && h.o.JobSets != nil {
		if js, ok := podreq.ControlledBy(job, podreq.JobSetGroup, "JobSet"); ok {
			shape, err := h.o.JobSets.JobSet(ctx, pod.Namespace, js.Name, string(js.UID))
			return shapeGangOps(pod, names, "JobSet "+js.Name, shape, err, func(s podreq.JobSetShape) (string, int, bool) {
				return podreq.JobSetGang(s, job.Labels[podreq.ReplicatedJobLabel], names)
			})
		}
	}
	return shapeGangOps(pod, names, "Job "+ref.Name, job, err, func(j *batchv1.Job) (string, int, bool) { return podreq.JobGang(j, names) })
}

// shapeGangOps writes the gang that rule makes of workload v, read with
// err, on the pod: nothing when there is no such workload (or its API is
// not served), an error when it could not be read.
func shapeGangOps[T any](pod *corev1.Pod, names contract.Names, what string, v T, err error, rule func(T) (string, int, bool)) ([]patchOp, error) {
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s in namespace %s for the pod's gang: %w", what, pod.Namespace, err)
	}
	gang, size, ok := rule(v)
	if !ok {
		return nil, nil
	}
	return []patchOp{
		mapEntryOp(pod.Labels, "/metadata/labels", names.GangLabel, gang),
		mapEntryOp(pod.Annotations, "/metadata/annotations", names.GangSizeAnnotation, strconv.Itoa(size)),
	}, nil
}

// mapEntryOp sets key to value in the map at path (the whole map when the
// pod has none yet).
func mapEntryOp(m map[string]string, path, key, value string) patchOp {
	if m == nil {
		return patchOp{Op: "add", Path: path, Value: map[string]string{key: value}}
	}
	return patchOp{Op: "add", Path: path + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key), Value: value}
}

// kueueTopologyWarning warns when a Rota gang also asks for Kueue's
// topology-aware scheduling: both would narrow its nodes. Kueue's choice
// wins (it pins each pod's nodes before kube-scheduler sees it), so Rota
// only places GPUs on the nodes Kueue chose and its own tier plan does not
// apply.
func kueueTopologyWarning(pod *corev1.Pod, gang string) []string {
	why := ""
	for _, a := range podreq.KueueTopologyAnnotations {
		if _, ok := pod.Annotations[a]; ok {
			why = "annotation " + a
			break
		}
	}
	if why == "" && slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podreq.KueueTopologyGate }) {
		why = "scheduling gate " + podreq.KueueTopologyGate
	}
	if why == "" {
		return nil
	}
	return []string{fmt.Sprintf("gang %s asks for Kueue's topology-aware scheduling (%s) and is a Rota gang: both narrow its nodes. "+
		"Kueue's choice wins and Rota only places GPUs on the nodes Kueue picks, without its own tier plan; "+
		"keep one of the two (see Rota's guide to running beside Kueue)", gang, why)}
}
