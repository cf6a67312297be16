package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/cluster"
)

// errMissingDeps is wrapped by Start's error when a host package is missing.
var errMissingDeps = errors.New("install the host packages with hack/realnode-deps.sh (containerd, runc, containernetworking-plugins, iptables)")

// GPUs describes the fake GPUs of the real node.
type GPUs struct {
	Model      string
	Count      int
	MemoryMiB  contract.MiB
	IslandSize int
	NUMA       int
}

// DefaultGPUs is 8 GPUs of 80 GiB in two NVLink islands of 4.
var DefaultGPUs = GPUs{Model: "NVIDIA H100 80GB HBM3", Count: 8, MemoryMiB: 80 * 1024, IslandSize: 4, NUMA: 2}

// Options configure Start.
type Options struct {
	// GPUs of the fake backend; zero means DefaultGPUs.
	GPUs GPUs
	// SimulatedNodes are simulated GPU nodes (DefaultGPUs each, topology
	// annotation published directly) registered beside the real node.
	SimulatedNodes []string
	// ExtenderArgs and DevicePluginArgs are appended to the generated flags.
	ExtenderArgs     []string
	DevicePluginArgs []string
	// Install starts the node for charts/rota to run on: Start runs no
	// rota-extender and no rota-device-plugin of its own. Instead it runs what
	// a node of a real cluster has and the chart's pods need:
	// kube-controller-manager (Deployments, DaemonSets, ServiceAccounts,
	// EndpointSlices, garbage collection), kube-proxy (Services), the API
	// server's ServiceAccount admission and its "kubernetes" Service at
	// NodeIP, and a kubelet at NodeIP. The control plane's kube-scheduler runs
	// the default profile only. Needs NodeIP, and a network namespace of the
	// test's own (RunInOwnNetwork): the API server and the chart's pods listen
	// on all of its addresses.
	Install bool
	// NodeIP is the kubelet's --node-ip and the API server's advertised
	// address with Install.
	NodeIP string
	// DRA runs the node for Rota's DRA mode (docs/dra.md): containerd 2.x
	// (hack/containerd.sh) reading CDI specs from CDIDir,
	// kube-controller-manager's resourceclaim controller (claims from
	// templates), and rota-device-plugin with --dra-mode. Start then waits
	// for the node's ResourceSlice instead of its extended resources.
	DRA bool
	// KeepDir keeps the folder (logs, state) after Stop.
	KeepDir bool
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Env is a control plane (test/cluster) with rota-extender behind its
// scheduler and one real node: containerd, a kubelet and
// rota-device-plugin on the fake backend. Safe for concurrent use.
type Env struct {
	Cluster *cluster.Cluster
	Client  kubernetes.Interface
	Names   contract.Names
	// Dir holds the logs (containerd.log, kubelet.log,
	// rota-device-plugin.log, rota-extender.log, and the control plane's
	// in Cluster.Dir) and the node's state.
	Dir string
	// NodeName is the real node's name (a host name that resolves to 127.0.0.1).
	NodeName string
	// Topology is the node's GPUs as the fake backend reports them.
	Topology *topology.Node
	// HealthFile is the fake backend's fault file: "<uuid>=xid:79" lines.
	HealthFile string
	// PodResourcesSocket is the kubelet's PodResources API socket.
	PodResourcesSocket string
	// CDIDir is where the DRA mode writes claims' CDI specs and containerd
	// reads them (Options.DRA).
	CDIDir string
	// ExtenderURL and PluginMetricsURL are http://127.0.0.1:PORT.
	ExtenderURL, PluginMetricsURL string

	opts       Options
	guard      *hostGuard
	containerd *containerd
	kubelet    *cluster.Process
	plugin     *cluster.Process
	extender   *cluster.Process
	kubeProxy  *cluster.Process

	mu      sync.Mutex
	stopped bool
}

// Prerequisites reports what is missing to run a real node on this host:
// root, the host packages (hack/realnode-deps.sh), the kubelet
// (hack/k8s-tools.sh) and Rota's binaries (make build).
func Prerequisites() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("a real node needs root (mounts, cgroups)"))
	}
	var missing []string
	for _, cmd := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2", "iptables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%s not on PATH: %w", strings.Join(missing, ", "), errMissingDeps))
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		errs = append(errs, err)
	} else if !executable(filepath.Join(binDir, "kubelet")) {
		errs = append(errs, fmt.Errorf("kubelet not found in %s: run make k8s-tools (hack/k8s-tools.sh)", binDir))
	}
	rotaDir, err := rotaBinDir()
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, b := range []string{"rota-extender", "rota-device-plugin"} {
			if !executable(filepath.Join(rotaDir, b)) {
				errs = append(errs, fmt.Errorf("%s not found in %s: run make build", b, rotaDir))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(DevicePluginDir, kubeletSocketName)); err == nil {
		errs = append(errs, fmt.Errorf("%s exists: another kubelet runs on this host (the device plugin folder is fixed)",
			filepath.Join(DevicePluginDir, kubeletSocketName)))
	}
	return errors.Join(errs...)
}

