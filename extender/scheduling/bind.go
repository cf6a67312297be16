package scheduling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// fitRetries bounds how often bind re-runs Fit when a concurrent bind took
// the GPUs between its snapshot and its reservation.
const fitRetries = 3

// maxNameLen is the longest Kubernetes object name (a DNS subdomain).
const maxNameLen = 253

// bindError is a bind failure with the reason code for metrics.
type bindError struct {
	code string
	err  error
}

func (b *bindError) Error() string { return b.err.Error() }
func (b *bindError) Unwrap() error { return b.err }

func bindErr(code string, format string, args ...any) error {
	return &bindError{code: code, err: fmt.Errorf(format, args...)}
}

// Bind answers the bind verb, in two phases: reserve, then write.
//
//  1. Find the pod (informer, else the API server) and check it is the one
//     the scheduler means (UID), pending and not bound elsewhere, and of a
//     scheduler this extender serves (Options.SchedulerNames); find the
//     node (informer) and check what kube-scheduler would have: the pod's
//     node selector, required node affinity and tolerations (checkNode) and,
//     for a pod that asks for no GPU, its CPU and memory requests. A bind
//     request is not trusted to come after the scheduler's filters: a
//     refusal writes nothing.
//  2. Reserve: the pod's gang slot; or its existing assignment for this node
//     (a retried bind); or placement.Fit on the current snapshot, then
//     ledger.Reserve with the reservation TTL (retried on a fresh snapshot
//     when a concurrent bind won the GPUs).
//  3. Create the Binding with the assignment annotation on it (the API
//     server copies it onto the pod in the same write that binds it, with
//     the pod's UID as precondition), then commit the reservation.
//
// A failure releases what this call reserved (a gang slot stays until the
// plan lapses, so the retry finds it) and is returned in Error, so the
// scheduler retries; a retry is idempotent.
func (e *Extender) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	start := e.now()
	if args == nil {
		args = &extenderv1.ExtenderBindingArgs{}
	}
	if err := e.notReady("bind"); err != nil {
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}
	}
	if len(args.PodName) > maxNameLen || len(args.PodNamespace) > maxNameLen || len(args.Node) > maxNameLen {
		// Not a Kubernetes name: refused before it reaches the log, the
		// decision record or the answer.
		e.metrics.Decisions.WithLabelValues("bind", "error", "InvalidRequest").Inc()
		return &extenderv1.ExtenderBindingResult{Error: fmt.Sprintf(
			"bind: a pod, namespace or node name longer than %d bytes is not a Kubernetes name", maxNameLen)}
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node)
	ctx = klog.NewContext(ctx, logger)
	outcome, gang, err := e.bind(ctx, args)
	code := ""
	d := Decision{Time: start, Verb: "bind", Outcome: outcome, Node: args.Node, Gang: gang}
	if err != nil {
		d.Outcome, d.Message = "error", err.Error()
		var be *bindError
		code = "APIError"
		if errors.As(err, &be) {
			code = be.code
		}
	}
	d.Duration = e.now().Sub(start).String()
	e.metrics.Decisions.WithLabelValues("bind", d.Outcome, code).Inc()
	e.decisions.add(args.PodNamespace+"/"+args.PodName, d)
	logger.V(4).Info("Bind decision", "outcome", d.Outcome, "gang", gang, "reason", code, "message", d.Message)
	if err != nil {
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}
	}
	return &extenderv1.ExtenderBindingResult{}
}

