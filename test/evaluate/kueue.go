package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/cluster"
)

// KueueVersion is the Kueue release the evaluation runs, built by
// hack/kueue.sh from the Go module proxy (make kueue).
const KueueVersion = "v0.17.0"

// kueueModule is where the Go module cache holds Kueue's source: its CRDs
// and webhook manifests come from there, at the version the binary was
// built from.
func kueueModule() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kueue@"+KueueVersion)
	if _, err := os.Stat(filepath.Join(dir, "config", "components", "crd", "bases")); err != nil {
		return "", fmt.Errorf("%w: Kueue %s's source is not in the module cache (%w): run make kueue", errNoKueue, KueueVersion, err)
	}
	return dir, nil
}

// kueueBinary is where hack/kueue.sh puts the manager.
func kueueBinary(root string) string { return filepath.Join(root, ".cache", "kueue", "bin", "kueue") }

var errNoKueue = errors.New("the Kueue manager is not built")

// kueueNamespace is where Kueue runs, as its manifests install it.
const kueueNamespace = "kueue-system"

// kueueUser is the identity the manager authenticates as (its writes are
// counted under it).
const kueueUser = "system:serviceaccount:kueue-system:kueue-controller-manager"

// metricsCertDir is the folder Kueue reads its metrics serving certificate
// from when it does not manage certificates itself; the release hard-codes
// it.
const metricsCertDir = "/etc/kueue/metrics/certs"

// kueueStack runs Kueue's controller manager, as its documentation
// recommends for batch work of several teams, beside the default
// kube-scheduler: a ClusterQueue per team with the team's guarantee as its
// nominal quota, all in one cohort with a ClusterQueue holding the shared
// pool, fair sharing on, waitForPodsReady for all-or-nothing starts, and
// the Job webhooks served to the API server by URL with a certificate made
// here. Whole GPUs only, as with NVIDIA's device plugin.
type kueueStack struct {
	root string
	stockStack
	manager     *cluster.Process
	madeCertDir bool
}

func (s *kueueStack) start(ctx context.Context, sc evaluate.Scenario, dir string) error {
	bin := kueueBinary(s.root)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (%s: run make kueue)", errNoKueue, bin)
	}
	mod, err := kueueModule()
	if err != nil {
		return err
	}
	if err := s.stockStack.startCluster(ctx, sc, dir); err != nil {
		return err
	}
	c := s.c
	// The CRDs, from the module at the binary's version (server-side: some
	// are too large for client-side apply's annotation).
	k8sBin, err := cluster.BinDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(k8sBin, "kubectl")
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side",
		"-f", filepath.Join(mod, "config", "components", "crd", "bases")).CombinedOutput(); err != nil {
		return fmt.Errorf("applying Kueue's CRDs: %w: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "wait", "--for=condition=established",
		"--timeout=60s", "crd", "--all").CombinedOutput(); err != nil {
		return fmt.Errorf("waiting for Kueue's CRDs: %w: %s", err, out)
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}},
		metav1.CreateOptions{}); err != nil {
		return err
	}
	// Certificates: the webhooks' (served on 127.0.0.1) and the metrics
	// listener's, which the release reads from a fixed folder.
	serving, err := cluster.NewServingCert("127.0.0.1", "localhost")
	if err != nil {
		return err
	}
	certDir := filepath.Join(dir, "kueue-certs")
	if _, _, _, err := serving.Write(certDir); err != nil {
		return err
	}
	if err := s.metricsCert(serving); err != nil {
		return err
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "kueue-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(kueueConfig(ports[0], ports[1], certDir)), 0o600); err != nil {
		return err
	}
	kubeconfig, err := c.UserKubeconfig(kueueUser, "system:masters")
	if err != nil {
		return err
	}
	s.manager = cluster.NewProcess("kueue", bin, filepath.Join(dir, "kueue.log"),
		[]string{"--config=" + cfgPath, "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"})
	s.manager.Env = []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + kueueNamespace}
	if err := s.manager.Start(); err != nil {
		return err
	}
	if err := waitOK(ctx, s.manager, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil {
		return fmt.Errorf("kueue: %w", err)
	}
	if err := s.registerWebhooks(ctx, mod, ports[0], serving.CAPEM); err != nil {
		return err
	}
	return s.queues(ctx, sc)
}

// metricsCert writes the metrics certificate where the release reads it,
// unless one is there; stop removes what it wrote.
func (s *kueueStack) metricsCert(serving cluster.ServingCert) error {
	if _, err := os.Stat(filepath.Join(metricsCertDir, cluster.CertFile)); err == nil {
		return nil
	}
	if _, _, _, err := serving.Write(metricsCertDir); err != nil {
		return fmt.Errorf("kueue %s reads its metrics certificate from %s, which cannot be written here: %w", KueueVersion, metricsCertDir, err)
	}
	s.madeCertDir = true
	return nil
}