// Start starts everything and waits until the real node is Ready and
// advertises its GPUs (capacity and topology annotation). On error,
// everything started is stopped and the host reverted.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	began := time.Now()
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	recovered, err := recoverStale()
	for _, line := range recovered {
		opts.Logf("%s", line)
	}
	if err != nil {
		return nil, err
	}
	if err := Prerequisites(); err != nil {
		return nil, err
	}
	if opts.GPUs.Count == 0 {
		opts.GPUs = DefaultGPUs
	}
	e := &Env{opts: opts, Names: contract.Default, NodeName: nodeName()}
	// A short folder: unix socket paths are limited to 108 bytes.
	if e.Dir, err = os.MkdirTemp("", "rota-rn-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.opts.KeepDir = true
			if stopErr := e.Stop(); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("stopping after the failed start: %w", stopErr))
			}
			err = fmt.Errorf("%w (logs in %s)", err, e.Dir)
		}
	}()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	if e.guard, err = newHostGuard(e.Dir, "rota-realnode-"+hex.EncodeToString(suffix),
		filepath.Join(e.Dir, "containerd", "containerd.sock")); err != nil {
		return e, err
	}

	// Control plane, with the API server able to call the kubelet.
	kpki, err := newKubeletClientPKI(filepath.Join(e.Dir, "pki"))
	if err != nil {
		return e, err
	}
	ports, err := cluster.FreePorts(7)
	if err != nil {
		return e, err
	}
	e.ExtenderURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	e.PluginMetricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	clusterOpts := cluster.Options{
		Dir:             filepath.Join(e.Dir, "cluster"),
		SchedulerConfig: extconfig.SchedulerConfig(e.ExtenderURL, "{{.Kubeconfig}}"),
		APIServerArgs:   kpki.apiServerArgs(),
	}
	if opts.Install {
		if opts.NodeIP == "" {
			return e, errors.New("Options.Install needs a NodeIP")
		}
		e.ExtenderURL, e.PluginMetricsURL = "", ""
		clusterOpts.SchedulerConfig = ""
		clusterOpts.ServiceAccountAdmission = true
		clusterOpts.APIServerArgs = append(clusterOpts.APIServerArgs, installAPIServerArgs(opts.NodeIP)...)
	}
	if e.Cluster, err = cluster.Start(ctx, clusterOpts); err != nil {
		return e, fmt.Errorf("control plane: %w", err)
	}
	e.Client = e.Cluster.Client()
	opts.Logf("control plane ready (%s)", time.Since(began).Round(time.Millisecond))
	if opts.Install {
		if err := e.Cluster.StartControllerManager(ctx, installControllers...); err != nil {
			return e, err
		}
		opts.Logf("kube-controller-manager ready (%s)", time.Since(began).Round(time.Millisecond))
	}
	if opts.DRA {
		if err := e.Cluster.StartControllerManager(ctx, "resourceclaim-controller"); err != nil {
			return e, err
		}
		opts.Logf("kube-controller-manager's resourceclaim controller ready (%s)", time.Since(began).Round(time.Millisecond))
	}

	rotaDir, err := rotaBinDir()
	if err != nil {
		return e, err
	}
	if !opts.Install {
		e.extender = newProcess("rota-extender", filepath.Join(rotaDir, "rota-extender"), e.Dir, append([]string{
			"--kubeconfig=" + e.Cluster.Kubeconfig, "--listen=127.0.0.1:" + strconv.Itoa(ports[0]),
			"--ops-listen=127.0.0.1:" + strconv.Itoa(ports[4]), "--v=4",
			"--scheduler-names=" + corev1.DefaultSchedulerName, // the scheduler's default profile
		}, opts.ExtenderArgs...))
		if err := e.extender.Start(); err != nil {
			return e, err
		}
	}

	// containerd, with the test images.
	var v2 string
	if opts.DRA {
		e.CDIDir = filepath.Join(e.Dir, "cdi")
		if v2, err = containerd2Dir(); err != nil {
			return e, err
		}
	}
	if e.containerd, err = newContainerd(filepath.Join(e.Dir, "containerd"), v2, e.CDIDir); err != nil {
		return e, err
	}
	if err := checkSocketPath(e.containerd.socket); err != nil {
		return e, err
	}
	binary, err := buildImageBinary(ctx, e.Dir)
	if err != nil {
		return e, err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return e, err
	}
	archive := filepath.Join(e.Dir, "images.tar")
	if err := writeImageArchive(archive, data, imageSpecs()); err != nil {
		return e, err
	}
	if err := e.containerd.start(ctx); err != nil {
		return e, err
	}
	if err := e.containerd.importImages(ctx, archive); err != nil {
		return e, err
	}
	opts.Logf("containerd ready, images imported (%s)", time.Since(began).Round(time.Millisecond))

	// The kubelet.
	cgroupRoot, err := e.guard.createCgroupRoot()
	if err != nil {
		return e, err
	}
	rootDir := filepath.Join(e.Dir, "kubelet")
	e.PodResourcesSocket = podResourcesSocket(rootDir)
	if err := checkSocketPath(e.PodResourcesSocket); err != nil {
		return e, err
	}
	cfg, err := kubeletConfig(kubeletSettings{
		rootDir: rootDir, logsDir: filepath.Join(e.Dir, "pod-logs"), containerdSocket: e.containerd.socket,
		cgroupRoot: cgroupRoot, clientCAFile: kpki.caFile, port: ports[2], healthPort: ports[3],
	})
	if err != nil {
		return e, err
	}
	cfgFile := filepath.Join(e.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return e, err
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		return e, err
	}
	e.kubelet = newProcess("kubelet", filepath.Join(binDir, "kubelet"), e.Dir,
		kubeletArgs(cfgFile, e.Cluster.Kubeconfig, rootDir, e.NodeName, opts.NodeIP))
	if err := e.kubelet.Start(); err != nil {
		return e, err
	}
	if opts.Install {
		if err := e.startKubeProxy(ctx, binDir, ports[5], ports[6]); err != nil {
			return e, err
		}
		if err := e.waitNodeReady(ctx); err != nil {
			return e, err
		}
		opts.Logf("node %s Ready for the chart, kube-proxy running (%s)", e.NodeName, time.Since(began).Round(time.Millisecond))
		return e, nil
	}

	// The device plugin, on the fake backend.
	g := opts.GPUs
	fakeDir := filepath.Join(e.Dir, "gpus")
	if err := os.MkdirAll(fakeDir, 0o755); err != nil {
		return e, err
	}
	fakeConfig := filepath.Join(fakeDir, "gpus.yaml")
	e.HealthFile = filepath.Join(fakeDir, "health")
	doc := fmt.Sprintf("model: %q\ncount: %d\nmemoryMiB: %d\nislandSize: %d\nnuma: %d\n",
		g.Model, g.Count, g.MemoryMiB, g.IslandSize, g.NUMA)
	if err := os.WriteFile(fakeConfig, []byte(doc), 0o644); err != nil {
		return e, err
	}
	e.Topology = topology.FromSpec(topology.Spec{Name: e.NodeName, Model: g.Model, Count: g.Count,
		MemoryMiB: g.MemoryMiB, IslandSize: g.IslandSize, NUMANodes: g.NUMA, UnitMiB: contract.DefaultMemoryUnitMiB})
	e.plugin = newProcess("rota-device-plugin", filepath.Join(rotaDir, "rota-device-plugin"), e.Dir, append([]string{
		"--backend=fake", "--fake-config=" + fakeConfig, "--node-name=" + e.NodeName,
		"--kubeconfig=" + e.Cluster.Kubeconfig, "--device-plugin-dir=" + DevicePluginDir,
		"--pod-resources-socket=" + e.PodResourcesSocket, "--metrics-listen=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--health-interval=1s", "--kubelet-poll=200ms", "--recovery-quiet=5s", "--v=4",
	}, opts.DevicePluginArgs...))
	if opts.DRA {
		e.plugin.Args = append(e.plugin.Args, "--dra-mode", "--cdi-dir="+e.CDIDir, "--kubelet-dir="+rootDir)
	}

	// The kubelet creates the device plugin folder; start the plugin once
	// the kubelet's registration socket is there.
	if err := waitUntil(ctx, time.Minute, "the kubelet's device plugin socket", e.kubelet, func() (bool, string) {
		_, err := os.Stat(filepath.Join(DevicePluginDir, kubeletSocketName))
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		return e, err
	}
	if err := e.plugin.Start(); err != nil {
		return e, err
	}
	if err := e.waitHTTP(ctx, e.extender, "http://127.0.0.1:"+strconv.Itoa(ports[4])+"/readyz"); err != nil {
		return e, err
	}
	for _, name := range opts.SimulatedNodes {
		if err := e.addSimulatedNode(ctx, name); err != nil {
			return e, err
		}
	}
	if opts.DRA {
		if err := e.WaitSlice(ctx, g.Count); err != nil {
			return e, err
		}
		opts.Logf("real node %s Ready with its ResourceSlice of %d GPUs (%s)", e.NodeName, g.Count, time.Since(began).Round(time.Millisecond))
		return e, nil
	}
	if err := e.WaitNodeGPUs(ctx, g.Count); err != nil {
		return e, err
	}
	opts.Logf("real node %s Ready with %d GPUs (%s)", e.NodeName, g.Count, time.Since(began).Round(time.Millisecond))
	return e, nil
}

