// Package kueue runs the real Kueue controller manager beside a local
// control plane (test/cluster): the binary hack/kueue.sh builds from the Go
// module proxy at Version, its CRDs and webhook manifests from the module
// cache at the same version, its webhooks served to the API server by URL
// with a certificate made here. The evaluation (test/evaluate) runs it as a
// stack of its own; the scenario tests (test/e2e) run it beside Rota.
package kueue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/test/cluster"
)

// Version is the Kueue release run here, built by hack/kueue.sh (make
// kueue); test/tools/versions.env's KUEUE_VERSION must agree.
const Version = "v0.17.0"

// ErrNotBuilt: the manager binary or Kueue's source is missing.
var ErrNotBuilt = errors.New("the Kueue manager is not built")

// Module is where the Go module cache holds Kueue's source: its CRDs and
// webhook manifests come from there, at the version the binary was built
// from.
func Module() (string, error) {
	dir, err := cluster.ModuleDir("sigs.k8s.io/kueue", Version, "kueue")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return dir, nil
}

// Binary is where hack/kueue.sh puts the manager, under the repository root.
func Binary(root string) string { return filepath.Join(root, ".cache", "kueue", "bin", "kueue") }

// Namespace is where Kueue runs, as its manifests install it.
const Namespace = "kueue-system"

// User is the identity the manager authenticates as (its API writes are
// counted under it).
const User = "system:serviceaccount:kueue-system:kueue-controller-manager"

// metricsCertDir is the folder Kueue reads its metrics serving certificate
// from when it does not manage certificates itself; the release hard-codes
// it.
const metricsCertDir = "/etc/kueue/metrics/certs"

// The Kueue objects the callers create.
var (
	ResourceFlavors = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	ClusterQueues   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	LocalQueues     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	Workloads       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	Topologies      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
)

// Options configure Start.
type Options struct {
	// Root is the repository root (the binary is Binary(Root)).
	Root string
	// Dir holds the configuration, certificates and the manager's log.
	Dir string
	// Frameworks are the integrations Kueue manages (default batch/job);
	// "pod" adds plain pods in namespaces labelled
	// ManagedNamespaceLabel=true (its webhook is called for those only).
	// Any workload that names a LocalQueue is managed.
	Frameworks []string
	// Config is appended to the generated configuration (YAML keys of
	// config.kueue.x-k8s.io/v1beta2 Configuration that it does not set).
	Config string
}

// Manager is a running Kueue controller manager.
type Manager struct {
	c           *cluster.Cluster
	proc        *cluster.Process
	dyn         dynamic.Interface
	madeCertDir bool
}

// ManagedNamespaceLabel marks the namespaces whose plain pods Kueue
// manages (with the "pod" framework).
const ManagedNamespaceLabel = "kueue-managed"

// Start installs Kueue's CRDs and webhooks on c and starts the manager;
// it returns once the manager is ready. Stop it with Stop.
func Start(ctx context.Context, c *cluster.Cluster, o Options) (*Manager, error) {
	bin := Binary(o.Root)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (%s: run make kueue)", ErrNotBuilt, bin)
	}
	mod, err := Module()
	if err != nil {
		return nil, err
	}
	if len(o.Frameworks) == 0 {
		o.Frameworks = []string{"batch/job"}
	}
	// The CRDs, from the module at the binary's version.
	if err := c.ApplyCRDs(ctx, filepath.Join(mod, "config", "components", "crd", "bases")); err != nil {
		return nil, err
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	m := &Manager{c: c}
	if m.dyn, err = dynamic.NewForConfig(c.RESTConfig()); err != nil {
		return nil, err
	}
	// Certificates: the webhooks' (served on 127.0.0.1) and the metrics
	// listener's, which the release reads from a fixed folder.
	serving, err := cluster.NewServingCert("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(o.Dir, "kueue-certs")
	if _, _, _, err := serving.Write(certDir); err != nil {
		return nil, err
	}
	if err := m.metricsCert(serving); err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(o.Dir, "kueue-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config(ports[0], ports[1], certDir, o.Frameworks)+o.Config), 0o600); err != nil {
		return nil, err
	}
	kubeconfig, err := c.UserKubeconfig(User, "system:masters")
	if err != nil {
		return nil, err
	}
	m.proc = cluster.NewProcess("kueue", bin, filepath.Join(o.Dir, "kueue.log"),
		[]string{"--config=" + cfgPath, "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"})
	m.proc.Env = []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + Namespace}
	if err := m.proc.Start(); err != nil {
		return nil, err
	}
	if err := cluster.WaitOK(ctx, m.proc, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil {
		return m, fmt.Errorf("kueue: %w", err)
	}
	if err := m.registerWebhooks(ctx, mod, ports[0], serving.CAPEM, o.Frameworks); err != nil {
		return m, err
	}
	return m, nil
}

// metricsCert writes the metrics certificate where the release reads it,
// unless one is there; Stop removes what it wrote.
func (m *Manager) metricsCert(serving cluster.ServingCert) error {
	if _, err := os.Stat(filepath.Join(metricsCertDir, cluster.CertFile)); err == nil {
		return nil
	}
	if _, _, _, err := serving.Write(metricsCertDir); err != nil {
		return fmt.Errorf("kueue %s reads its metrics certificate from %s, which cannot be written here: %w", Version, metricsCertDir, err)
	}
	m.madeCertDir = true
	return nil
}

// config is the manager's configuration, as Kueue's documentation
// recommends for batch work of several teams: waitForPodsReady for
// all-or-nothing starts and fair sharing.
func config(webhookPort, healthPort int, certDir string, frameworks []string) string {
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
managedJobsNamespaceSelector:
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, %s]}
waitForPodsReady:
  timeout: 5m
  blockAdmission: true
  requeuingStrategy:
    timestamp: Eviction
