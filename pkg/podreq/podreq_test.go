package podreq

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

var (
	names   = contract.Default
	opts    = Options{Names: names}
	gpuName = corev1.ResourceName(names.GPU)
	memName = corev1.ResourceName(names.GPUMemory)
)

// ctr is a container whose limits and requests are both set from kv pairs
// (resource name, quantity).
func ctr(kv ...string) corev1.Container {
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}}
	for i := 0; i < len(kv); i += 2 {
		q := resource.MustParse(kv[i+1])
		c.Resources.Limits[corev1.ResourceName(kv[i])] = q
		c.Resources.Requests[corev1.ResourceName(kv[i])] = q
	}
	return c
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func pod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{Containers: containers}}
}

func TestFromPod(t *testing.T) {
	prio := int32(7)
	tests := []struct {
		name string
		give *corev1.Pod
		want placement.Request
	}{
		{"whole GPUs", pod(ctr(names.GPU, "2"), ctr(names.GPU, "1")), placement.Request{GPUs: 3}},
		{"memory share", pod(ctr(names.GPUMemory, "20")), placement.Request{MemoryUnits: 20}},
		{"no GPU", pod(ctr("cpu", "1")), placement.Request{CPUMilli: 1000}},
		{"init container max, not sum", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "2"))
			p.Spec.InitContainers = []corev1.Container{ctr(names.GPU, "4"), ctr(names.GPU, "3")}
			return p
		}(), placement.Request{GPUs: 4}},
		{"app containers larger than init", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "2"), ctr(names.GPU, "3"))
			p.Spec.InitContainers = []corev1.Container{ctr(names.GPU, "4")}
			return p
		}(), placement.Request{GPUs: 5}},
		{"sidecars add to app containers", func() *corev1.Pod {
			p := pod(ctr(names.GPUMemory, "10"))
			p.Spec.InitContainers = []corev1.Container{sidecar(ctr(names.GPUMemory, "4")), ctr(names.GPUMemory, "12")}
			return p
		}(), placement.Request{MemoryUnits: 16}},
		{"init runs beside earlier sidecars", func() *corev1.Pod {
			p := pod(ctr("cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{sidecar(ctr(names.GPU, "1")), ctr(names.GPU, "2")}
			return p
		}(), placement.Request{GPUs: 3, CPUMilli: 1000}},
		{"init before a sidecar runs alone", func() *corev1.Pod {
			p := pod(ctr("cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{ctr(names.GPU, "2"), sidecar(ctr(names.GPU, "1"))}
			return p
		}(), placement.Request{GPUs: 2, CPUMilli: 1000}},
		{"priority and not preemptible", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "1"))
			p.Spec.Priority = &prio
			p.Labels = map[string]string{names.PreemptibleLabel: "FALSE"}
			return p
		}(), placement.Request{GPUs: 1, Priority: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromPod(tc.give, opts)
			if err != nil {
				t.Fatalf("FromPod() error = %v", err)
			}
			tc.want.UID, tc.want.Pod = "uid-1", "ns/p"
			tc.want.Preemptible = tc.give.Labels[names.PreemptibleLabel] == ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FromPod() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		give      *corev1.Pod
		giveOpts  Options
		wantField string
		wantMsg   []string
	}{
		{"both resources in one container", pod(ctr(names.GPU, "1", names.GPUMemory, "10")), opts,
			"spec.containers[0].resources.limits", []string{"asks for both example.com/gpu and example.com/gpu-memory", "not both"}},
		{"both resources across containers", pod(ctr(names.GPU, "1"), ctr(names.GPUMemory, "10")), opts,
			"spec", []string{"asks for 1 whole GPUs and 10 units of GPU memory", "not both"}},
		{"limits differ from requests", func() *corev1.Pod {
			c := ctr(names.GPU, "2")
			c.Resources.Requests[gpuName] = resource.MustParse("1")
			return pod(c)
		}(), opts, "spec.containers[0].resources.limits[example.com/gpu]", []string{`"2" differs from the request "1"`, "set both to the same value"}},
		{"request without limit", func() *corev1.Pod {
			c := ctr()
			c.Resources.Requests[memName] = resource.MustParse("8")
			return pod(c)
		}(), opts, "spec.containers[0].resources.limits[example.com/gpu-memory]", []string{"is missing", `set limits example.com/gpu-memory: "8"`}},
		{"bytes: 20Gi", pod(ctr(names.GPUMemory, "20Gi")), opts,
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{`"20Gi" looks like bytes`, "counts units of 1 GiB", `so write "20"`}},
		{"bytes: 20G", pod(ctr(names.GPUMemory, "20G")), opts,
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{`"20G" looks like bytes`, `so write "19"`}},
		{"bytes: 512Mi in 512 MiB units", pod(ctr(names.GPUMemory, "1536Mi")), Options{Names: names, MemoryUnitMiB: 512},
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{"counts units of 512 MiB", `so write "3"`}},
		{"bytes in an init container", func() *corev1.Pod {
			p := pod(ctr())
			p.Spec.InitContainers = []corev1.Container{ctr(names.GPUMemory, "8Gi")}
			return p
		}(), opts, "spec.initContainers[0].resources.limits[example.com/gpu-memory]", []string{`write "8"`}},
		{"fraction", pod(ctr(names.GPU, "0.5")), opts,
			"spec.containers[0].resources.limits[example.com/gpu]", []string{`"500m" is not a whole number`}},
		{"negative", pod(ctr(names.GPUMemory, "-4")), opts,
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{`"-4" is negative`, "write a positive whole number"}},
		{"too many GPUs in a container", pod(ctr(names.GPU, "65")), opts,
			"spec.containers[0].resources.limits[example.com/gpu]", []string{"more GPUs than any node has", "at most 64"}},
		{"more GPUs than the largest node", pod(ctr(names.GPU, "9")), Options{Names: names, MaxGPUs: 8},
			"spec", []string{"asks for 9 GPUs but the largest node has 8", "gang of smaller pods"}},
		{"share larger than the largest GPU", pod(ctr(names.GPUMemory, "100")), Options{Names: names, MaxGPUMemoryMiB: 80 * 1024},
			"spec", []string{"asks for 100 GiB of GPU memory on one GPU but the largest GPU has 80 GiB", "at most 80 units"}},
		{"far larger than any GPU", pod(ctr(names.GPUMemory, "900000")), Options{Names: names, MaxGPUMemoryMiB: 1024},
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{"far larger than any GPU"}},
		{"memory beyond int64", pod(ctr(names.GPUMemory, "1E19")), opts,
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{`"10e18" is far larger than any GPU`}},
		{"GPUs beyond int64", pod(ctr(names.GPU, "2022220000000000000000")), opts,
			"spec.containers[0].resources.limits[example.com/gpu]", []string{"is more GPUs than any node has"}},
		{"huge exponent", pod(ctr(names.GPUMemory, "9E23372036854775807")), opts,
			"spec.containers[0].resources.limits[example.com/gpu-memory]", []string{"is far larger than any GPU"}},
		{"gang label without size", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.GangLabel: "train-7"}
			return p
		}(), opts, "metadata", []string{"annotation example.com/gang-size: is missing", `e.g. "16"`}},
		{"gang size zero", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.GangLabel: "train-7"}
			p.Annotations = map[string]string{names.GangSizeAnnotation: "0"}
			return p
		}(), opts, "metadata", []string{`"0" is out of range`, "1..10000"}},
		{"empty gang label", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.GangLabel: ""}
			return p
		}(), opts, "metadata", []string{"label example.com/gang is empty", "example.com/gang: train-7"}},
		{"pod group with a bad size", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.PodGroupLabel: "pg"}
			p.Annotations = map[string]string{names.GangSizeAnnotation: "many"}
			return p
		}(), opts, "metadata", []string{`"many" is not a whole number`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := Validate(tc.give, tc.giveOpts)
			var hit *Violation
			for i := range vs {
				if vs[i].Field == tc.wantField {
					hit = &vs[i]
					break
				}
			}
			if hit == nil {
				t.Fatalf("Validate() = %v, want a violation at %s", vs, tc.wantField)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(hit.Message, m) {
					t.Errorf("message %q does not contain %q", hit.Message, m)
				}
			}
			if !strings.HasPrefix(hit.Error(), tc.wantField+": ") {
				t.Errorf("Error() = %q", hit.Error())
			}
			if _, err := FromPod(tc.give, tc.giveOpts); err == nil {
				t.Errorf("FromPod() accepted a pod with violations")
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		give *corev1.Pod
	}{
		{"whole GPUs", pod(ctr(names.GPU, "8"))},
		{"share", pod(ctr(names.GPUMemory, "20"))},
		{"limits only", func() *corev1.Pod {
			c := ctr()
			c.Resources.Limits[gpuName] = resource.MustParse("1")
			return pod(c)
		}()},
		{"zero GPUs next to a share", pod(ctr(names.GPU, "0", names.GPUMemory, "10"))},
		{"gang with size", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.GangLabel: "train-7"}
			p.Annotations = map[string]string{names.GangSizeAnnotation: "16"}
			return p
		}()},
		{"pod group without size", func() *corev1.Pod {
			p := pod(ctr(names.GPU, "8"))
			p.Labels = map[string]string{names.PodGroupLabel: "pg"}
			return p
		}()},
		{"no GPU", pod(ctr("cpu", "2"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if vs := Validate(tc.give, Options{Names: names, MaxGPUs: 8, MaxGPUMemoryMiB: 80 * 1024}); len(vs) > 0 {
				t.Errorf("Validate() = %v", vs)
			}
		})
	}
}

func TestGangOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		annots map[string]string
		want   *GangRef
	}{
		{"none", nil, nil, nil},
		{"gang label", map[string]string{names.GangLabel: "train-7"}, map[string]string{names.GangSizeAnnotation: "16"},
			&GangRef{Key: "ns/train-7", Name: "train-7", Size: 16}},
		{"pod group", map[string]string{contract.PodGroupLabel: "pg"}, nil, &GangRef{Key: "ns/pg", Name: "pg", PodGroup: true}},
		{"pod group with size", map[string]string{contract.PodGroupLabel: "pg"}, map[string]string{names.GangSizeAnnotation: "4"},
			&GangRef{Key: "ns/pg", Name: "pg", Size: 4, PodGroup: true}},
		{"gang label wins", map[string]string{names.GangLabel: "g", contract.PodGroupLabel: "pg"}, map[string]string{names.GangSizeAnnotation: "2"},
			&GangRef{Key: "ns/g", Name: "g", Size: 2}},
		{"empty pod group label", map[string]string{contract.PodGroupLabel: ""}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod()
			p.Labels, p.Annotations = tc.labels, tc.annots
			got, err := GangOf(p, names)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GangOf() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestWantsTeamTerminal(t *testing.T) {
	if Wants(pod(ctr("cpu", "1")), names) || !Wants(pod(ctr(names.GPUMemory, "1")), names) {
		t.Errorf("Wants() is wrong")
	}
	p := pod(ctr("cpu", "1"))
	p.Spec.InitContainers = []corev1.Container{ctr(names.GPU, "1")}
	if !Wants(p, names) {
		t.Errorf("Wants() misses init containers")
	}
	p.Labels = map[string]string{names.TeamLabel: "pod-team"}
	ns := map[string]string{names.TeamLabel: "ns-team"}
	if Team(p, ns, names, false) != "ns-team" || Team(p, ns, names, true) != "pod-team" || Team(pod(), ns, names, true) != "ns-team" {
		t.Errorf("Team() is wrong")
	}
	for phase, want := range map[corev1.PodPhase]bool{corev1.PodSucceeded: true, corev1.PodFailed: true, corev1.PodRunning: false, corev1.PodPending: false} {
		p.Status.Phase = phase
		if Terminal(p) != want {
			t.Errorf("Terminal(%s) = %v", phase, !want)
		}
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	prio := int32(3)
	a := ledger.Allocation{PodUID: "uid-1", Pod: "ns/p", Node: "n1", Whole: true, Gang: "ns/g", GangSize: 2, Priority: 3,
		Preemptible: true, State: ledger.Committed,
		GPUs: []ledger.Share{{Index: 0, UUID: "GPU-0", MemoryMiB: 81920}, {Index: 1, UUID: "GPU-1", MemoryMiB: 81920}}}
	doc := ToAssignment(a)
	b, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := pod(ctr(names.GPU, "2"))
	p.Spec.Priority = &prio
	p.Labels = map[string]string{names.GangLabel: "g"}
	p.Annotations = map[string]string{names.AssignmentAnnotation: string(b), names.GangSizeAnnotation: "2"}
	got, err := Assignment(p, names)
	if err != nil {
		t.Fatal(err)
	}
	back := ToAllocation(p, *got, names)
	if !reflect.DeepEqual(back, a) {
		t.Errorf("ToAllocation(ToAssignment()) = %+v\nwant %+v", back, a)
	}
	if none, err := Assignment(pod(), names); none != nil || err != nil {
		t.Errorf("Assignment(no annotation) = %v, %v", none, err)
	}
	p.Annotations[names.AssignmentAnnotation] = `{"version":"v1"}`
	if _, err := Assignment(p, names); err == nil || !strings.Contains(err.Error(), "pod ns/p annotation example.com/gpu-assignment: assignment.node") {
		t.Errorf("Assignment(bad) error = %v", err)
	}
}

// A bad container value is reported once, not restated by the pod-level
// size checks.
func TestValidateReportsBytesOnce(t *testing.T) {
	o := Options{Names: contract.Default, MaxGPUMemoryMiB: 80 * 1024}
	vs := Validate(pod(ctr("example.com/gpu-memory", "20Gi")), o)
	if len(vs) != 1 {
		t.Fatalf("got %d violations, want 1: %v", len(vs), vs)
	}
	if !strings.Contains(vs[0].Message, `write "20"`) {
		t.Fatalf("message %q does not say what to write", vs[0].Message)
	}
}

// NodeResources counts CPU and host memory the way kube-scheduler does:
// requests only, sidecars beside the app containers, the largest init step,
// pod-level requests over the containers', overhead on top; memory rounded
// up to whole MiB.
func TestNodeResources(t *testing.T) {
	withOverhead := pod(ctr("cpu", "1", "memory", "1Gi"))
	withOverhead.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"),
		corev1.ResourceMemory: resource.MustParse("64Mi")}
	podLevel := pod(ctr("cpu", "1", "memory", "1Gi"), ctr("cpu", "2"))
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}
	initHeavy := pod(ctr("cpu", "1"))
	initHeavy.Spec.InitContainers = []corev1.Container{sidecar(ctr("cpu", "500m")), ctr("cpu", "4")}
	limitsOnly := pod(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}})
	tests := []struct {
		name    string
		pod     *corev1.Pod
		cpu     int64
		memory  contract.MiB
		comment string
	}{
		{"none", pod(ctr(names.GPU, "1")), 0, 0, "a GPU pod without CPU requests takes none"},
		{"two containers", pod(ctr("cpu", "1500m", "memory", "1Gi"), ctr("cpu", "500m", "memory", "512Mi")), 2000, 1536, ""},
		{"memory rounded up", pod(ctr("memory", "1000001")), 0, 1, "1,000,001 bytes is under 1 MiB: still 1"},
		{"overhead", withOverhead, 1250, 1088, "RuntimeClass overhead adds"},
		{"pod-level", podLevel, 8000, 1024, "pod-level CPU replaces the containers' sum; memory stays theirs"},
		{"init step", initHeavy, 4500, 0, "sidecar 0.5 + init 4 beats app 1 + sidecar 0.5"},
		{"limits only", limitsOnly, 0, 0, "the API server copies limits into requests; the spec as given has none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cpu, mem := NodeResources(tc.pod)
			if cpu != tc.cpu || mem != tc.memory {
				t.Errorf("NodeResources = %dm, %v; want %dm, %v (%s)", cpu, mem, tc.cpu, tc.memory, tc.comment)
			}
			// The fast path agrees with kube-scheduler's function.
			reqs := resourcehelper.PodRequests(tc.pod, resourcehelper.PodResourcesOptions{})
			if want := reqs.Cpu().MilliValue(); cpu != want {
				t.Errorf("NodeResources CPU %dm, PodRequests %dm", cpu, want)
			}
			if want := reqs.Memory().Value(); int64(mem)<<20 < want || int64(mem-1)<<20 >= want {
				t.Errorf("NodeResources memory %v does not round PodRequests' %d bytes up to MiB", mem, want)
			}
			r, err := FromPod(tc.pod, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.CPUMilli != tc.cpu || r.HostMemoryMiB != tc.memory {
				t.Errorf("FromPod CPU/memory = %dm, %v; want %dm, %v", r.CPUMilli, r.HostMemoryMiB, tc.cpu, tc.memory)
			}
		})
	}
}