// WaitNodeGPUs waits until the real node is Ready, its allocatable
// <domain>/gpu is want (and gpu-memory matches), and its topology
// annotation is published.
func (e *Env) WaitNodeGPUs(ctx context.Context, want int) error {
	wantMem := int64(want) * int64(e.opts.GPUs.MemoryMiB/contract.DefaultMemoryUnitMiB)
	return waitUntil(ctx, time.Minute, fmt.Sprintf("node %s Ready with %d allocatable GPUs", e.NodeName, want),
		e.kubelet, func() (bool, string) {
			n, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready := nodeReady(n)
			gpus := n.Status.Allocatable[corev1.ResourceName(e.Names.GPU)]
			mem := n.Status.Allocatable[corev1.ResourceName(e.Names.GPUMemory)]
			_, annotated := n.Annotations[e.Names.TopologyAnnotation]
			state := fmt.Sprintf("ready=%v gpu=%s gpu-memory=%s topology=%v", ready, gpus.String(), mem.String(), annotated)
			return ready && annotated && gpus.Value() == int64(want) && mem.Value() == wantMem, state
		})
}

// WaitSlice waits until the real node is Ready and the DRA mode's
// ResourceSlice for it lists want devices.
func (e *Env) WaitSlice(ctx context.Context, want int) error {
	return waitUntil(ctx, time.Minute, fmt.Sprintf("node %s Ready with a ResourceSlice of %d devices", e.NodeName, want),
		e.plugin, func() (bool, string) {
			n, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			s, err := e.Slice(ctx)
			if err != nil {
				return false, err.Error()
			}
			return nodeReady(n) && len(s.Spec.Devices) == want, fmt.Sprintf("ready=%v devices=%d", nodeReady(n), len(s.Spec.Devices))
		})
}

