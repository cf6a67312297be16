// Package jobset runs the real JobSet controller manager beside a local
// control plane (test/cluster): the binary hack/jobset.sh builds from the
// Go module proxy at Version, its CRD and webhook manifests from the module
// cache at the same version, its webhooks served to the API server by URL
// with a certificate made here. The scenario tests (test/e2e) run it to
// show what Rota does with the JobSets and Jobs it makes.
package jobset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rota-sched/rota/test/cluster"
)

// Version is the JobSet release run here, built by hack/jobset.sh (make
// jobset); test/tools/jobset/go.mod and test/tools/versions.env's
// JOBSET_VERSION must agree.
const Version = "v0.11.1"

// ErrNotBuilt: the manager binary or JobSet's source is missing.
var ErrNotBuilt = errors.New("the JobSet controller manager is not built")

// Binary is where hack/jobset.sh puts the manager, under the repository
// root.
func Binary(root string) string { return filepath.Join(root, ".cache", "jobset", "bin", "jobset") }

// Namespace is where the manager runs, as its manifests install it.
const Namespace = "jobset-system"

// User is the identity the manager authenticates as.
const User = "system:serviceaccount:jobset-system:jobset-controller-manager"

// JobSets is the JobSet resource.
var JobSets = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// Options configure Start.
type Options struct {
	// Root is the repository root (the binary is Binary(Root)).
	Root string
	// Dir holds the configuration, certificates and the manager's log.
	Dir string
}

// Manager is a running JobSet controller manager.
type Manager struct {
	c    *cluster.Cluster
	proc *cluster.Process
}

// Start installs JobSet's CRD and webhooks on c and starts the manager; it
// returns once the manager is ready and its webhooks answer. Stop it with
// Stop.
func Start(ctx context.Context, c *cluster.Cluster, o Options) (*Manager, error) {
	bin := Binary(o.Root)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (%s: run make jobset)", ErrNotBuilt, bin)
	}
	mod, err := cluster.ModuleDir("sigs.k8s.io/jobset", Version, "jobset")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	if err := c.ApplyCRDs(ctx, filepath.Join(mod, "config", "components", "crd", "bases")); err != nil {
		return nil, err
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	serving, err := cluster.NewServingCert("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(o.Dir, "jobset-certs")
	if _, _, _, err := serving.Write(certDir); err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(o.Dir, "jobset-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config(ports[0], ports[1], certDir)), 0o600); err != nil {
		return nil, err
	}
	kubeconfig, err := c.UserKubeconfig(User, "system:masters")
	if err != nil {
		return nil, err
	}
	m := &Manager{c: c}
	m.proc = cluster.NewProcess("jobset", bin, filepath.Join(o.Dir, "jobset.log"), []string{"--config=" + cfgPath, "--zap-log-level=2"})
	m.proc.Env = []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + Namespace}
	if err := m.proc.Start(); err != nil {
		return nil, err
	}
	if err := cluster.WaitOK(ctx, m.proc, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil {
		return m, fmt.Errorf("jobset: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(mod, "config", "components", "webhook", "manifests.yaml"))
	if err != nil {
		return m, err
	}
	if err := c.RegisterWebhooks(ctx, raw, "jobset", retarget(ports[0], serving.CAPEM)); err != nil {
		return m, err
	}
	return m, nil
}

// config is the manager's configuration: no leader election, no internal
// certificate management (the certificate is made here), webhooks and
// probes on 127.0.0.1, no metrics listener.
func config(webhookPort, healthPort int, certDir string) string {
	return fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
`, webhookPort, certDir, healthPort)
}

// retarget points JobSet's webhooks at the manager by URL. Its pod
// webhooks see only the pods of JobSets, as the release's kustomize
// patches select them.
func retarget(port int, ca []byte) cluster.Retarget {
	return func(cc *admissionv1.WebhookClientConfig, _, objects **metav1.LabelSelector) bool {
		if cc.Service == nil || cc.Service.Path == nil {
			return false
		}
		path := *cc.Service.Path
		if strings.HasSuffix(path, "--v1-pod") {
			*objects = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "jobset.sigs.k8s.io/jobset-name", Operator: metav1.LabelSelectorOpExists}}}
		}
		u := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		*cc = admissionv1.WebhookClientConfig{URL: &u, CABundle: ca}
		return true
	}
}

// Stop stops the manager and removes its webhook configurations. JobSet's
// CRD and objects stay.
func (m *Manager) Stop() error {
	if m == nil {
		return nil
	}
	return m.c.StopOperator(m.proc, "jobset")
}
