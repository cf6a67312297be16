package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/cluster"
)

// MaxPluginNodes bounds how many nodes run a real rota-device-plugin
// process (each is a process plus a gRPC stand-in; the machine has 2 cores).
// Larger fleets publish the topology annotation directly.
const MaxPluginNodes = 10

// GPUNodeSpec describes one simulated GPU node.
type GPUNodeSpec struct {
	Name       string
	Model      string // e.g. "NVIDIA H100 80GB HBM3"
	Count      int
	MemoryMiB  contract.MiB
	IslandSize int // NVLink islands of this many consecutive GPUs; 0: none
	NUMA       int
	// Labels are added to the Node (e.g. example.com/leaf).
	Labels map[string]string
	// Plugin runs a rota-device-plugin process (fake backend) with a
	// kubeletstub for this node: the plugin publishes the topology
	// annotation, the stub's ListAndWatch counts become the Node's capacity,
	// and pods bound here get their devices through Allocate. Without it
	// the harness writes the annotation and capacity itself, from the same
	// topology.FromSpec the fake backend uses (same GPU UUIDs).
	Plugin bool
	// CPU and Memory override the node's cpu and memory capacity.
	CPU, Memory string
}

// GPUNode is a simulated GPU node.
type GPUNode struct {
	Spec GPUNodeSpec
	// Topology is the node as topology.FromSpec builds it (UUIDs, islands).
	Topology *topology.Node
	// Dir holds the fake GPU file, the health file and the sockets (plugin nodes).
	Dir string
	// Plugin and Stub are set for plugin nodes.
	Plugin *Process
	// MetricsURL is the plugin's metrics listener, http://127.0.0.1:PORT
	// (with Options.Profiling; "" otherwise).
	MetricsURL string
	Stub       *kubeletstub.Stub
	// PodResourcesSocket is the kubelet PodResources API the stand-in
	// serves for this node (Dir/podres.sock; plugin nodes), passed to the
	// plugin as --pod-resources-socket.
	PodResourcesSocket string
	podRes             *podResources
}

// UUID returns the UUID of GPU index i.
func (n *GPUNode) UUID(i int) string { return n.Topology.GPUs[i].UUID }

// GPUIndex returns the index of the GPU with uuid, or -1.
func (n *GPUNode) GPUIndex(uuid string) int {
	if s := n.Topology.SlotByUUID(uuid); s >= 0 {
		return n.Topology.GPUs[s].Index
	}
	return -1
}