// Slice is the DRA mode's one ResourceSlice for the real node.
func (e *Env) Slice(ctx context.Context) (*resourcev1.ResourceSlice, error) {
	list, err := e.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + e.NodeName})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d ResourceSlices for node %s, want 1", len(list.Items), e.NodeName)
	}
	return &list.Items[0], nil
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// addSimulatedNode registers a simulated GPU node (no kubelet) with its
// topology annotation, as the e2e harness does for fleets.
func (e *Env) addSimulatedNode(ctx context.Context, name string) error {
	g := DefaultGPUs
	topo := topology.FromSpec(topology.Spec{Name: name, Model: g.Model, Count: g.Count, MemoryMiB: g.MemoryMiB,
		IslandSize: g.IslandSize, NUMANodes: g.NUMA, UnitMiB: contract.DefaultMemoryUnitMiB})
	units := int64(g.Count) * int64(g.MemoryMiB/contract.DefaultMemoryUnitMiB)
	if _, err := e.Cluster.CreateNode(ctx, name, nil, map[string]string{
		e.Names.GPU: strconv.Itoa(g.Count), e.Names.GPUMemory: strconv.FormatInt(units, 10),
	}); err != nil {
		return err
	}
	data, err := topo.Document().Marshal()
	if err != nil {
		return err
	}
	patch, err := jsonMergePatchAnnotations(map[string]string{e.Names.TopologyAnnotation: string(data)})
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Namespace creates a namespace with what pods need and no
// kube-controller-manager provides: the default ServiceAccount and the
// kube-root-ca.crt ConfigMap.
func (e *Env) Namespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := e.Client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(e.Cluster.Dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: name},
		Data: map[string]string{"ca.crt": string(ca)}}
	if _, err := e.Client.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// RestartKubelet stops the kubelet (SIGTERM) and starts it again with the