func (e *Extender) bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (outcome, gang string, err error) {
	if args.PodName == "" || args.PodNamespace == "" || args.PodUID == "" || args.Node == "" {
		return "", "", bindErr("InvalidRequest", "bind: podName, podNamespace, podUID and node are required")
	}

	// 1. The pod.
	pod, ok := e.cache.Pod(args.PodNamespace, args.PodName)
	if !ok || pod.UID != args.PodUID {
		fresh, err := e.binder.Pod(ctx, args.PodNamespace, args.PodName)
		if apierrors.IsNotFound(err) {
			return "", "", bindErr("PodNotFound", "bind: pod %s/%s no longer exists", args.PodNamespace, args.PodName)
		}
		if err != nil {
			return "", "", bindErr("APIError", "bind: pod %s/%s is not in the cache yet and reading it failed: %w",
				args.PodNamespace, args.PodName, err)
		}
		pod = fresh
	}
	if pod.UID != args.PodUID {
		return "", "", bindErr("PodReplaced", "bind: pod %s/%s has UID %s, the request names %s (the pod was replaced)",
			pod.Namespace, pod.Name, pod.UID, args.PodUID)
	}
	uid := string(pod.UID)
	if name := schedulerOf(pod); !slices.Contains(e.o.SchedulerNames, name) {
		return "", "", bindErr(string(codeWrongScheduler), "bind: pod %s/%s has schedulerName %q; this extender binds only pods of %s (--scheduler-names)",
			pod.Namespace, pod.Name, name, strings.Join(e.o.SchedulerNames, ", "))
	}
	if pod.Spec.NodeName != "" {
		if pod.Spec.NodeName == args.Node {
			return "already-bound", "", nil
		}
		return "", "", bindErr("AlreadyBound", "bind: pod %s/%s is already bound to %s", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if pod.DeletionTimestamp != nil || podreq.Terminal(pod) {
		return "", "", bindErr(string(codePodNotPending), "bind: pod %s/%s is being deleted or has finished", pod.Namespace, pod.Name)
	}
	node, ok := e.cache.Node(args.Node)
	if !ok {
		return "", "", bindErr(string(codeUnknownNode), "bind: node %s is unknown to the extender (no such node, or deleted)", args.Node)
	}
	gpuFree := !podreq.Wants(pod, e.names)
	var use *nodeUse
	if gpuFree {
		use = e.nodeUse(args.Node)
	}
	if r := checkNode(pod, node, use); r != nil {
		return "", "", bindErr(string(r.code), "bind: pod %s/%s may not run on node %s: %s", pod.Namespace, pod.Name, args.Node, r.msg)
	}
	if gpuFree {
		// Recorded before the write, as kube-scheduler assumes a pod before
		// binding it: the next filter already sees this pod's CPU.
		held := e.cache.AccountGPUFree(pod, args.Node)
		if err := e.binder.Bind(ctx, pod.Namespace, pod.Name, pod.UID, args.Node, nil); err != nil {
			if held {
				e.ledger.Release(uid)
			}
			return "", "", bindErr("APIError", "%w", err)
		}
		return "bound", "", nil
	}
	req, err := e.request(pod)
	if err != nil {
		return "", "", bindErr(string(codeInvalidRequest), "bind: invalid GPU request: %w", err)
	}
	if ref := e.o.Parser.Of(pod).Gang; ref != nil {
		gang = ref.Key
	}

	// 2. Reserve.
	alloc, fresh, err := e.reserve(ctx, pod, req, gang, args.Node)
	if err != nil {
		return "", gang, err
	}
	release := func() {
		if fresh {
			e.ledger.Release(uid)
		}
	}

	// 3. One write: the Binding, carrying the assignment annotation; then
	// commit.
	as := podreq.ToAssignment(alloc)
	as.Gang = gang
	as, err = e.o.Records.Key.SignAssignment(string(pod.UID), as)
	if err != nil {
		release()
		return "", gang, bindErr("InvalidAssignment", "bind: signing the assignment: %w", err)
	}
	value, err := as.Marshal()
	if err != nil {
		release()
		return "", gang, bindErr("InvalidAssignment", "bind: %w", err)
	}
	if err := e.binder.Bind(ctx, pod.Namespace, pod.Name, pod.UID, args.Node,
		map[string]string{e.names.AssignmentAnnotation: string(value)}); err != nil {
		release()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, replaced or bound elsewhere: nothing will use this
			// reservation, not even a gang slot.
			e.ledger.Release(uid)
		}
		return "", gang, bindErr("BindingFailed", "%w", err)
	}
	if err := e.ledger.Commit(uid); err != nil {
		// The reservation lapsed or was released while we wrote: the pod is
		// bound, so its assignment is the truth.
		if rerr := e.ledger.Restore(alloc); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Bound pod's GPUs could not be recorded; the ledger check will flag the node")
		}
	}
	if gang != "" {
		e.gangs.bound(gang)
	}
	return "bound", gang, nil
}

