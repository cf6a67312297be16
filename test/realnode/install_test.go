//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/test/cluster"
)

const (
	installRelease   = "rota"
	installNamespace = "rota-system"
	installUserNS    = "ml"
	// The chart's label on everything it creates.
	installLabel = "app.kubernetes.io/instance=" + installRelease
)

// TestHelmInstall installs charts/rota with Helm, as docs/operations.md's install
// section tells a platform engineer to, on a real node: the control plane
// with kube-controller-manager, and a node with containerd, the kubelet and
// kube-proxy, in a network namespace of the test's own. The images are the
// ones `make images` builds, imported into containerd. The chart runs every
// part as a pod: its kube-scheduler profile, the extender, the webhooks and
// the device plugin (on its fake backend: this host has no GPU), on the
// node's network (the chart's hostNetwork value; the node has no CNI
// plugin). Then:
//   - helm install --wait returns once every Deployment and the DaemonSet
//     are ready through their probes;
//   - a user's GPU pod is gated by the webhook at creation, admitted by the
//     queue controller, placed by the chart's scheduler and extender, and
//     started with its GPU handed over by the chart's device plugin; the
//     time from helm install to that pod Running is logged;
//   - helm upgrade changes the extender's arguments: every certificate is
//     kept, the running GPU pod is not disturbed, and a new GPU pod runs;
//   - helm uninstall removes every object of the chart; what stays is what
//     docs/operations.md says stays.
func TestHelmInstall(t *testing.T) {
	if !RunInOwnNetwork(t, 12*time.Minute) {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 11*time.Minute)
	defer cancel()
	images, tags := buildImages(ctx, t)
	e := StartT(t, Options{Install: true, NodeIP: OwnNetworkNodeIP})
	var archives []string
	for name := range tags {
		archives = append(archives, filepath.Join(images, name+".tar"))
	}
	if err := e.ImportImages(ctx, archives...); err != nil {
		t.Fatal(err)
	}
	// What GPU feature discovery labels GPU nodes with; the chart's device
	// plugin DaemonSet selects it.
	labelNode(ctx, t, e, "nvidia.com/gpu.present", "true")

	values := installValues(t, e, tags)
	began := time.Now()
	runHelm(ctx, t, e, "install", installRelease, chartDir(t), "--namespace", installNamespace, "--create-namespace",
		"--values", values, "--wait", "--timeout", "5m")
	t.Logf("helm install --wait returned after %s", time.Since(began).Round(time.Millisecond))
	waitChartReady(ctx, t, e, 4)
	t.Logf("the chart's 4 pods Ready through their probes %s after helm install", time.Since(began).Round(time.Millisecond))
	if err := e.WaitNodeGPUs(ctx, e.opts.GPUs.Count); err != nil {
		t.Fatal(err)
	}
	userNamespace(ctx, t, e)

	first := createGPUPod(ctx, t, e, "train-0")
	t.Logf("helm install to the first GPU pod Running: %s", time.Since(began).Round(time.Millisecond))
	checkPlacedByTheChart(ctx, t, e, first)

	secrets := chartSecrets(ctx, t, e)
	runHelm(ctx, t, e, "upgrade", installRelease, chartDir(t), "--namespace", installNamespace, "--values", values,
		"--set", "extender.logVerbosity=3", "--wait", "--timeout", "5m")
	if diff := cmp.Diff(secrets, chartSecrets(ctx, t, e)); diff != "" {
		t.Errorf("helm upgrade changed the chart's certificates (-before +after):\n%s", diff)
	}
	extenderHasArg(ctx, t, e, "--v=3")
	waitChartReady(ctx, t, e, 4)
	p, err := e.Client.CoreV1().Pods(installUserNS).Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != first.UID || p.Status.Phase != corev1.PodRunning || restarts(p) != 0 {
		t.Errorf("helm upgrade disturbed GPU pod %s: uid %s -> %s, %s", p.Name, first.UID, p.UID, describePod(p))
	}
	second := createGPUPod(ctx, t, e, "train-1")
	checkPlacedByTheChart(ctx, t, e, second)

	runHelm(ctx, t, e, "uninstall", installRelease, "--namespace", installNamespace, "--wait", "--timeout", "3m")
	checkNothingLeft(ctx, t, e)
	for _, name := range []string{first.Name, second.Name} {
		p, err := e.Client.CoreV1().Pods(installUserNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("GPU pod %s after helm uninstall: %s, want it left running", name, describePod(p))
		}
	}
	if err := e.DeletePods(ctx, installUserNS, first.Name, second.Name); err != nil {
		t.Error(err)
	}
}