// same configuration; running containers stay up. It returns once the new
// kubelet's registration socket exists.
func (e *Env) RestartKubelet(ctx context.Context) error {
	if err := e.StopKubelet(); err != nil {
		return err
	}
	return e.StartKubelet(ctx)
}

// StopKubelet stops the kubelet (SIGTERM); containers keep running and the
// Node stays Ready in the API (no node lifecycle controller runs).
func (e *Env) StopKubelet() error { return e.kubelet.Stop(10 * time.Second) }

// StartKubelet starts the stopped kubelet and returns once it has created
// its device plugin registration socket again.
func (e *Env) StartKubelet(ctx context.Context) error {
	sock := filepath.Join(DevicePluginDir, kubeletSocketName)
	// File times come from the kernel's coarse clock, a tick behind.
	startedAt := time.Now().Add(-20 * time.Millisecond)
	if err := e.kubelet.Start(); err != nil {
		return err
	}
	return waitUntil(ctx, time.Minute, "the restarted kubelet's device plugin socket", e.kubelet, func() (bool, string) {
		st, err := os.Stat(sock)
		if err != nil {
			return false, err.Error()
		}
		return st.ModTime().After(startedAt), "socket from " + st.ModTime().String()
	})
}

// KubeletLog and PluginLog return the paths of the logs.
func (e *Env) KubeletLog() string { return e.kubelet.LogPath }

// PluginLog returns the path of rota-device-plugin's log.
func (e *Env) PluginLog() string { return e.plugin.LogPath }

// LogTails returns the end of every log, for a failing test.
func (e *Env) LogTails(n int) string {
	var b strings.Builder
	for _, p := range []*cluster.Process{e.extender, e.kubelet, e.plugin, e.kubeProxy} {
		if p != nil {
			b.WriteString("\n" + p.LogTail(n))
		}
	}
	if e.containerd != nil {
		b.WriteString("\n" + e.containerd.proc.LogTail(n))
	}
	return b.String()
}