integrations:
  frameworks: [%s]
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
`, Namespace, healthPort, webhookPort, certDir, Namespace, strings.Join(quoted(frameworks), ", "))
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// webhookPaths are the webhook paths of each framework in the release's
// manifests.
var webhookPaths = map[string]string{"batch/job": "-batch-v1-job", "pod": "--v1-pod"}

// registerWebhooks registers the webhooks of Kueue's own objects and of the
// frameworks' objects from the release's manifests, pointing them at the
// manager by URL with its CA. The others are left out: their integrations
// are off and nothing serves them.
func (m *Manager) registerWebhooks(ctx context.Context, mod string, port int, ca []byte, frameworks []string) error {
	raw, err := os.ReadFile(filepath.Join(mod, "config", "components", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	keep := func(path string) bool {
		return strings.Contains(path, "-kueue-x-k8s-io-") || slices.ContainsFunc(frameworks, func(f string) bool {
			suffix, ok := webhookPaths[f]
			return ok && strings.HasSuffix(path, suffix)
		})
	}
	// retarget points a kept webhook at the manager by URL; the pod webhook
	// applies to the namespaces Kueue manages plain pods in.
	retarget := func(cc *admissionv1.WebhookClientConfig, sel, _ **metav1.LabelSelector) bool {
		if cc.Service == nil || cc.Service.Path == nil || !keep(*cc.Service.Path) {
			return false
		}
		path := *cc.Service.Path
		if strings.HasSuffix(path, webhookPaths["pod"]) {
			*sel = &metav1.LabelSelector{MatchLabels: map[string]string{ManagedNamespaceLabel: "true"}}
		}
		u := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		*cc = admissionv1.WebhookClientConfig{URL: &u, CABundle: ca}
		return true
	}
	return m.c.RegisterWebhooks(ctx, raw, "kueue", retarget)
}

// Create creates a Kueue object from YAML (cluster-scoped when namespace
// is ""), retrying for a few seconds: the webhooks may need a moment after
// the manager says ready.
func (m *Manager) Create(ctx context.Context, gvr schema.GroupVersionResource, namespace, doc string) error {
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		return fmt.Errorf("%s: %w", gvr.Resource, err)
	}
	var err error
	for range 20 {
		if namespace == "" {
			_, err = m.dyn.Resource(gvr).Create(ctx, &obj, metav1.CreateOptions{})
		} else {
			_, err = m.dyn.Resource(gvr).Namespace(namespace).Create(ctx, &obj, metav1.CreateOptions{})
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("creating %s %s: %w", gvr.Resource, obj.GetName(), err)
}

// Dynamic is a dynamic client of the cluster, for reading Kueue's objects.
func (m *Manager) Dynamic() dynamic.Interface { return m.dyn }

// PID is the manager's process ID, 0 when it is not running.
func (m *Manager) PID() int {
	if m == nil || m.proc == nil || !m.proc.Running() {
		return 0
	}
	return m.proc.PID()
}

// Stop stops the manager, removes its webhook configurations (nothing
// would answer them: with their failure policy the API server would refuse
// every Job) and the metrics certificate Start wrote. Kueue's CRDs and
// objects stay.
func (m *Manager) Stop() error {
	if m == nil {
		return nil
	}
	errs := []error{m.c.StopOperator(m.proc, "kueue")}
	if m.madeCertDir {
		errs = append(errs, os.RemoveAll(filepath.Dir(filepath.Dir(metricsCertDir))))
	}
	return errors.Join(errs...)
}
