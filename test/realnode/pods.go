package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/rota-sched/rota/pkg/contract"
)

// Request is what one container asks for: whole GPUs or gpu-memory units
// (1 GiB each), not both.
type Request struct {
	GPUs        int
	MemoryUnits int
}

// Pod returns a pod for the real node (nodeSelector on its host name):
// hostNetwork, the workload image, one app container "app" asking for app,
// and, when init is non-zero, an init container "init" asking for init that
// prints its environment and exits.
func (e *Env) Pod(namespace, name string, app, init Request) *corev1.Pod {
	grace := int64(1)
	automount := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: e.NodeName},
			HostNetwork:                   true,
			DNSPolicy:                     corev1.DNSDefault,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &automount,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers:                    []corev1.Container{e.container("app", app, nil)},
		},
	}
	if init != (Request{}) {
		p.Spec.InitContainers = []corev1.Container{e.container("init", init, []string{"/" + imageBinary, "env-exit"})}
	}
	return p
}

func (e *Env) container(name string, r Request, command []string) corev1.Container {
	limits := corev1.ResourceList{}
	if r.GPUs > 0 {
		limits[corev1.ResourceName(e.Names.GPU)] = *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)
	}
	if r.MemoryUnits > 0 {
		limits[corev1.ResourceName(e.Names.GPUMemory)] = *resource.NewQuantity(int64(r.MemoryUnits), resource.DecimalSI)
	}
	return corev1.Container{
		Name: name, Image: WorkloadImage, Command: command, ImagePullPolicy: corev1.PullNever,
		Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits},
	}
}

// WaitRunning waits until the pod is Running with every app container
// started, and returns it. It fails early when the pod fails (e.g. the
// kubelet rejected it at admission) and says why.
func (e *Env) WaitRunning(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := waitUntil(ctx, time.Minute, "pod "+namespace+"/"+name+" Running", nil, func() (bool, string) {
		p, err := e.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed, describePod(p)
	})
	if err != nil {
		return pod, err
	}
	if pod.Status.Phase == corev1.PodFailed {
		return pod, fmt.Errorf("pod %s/%s failed: %s", namespace, name, describePod(pod))
	}
	return pod, nil
}

func describePod(p *corev1.Pod) string {
	s := fmt.Sprintf("phase=%s node=%q reason=%q message=%q", p.Status.Phase, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(" %s: %s", c.Type, c.Message)
		}
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf(" %s waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			s += fmt.Sprintf(" %s terminated: %s %s", cs.Name, t.Reason, t.Message)
		}
	}
	return s
}

// ContainerEnv reads a container's environment back from its log (through
// the API server and the kubelet's logs endpoint), waiting for the line
// the workload prints after it.
func (e *Env) ContainerEnv(ctx context.Context, namespace, pod, container string) (map[string]string, error) {
	var env map[string]string
	err := waitUntil(ctx, 30*time.Second, "the environment of "+namespace+"/"+pod+"/"+container, nil, func() (bool, string) {
		raw, err := e.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Do(ctx).Raw()
		if err != nil {
			return false, err.Error()
		}
		m, complete := parseEnv(string(raw))
		env = m
		return complete, fmt.Sprintf("%d lines, no %q yet", len(m), ReadyLine)
	})
	return env, err
}

// parseEnv parses VAR=value lines up to ReadyLine; complete is whether
// ReadyLine was seen.
func parseEnv(log string) (env map[string]string, complete bool) {
	env = map[string]string{}
	s := bufio.NewScanner(strings.NewReader(log))
	for s.Scan() {
		line := s.Text()
		if line == ReadyLine {
			return env, true
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env, false
}

// Assignment decodes the pod's assignment annotation.
func (e *Env) Assignment(p *corev1.Pod) (contract.Assignment, error) {
	v, ok := p.Annotations[e.Names.AssignmentAnnotation]
	if !ok {
		return contract.Assignment{}, fmt.Errorf("pod %s/%s has no %s annotation", p.Namespace, p.Name, e.Names.AssignmentAnnotation)
	}
	return contract.ParseAssignment([]byte(v))
}

// NodePods returns the pods bound to the real node that are not finished.
func (e *Env) NodePods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := e.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", e.NodeName).String(),
	})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// DeletePods deletes the pods (1s grace) and waits until they are gone,