// Stop stops the device plugin, the kubelet, every container (by the PIDs
// in the node's cgroups and of containerd's shims), containerd, the
// extender and the control plane, then reverts the host: mounts, cgroups,
// sysctls, iptables rules and the files under /var/lib/kubelet,
// /var/log/containers and /run/containerd. It returns an error naming any
// host change still present afterwards. Safe to call more than once.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	stop := func(p *cluster.Process, grace time.Duration) {
		if p != nil {
			errs = append(errs, p.Stop(grace))
		}
	}
	stop(e.plugin, 5*time.Second)
	stop(e.kubelet, 10*time.Second)
	stop(e.kubeProxy, 5*time.Second)
	if e.guard != nil {
		errs = append(errs, killPIDs(e.guard.cgroupPIDs()))
	}
	if e.containerd != nil {
		errs = append(errs, killPIDs(shimPIDs(e.containerd.socket)))
		stop(e.containerd.proc, 5*time.Second)
	}
	stop(e.extender, 5*time.Second)
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	if e.guard != nil {
		if changes := e.guard.diff(); len(changes) > 0 {
			e.opts.Logf("reverting %d host changes: %s", len(changes), summarize(changes))
		}
		errs = append(errs, e.guard.revert())
		if left := e.guard.diff(); len(left) > 0 {
			errs = append(errs, fmt.Errorf("host changes not reverted:\n  %s", strings.Join(left, "\n  ")))
		} else {
			errs = append(errs, e.guard.forget())
		}
	}
	err := errors.Join(errs...)
	if err == nil && !e.opts.KeepDir && e.Dir != "" {
		err = os.RemoveAll(e.Dir)
	}
	return err
}

func (e *Env) waitHTTP(ctx context.Context, p *cluster.Process, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return waitUntil(ctx, time.Minute, url, p, func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// waitUntil polls cond every 100ms until it holds, p exits, ctx ends or
// timeout passes; the error carries cond's last description.
func waitUntil(ctx context.Context, timeout time.Duration, what string, p *cluster.Process, cond func() (bool, string)) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var exited <-chan struct{}
	if p != nil {
		exited = p.Exited()
	}
	for {
		ok, last := cond()
		if ok {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("waiting for %s: %w", what, p.ExitError())
		case <-ctx.Done():
			tail := ""
			if p != nil {
				tail = "\n" + p.LogTail(30)
			}
			return fmt.Errorf("waiting for %s: %w after %s (last: %s)%s", what, ctx.Err(),
				time.Since(began).Round(time.Millisecond), last, tail)
		case <-tick.C:
		}
	}
}

// newProcess runs path as name, its output in <dir>/<name>.log.
func newProcess(name, path, dir string, args []string) *cluster.Process {
	return cluster.NewProcess(name, path, filepath.Join(dir, name+".log"), args)
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// rotaBinDir is $ROTA_BIN, else bin/ at the repository root (two levels
// above .cache/k8s/bin).
func rotaBinDir() (string, error) {
	if d := os.Getenv("ROTA_BIN"); d != "" {
		return filepath.Abs(d)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.HasPrefix(string(b), "module github.com/rota-sched/rota\n") {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/rota-sched/rota above the working directory (or set ROTA_BIN)")
		}
		dir = parent
	}
}

// summarize shortens a list of host changes for a log line: mounts, files
// and cgroups are counted, the rest listed.
func summarize(changes []string) string {
	counts := map[string]int{}
	var rest []string
	for _, c := range changes {
		kind, _, _ := strings.Cut(c, " ")
		switch kind {
		case "mount", "file", "cgroup":
			counts[kind]++
		default:
			rest = append(rest, c)
		}
	}
	for _, k := range []string{"mount", "file", "cgroup"} {
		if counts[k] > 0 {
			rest = append(rest, fmt.Sprintf("%d %ss", counts[k], k))
		}
	}
	return strings.Join(rest, "; ")
}
