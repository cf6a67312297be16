//go:build e2e

// Package chart checks the Helm chart against a real kube-apiserver: every
// object the chart renders, for several value sets, is applied with a
// server-side dry run, so schema errors fail CI; and deploy/rota.yaml, the
// plain manifests for people who do not use Helm, must equal what the chart
// renders.
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	corev1 "k8s.io/api/core/v1"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/test/cluster"
)

// valueSets are the configurations CI renders and applies.
var valueSets = map[string][]string{
	"default":      nil,
	"cert-manager": {"admission.certManager.enabled=true"},
	"monitoring": {"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
		"metrics.dashboard.enabled=true", "extender.filterBestOnly=false", "scheduler.gpuFreePods=false"},
	"existing-scheduler": {"scheduler.mode=existing", "devicePlugin.backend=fake",
		"devicePlugin.fakeConfig=/etc/rota/gpus.yaml", "extender.policy=fragmentation-aware",
		"extender.remediation.mode=on", workloadSet, "extender.networkPolicy.verbsFrom[0].ipBlock.cidr=10.0.0.10/32"},
	"insecure-http": {"extender.insecureHTTP=true",
		`extender.networkPolicy.opsFrom[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring`},
	"dra-mode": {"dra.mode.enabled=true", "dra.mode.driver=gpu.rota.example.org", "devicePlugin.mps.enabled=true",
		"metrics.serviceMonitor.enabled=true"},
	"own-issuer": {"extender.tls.certManager.enabled=true", "extender.tls.certManager.issuerRef.name=rota-ca",
		"extender.tls.certManager.issuerRef.kind=ClusterIssuer"},
}

// workloadSet gives the extender two pod shapes (extender.workload).
const workloadSet = "extender.workload[0].milli=500,extender.workload[0].cpuMilli=4000,extender.workload[0].weight=0.4," +
	"extender.workload[1].gpus=1,extender.workload[1].weight=0.6"

// The extender.workload value reaches rota-extender as a --workload-file
// it accepts, with the shapes given.
func TestChartWorkload(t *testing.T) {
	objs := decode(t, render(t, []string{"extender.policy=fragmentation-aware", workloadSet}))
	var file string
	var args []any
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == "rota-extender-workload":
			file, _, _ = unstructured.NestedString(o.Object, "data", "workload.yaml")
		case o.GetKind() == "Deployment" && o.GetName() == "rota-extender":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			args, _ = cs[0].(map[string]any)["args"].([]any)
		}
	}
	if !slices.Contains(args, any("--workload-file=/etc/rota/workload/workload.yaml")) {
		t.Errorf("extender args %v lack --workload-file", args)
	}
	path := filepath.Join(t.TempDir(), "workload.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := extconfig.LoadWorkload(path)
	if err != nil {
		t.Fatalf("rendered workload %q: %v", file, err)
	}
	if len(w) != 2 || w[0].Milli != 500 || w[0].CPUMilli != 4000 || w[1].GPUs != 1 {
		t.Errorf("workload read back as %+v", w)
	}
	for _, o := range decode(t, render(t, nil)) {
		if o.GetName() == "rota-extender-workload" {
			t.Error("a workload ConfigMap without extender.workload")
		}
	}
}