// installValues writes the values of a single-host install: the images
// `make images` built, the node's network, one replica of each part, the
// fake GPUs and the kubelet's root folder.
func installValues(t *testing.T, e *Env, tags map[string]string) string {
	t.Helper()
	tag := func(archive string) (repo, version string) {
		ref, ok := tags[archive]
		if !ok {
			t.Fatalf("hack/images wrote no %s (tags %v)", archive, tags)
		}
		repo, version, _ = strings.Cut(ref, ":")
		return repo, version
	}
	_, rotaVersion := tag("rota-extender")
	schedRepo, schedVersion := tag("rota-kube-scheduler")
	g := e.opts.GPUs
	v := map[string]any{
		"hostNetwork": true,
		"image":       map[string]any{"tag": rotaVersion, "pullPolicy": "Never"},
		"extender":    map[string]any{"replicas": 1},
		"admission":   map[string]any{"replicas": 1},
		"scheduler": map[string]any{
			"image":       map[string]any{"repository": schedRepo, "tag": schedVersion},
			"extenderURL": "https://127.0.0.1:8888",
		},
		"devicePlugin": map[string]any{
			"backend": "fake",
			"fakeGPUs": fmt.Sprintf("model: %q\ncount: %d\nmemoryMiB: %d\nislandSize: %d\nnuma: %d\n",
				g.Model, g.Count, g.MemoryMiB, g.IslandSize, g.NUMA),
			"kubeletRootDir": filepath.Join(e.Dir, "kubelet"),
		},
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("values:\n%s", b)
	return path
}

func chartDir(t *testing.T) string {
	t.Helper()
	root, err := repoRootDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "rota")
}

// runHelm runs the Helm CLI that make helm builds against the real node's
// control plane.
func runHelm(ctx context.Context, t *testing.T, e *Env, args ...string) {
	t.Helper()
	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "helm"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Cluster.Kubeconfig, "HELM_CACHE_HOME="+filepath.Join(e.Dir, "helm"),
		"HELM_CONFIG_HOME="+filepath.Join(e.Dir, "helm"), "HELM_DATA_HOME="+filepath.Join(e.Dir, "helm"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s\n%s", args[0], err, out.String(), chartPodsState(ctx, e))
	}
	t.Logf("helm %s (%s):\n%s", args[0], time.Since(began).Round(time.Millisecond), tail(out.String(), 15))
}

