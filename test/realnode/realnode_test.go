//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// TestRealNode runs the real-node scenarios on one Env (starting one takes
// a few seconds; the scenarios run in order and each leaves the node empty).
// The node: 8 fake GPUs of 80 GiB in NVLink islands 0-3 and 4-7, and one
// simulated GPU node beside it, which the pods here never select.
func TestRealNode(t *testing.T) {
	e := StartT(t, Options{SimulatedNodes: []string{"sim-gpu-0"}})
	steps := []struct {
		name string
		run  func(context.Context, *testing.T, *Env, string)
	}{
		{"MemorySharesBoundTogether", testMemorySharesBoundTogether},
		{"WholeGPUsOneIsland", testWholeGPUsOneIsland},
		{"InitAndAppContainers", testInitAndAppContainers},
		{"KubeletRestart", testKubeletRestart},
		{"BoundWhileKubeletDown", testBoundWhileKubeletDown},
		{"UnhealthyGPU", testUnhealthyGPU},
		{"PodResourcesAgreeMixed", testPodResourcesAgreeMixed},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			ns := fmt.Sprintf("rn-%d-%s", i, strings.ToLower(s.name))
			if len(ns) > 40 {
				ns = ns[:40]
			}
			if err := e.Namespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			// Every scenario leaves an empty node, also when it fails.
			defer func() {
				deleteAll(ctx, t, e, ns)
				t.Logf("%s took %s", s.name, time.Since(began).Round(time.Millisecond))
			}()
			s.run(ctx, t, e, ns)
			// ... and ends with PodResources agreeing with the assignments
			// of whatever still runs.
			if err := e.CheckPodResources(ctx); err != nil {
				t.Errorf("PodResources disagrees with the assignments:\n%v", err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if n, err := e.PluginMetric(ctx, "rota_device_plugin_assignment_mismatches_total"); err != nil {
		t.Error(err)
	} else if n != 0 {
		t.Errorf("the device plugin counted %v containers holding devices outside their assignment", n)
	}
}

// testMemorySharesBoundTogether: two pods asking for the same memory share
// (48 of 80 GiB, so they need two different GPUs) are created at the same
// instant, bound back to back, and admitted by the kubelet together; the
// device plugin's Allocate cannot tell them apart by the request. Each
// container must see exactly the GPU its own assignment names, 20 times.
func testMemorySharesBoundTogether(ctx context.Context, t *testing.T, e *Env, ns string) {
	const rounds, units = 20, 48
	var prev []string
	wrong := 0
	for round := range rounds {
		names := []string{fmt.Sprintf("share-%02d-a", round), fmt.Sprintf("share-%02d-b", round)}
		createAll(ctx, t, e, ns, names, Request{MemoryUnits: units}, Request{})
		var uuids []string
		var problems []string
		for _, n := range names {
			pod, err := e.WaitRunning(ctx, ns, n)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			a := mustAssignment(t, e, pod)
			env, err := e.ContainerEnv(ctx, ns, n, "app")
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			want := map[string]string{
				"NVIDIA_VISIBLE_DEVICES":           a.GPUs[0].UUID,
				"ROTA_GPU_UUIDS":                   a.GPUs[0].UUID,
				"ROTA_ASSIGNED_POD":                ns + "/" + n,
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": fmt.Sprintf("0=%dM", units*1024),
			}
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if env[k] != want[k] {
					problems = append(problems, fmt.Sprintf("%s sees %s=%s, want %s", n, k, env[k], want[k]))
				}
			}
			uuids = append(uuids, a.GPUs[0].UUID)
		}
		if uuids[0] == uuids[1] {
			problems = append(problems, fmt.Sprintf("both %d GiB shares assigned GPU %s (80 GiB): double booking", units, uuids[0]))
		}
		if err := e.CheckPodResources(ctx, ns+"/"+names[0], ns+"/"+names[1]); err != nil {
			problems = append(problems, "PodResources: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		if len(problems) > 0 {
			wrong++
			t.Errorf("round %d:\n  %s", round, strings.Join(problems, "\n  "))
		}
		// Free the previous round's GPUs (this round's stay until the next
		// one runs, so rounds overlap as real traffic does).
		if prev != nil {
			if err := e.DeletePods(ctx, ns, prev...); err != nil {
				t.Fatal(err)
			}
		}
		prev = names
	}
	if wrong > 0 {
		t.Errorf("%d of %d rounds: a container did not get the GPU its own assignment names", wrong, rounds)
	}
}

// testWholeGPUsOneIsland: two 4-GPU pods created together each get a whole
// NVLink island (the node has two), and their containers see exactly those.
func testWholeGPUsOneIsland(ctx context.Context, t *testing.T, e *Env, ns string) {
	names := []string{"four-a", "four-b"}
	createAll(ctx, t, e, ns, names, Request{GPUs: 4}, Request{})
	islands := map[int]string{}
	for _, n := range names {
		pod, err := e.WaitRunning(ctx, ns, n)
		if err != nil {
			t.Fatal(err)
		}
		a := mustAssignment(t, e, pod)
		env, err := e.ContainerEnv(ctx, ns, n, "app")
		if err != nil {
			t.Fatal(err)
		}
		seen := splitUUIDs(env["NVIDIA_VISIBLE_DEVICES"])
		if !slices.Equal(slices.Sorted(slices.Values(seen)), slices.Sorted(slices.Values(a.UUIDs()))) {
			t.Errorf("%s sees NVIDIA_VISIBLE_DEVICES=%v, assignment %v", n, seen, a.UUIDs())
		}
		island := -1
		for _, u := range seen {
			g := e.gpu(t, u)
			if island == -1 {
				island = g.Island
			} else if g.Island != island {
				t.Errorf("%s: GPU %d (%s) is in island %d, GPU of island %d before it", n, g.Index, u, g.Island, island)
			}
		}
		if o, ok := islands[island]; ok {
			t.Errorf("%s and %s both got island %d", o, n, island)
		}
		islands[island] = n
		t.Logf("%s: island %d, GPUs %v", n, island, seen)
	}
}

// testInitAndAppContainers: an init container and an app container of one
// pod both ask for GPUs. The kubelet allocates the init container's
// devices first and hands them on to the app container; every device either
// sees must be one of the pod's assigned GPUs. Once for whole GPUs (init 1,
// app 2) and once for a memory share (init 8 units, app 16 units).
func testInitAndAppContainers(ctx context.Context, t *testing.T, e *Env, ns string) {
	createAll(ctx, t, e, ns, []string{"init-whole"}, Request{GPUs: 2}, Request{GPUs: 1})
	createAll(ctx, t, e, ns, []string{"init-share"}, Request{MemoryUnits: 16}, Request{MemoryUnits: 8})
	for _, n := range []string{"init-whole", "init-share"} {
		pod, err := e.WaitRunning(ctx, ns, n)
		if err != nil {
			t.Fatal(err)
		}
		a := mustAssignment(t, e, pod)
		initEnv, err := e.ContainerEnv(ctx, ns, n, "init")
		if err != nil {
			t.Fatal(err)
		}
		appEnv, err := e.ContainerEnv(ctx, ns, n, "app")
		if err != nil {
			t.Fatal(err)
		}
		initSees, appSees := splitUUIDs(initEnv["NVIDIA_VISIBLE_DEVICES"]), splitUUIDs(appEnv["NVIDIA_VISIBLE_DEVICES"])
		t.Logf("%s: assignment %v; init sees %v, app sees %v; memory limits init %q app %q", n, a.UUIDs(),
			initSees, appSees, initEnv["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], appEnv["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
		const wantInit = 1 // whole: the init container asks for 1; share: one GPU for every container
		if len(initSees) != wantInit {
			t.Errorf("%s: init container sees %d GPUs %v, want %d", n, len(initSees), initSees, wantInit)
		}
		for _, u := range initSees {
			if !slices.Contains(a.UUIDs(), u) {
				t.Errorf("%s: init container sees %s, not in its assignment %v", n, u, a.UUIDs())
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(appSees)), slices.Sorted(slices.Values(a.UUIDs()))) {
			t.Errorf("%s: app container sees %v, assignment %v", n, appSees, a.UUIDs())
		}
		for c, env := range map[string]map[string]string{"init": initEnv, "app": appEnv} {
			if env["ROTA_ASSIGNED_POD"] != ns+"/"+n {
				t.Errorf("%s/%s: ROTA_ASSIGNED_POD=%q", n, c, env["ROTA_ASSIGNED_POD"])
			}
		}
		if !a.Whole {
			want := map[string]string{"init": "0=8192M", "app": "0=16384M"}
			for c, env := range map[string]map[string]string{"init": initEnv, "app": appEnv} {
				if got := env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; got != want[c] {
					t.Errorf("%s/%s: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want %q", n, c, got, want[c])
				}
			}
		}
	}
}

// testKubeletRestart: with a GPU pod running, the kubelet is restarted.
// The plugin must re-register (both resources), the Node's GPU capacity
// must never read 0 in the API while it happens (polled every 50ms), the
// running pod keeps its container and its GPU, and new pods still get
// exactly their assigned GPUs.
func testKubeletRestart(ctx context.Context, t *testing.T, e *Env, ns string) {
	createAll(ctx, t, e, ns, []string{"before"}, Request{GPUs: 1}, Request{})
	before, err := e.WaitRunning(ctx, ns, "before")
	if err != nil {
		t.Fatal(err)
	}
	beforeA := mustAssignment(t, e, before)
	regs, err := e.PluginMetric(ctx, "rota_device_plugin_registrations_total", `result="ok"`)
	if err != nil {
		t.Fatal(err)
	}

	// Poll the Node while the kubelet restarts.
	type sample struct {
		at                    time.Duration
		capacity, allocatable int64
		memCapacity, memAlloc int64
	}
	var (
		samplesMu sync.Mutex
		samples   []sample
	)
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	began := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := e.Client.CoreV1().Nodes().Get(pollCtx, e.NodeName, metav1.GetOptions{}); err == nil {
				q := func(l corev1.ResourceList, r string) int64 { v := l[corev1.ResourceName(r)]; return v.Value() }
				samplesMu.Lock()
				samples = append(samples, sample{time.Since(began),
					q(n.Status.Capacity, e.Names.GPU), q(n.Status.Allocatable, e.Names.GPU),
					q(n.Status.Capacity, e.Names.GPUMemory), q(n.Status.Allocatable, e.Names.GPUMemory)})
				samplesMu.Unlock()
			}
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	if err := e.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(began)
	if err := e.StartKubelet(ctx); err != nil {
		stopPoll()
		wg.Wait()
		t.Fatal(err)
	}
	restarted := time.Since(began)
	err = waitUntil(ctx, 30*time.Second, "the device plugin to re-register both resources", nil, func() (bool, string) {
		n, err := e.PluginMetric(ctx, "rota_device_plugin_registrations_total", `result="ok"`)
		if err != nil {
			return false, err.Error()
		}
		return n >= regs+2, fmt.Sprintf("%v successful registrations, %v before the restart", n, regs)
	})
	reregistered := time.Since(began)
	if err == nil {
		err = e.WaitNodeGPUs(ctx, e.opts.GPUs.Count)
	}
	time.Sleep(3 * time.Second) // three more status updates
	stopPoll()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet itself publishes 0: on start it restores its device
	// checkpoint with empty device sets "so that the resource capacity will
	// stay zero till the corresponding device plugin re-registers"
	// (pkg/kubelet/cm/devicemanager/manager.go readCheckpoint), and its
	// first node status update comes about 100ms after its registration
	// socket, before any plugin can re-register. So the guarantee is: the
	// zero window closes with the first status update after the plugin
	// re-registers, and never opens again.
	var zeroFrom, zeroTo time.Duration = -1, -1
	for _, s := range samples {
		if s.capacity == 0 || s.memCapacity == 0 || s.allocatable == 0 || s.memAlloc == 0 {
			if zeroFrom < 0 {
				zeroFrom = s.at
			}
			zeroTo = s.at
		}
	}
	t.Logf("kubelet stopped at %s, its socket back at %s, plugin re-registered at %s; %d Node samples, "+
		"GPU capacity or allocatable 0 from %s to %s", stopped.Round(time.Millisecond), restarted.Round(time.Millisecond),
		reregistered.Round(time.Millisecond), len(samples), zeroFrom.Round(time.Millisecond), zeroTo.Round(time.Millisecond))
	if reregistered-restarted > 2*time.Second {
		t.Errorf("the plugin re-registered %s after the kubelet's socket came back, want under 2s", (reregistered - restarted).Round(time.Millisecond))
	}
	if zeroFrom >= 0 && zeroTo > reregistered+1500*time.Millisecond {
		t.Errorf("the Node's GPU capacity read 0 until %s, more than 1.5s (one status update) after the plugin re-registered at %s",
			zeroTo.Round(time.Millisecond), reregistered.Round(time.Millisecond))
	}
	if zeroFrom >= 0 && zeroFrom < stopped {
		t.Errorf("the Node's GPU capacity read 0 at %s, before the kubelet stopped", zeroFrom.Round(time.Millisecond))
	}

	// The running pod kept its container and its GPU.
	after, err := e.Client.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Phase != corev1.PodRunning || len(after.Status.ContainerStatuses) != 1 ||
		after.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID ||
		after.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the running pod changed across the kubelet restart: %s", describePod(after))
	}
	env, err := e.ContainerEnv(ctx, ns, "before", "app")
	if err != nil {
		t.Fatal(err)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != beforeA.GPUs[0].UUID {
		t.Errorf("pod before sees %s, assignment %s", env["NVIDIA_VISIBLE_DEVICES"], beforeA.GPUs[0].UUID)
	}
	if err := e.CheckPodResources(ctx); err != nil {
		t.Errorf("after the restart: %v", err)
	}

	// New pods: one whole GPU, one memory share.
	createAll(ctx, t, e, ns, []string{"after-whole"}, Request{GPUs: 1}, Request{})
	createAll(ctx, t, e, ns, []string{"after-share"}, Request{MemoryUnits: 20}, Request{})
	for _, n := range []string{"after-whole", "after-share"} {
		a := seesAssignment(ctx, t, e, ns, n)
		if a.Whole && slices.Contains(a.UUIDs(), beforeA.GPUs[0].UUID) {
			t.Errorf("%s was assigned %s, which pod before holds", n, beforeA.GPUs[0].UUID)
		}
	}
}

// testBoundWhileKubeletDown: pods bound to the node while its kubelet is
// down (an upgrade, a crash loop; the Node stays Ready for the scheduler
// until the node lifecycle controller notices) reach the restarted kubelet
// in its first batch. The kubelet admits that batch before its pod sources
// count as ready, so its device manager has not yet freed the devices its
// checkpoint still holds for pods deleted since it was last written
// (UpdateAllocatedDevices returns early until then): the assigned GPU's
// devices may not be offered, and the plugin then refuses rather than hand
// another GPU (deviceplugin/README.md, "Pods bound while the kubelet is
// down"). The property checked, 3 rounds of two same-shape memory shares:
// every such pod either runs with exactly its assigned GPU or is rejected
// at admission (Failed, UnexpectedAdmissionError) — never runs with another
// pod's GPU — and a replacement created once the kubelet is up runs with
// its own GPU (what a controller does with the rejected pod).
func testBoundWhileKubeletDown(ctx context.Context, t *testing.T, e *Env, ns string) {
	const rounds, units = 3, 48
	ran, rejected := 0, 0
	for round := range rounds {
		names := []string{fmt.Sprintf("down-%d-a", round), fmt.Sprintf("down-%d-b", round)}
		if err := e.StopKubelet(); err != nil {
			t.Fatal(err)
		}
		createAll(ctx, t, e, ns, names, Request{MemoryUnits: units}, Request{})
		err := waitUntil(ctx, 30*time.Second, "both pods bound", nil, func() (bool, string) {
			for _, n := range names {
				p, err := e.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
				if err != nil || p.Spec.NodeName == "" {
					return false, fmt.Sprint(n, " not bound ", err)
				}
			}
			return true, ""
		})
		if startErr := e.StartKubelet(ctx); startErr != nil {
			t.Fatal(startErr)
		}
		if err != nil {
			t.Fatal(err)
		}
		var running, again []string
		for _, n := range names {
			pod, err := e.WaitRunning(ctx, ns, n)
			if pod == nil || (err != nil && pod.Status.Phase != corev1.PodFailed) {
				t.Fatalf("round %d: %v", round, err)
			}
			if pod.Status.Phase == corev1.PodFailed {
				// Rejected at admission: safe, as long as it is the kubelet's
				// admission that rejected it (no container ever ran).
				if pod.Status.Reason != "UnexpectedAdmissionError" || len(pod.Status.ContainerStatuses) > 0 && pod.Status.ContainerStatuses[0].ContainerID != "" {
					t.Errorf("round %d: %s failed other than by admission: %s", round, n, describePod(pod))
				}
				t.Logf("round %d: %s rejected at admission: %s", round, n, pod.Status.Message)
				rejected++
				again = append(again, n+"-again")
				continue
			}
			running = append(running, n)
			ran++
			checkOwnGPU(ctx, t, e, ns, n, pod, units, fmt.Sprintf("round %d", round))
		}
		// A replacement for each rejected pod, created with the kubelet up.
		if len(again) > 0 {
			createAll(ctx, t, e, ns, again, Request{MemoryUnits: units}, Request{})
			for _, n := range again {
				pod, err := e.WaitRunning(ctx, ns, n)
				if err != nil {
					t.Fatalf("round %d: replacement: %v", round, err)
				}
				checkOwnGPU(ctx, t, e, ns, n, pod, units, fmt.Sprintf("round %d replacement", round))
			}
		}
		var keys []string
		for _, n := range append(running, again...) {
			keys = append(keys, ns+"/"+n)
		}
		if len(keys) > 0 {
			if err := e.CheckPodResources(ctx, keys...); err != nil {
				t.Errorf("round %d: PodResources: %s", round, strings.ReplaceAll(err.Error(), "\n", "; "))
			}
		}
		if err := e.DeletePods(ctx, ns, append(names, again...)...); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitNodeGPUs(ctx, e.opts.GPUs.Count); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d pods bound while the kubelet was down: %d ran with their own GPU, %d rejected at admission (replacements ran with their own GPU)",
		2*rounds, ran, rejected)
}

// checkOwnGPU checks that the running pod's app container sees exactly the
// GPU and memory limit of its own assignment.
// seesAssignment waits for pod ns/n to run and checks that its app
// container sees exactly the GPUs of its assignment; it returns the
// assignment.
func seesAssignment(ctx context.Context, t *testing.T, e *Env, ns, n string) contract.Assignment {
	t.Helper()
	pod, err := e.WaitRunning(ctx, ns, n)
	if err != nil {
		t.Fatal(err)
	}
	a := mustAssignment(t, e, pod)
	env, err := e.ContainerEnv(ctx, ns, n, "app")
	if err != nil {
		t.Fatal(err)
	}
	if got := env["NVIDIA_VISIBLE_DEVICES"]; got != strings.Join(a.UUIDs(), ",") {
		t.Errorf("%s sees %s, assignment %v", n, got, a.UUIDs())
	}
	return a
}

func checkOwnGPU(ctx context.Context, t *testing.T, e *Env, ns, n string, pod *corev1.Pod, units int, what string) {
	t.Helper()
	a := mustAssignment(t, e, pod)
	env, err := e.ContainerEnv(ctx, ns, n, "app")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":           a.GPUs[0].UUID,
		"ROTA_ASSIGNED_POD":                ns + "/" + n,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": fmt.Sprintf("0=%dM", units*1024),
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if env[k] != want[k] {
			t.Errorf("%s: %s sees %s=%s, want %s (its assignment is GPU %d)", what, n, k, env[k], want[k], a.GPUs[0].Index)
		}
	}
}

// testUnhealthyGPU: an XID 79 on one GPU (through the fake backend's
// health file) takes it out of the Node's allocatable and marks it
// Unhealthy in the topology annotation; new pods never get it, and a pod
// that only it could hold stays Pending with a reason. After the fault
// clears, the GPU comes back.
func testUnhealthyGPU(ctx context.Context, t *testing.T, e *Env, ns string) {
	bad := e.Topology.GPUs[4] // island 1
	if err := os.WriteFile(e.HealthFile, []byte(bad.UUID+"=xid:79\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Clear the fault and wait for the GPU to come back (quiet period 5s).
		if err := os.WriteFile(e.HealthFile, nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		deleteAll(ctx, t, e, ns)
		began := time.Now()
		if err := e.WaitNodeGPUs(ctx, e.opts.GPUs.Count); err != nil {
			t.Errorf("GPU %s did not come back: %v", bad.UUID, err)
			return
		}
		t.Logf("GPU %d healthy and allocatable again after %s", bad.Index, time.Since(began).Round(time.Millisecond))
	}()
	began := time.Now()
	if err := e.WaitNodeGPUs(ctx, e.opts.GPUs.Count-1); err != nil {
		t.Fatal(err)
	}
	t.Logf("XID 79 on GPU %d: allocatable %d GPUs after %s", bad.Index, e.opts.GPUs.Count-1, time.Since(began).Round(time.Millisecond))
	node, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := contract.ParseTopology([]byte(node.Annotations[e.Names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := topo.GPUByIndex(bad.Index); !ok || g.Health != contract.Unhealthy {
		t.Errorf("topology annotation shows GPU %d as %+v, want Unhealthy", bad.Index, g)
	}
	if devs, err := e.AllocatableDevices(ctx); err != nil {
		t.Error(err)
	} else if slices.Contains(devs[e.Names.GPU], bad.UUID) {
		t.Errorf("PodResources still lists %s as allocatable", bad.UUID)
	}

	// Two 4-GPU pods: one gets island 0; island 1 has 3 healthy GPUs, so
	// the other must wait. Then three 1-GPU pods fill GPUs 5-7, and a memory
	// share finds no healthy GPU with room.
	createAll(ctx, t, e, ns, []string{"four-a", "four-b"}, Request{GPUs: 4}, Request{})
	running, pending := waitOneRunning(ctx, t, e, ns, "four-a", "four-b")
	createAll(ctx, t, e, ns, []string{"one-a", "one-b", "one-c"}, Request{GPUs: 1}, Request{})
	for _, n := range []string{"one-a", "one-b", "one-c"} {
		if _, err := e.WaitRunning(ctx, ns, n); err != nil {
			t.Fatal(err)
		}
	}
	createAll(ctx, t, e, ns, []string{"share"}, Request{MemoryUnits: 10}, Request{})
	for _, n := range []string{pending, "share"} {
		msg := waitUnschedulable(ctx, t, e, ns, n)
		t.Logf("%s pending: %s", n, msg)
	}
	for _, n := range []string{running, "one-a", "one-b", "one-c"} {
		pod, err := e.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := mustAssignment(t, e, pod)
		env, err := e.ContainerEnv(ctx, ns, n, "app")
		if err != nil {
			t.Fatal(err)
		}
		seen := splitUUIDs(env["NVIDIA_VISIBLE_DEVICES"])
		if slices.Contains(seen, bad.UUID) || slices.Contains(a.UUIDs(), bad.UUID) {
			t.Errorf("%s got the unhealthy GPU %s (sees %v, assignment %v)", n, bad.UUID, seen, a.UUIDs())
		}
		if strings.Join(seen, ",") != strings.Join(a.UUIDs(), ",") {
			t.Errorf("%s sees %v, assignment %v", n, seen, a.UUIDs())
		}
	}
}

// testPodResourcesAgreeMixed runs a mix at once (two shares that fit on
// one GPU, a 2-GPU pod, a 1-GPU pod with a GPU init container, a 3-GPU
// pod) and checks PodResources against every assignment.
func testPodResourcesAgreeMixed(ctx context.Context, t *testing.T, e *Env, ns string) {
	createAll(ctx, t, e, ns, []string{"share-a", "share-b"}, Request{MemoryUnits: 30}, Request{})
	createAll(ctx, t, e, ns, []string{"two"}, Request{GPUs: 2}, Request{})
	createAll(ctx, t, e, ns, []string{"one-init"}, Request{GPUs: 1}, Request{GPUs: 1})
	createAll(ctx, t, e, ns, []string{"three"}, Request{GPUs: 3}, Request{})
	for _, n := range []string{"share-a", "share-b", "two", "one-init", "three"} {
		seesAssignment(ctx, t, e, ns, n)
	}
	resp, err := e.PodResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() == ns {
			pods++
		}
	}
	if pods != 5 {
		t.Errorf("PodResources lists %d pods of %s, want 5", pods, ns)
	}
}

func createAll(ctx context.Context, t *testing.T, e *Env, ns string, names []string, app, init Request) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Go(func() {
			_, errs[i] = e.Client.CoreV1().Pods(ns).Create(ctx, e.Pod(ns, n, app, init), metav1.CreateOptions{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func deleteAll(ctx context.Context, t *testing.T, e *Env, ns string) {
	t.Helper()
	list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if err := e.DeletePods(ctx, ns, names...); err != nil {
		t.Fatal(err)
	}
}

// waitOneRunning waits until one of a and b runs and the other is
// unschedulable, and returns them in that order.
func waitOneRunning(ctx context.Context, t *testing.T, e *Env, ns, a, b string) (running, pending string) {
	t.Helper()
	err := waitUntil(ctx, time.Minute, "one of "+a+", "+b+" Running", nil, func() (bool, string) {
		var states []string
		for _, n := range []string{a, b} {
			p, err := e.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase == corev1.PodRunning {
				running = n
			}
			states = append(states, n+": "+describePod(p))
		}
		return running != "", strings.Join(states, "; ")
	})
	if err != nil {
		t.Fatal(err)
	}
	pending = a
	if running == a {
		pending = b
	}
	return running, pending
}

// waitUnschedulable waits for the scheduler's Unschedulable condition on
// the pod and returns its message; the pod must not be bound.
func waitUnschedulable(ctx context.Context, t *testing.T, e *Env, ns, name string) string {
	t.Helper()
	var msg string
	err := waitUntil(ctx, 30*time.Second, name+" Unschedulable", nil, func() (bool, string) {
		p, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			t.Errorf("%s was bound to %s", name, p.Spec.NodeName)
			return true, ""
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				return true, ""
			}
		}
		return false, describePod(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func mustAssignment(t *testing.T, e *Env, p *corev1.Pod) contract.Assignment {
	t.Helper()
	a, err := e.Assignment(p)
	if err != nil {
		t.Fatal(err)
	}
	if a.Node != e.NodeName {
		t.Fatalf("%s/%s: assignment for node %s, bound to %s", p.Namespace, p.Name, a.Node, e.NodeName)
	}
	return a
}

func splitUUIDs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// gpu returns the node's GPU with the UUID, failing the test if there is none.
func (e *Env) gpu(t *testing.T, uuid string) struct{ Index, Island int } {
	t.Helper()
	for _, g := range e.Topology.GPUs {
		if g.UUID == uuid {
			return struct{ Index, Island int }{g.Index, g.Island}
		}
	}
	t.Fatalf("GPU %s is not one of the node's", uuid)
	return struct{ Index, Island int }{}
}