// dra.mode.enabled runs a second DaemonSet with --dra-mode on the nodes
// labelled <domain>/dra-mode=true, with the kubelet's plugin folders and the
// CDI folder at the host's paths, keeps the device-plugin DaemonSet off those
// nodes, lets the plugin publish slices and read claims, and scrapes both.
func TestChartDRAMode(t *testing.T) {
	type ds struct {
		args, mounts []string
		affinity     string
	}
	read := func(sets []string) (map[string]ds, []any, string) {
		got := map[string]ds{}
		var rules []any
		var monitor string
		for _, o := range decode(t, render(t, sets)) {
			switch o.GetKind() {
			case "DaemonSet":
				var d ds
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c := cs[0].(map[string]any)
				for _, a := range c["args"].([]any) {
					d.args = append(d.args, a.(string))
				}
				for _, m := range c["volumeMounts"].([]any) {
					d.mounts = append(d.mounts, m.(map[string]any)["mountPath"].(string))
				}
				terms, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
					"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
				d.affinity = fmt.Sprint(terms)
				got[o.GetName()] = d
			case "ClusterRole":
				if o.GetName() == "rota-device-plugin" {
					rules, _, _ = unstructured.NestedSlice(o.Object, "rules")
				}
			case "PodMonitor":
				sel, _, _ := unstructured.NestedMap(o.Object, "spec", "selector")
				monitor = fmt.Sprint(sel)
			}
		}
		return got, rules, monitor
	}
	got, rules, monitor := read(valueSets["dra-mode"])
	plain, dra := got["rota-device-plugin"], got["rota-device-plugin-dra"]
	if len(got) != 2 || dra.args == nil {
		t.Fatalf("DaemonSets %v, want rota-device-plugin and rota-device-plugin-dra", slices.Collect(maps.Keys(got)))
	}
	for _, a := range []string{"--dra-mode", "--cdi-dir=/var/run/cdi", "--kubelet-dir=/var/lib/kubelet", "--dra-driver=gpu.rota.example.org", "--mps"} {
		if !slices.Contains(dra.args, a) {
			t.Errorf("the DRA DaemonSet's args %v lack %s", dra.args, a)
		}
		if a != "--mps" && slices.Contains(plain.args, a) {
			t.Errorf("the device-plugin DaemonSet has %s", a)
		}
	}
	for _, m := range []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"} {
		if !slices.Contains(dra.mounts, m) {
			t.Errorf("the DRA DaemonSet mounts %v, not %s", dra.mounts, m)
		}
	}
	if !strings.Contains(dra.affinity, "example.com/dra-mode operator:In values:[true]") ||
		!strings.Contains(plain.affinity, "example.com/dra-mode operator:NotIn values:[true]") {
		t.Errorf("affinities: DRA %s, device plugin %s; want In and NotIn the dra-mode label", dra.affinity, plain.affinity)
	}
	if r := fmt.Sprint(rules); !strings.Contains(r, "resources:[resourceslices] verbs:[get watch create update patch delete]") ||
		!strings.Contains(r, "resources:[resourceclaims] verbs:[get]") {
		t.Errorf("the device plugin's rules %s do not let it publish slices and read claims", r)
	}
	if !strings.Contains(monitor, "device-plugin-dra") {
		t.Errorf("the PodMonitor's selector %s leaves the DRA DaemonSet out", monitor)
	}

	got, rules, _ = read(nil)
	if len(got) != 1 || got["rota-device-plugin"].affinity != "[]" || strings.Contains(fmt.Sprint(rules), "resourceclaims") {
		t.Errorf("without dra.mode: DaemonSets %v, rules %v; want one, without affinity or claims", got, rules)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(dir, "..", ".."))
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(bin, "helm")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("helm is not built: run make chart-check (hack/helm.sh): %v", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// Render renders the chart the way `make manifests` does.
func render(t *testing.T, sets []string) []byte {
	args := []string{"template", "rota", "charts/rota", "--namespace", "rota-system", "--kube-version", "1.37.2"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding rendered YAML: %v", err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

func TestChartLint(t *testing.T) {
	for name, sets := range valueSets {
		args := []string{"lint", "--strict", "charts/rota", "--kube-version", "1.37.2"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		t.Run(name, func(t *testing.T) { helm(t, args...) })
	}
}

func TestManifestsInSync(t *testing.T) {
	want := render(t, manifestSets)
	got, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "rota.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stripHeader(got), want) {
		t.Fatal("deploy/rota.yaml differs from the chart: run `make manifests` and commit the result")
	}
}

// manifestSets render deploy/rota.yaml; cert-manager issues the webhook's
// certificate there, so the file is the same on every render.
var manifestSets = []string{"admission.certManager.enabled=true", "recordsKey.generate=false"}

func stripHeader(b []byte) []byte {
	for bytes.HasPrefix(b, []byte("#")) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b = b[i+1:]
	}
	return b
}

func TestChartAppliesToRealAPIServer(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{NoScheduler: true, NoPodSimulator: true, NodeLeaseInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds, err := os.ReadFile("testdata/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, o := range decode(t, crds) {
		if _, err := dyn.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CRD %s: %v", o.GetName(), err)
		}
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rota-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for name, sets := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := decode(t, render(t, sets))
			if len(objs) < 10 {
				t.Fatalf("chart rendered only %d objects", len(objs))
			}
			for _, o := range objs {
				if err := dryRunApply(ctx, dyn, mapper, o); err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

func dryRunApply(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	var m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	for i := 0; err != nil && i < 20; i++ {
		// Freshly created CRDs take a moment to appear in discovery.
		time.Sleep(250 * time.Millisecond)
		mapper.Reset()
		m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("no API for %s: %w", gvk, err)
	}
	data, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	ri := dyn.Resource(m.Resource)
	var r dynamic.ResourceInterface = ri
	if o.GetNamespace() != "" || m.Scope.Name() == "namespace" {
		ns := o.GetNamespace()
		if ns == "" {
			ns = "rota-system"
		}
		r = ri.Namespace(ns)
	}
	force := true
	_, err = r.Patch(ctx, o.GetName(), "application/apply-patch+yaml", data, metav1.PatchOptions{
		DryRun: []string{metav1.DryRunAll}, FieldManager: "rota-chart-test", Force: &force})
	return err
}

// TestFilterBestOnlyDropsPrioritize: with --filter-best-only (the default)
// the scheduler profile leaves the prioritize verb out (it would score every
// passed node alike); without it the verb and its weight are there.
func TestFilterBestOnlyDropsPrioritize(t *testing.T) {
	for _, tc := range []struct {
		sets           []string
		wantPrioritize bool
	}{
		{sets: nil, wantPrioritize: false},
		{sets: []string{"extender.filterBestOnly=false"}, wantPrioritize: true},
	} {
		out := string(render(t, tc.sets))
		if !strings.Contains(out, "filterVerb: filter") {
			t.Fatalf("%v: the rendered chart has no extender entry", tc.sets)
		}
		if got := strings.Contains(out, "prioritizeVerb: prioritize"); got != tc.wantPrioritize {
			t.Errorf("%v: prioritizeVerb rendered = %v, want %v", tc.sets, got, tc.wantPrioritize)
		}
		if got := strings.Contains(out, "- --filter-best-only"); got == tc.wantPrioritize {
			t.Errorf("%v: --filter-best-only rendered = %v, want %v", tc.sets, got, !tc.wantPrioritize)
		}
	}
}