// waitChartReady waits until the release namespace has want pods, all
// Ready (Helm's --wait can return before the controllers made them).
func waitChartReady(ctx context.Context, t *testing.T, e *Env, want int) {
	t.Helper()
	err := waitUntil(ctx, 3*time.Minute, "the chart's pods Ready", nil, func() (bool, string) {
		pods, err := e.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for i := range pods.Items {
			if ready(&pods.Items[i]) && pods.Items[i].DeletionTimestamp == nil {
				n++
			}
		}
		return n == want && len(pods.Items) == want, chartPodsState(ctx, e)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// chartPodsState describes the release namespace's pods, for a failure.
func chartPodsState(ctx context.Context, e *Env) string {
	pods, err := e.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s\n", pods.Items[i].Name, describePod(&pods.Items[i]))
	}
	return b.String()
}

func labelNode(ctx context.Context, t *testing.T, e *Env, key, value string) {
	t.Helper()
	// A merge patch carries no resourceVersion: the kubelet writes the Node
	// all the time while it starts, and a read-then-update races with it.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.CoreV1().Nodes().Patch(ctx, e.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// userNamespace creates the ML team's namespace, labelled with its team.
func userNamespace(ctx context.Context, t *testing.T, e *Env) {
	t.Helper()
	if err := e.Namespace(ctx, installUserNS); err != nil {
		t.Fatal(err)
	}
	ns, err := e.Client.CoreV1().Namespaces().Get(ctx, installUserNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[e.Names.TeamLabel] = "ml"
	if _, err := e.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createGPUPod creates a one-GPU pod for the chart's scheduler, as a user
// would, checks that the webhook gated it into the queue, and waits until
// it runs.
func createGPUPod(ctx context.Context, t *testing.T, e *Env, name string) *corev1.Pod {
	t.Helper()
	pod := e.Pod(installUserNS, name, Request{GPUs: 1}, Request{})
	pod.Spec.SchedulerName = "rota-scheduler"
	// kube-proxy programs the webhook Service's endpoint a moment after the
	// webhook pod turns Ready; until then the API server's call is refused.
	var created *corev1.Pod
	err := waitUntil(ctx, 30*time.Second, "creating GPU pod "+name, nil, func() (bool, string) {
		var err error
		created, err = e.Client.CoreV1().Pods(installUserNS).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(created.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == e.Names.QueueGate
	}) {
		t.Errorf("pod %s was created without the queue gate %s (gates %v): the chart's webhook did not gate it",
			name, e.Names.QueueGate, created.Spec.SchedulingGates)
	}
	p, err := e.WaitRunning(ctx, installUserNS, name)
	if err != nil {
		t.Fatalf("%v\n%s", err, chartPodsState(ctx, e))
	}
	return p
}

// checkPlacedByTheChart checks that the queue controller admitted p (its
// admission record), the chart's extender bound it (its GPU assignment) and
// the chart's device plugin handed that GPU to its container.
func checkPlacedByTheChart(ctx context.Context, t *testing.T, e *Env, p *corev1.Pod) {
	t.Helper()
	if _, ok := p.Annotations[e.Names.AdmissionAnnotation]; !ok {
		t.Errorf("pod %s has no admission record %s: the queue did not admit it", p.Name, e.Names.AdmissionAnnotation)
	}
	a := mustAssignment(t, e, p)
	if err := e.CheckPodResources(ctx, p.Namespace+"/"+p.Name); err != nil {
		t.Error(err)
	}
	env, err := e.ContainerEnv(ctx, p.Namespace, p.Name, "app")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s: assignment %+v, NVIDIA_VISIBLE_DEVICES=%s", p.Name, a, env["NVIDIA_VISIBLE_DEVICES"])
	if env["NVIDIA_VISIBLE_DEVICES"] == "" {
		t.Errorf("pod %s's container has no NVIDIA_VISIBLE_DEVICES: the device plugin handed it nothing", p.Name)
	}
}

// chartSecrets returns the data of the release namespace's Secrets that
// hold certificates (Helm's own release Secrets excluded).
func chartSecrets(ctx context.Context, t *testing.T, e *Env) map[string]map[string][]byte {
	t.Helper()
	list, err := e.Client.CoreV1().Secrets(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: installLabel})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]byte{}
	for _, s := range list.Items {
		out[s.Name] = s.Data
	}
	if len(out) == 0 {
		t.Fatalf("no Secret labelled %s in %s", installLabel, installNamespace)
	}
	return out
}

// extenderHasArg waits until the extender's only pod is the upgraded one:
// it runs with arg, and is ready.
func extenderHasArg(ctx context.Context, t *testing.T, e *Env, arg string) {
	t.Helper()
	selector := installLabel + ",app.kubernetes.io/component=extender"
	err := waitUntil(ctx, 2*time.Minute, "the upgraded extender", nil, func() (bool, string) {
		pods, err := e.Client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d extender pods", len(pods.Items))
		}
		p := &pods.Items[0]
		has := slices.Contains(p.Spec.Containers[0].Args, arg)
		return has && p.DeletionTimestamp == nil && ready(p), fmt.Sprintf("%s has %s: %v; %s", p.Name, arg, has, describePod(p))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// checkNothingLeft checks that no object of the chart is left after helm
// uninstall: the kinds the chart creates, in the release namespace and
// cluster-wide, by the chart's label and, for pods (the garbage
// collector's), at all.
func checkNothingLeft(ctx context.Context, t *testing.T, e *Env) {
	t.Helper()
	c := e.Client
	opts := metav1.ListOptions{LabelSelector: installLabel}
	err := waitUntil(ctx, 2*time.Minute, "the release's objects to go", nil, func() (bool, string) {
		var left []string
		add := func(kind string, n int, err error) {
			if err != nil {
				left = append(left, kind+": "+err.Error())
			} else if n > 0 {
				left = append(left, fmt.Sprintf("%d %s", n, kind))
			}
		}
		pods, err := c.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{})
		add("pods", len(pods.Items), err)
		deps, err := c.AppsV1().Deployments(installNamespace).List(ctx, opts)
		add("deployments", len(deps.Items), err)
		rs, err := c.AppsV1().ReplicaSets(installNamespace).List(ctx, metav1.ListOptions{})
		add("replicasets", len(rs.Items), err)
		ds, err := c.AppsV1().DaemonSets(installNamespace).List(ctx, opts)
		add("daemonsets", len(ds.Items), err)
		svcs, err := c.CoreV1().Services(installNamespace).List(ctx, opts)
		add("services", len(svcs.Items), err)
		cms, err := c.CoreV1().ConfigMaps(installNamespace).List(ctx, opts)
		add("configmaps", len(cms.Items), err)
		secrets, err := c.CoreV1().Secrets(installNamespace).List(ctx, metav1.ListOptions{})
		add("secrets", len(secrets.Items), err)
		sas, err := c.CoreV1().ServiceAccounts(installNamespace).List(ctx, opts)
		add("serviceaccounts", len(sas.Items), err)
		roles, err := c.RbacV1().Roles(metav1.NamespaceAll).List(ctx, opts)
		add("roles", len(roles.Items), err)
		rbs, err := c.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, opts)
		add("rolebindings", len(rbs.Items), err)
		crs, err := c.RbacV1().ClusterRoles().List(ctx, opts)
		add("clusterroles", len(crs.Items), err)
		crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, opts)
		add("clusterrolebindings", len(crbs.Items), err)
		vwc, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, opts)
		add("validatingwebhookconfigurations", len(vwc.Items), err)
		mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, opts)
		add("mutatingwebhookconfigurations", len(mwc.Items), err)
		pdbs, err := c.PolicyV1().PodDisruptionBudgets(installNamespace).List(ctx, opts)
		add("poddisruptionbudgets", len(pdbs.Items), err)
		return len(left) == 0, strings.Join(left, ", ")
	})
	if err != nil {
		t.Error(err)
	}
	// What docs/operations.md says stays: the namespace helm created, the leader
	// election Leases the parts wrote, and on the node the device plugin's
	// topology annotation and GPU capacity (the kubelet drops the capacity
	// when the plugin is gone; the annotation goes with the node).
	leases, err := c.CoordinationV1().Leases(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	t.Logf("left after helm uninstall, as docs/operations.md says: namespace %s, Leases %v, node annotation %s",
		installNamespace, names, e.Names.TopologyAnnotation)
}
