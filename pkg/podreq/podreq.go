// Package podreq turns a Pod into Rota's placement request and checks that
// the pod's GPU request is well formed. It is the only package under pkg/
// that reads Kubernetes types; the extender, the webhook, the simulator and
// the demo all translate pods here, so they agree on what a pod asks for.
package podreq

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
)

// Violation is one problem with a pod's GPU request.
type Violation struct {
	Field   string
	Message string
}

func (v Violation) Error() string { return v.Field + ": " + v.Message }

// Options tune validation.
type Options struct {
	Names contract.Names
	// MemoryUnitMiB is the cluster's gpu-memory unit (for messages and the
	// bytes check); 0 means contract.DefaultMemoryUnitMiB.
	MemoryUnitMiB contract.MiB
	// MaxGPUMemoryMiB is the largest GPU in the cluster; 0 skips the check.
	MaxGPUMemoryMiB contract.MiB
	// MaxGPUs is the most GPUs any node has; 0 skips the check.
	MaxGPUs int
}

func (o Options) unit() contract.MiB {
	if o.MemoryUnitMiB > 0 {
		return o.MemoryUnitMiB
	}
	return contract.DefaultMemoryUnitMiB
}

// Wants reports whether the pod asks for any Rota resource.
func Wants(pod *corev1.Pod, names contract.Names) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, rl := range []corev1.ResourceList{cs[i].Resources.Requests, cs[i].Resources.Limits} {
				if _, ok := rl[corev1.ResourceName(names.GPU)]; ok {
					return true
				}
				if _, ok := rl[corev1.ResourceName(names.GPUMemory)]; ok {
					return true
				}
			}
		}
	}
	return false
}

// amount is the effective pod-level value of one resource, the way the
// scheduler and the kubelet count it (k8s.io/component-helpers
// resource.PodRequests): app containers and restartable init ("sidecar")
// containers run together, so they add up; a regular init container runs
// alone beside the sidecars declared before it. The pod needs the larger
// of the two. Example: sidecar 1, init 2, app 0 needs max(0+1, 1+2) = 3.
func amount(pod *corev1.Pod, name corev1.ResourceName) int64 {
	var sum, sidecars, maxInit int64
	for i := range pod.Spec.Containers {
		sum += value(pod.Spec.Containers[i], name)
	}
	for i := range pod.Spec.InitContainers {
		c := pod.Spec.InitContainers[i]
		v := value(c, name)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum += v
			sidecars += v
			maxInit = max(maxInit, sidecars)
			continue
		}
		maxInit = max(maxInit, sidecars+v)
	}
	return max(sum, maxInit)
}

func value(c corev1.Container, name corev1.ResourceName) int64 {
	if q, ok := c.Resources.Limits[name]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Requests[name]; ok {
		return q.Value()
	}
	return 0
}

// FromPod returns the placement request of a pod. It validates as it goes
// and returns the first violation as an error.
func FromPod(pod *corev1.Pod, o Options) (placement.Request, error) {
	if vs := Validate(pod, o); len(vs) > 0 {
		return placement.Request{}, vs[0]
	}
	r := placement.Request{
		UID:             string(pod.UID),
		Pod:             pod.Namespace + "/" + pod.Name,
		GPUs:            int(amount(pod, corev1.ResourceName(o.Names.GPU))),
		MemoryUnits:     amount(pod, corev1.ResourceName(o.Names.GPUMemory)),
		Preemptible:     Preemptible(pod, o.Names),
		ShareWithoutMPS: strings.EqualFold(pod.Annotations[o.Names.ShareWithoutMPSAnnotation], "true"),
	}
	r.CPUMilli, r.HostMemoryMiB = NodeResources(pod)
	if pod.Spec.Priority != nil {
		r.Priority = *pod.Spec.Priority
	}
	return r, nil
}

// NodeResources is the CPU (millicores) and host memory (MiB, rounded up)
// the pod takes from its node, counted by the function kube-scheduler
// counts with (k8s.io/component-helpers resource.PodRequests: containers
// under the init/sidecar rule, pod-level requests where set, plus the
// RuntimeClass overhead), from the pod's spec.
func NodeResources(pod *corev1.Pod) (cpuMilli int64, memoryMiB contract.MiB) {
	var mem int64
	if pod.Spec.Resources == nil && len(pod.Spec.InitContainers) == 0 && pod.Spec.Overhead == nil {
		// The common case, summed without PodRequests' maps: the
		// extender's informer runs this for every pod it stores, and the
		// maps' garbage alone raised the heap in use at 50,000 pods from
		// ~290 to ~386 MiB (TestHeap5kNodes50kPods).
		for i := range pod.Spec.Containers {
			rl := pod.Spec.Containers[i].Resources.Requests
			if q, ok := rl[corev1.ResourceCPU]; ok {
				cpuMilli += q.MilliValue()
			}
			if q, ok := rl[corev1.ResourceMemory]; ok {
				mem += q.Value()
			}
		}
	} else {
		reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		cpuMilli, mem = reqs.Cpu().MilliValue(), reqs.Memory().Value()
	}
	const mib = 1 << 20
	return cpuMilli, contract.MiB(mem/mib + min(mem%mib, 1))
}