// so that the kubelet has released their devices.
func (e *Env) DeletePods(ctx context.Context, namespace string, names ...string) error {
	for _, n := range names {
		err := e.Client.CoreV1().Pods(namespace).Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return waitUntil(ctx, time.Minute, fmt.Sprintf("pods %v deleted", names), nil, func() (bool, string) {
		for _, n := range names {
			_, err := e.Client.CoreV1().Pods(namespace).Get(ctx, n, metav1.GetOptions{})
			if err == nil {
				return false, n + " still exists"
			}
			if !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

// CheckPodResources compares, for every Running pod on the real node, the
// devices the kubelet's PodResources API says its app containers hold with
// the pod's assignment annotation:
//   - whole GPUs: the <domain>/gpu device IDs of the app containers are
//     exactly the assigned UUIDs, and no gpu-memory device is held;
//   - memory share: every <domain>/gpu-memory device is a unit of the one
//     assigned GPU ("<uuid>::<n>"), their count is the pod's request (sum of
//     its app containers), within the assigned memory;
//   - no device is held by two pods.
//
// only, when given, limits the comparison to those pods ("namespace/name");
// the double-holding check always covers every pod. It returns one error
// per disagreement, nil when they all agree.
func (e *Env) CheckPodResources(ctx context.Context, only ...string) error {
	pods, err := e.NodePods(ctx)
	if err != nil {
		return err
	}
	resp, err := e.PodResources(ctx)
	if err != nil {
		return err
	}
	type key struct{ ns, name string }
	held := map[key]map[string][]string{} // pod -> resource -> device IDs (app containers)
	owner := map[string]string{}          // device ID -> pod
	var errs []error
	for _, pr := range resp.GetPodResources() {
		k := key{pr.GetNamespace(), pr.GetName()}
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != e.Names.GPU && d.GetResourceName() != e.Names.GPUMemory {
					continue
				}
				if held[k] == nil {
					held[k] = map[string][]string{}
				}
				for _, id := range d.GetDeviceIds() {
					held[k][d.GetResourceName()] = append(held[k][d.GetResourceName()], id)
					p := k.ns + "/" + k.name
					if o, ok := owner[id]; ok && o != p {
						errs = append(errs, fmt.Errorf("device %s held by %s and %s", id, o, p))
					}
					owner[id] = p
				}
			}
		}
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		name := p.Namespace + "/" + p.Name
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		want := requestOf(&p, e.Names)
		if want == (Request{}) {
			continue
		}
		a, err := e.Assignment(&p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		got := held[key{p.Namespace, p.Name}]
		if a.Whole {
			ids := slices.Sorted(slices.Values(got[e.Names.GPU]))
			wantIDs := slices.Sorted(slices.Values(a.UUIDs()))
			if !slices.Equal(ids, wantIDs) || len(got[e.Names.GPUMemory]) > 0 {
				errs = append(errs, fmt.Errorf("%s: PodResources gpu %v gpu-memory %d units, assignment %v",
					name, ids, len(got[e.Names.GPUMemory]), wantIDs))
			}
			continue
		}
		units := got[e.Names.GPUMemory]
		uuid := a.GPUs[0].UUID
		perGPU := map[string]int{}
		for _, id := range units {
			g, _, _ := strings.Cut(id, "::")
			perGPU[g]++
		}
		for g, n := range perGPU {
			if g != uuid {
				errs = append(errs, fmt.Errorf("%s: holds %d memory units of GPU %s, its assignment is GPU %s", name, n, g, uuid))
			}
		}
		if len(units) != want.MemoryUnits || len(got[e.Names.GPU]) > 0 {
			errs = append(errs, fmt.Errorf("%s: PodResources %d gpu-memory units and %d GPUs, request %d units",
				name, len(units), len(got[e.Names.GPU]), want.MemoryUnits))
		}
		if contract.MiB(len(units))*contract.DefaultMemoryUnitMiB > a.GPUs[0].MemoryMiB {
			errs = append(errs, fmt.Errorf("%s: %d units exceed the assigned %s", name, len(units), a.GPUs[0].MemoryMiB))
		}
	}
	return errors.Join(errs...)
}

// requestOf sums the pod's app containers' Rota requests.
func requestOf(p *corev1.Pod, names contract.Names) Request {
	var r Request
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceName(names.GPU)]; ok {
			r.GPUs += int(q.Value())
		}
		if q, ok := c.Resources.Limits[corev1.ResourceName(names.GPUMemory)]; ok {
			r.MemoryUnits += int(q.Value())
		}
	}
	return r
}