// reserve returns the pod's reservation on node and whether this call made
// it (fresh): the gang slot, the assignment a previous bind wrote, or a new
// placement.
func (e *Extender) reserve(ctx context.Context, pod *corev1.Pod, req placement.Request, gang, node string) (ledger.Allocation, bool, error) {
	uid := string(pod.UID)
	expires := e.now().Add(e.o.BindTTL)
	if held, ok := e.ledger.Get(uid); ok {
		switch {
		case held.Node == node:
			if held.State == ledger.Reserved && held.Gang == "" {
				_ = e.ledger.Reserve(held, expires) // extend a retried bind's reservation
			}
			return held, false, nil
		case held.State == ledger.Reserved && held.Gang != "":
			return ledger.Allocation{}, false, bindErr(string(placement.GangSlot),
				"bind: gang %s reserved this member's slot on node %s, not %s", held.Gang, held.Node, node)
		default:
			// A stale hold elsewhere (a failed bind's annotation): the
			// scheduler chose again, so drop it.
			e.ledger.Release(uid)
		}
	}
	// The pod already carries an assignment for this node but is unbound
	// (written by a Rota release that annotated before binding): honour it.
	if as, err := podreq.Assignment(pod, e.names); err == nil && as != nil && as.Node == node {
		a := podreq.ToAllocation(pod, *as, e.names)
		a.Gang, a.GangSize = "", 0 // gang completeness was checked when it was planned
		a.Ends = req.Ends
		if err := e.ledger.Reserve(a, expires); err == nil {
			return a, true, nil
		}
	}
	var last *placement.Reason
	for range fitRetries {
		snap := e.ledger.Snapshot()
		ni := snap.Node(node)
		c, reason := placement.Fit(req, ni)
		if reason != nil {
			last = reason
			break
		}
		a := c.Allocation(req, ni)
		err := e.ledger.Reserve(a, expires)
		if err == nil {
			return a, true, nil
		}
		if !errors.Is(err, ledger.ErrNoCapacity) && !errors.Is(err, ledger.ErrUnhealthy) {
			return ledger.Allocation{}, false, bindErr("ReserveFailed", "bind: reserve on %s: %w", node, err)
		}
		klog.FromContext(ctx).V(5).Info("Concurrent bind took the GPUs; fitting again", "reason", err.Error())
	}
	if last == nil {
		return ledger.Allocation{}, false, bindErr("ReserveFailed", "bind: node %s: GPUs taken by concurrent binds %d times in a row", node, fitRetries)
	}
	return ledger.Allocation{}, false, bindErr(string(last.Code), "bind: node %s no longer fits the pod's GPU request: %s", node, last.Message())
}

// nodeUse is the CPU and memory already requested on node: the ledger's
// count where it tracks the node (bound pods and binds in flight), else the
// informer's bound pods.
func (e *Extender) nodeUse(node string) *nodeUse {
	if ni := e.ledger.Snapshot().Node(node); ni != nil {
		return &nodeUse{CPUMilli: ni.CPUMilli, MemoryMiB: ni.HostMemoryMiB}
	}
	cpu, mem := e.cache.NodeRequests(node)
	return &nodeUse{CPUMilli: cpu, MemoryMiB: mem}
}