// Preemptible reads the preemptible label ("true"/"false"); pods are
// preemptible unless labelled "false".
func Preemptible(pod *corev1.Pod, names contract.Names) bool {
	return !strings.EqualFold(pod.Labels[names.PreemptibleLabel], "false")
}

// Validate checks the pod's GPU request: whole GPUs or a memory share, not
// both; whole numbers; limits equal to requests; a memory share in the
// memory unit and no larger than the largest GPU; sane gang labels.
func Validate(pod *corev1.Pod, o Options) []Violation {
	var vs []Violation
	gpu := corev1.ResourceName(o.Names.GPU)
	mem := corev1.ResourceName(o.Names.GPUMemory)
	unit := o.unit()
	check := func(path string, c corev1.Container) {
		for _, name := range []corev1.ResourceName{gpu, mem} {
			lim, hasLim := c.Resources.Limits[name]
			req, hasReq := c.Resources.Requests[name]
			f := fmt.Sprintf("%s.resources.limits[%s]", path, name)
			if hasReq && !hasLim {
				vs = append(vs, Violation{f, fmt.Sprintf("is missing; extended resources need limits equal to requests: set limits %s: %q", name, req.String())})
				continue
			}
			if hasReq && hasLim && req.Cmp(lim) != 0 {
				vs = append(vs, Violation{f, fmt.Sprintf("%q differs from the request %q; set both to the same value", lim.String(), req.String())})
			}
			if !hasLim {
				continue
			}
			vs = append(vs, checkQuantity(f, name, lim, name == mem, unit, o)...)
		}
		if q1, ok1 := c.Resources.Limits[gpu]; ok1 && !q1.IsZero() {
			if q2, ok2 := c.Resources.Limits[mem]; ok2 && !q2.IsZero() {
				vs = append(vs, Violation{path + ".resources.limits", fmt.Sprintf(
					"asks for both %s and %s; ask for whole GPUs (%s) or a memory share on one GPU (%s), not both",
					gpu, mem, gpu, mem)})
			}
		}
	}
	for i, c := range pod.Spec.InitContainers {
		check(fmt.Sprintf("spec.initContainers[%d]", i), c)
	}
	for i, c := range pod.Spec.Containers {
		check(fmt.Sprintf("spec.containers[%d]", i), c)
	}
	if len(vs) > 0 {
		// The pod-level checks below would only restate a bad container
		// value (a "20Gi" share is not also "21474836480 GiB on one GPU").
		if _, err := GangOf(pod, o.Names); err != nil {
			vs = append(vs, Violation{"metadata", err.Error()})
		}
		return vs
	}
	g, m := amount(pod, gpu), amount(pod, mem)
	if g > 0 && m > 0 {
		vs = append(vs, Violation{"spec", fmt.Sprintf(
			"the pod asks for %d whole GPUs and %d units of GPU memory; ask for whole GPUs (%s) or a memory share (%s), not both",
			g, m, gpu, mem)})
	}
	if o.MaxGPUs > 0 && g > int64(o.MaxGPUs) {
		vs = append(vs, Violation{"spec", fmt.Sprintf("the pod asks for %d GPUs but the largest node has %d; split the job into a gang of smaller pods", g, o.MaxGPUs)})
	}
	if o.MaxGPUMemoryMiB > 0 && m > 0 && contract.MiB(m)*unit > o.MaxGPUMemoryMiB {
		vs = append(vs, Violation{"spec", fmt.Sprintf(
			"the pod asks for %s of GPU memory on one GPU but the largest GPU has %s; ask for at most %d units, or for whole GPUs",
			contract.MiB(m)*unit, o.MaxGPUMemoryMiB, int64(o.MaxGPUMemoryMiB/unit))})
	}
	if _, err := GangOf(pod, o.Names); err != nil {
		vs = append(vs, Violation{"metadata", err.Error()})
	}
	return vs
}