func kueueConfig(webhookPort, healthPort int, certDir string) string {
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
waitForPodsReady:
  timeout: 5m
  blockAdmission: true
  requeuingStrategy:
    timestamp: Eviction
integrations:
  frameworks: ["batch/job"]
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
`, kueueNamespace, healthPort, webhookPort, certDir)
}

// waitOK polls url until it answers 200 or p exits.
func waitOK(ctx context.Context, p *cluster.Process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		resp, err := http.Get(url) //nolint:gosec,noctx // a loopback probe of the harness's own process
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("exited: %w", p.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s: %w", url, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// registerWebhooks registers the webhooks of Kueue's own objects and of
// Jobs from the release's manifests, pointing them at the manager by URL
// with its CA. The others (pods, deployments, other frameworks) are left
// out: their integrations are off and nothing serves them.
func (s *kueueStack) registerWebhooks(ctx context.Context, mod string, port int, ca []byte) error {
	raw, err := os.ReadFile(filepath.Join(mod, "config", "components", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	keep := func(path string) bool {
		return strings.Contains(path, "-kueue-x-k8s-io-") || strings.HasSuffix(path, "-batch-v1-job")
	}
	url := func(path string) *string { u := fmt.Sprintf("https://127.0.0.1:%d%s", port, path); return &u }
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	client := s.c.Client().AdmissionregistrationV1()
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("kueue's webhook manifests: %w", err)
		}
		js, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		switch doc["kind"] {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal(js, &m); err != nil {
				return err
			}
			var hooks []admissionv1.MutatingWebhook
			for _, h := range m.Webhooks {
				if h.ClientConfig.Service != nil && keep(*h.ClientConfig.Service.Path) {
					h.ClientConfig = admissionv1.WebhookClientConfig{URL: url(*h.ClientConfig.Service.Path), CABundle: ca}
					hooks = append(hooks, h)
				}
			}
			m.Name, m.Webhooks = "kueue-mutating", hooks
			if _, err := client.MutatingWebhookConfigurations().Create(ctx, &m, metav1.CreateOptions{}); err != nil {
				return err
			}
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(js, &v); err != nil {
				return err
			}
			var hooks []admissionv1.ValidatingWebhook
			for _, h := range v.Webhooks {
				if h.ClientConfig.Service != nil && keep(*h.ClientConfig.Service.Path) {
					h.ClientConfig = admissionv1.WebhookClientConfig{URL: url(*h.ClientConfig.Service.Path), CABundle: ca}
					hooks = append(hooks, h)
				}
			}
			v.Name, v.Webhooks = "kueue-validating", hooks
			if _, err := client.ValidatingWebhookConfigurations().Create(ctx, &v, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	gvrFlavor  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	gvrCQ      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	gvrLQ      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	localQueue = "team"
)

// queues makes the flavor, a ClusterQueue per team in one cohort with the
// shared pool's own ClusterQueue, and a LocalQueue in each team's
// namespace.
func (s *kueueStack) queues(ctx context.Context, sc evaluate.Scenario) error {
	dyn, err := dynamic.NewForConfig(s.c.RESTConfig())
	if err != nil {
		return err
	}
	create := func(gvr schema.GroupVersionResource, ns, doc string) error {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			return fmt.Errorf("%s: %w", gvr.Resource, err)
		}
		var err error
		// The webhooks may need a moment after the manager says ready.
		for range 20 {
			if ns == "" {
				_, err = dyn.Resource(gvr).Create(ctx, &obj, metav1.CreateOptions{})
			} else {
				_, err = dyn.Resource(gvr).Namespace(ns).Create(ctx, &obj, metav1.CreateOptions{})
			}
			if err == nil {
				return nil
			}
			time.Sleep(500 * time.Millisecond)
		}
		return fmt.Errorf("creating %s %s: %w", gvr.Resource, obj.GetName(), err)
	}
	if err := create(gvrFlavor, "", "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"); err != nil {
		return err
	}
	cq := func(name string, gpus, borrow int64) string {
		cpu, mem := sc.Cluster.CPUMilli/1000*int64(sc.Cluster.Nodes), sc.Cluster.HostMiB*int64(sc.Cluster.Nodes)
		return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohortName: all
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, %s]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "%d"}
      - {name: memory, nominalQuota: "%dMi"}
      - {name: %s, nominalQuota: "%d", borrowingLimit: "%d"}
`, name, names.GPU, cpu, mem, names.GPU, gpus, borrow)
	}
	if err := create(gvrCQ, "", cq("shared-pool", sc.Pool(), 0)); err != nil {
		return err
	}
	for _, t := range sc.Teams {
		if err := create(gvrCQ, "", cq(t.Name, t.GPUs, sc.Pool())); err != nil {
			return err
		}
		lq := fmt.Sprintf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: %s, namespace: %s}\nspec: {clusterQueue: %s}\n",
			localQueue, s.namespace(t.Name), t.Name)
		if err := create(gvrLQ, s.namespace(t.Name), lq); err != nil {
			return err
		}
	}
	return nil
}

func (s *kueueStack) shape() shape {
	return shape{labels: map[string]string{"kueue.x-k8s.io/queue-name": localQueue}}
}

func (s *kueueStack) pids() map[string]int {
	out := s.stockStack.pids()
	if s.manager != nil && s.manager.Running() {
		out["kueue"] = s.manager.PID()
	}
	return out
}

func (s *kueueStack) stop() error {
	var errs []error
	if s.manager != nil {
		errs = append(errs, s.manager.Stop(10*time.Second))
	}
	errs = append(errs, s.stockStack.stop())
	if s.madeCertDir {
		errs = append(errs, os.RemoveAll(filepath.Dir(filepath.Dir(metricsCertDir))))
	}
	return errors.Join(errs...)
}