// SetHealth writes the fake backend's health file: each entry maps a GPU
// index to "xid:<code>", "ecc", "lost" or "healthy". Plugin nodes only.
func (n *GPUNode) SetHealth(faults map[int]string) error {
	if n.Plugin == nil {
		return fmt.Errorf("node %s has no device plugin", n.Spec.Name)
	}
	var b []byte
	for i, s := range faults {
		b = fmt.Appendf(b, "%d=%s\n", i, s)
	}
	tmp := filepath.Join(n.Dir, "health.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.Dir, "health"))
}

// fakeSpec is the device plugin's fake backend file (discovery.FakeSpec).
type fakeSpec struct {
	Model      string       `json:"model"`
	Count      int          `json:"count"`
	MemoryMiB  contract.MiB `json:"memoryMiB"`
	IslandSize int          `json:"islandSize,omitempty"`
	NUMA       int          `json:"numa,omitempty"`
}

// AddGPUNodes creates the nodes, starts their device plugins, and waits
// until every node shows its topology annotation and GPU capacity.
func (e *Env) AddGPUNodes(ctx context.Context, specs ...GPUNodeSpec) ([]*GPUNode, error) {
	var out []*GPUNode
	for _, s := range specs {
		n, err := e.addGPUNode(ctx, s)
		if err != nil {
			return out, err
		}
		out = append(out, n)
	}
	for _, n := range out {
		if err := e.waitNodeReady(ctx, n); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (e *Env) addGPUNode(ctx context.Context, s GPUNodeSpec) (*GPUNode, error) {
	e.mu.Lock()
	plugins := 0
	for _, n := range e.gpuNodes {
		if n.Plugin != nil {
			plugins++
		}
	}
	e.mu.Unlock()
	if s.Plugin && plugins >= MaxPluginNodes {
		return nil, fmt.Errorf("node %s: at most %d nodes run a device plugin; publish the others directly", s.Name, MaxPluginNodes)
	}
	topo := topology.FromSpec(topology.Spec{Name: s.Name, Model: s.Model, Count: s.Count, MemoryMiB: s.MemoryMiB,
		IslandSize: s.IslandSize, NUMANodes: s.NUMA, UnitMiB: e.unitMiB})
	n := &GPUNode{Spec: s, Topology: topo}
	capacity := map[string]string{}
	if s.CPU != "" {
		capacity[string(corev1.ResourceCPU)] = s.CPU
	}
	if s.Memory != "" {
		capacity[string(corev1.ResourceMemory)] = s.Memory
	}
	if !s.Plugin {
		units := int64(0)
		for _, g := range topo.GPUs {
			units += int64(g.MemoryMiB / e.unitMiB)
		}
		capacity[e.Names.GPU] = strconv.Itoa(s.Count)
		capacity[e.Names.GPUMemory] = strconv.FormatInt(units, 10)
	}
	if _, err := e.Cluster.CreateNode(ctx, s.Name, s.Labels, capacity); err != nil {
		return nil, err
	}
	if !s.Plugin {
		doc := topo.Document()
		doc.Leaf = s.Labels[e.Names.Domain+"/leaf"]
		data, err := doc.Marshal()
		if err != nil {
			return nil, err
		}
		if err := e.annotateNode(ctx, s.Name, map[string]string{e.Names.TopologyAnnotation: string(data)}); err != nil {
			return nil, err
		}
		e.Kubelet.addNode(s.Name, nil, nil)
		e.mu.Lock()
		e.gpuNodes[s.Name] = n
		e.mu.Unlock()
		return n, nil
	}

	// A short folder: unix socket paths are limited to 108 bytes.
	e.mu.Lock()
	e.pluginSeq++
	n.Dir = filepath.Join(e.Dir, "n", strconv.Itoa(e.pluginSeq))
	e.mu.Unlock()
	sockDir := filepath.Join(n.Dir, "dp")
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return nil, err
	}
	spec, err := yaml.Marshal(fakeSpec{Model: s.Model, Count: s.Count, MemoryMiB: s.MemoryMiB, IslandSize: s.IslandSize, NUMA: s.NUMA})
	if err != nil {
		return nil, err
	}
	specPath := filepath.Join(n.Dir, "gpus.yaml")
	if err := os.WriteFile(specPath, spec, 0o600); err != nil {
		return nil, err
	}
	stub, err := kubeletstub.Start(sockDir, kubeletstub.WithUpdateFunc(func(res string, healthy, total int) {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.setNodeDevices(pctx, s.Name, res, healthy, total); err != nil {
			fmt.Fprintf(os.Stderr, "harness: patching %s capacity of node %s: %v\n", res, s.Name, err)
		}
	}))
	if err != nil {
		return nil, err
	}
	n.Stub = stub
	// The kubelet's PodResources API, which the plugin asks which pod an
	// Allocate is for; outside sockDir, which a kubelet restart
	// (Stub.Restart) empties of sockets.
	n.PodResourcesSocket = filepath.Join(n.Dir, PodResourcesSocketName)
	if n.podRes, err = startPodResources(n.PodResourcesSocket, stub, e.Names.GPU, e.Names.GPUMemory); err != nil {
		_ = stub.Close()
		return nil, err
	}
	metrics := []string{"--metrics-listen="}
	if e.opts.Profiling {
		ports, err := cluster.FreePorts(1)
		if err != nil {
			return nil, err
		}
		n.MetricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		metrics = []string{"--metrics-listen=" + hostPort(n.MetricsURL), "--profiling"}
	}
	n.Plugin = newProcess(e.binDir, "rota-device-plugin", "rota-device-plugin-"+s.Name, e.Dir, append([]string{
		"--node-name=" + s.Name,
		"--kubeconfig=" + e.kubeconfs["rota-device-plugin"],
		"--device-plugin-dir=" + sockDir + "/",
		"--pod-resources-socket=" + n.PodResourcesSocket,
		"--backend=fake",
		"--fake-config=" + specPath,
		"--health-interval=1s",
		"--recovery-quiet=5s",
		"--dra-check=2s",
		"--memory-unit-mib=" + strconv.FormatInt(int64(e.unitMiB), 10),
		"--v=2",
	}, metrics...))
	e.Kubelet.addNode(s.Name, stub, n.podRes)
	e.mu.Lock()
	e.gpuNodes[s.Name] = n
	e.mu.Unlock()
	if err := n.Plugin.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// AddPlainNode creates a node without GPUs (no topology, no device plugin)
// with the given cpu and memory capacity; the kubelet stand-in runs its
// pods.
func (e *Env) AddPlainNode(ctx context.Context, name string, labels map[string]string, cpu, memory string) error {
	capacity := map[string]string{string(corev1.ResourceCPU): cpu, string(corev1.ResourceMemory): memory}
	if _, err := e.Cluster.CreateNode(ctx, name, labels, capacity); err != nil {
		return err
	}
	e.Kubelet.addNode(name, nil, nil)
	return nil
}

// waitNodeReady waits for the node's topology annotation and, for plugin
// nodes, for both resources to register and reach the Node's capacity.
func (e *Env) waitNodeReady(ctx context.Context, n *GPUNode) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if n.Plugin != nil && !n.Plugin.Running() {
			return false, n.Plugin.ExitError()
		}
		node, err := e.Client.CoreV1().Nodes().Get(ctx, n.Spec.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if _, ok := node.Annotations[e.Names.TopologyAnnotation]; !ok {
			last = "no topology annotation yet"
			return false, nil
		}
		gpus := node.Status.Allocatable[corev1.ResourceName(e.Names.GPU)]
		if gpus.Value() != int64(n.Spec.Count) {
			last = fmt.Sprintf("allocatable %s is %s", e.Names.GPU, gpus.String())
			return false, nil
		}
		mem := node.Status.Allocatable[corev1.ResourceName(e.Names.GPUMemory)]
		if mem.Value() == 0 {
			last = "no allocatable " + e.Names.GPUMemory
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		msg := fmt.Sprintf("node %s not ready: %v (last: %s)", n.Spec.Name, err, last)
		if n.Plugin != nil {
			msg += "\n" + n.Plugin.LogTail(20)
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// setNodeDevices writes a device plugin resource's counts into the Node's
// status, as the kubelet does after ListAndWatch.
func (e *Env) setNodeDevices(ctx context.Context, node, res string, healthy, total int) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{res: strconv.Itoa(total)},
		"allocatable": map[string]string{res: strconv.Itoa(healthy)},
	}})
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func (e *Env) annotateNode(ctx context.Context, node string, ann map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// GPUNode returns a node created by AddGPUNodes.
func (e *Env) GPUNode(name string) *GPUNode {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gpuNodes[name]
}

// PublishUnhealthy marks GPUs of a node without a plugin unhealthy (or
// healthy again) by rewriting its topology annotation, as a plugin would.
func (e *Env) PublishUnhealthy(ctx context.Context, node string, reasons map[int]string) error {
	n := e.GPUNode(node)
	if n == nil || n.Plugin != nil {
		return fmt.Errorf("node %s is not a directly published GPU node", node)
	}
	doc := n.Topology.Document()
	for i := range doc.GPUs {
		if r, ok := reasons[doc.GPUs[i].Index]; ok {
			doc.GPUs[i].Health, doc.GPUs[i].Reason = contract.Unhealthy, r
		}
	}
	data, err := doc.Marshal()
	if err != nil {
		return err
	}
	return e.annotateNode(ctx, node, map[string]string{e.Names.TopologyAnnotation: string(data)})
}

// Cordon sets a node's spec.unschedulable (kubectl cordon / uncordon).
func (e *Env) Cordon(ctx context.Context, node string, unschedulable bool) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": unschedulable}})
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}