func checkQuantity(field string, name corev1.ResourceName, q resource.Quantity, isMem bool, unit contract.MiB, o Options) []Violation {
	if q.Sign() < 0 {
		return []Violation{{field, fmt.Sprintf("%q is negative; write a positive whole number", q.String())}}
	}
	// Value and MilliValue wrap around beyond int64 ("1E19" reads as 0), so
	// anything that is not an int64 is either far too large or a fraction.
	v, ok := q.AsInt64()
	if !ok {
		// Not q.Cmp: it expands "9E23372036854775807" digit by digit.
		if q.AsApproximateFloat64() >= math.MaxInt64 {
			if isMem {
				return []Violation{{field, fmt.Sprintf("%q is far larger than any GPU; %s counts units of %s", q.String(), name, unit)}}
			}
			return []Violation{{field, fmt.Sprintf("%q is more GPUs than any node has; %s counts whole GPUs (at most %d per pod)", q.String(), name, contract.MaxGPUsPerNode)}}
		}
		return []Violation{{field, fmt.Sprintf("%q is not a whole number; %s counts whole units", q.String(), name)}}
	}
	if isMem {
		// A value of a million or more is bytes, not units: no GPU has a
		// million memory units ("20Gi", and "20G" too). Suggest the units
		// that hold it, rounded up.
		if v >= 1<<20 {
			ub := int64(unit) << 20
			units := v/ub + min(v%ub, 1)
			return []Violation{{field, fmt.Sprintf(
				"%q looks like bytes; %s counts units of %s, so write %q", q.String(), name, unit, fmt.Sprint(units))}}
		}
		if o.MaxGPUMemoryMiB > 0 && contract.MiB(v)*unit > o.MaxGPUMemoryMiB*64 {
			return []Violation{{field, fmt.Sprintf("%q is far larger than any GPU; %s counts units of %s", q.String(), name, unit)}}
		}
	} else if v > contract.MaxGPUsPerNode {
		return []Violation{{field, fmt.Sprintf("%q is more GPUs than any node has; %s counts whole GPUs (at most %d per pod)", q.String(), name, contract.MaxGPUsPerNode)}}
	}
	return nil
}

// GangRef names a pod's gang.
type GangRef struct {
	// Key is "namespace/name".
	Key  string
	Name string
	// Size is the member count from the gang-size annotation; 0 when the
	// pod uses the pod-group label and the size comes from a PodGroup.
	Size int
	// PodGroup is set when the gang comes from scheduler-plugins' label.
	PodGroup bool
}

// WorkloadKey is the key of the workload a pod belongs to, the one key the
// queue, the reservations and the holds use: its gang's key (ref, from
// GangOf), else "namespace/name" for a pod alone.
func WorkloadKey(pod *corev1.Pod, ref *GangRef) string {
	if ref != nil {
		return ref.Key
	}
	return pod.Namespace + "/" + pod.Name
}

// GangKey returns the pod's gang key ("namespace/name", from the gang label,
// else scheduler-plugins' pod-group label) or "" when it belongs to none.
// It reads the labels only, never the size annotation, so a member whose
// size is broken or missing still counts as one: the extender's gang index,
// remediation and the invariant checker find every member of a gang, and
// GangOf reports the size problem on its own. When GangOf returns a gang,
// its Key is GangKey's.
func GangKey(pod *corev1.Pod, names contract.Names) string {
	if n := pod.Labels[names.GangLabel]; n != "" {
		return pod.Namespace + "/" + n
	}
	if n := pod.Labels[names.PodGroupLabel]; n != "" {
		return pod.Namespace + "/" + n
	}
	return ""
}

// GangOf reads the pod's gang, if any. A gang label without a size
// annotation is an error unless the pod-group label is used.
func GangOf(pod *corev1.Pod, names contract.Names) (*GangRef, error) {
	if name, ok := pod.Labels[names.GangLabel]; ok {
		if name == "" {
			return nil, fmt.Errorf("label %s is empty; name the gang, e.g. %s: train-7", names.GangLabel, names.GangLabel)
		}
		size, err := contract.ParseGangSize("annotation "+names.GangSizeAnnotation, pod.Annotations[names.GangSizeAnnotation])
		if err != nil {
			return nil, err
		}
		return &GangRef{Key: GangKey(pod, names), Name: name, Size: size}, nil
	}
	if name, ok := pod.Labels[names.PodGroupLabel]; ok && name != "" {
		ref := &GangRef{Key: GangKey(pod, names), Name: name, PodGroup: true}
		if s, ok := pod.Annotations[names.GangSizeAnnotation]; ok {
			size, err := contract.ParseGangSize("annotation "+names.GangSizeAnnotation, s)
			if err != nil {
				return nil, err
			}
			ref.Size = size
		}
		return ref, nil
	}
	return nil, nil
}

// Team returns the team a pod is charged to: the pod's team label when
// overrides are allowed and it is set, else the namespace's label.
func Team(pod *corev1.Pod, nsLabels map[string]string, names contract.Names, allowOverride bool) string {
	if allowOverride {
		if t := pod.Labels[names.TeamLabel]; t != "" {
			return t
		}
	}
	return nsLabels[names.TeamLabel]
}

// Assignment reads and validates the pod's assignment annotation. It
// returns nil, nil when the pod has none.
func Assignment(pod *corev1.Pod, names contract.Names) (*contract.Assignment, error) {
	s, ok := pod.Annotations[names.AssignmentAnnotation]
	if !ok {
		return nil, nil
	}
	a, err := contract.ParseAssignment([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s annotation %s: %w", pod.Namespace, pod.Name, names.AssignmentAnnotation, err)
	}
	return &a, nil
}

// Terminal reports whether the pod will never run again (its GPUs are free).
func Terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
