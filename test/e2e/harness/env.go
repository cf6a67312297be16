// Package harness runs Rota for real on the local control plane of
// test/cluster: kube-scheduler configured to call the rota-extender binary
// (filter, prioritize, bind, preempt; nodeCacheCapable; example.com/gpu and
// example.com/gpu-memory managed and ignoredByScheduler), rota-admission as
// the chart's ValidatingWebhookConfiguration (and with Options.Queueing its
// MutatingWebhookConfiguration, the queue gate) the API server calls over
// HTTPS, and
// simulated GPU nodes: up to MaxPluginNodes of them run a real
// rota-device-plugin process (fake GPU backend) behind a kubeletstub, the
// others publish their topology annotation directly. A kubelet stand-in
// (Kubelet) allocates devices for bound pods through the stubs exactly as
// the kubelet's device manager does, and records every Allocate response;
// it also serves each plugin node's kubelet PodResources API (List of the
// active pods, podresources.go), which the plugin is given as
// --pod-resources-socket, as the chart does.
//
// Rota's binaries come from bin/ (make build); the control plane's from
// .cache/k8s/bin (make k8s-tools). Every process runs in its own process
// group with its log in the cluster folder and is stopped by PID.
//
// Rota's processes run as the chart's ServiceAccounts, not as the admin:
// Start applies the RBAC objects of deploy/rota.yaml (the chart's
// rendering) and gives each binary a client certificate for its
// ServiceAccount's user name, so only the chart's bindings authorize it
// (rbac.go; Options.AdminCredentials turns this off). The scenarios'
// own objects (namespaces, nodes, pods, the webhook registration) and the
// kubelet stand-in use the admin client.
//
// rota-extender serves its verbs as the chart does, in mutual TLS (tls.go):
// a serving certificate from a test CA, and a client CA whose certificate
// kube-scheduler presents (enableHTTPS, tlsConfig); its health, metrics,
// /ui and /debug are on a separate plain-HTTP ops listener (ExtenderURL).
//
// The e2e scenarios (test/e2e, build tag e2e) and the demo (test/demo) use
// it. An Env is safe for concurrent use.
package harness

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/cluster"
)

// Names of Rota's binaries in bin/.
var rotaBinaries = []string{"rota-extender", "rota-admission", "rota-device-plugin"}

// Objects the harness creates for the webhook.
const (
	SystemNamespace = "rota-system"
	QuotaConfigMap  = "rota-quota"
	QuotaKey        = "quota.yaml"
	WebhookName     = "rota-admission"
)

// Options configure Start.
type Options struct {
	// Dir is the folder for everything (default: a new temporary folder).
	// Start never removes it; Stop removes it only when RemoveDir is set.
	Dir string
	// RemoveDir makes Stop remove Dir.
	RemoveDir bool
	// BinDir holds Rota's binaries (default: bin/ at the repository root,
	// or $ROTA_BIN).
	BinDir string
	// Quota is the quota document (YAML) for rota-admission's ConfigMap;
	// empty means no team quota, every team unlimited.
	Quota string
	// ExtenderArgs and AdmissionArgs are appended to the generated flags.
	ExtenderArgs  []string
	AdmissionArgs []string
	// SchedulerConfig replaces the configuration extender/config.SchedulerConfig
	// renders (with GPU-free pods).
	SchedulerConfig string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)

	// AdminCredentials runs rota-extender, rota-admission and the device
	// plugins with the cluster's admin (system:masters) kubeconfig. By
	// default each runs as its chart ServiceAccount (ExtenderServiceAccount
	// ...), authorized only by the chart's RBAC, which Start applies.
	AdminCredentials bool
	// AuditLog turns on the API server's audit log of service-account
	// requests (test/cluster Options.AuditLog): Cluster.AuditLogFiles.
	AuditLog bool
	// AuditPolicy replaces cluster.DefaultAuditPolicy (with AuditLog).
	AuditPolicy string
	// Manifests is the file the chart's RBAC and webhook configurations
	// are read from (default: ManifestsFile at the repository root).
	Manifests string
	// Extenders is how many rota-extender replicas run: 1 (0 means 1) or
	// 2, an active-standby pair behind a Router (the stand-in for the
	// chart's Service that selects the leader).
	Extenders int
	// MemoryUnitMiB is the size of one gpu-memory unit for every part
	// (rota-extender, rota-admission, the device plugins and the simulated
	// nodes' topology); 0 means contract.DefaultMemoryUnitMiB.
	MemoryUnitMiB contract.MiB
	// APIServerArgs and SchedulerArgs are appended to kube-apiserver's and
	// kube-scheduler's flags (feature gates, runtime config).
	APIServerArgs, SchedulerArgs []string
	// Webhooks is how many rota-admission replicas run: 1 (0 means 1) or
	// 2, leader-elected as the chart runs them, behind a Router that sends
	// each connection to a ready replica (the stand-in for the Service).
	Webhooks int
	// Profiling serves Go's runtime profiles (/debug/pprof/) from every
	// Rota process: the extenders' ops listeners, the webhooks' listeners
	// and the device plugins' metrics listeners (GPUNode.MetricsURL).
	Profiling bool
	// Queueing also installs the chart's mutating webhook, which gates
	// every new GPU pod for Rota's queue (Env.SetQueueing turns it on and
	// off later). Off, GPU pods are created ungated and rota-admission
	// refuses those over quota at creation.
	Queueing bool
}

// Process is one of Rota's binaries running as a child in its own process
// group, its output appended to a log file in the cluster folder. It can be
// stopped (SIGTERM), killed (SIGKILL, as in kill -9) and started again.
type Process = cluster.Process

// newProcess runs binDir/name with its output in <dir>/<logName>.log.
func newProcess(binDir, name, logName, dir string, args []string) *Process {
	return cluster.NewProcess(name, filepath.Join(binDir, name), filepath.Join(dir, logName+".log"), args)
}

// Env is a running control plane with Rota.
type Env struct {
	Cluster *cluster.Cluster
	Client  kubernetes.Interface
	Names   contract.Names
	// Dir is the folder with the logs of every process.
	Dir string
	// ExtenderURL is rota-extender's ops listener, http://127.0.0.1:PORT
	// (/readyz, /metrics, /ui, /debug/pods); VerbsURL its verbs listener,
	// https://127.0.0.1:PORT, which answers only ExtenderTLS.SchedulerCert;
	// AdmissionURL https://127.0.0.1:PORT.
	ExtenderURL, VerbsURL, AdmissionURL string
	// ExtenderTLS is the verbs listener's certificates and key files.
	ExtenderTLS         *ExtenderTLS
	Extender, Admission *Process
	// Extenders are the rota-extender replicas (Extender is Extenders[0]'s
	// process). With two, VerbsURL and ExtenderURL are Router's, which
	// forwards to the replica holding the Lease.
	Extenders []*Replica
	Router    *Router
	// Webhooks are the rota-admission replicas (Admission is Webhooks[0]'s
	// process); with two, AdmissionURL is WebhookRouter's.
	Webhooks      []*Webhook
	WebhookRouter *Router
	// Kubelet is the kubelet stand-in for every simulated node.
	Kubelet *Kubelet
	// Version is the API server's version, e.g. v1.37.2.
	Version string
	// RBAC is the chart's RBAC, applied to the cluster (nil with
	// Options.AdminCredentials).
	RBAC *ChartRBAC
	// Users maps each Rota binary (rota-extender, rota-admission,
	// rota-device-plugin) to the user it authenticates as.
	Users map[string]string

	// RecordsKey is the key rota-extender signs its records with.
	RecordsKey     contract.RecordKey
	recordsKeyFile string
	recordsSince   time.Time

	opts      Options
	binDir    string
	kubeconfs map[string]string // binary -> kubeconfig
	unitMiB   contract.MiB
	admCA     []byte
	admClient *http.Client
	cancel    context.CancelFunc
	mu        sync.Mutex
	gpuNodes  map[string]*GPUNode
	pluginSeq int
	stopped   bool
}

// ErrMissingBinaries is wrapped by Start's error when a binary is missing.
var ErrMissingBinaries = errors.New("binaries missing")

// CheckBinaries reports which of Rota's and the control plane's binaries
// are missing, with the make target that builds them.
func CheckBinaries() error {
	var errs []error
	rotaDir, err := rotaBinDir("")
	if err != nil {
		return err
	}
	for _, b := range rotaBinaries {
		if !executable(filepath.Join(rotaDir, b)) {
			errs = append(errs, fmt.Errorf("%s not found in %s (run make build)", b, rotaDir))
		}
	}
	k8sDir, err := cluster.BinDir()
	if err != nil {
		return err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler"} {
		if !executable(filepath.Join(k8sDir, b)) {
			errs = append(errs, fmt.Errorf("%s not found in %s (run make k8s-tools)", b, k8sDir))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrMissingBinaries, errors.Join(errs...))
	}
	return nil
}

// Start starts etcd, kube-apiserver, rota-extender, rota-admission (and
// its webhook registration), kube-scheduler and the kubelet stand-in, in
// that order, and waits until each is ready. On error everything started
// is stopped; the folder is kept for its logs.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	if err := CheckBinaries(); err != nil {
		return nil, err
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir, err := rotaBinDir(o.BinDir)
	if err != nil {
		return nil, err
	}
	unit := o.MemoryUnitMiB
	if unit <= 0 {
		unit = contract.DefaultMemoryUnitMiB
	}
	e := &Env{opts: o, binDir: binDir, Names: contract.Default, unitMiB: unit,
		gpuNodes: map[string]*GPUNode{}, Dir: o.Dir}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "rota-e2e-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			o.RemoveDir = false
			e.opts.RemoveDir = false
			if stopErr := e.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	e.VerbsURL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	e.AdmissionURL = "https://127.0.0.1:" + strconv.Itoa(ports[1])
	e.ExtenderURL = "http://127.0.0.1:" + strconv.Itoa(ports[2])
	if e.ExtenderTLS, err = newExtenderTLS(filepath.Join(e.Dir, "extender-tls")); err != nil {
		return nil, err
	}
	// The records key, as the chart's Secret holds it: random, made now.
	key := make([]byte, 48)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	e.RecordsKey, e.recordsSince = contract.RecordKey(key), time.Now().Add(-time.Second)
	e.recordsKeyFile = filepath.Join(e.Dir, "records-key")
	if err := os.WriteFile(e.recordsKeyFile, key, 0o600); err != nil {
		return nil, err
	}

	schedCfg := strings.ReplaceAll(o.SchedulerConfig, extenderURLPlaceholder, e.VerbsURL)
	if schedCfg == "" {
		// The cluster renders {{.Kubeconfig}} as the scheduler's kubeconfig.
		// Every pod reaches the extender, as with the chart's default
		// (scheduler.gpuFreePods); the scheduler presents its client
		// certificate, as the chart's does.
		schedCfg = extconfig.SchedulerConfig(e.VerbsURL, "{{.Kubeconfig}}", extconfig.WithGPUFreePods(true),
			extconfig.WithTLS(e.ExtenderTLS.SchedulerTLS()))
	}
	began := time.Now()
	// A configuration given in Options gets the same tlsConfig (cluster
	// adds it to every extender entry that has none).
	e.Cluster, err = cluster.Start(ctx, cluster.Options{Dir: e.Dir, SchedulerConfig: schedCfg,
		NoScheduler: true, NoPodSimulator: true, AuditLog: o.AuditLog, AuditPolicy: o.AuditPolicy, ExtenderTLS: e.ExtenderTLS.clusterTLS(),
		APIServerArgs: o.APIServerArgs, SchedulerArgs: o.SchedulerArgs})
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	e.Client = e.Cluster.Client()
	if e.Version, err = e.Cluster.Version(); err != nil {
		return nil, err
	}
	logf("etcd and kube-apiserver %s ready in %s", e.Version, time.Since(began).Round(100*time.Millisecond))

	if err := e.setupIdentities(ctx); err != nil {
		return nil, err
	}
	if e.RBAC != nil {
		logf("chart RBAC applied; Rota's processes run as %s", strings.Join(slices.Sorted(maps.Values(e.Users)), ", "))
	}

	if err := e.startExtenders(ctx, ports[0], ports[2]); err != nil {
		return nil, err
	}
	logf("rota-extender ready: verbs at %s (mutual TLS), ops at %s (pid %d)", e.VerbsURL, e.ExtenderURL, e.Extender.PID())

	if err := e.startAdmission(ctx, ports[1]); err != nil {
		return nil, err
	}
	logf("rota-admission ready at %s (pid %d), webhook registered", e.AdmissionURL, e.Admission.PID())

	if err := e.Cluster.StartScheduler(ctx); err != nil {
		return nil, fmt.Errorf("starting kube-scheduler: %w", err)
	}
	logf("kube-scheduler ready, calling the extender for %s and %s", e.Names.GPU, e.Names.GPUMemory)

	kctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.Kubelet = newKubelet(e.Client, e.Names)
	if err := e.Kubelet.start(kctx); err != nil {
		return nil, err
	}
	return e, nil
}

const extenderURLPlaceholder = "http://rota-extender.invalid"

// ExtenderURLPlaceholder stands for the extender's URL in
// Options.SchedulerConfig and SetSchedulerConfig; they replace it.
const ExtenderURLPlaceholder = extenderURLPlaceholder

// SetSchedulerConfig makes cfg (as Options.SchedulerConfig) kube-scheduler's
// configuration from its next start (Cluster.StartScheduler) on.
func (e *Env) SetSchedulerConfig(cfg string) error {
	return e.Cluster.SetSchedulerConfig(strings.ReplaceAll(cfg, extenderURLPlaceholder, e.VerbsURL))
}

// setupIdentities creates SystemNamespace and decides who each Rota binary
// runs as: the admin, or (default) its chart ServiceAccount, after applying
// the chart's RBAC. The ServiceAccounts authenticate with client
// certificates that name the same user and groups a token would, so the
// chart's bindings authorize them exactly as in a real cluster.
func (e *Env) setupIdentities(ctx context.Context) error {
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	accounts := map[string]string{
		"rota-extender":      ExtenderServiceAccount,
		"rota-admission":     AdmissionServiceAccount,
		"rota-device-plugin": DevicePluginServiceAccount,
	}
	e.kubeconfs, e.Users = map[string]string{}, map[string]string{}
	if e.opts.AdminCredentials {
		for bin := range accounts {
			e.kubeconfs[bin], e.Users[bin] = e.Cluster.Kubeconfig, "rota-admin (system:masters)"
		}
		return nil
	}
	path, err := e.manifestsPath()
	if err != nil {
		return err
	}
	rbac, err := LoadChartRBAC(path)
	if err != nil {
		return fmt.Errorf("reading the chart's RBAC: %w", err)
	}
	for bin, sa := range accounts {
		if !rbac.HasServiceAccount(SystemNamespace, sa) {
			return fmt.Errorf("%s defines no ServiceAccount %s/%s for %s", path, SystemNamespace, sa, bin)
		}
		if e.kubeconfs[bin], err = e.Cluster.ServiceAccountKubeconfig(SystemNamespace, sa); err != nil {
			return err
		}
		e.Users[bin] = cluster.ServiceAccountUser(SystemNamespace, sa)
	}
	if err := rbac.Apply(ctx, e.Client); err != nil {
		return fmt.Errorf("applying the chart's RBAC from %s: %w", path, err)
	}
	e.RBAC = rbac
	return nil
}

// manifestsPath is Options.Manifests or ManifestsFile at the repository root.
func (e *Env) manifestsPath() (string, error) {
	if e.opts.Manifests != "" {
		return e.opts.Manifests, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ManifestsFile), nil
}

// StartExtender starts rota-extender (Extenders[0]) again and waits for
// its /readyz; when it is the only replica, also until it leads (after a
// kill -9, once the lease of its previous run has lapsed).
func (e *Env) StartExtender(ctx context.Context) error {
	r := e.Extenders[0]
	if err := e.StartReplica(ctx, r); err != nil {
		return err
	}
	if len(e.Extenders) == 1 {
		return e.WaitLeading(ctx, r)
	}
	return nil
}

// KillExtender kills rota-extender with SIGKILL (kill -9).
func (e *Env) KillExtender() error { return e.Extender.Kill() }

// startAdmission generates the serving certificate, writes the quota
// ConfigMap, starts rota-admission, waits for its /readyz and registers it.
func (e *Env) startAdmission(ctx context.Context, port int) error {
	serving, err := cluster.NewServingCert("127.0.0.1")
	if err != nil {
		return err
	}
	_, certFile, keyFile, err := serving.Write(filepath.Join(e.Dir, "admission-certs"))
	if err != nil {
		return err
	}
	e.admCA = serving.CAPEM
	q := e.opts.Quota
	if q == "" {
		q = "unknownTeams: unlimited\n"
	}
	if _, err := e.Client.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: QuotaConfigMap},
		Data:       map[string]string{QuotaKey: q},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	n := max(e.opts.Webhooks, 1)
	if n > 2 {
		return fmt.Errorf("Options.Webhooks: %d replicas; the harness runs one or two", n)
	}
	ports := []int{port}
	if n > 1 {
		if ports, err = cluster.FreePorts(n); err != nil {
			return err
		}
	}
	for i := range n {
		args := []string{
			"--kubeconfig=" + e.kubeconfs["rota-admission"],
			"--listen=127.0.0.1:" + strconv.Itoa(ports[i]),
			"--tls-cert-file=" + certFile,
			"--tls-key-file=" + keyFile,
			"--quota-namespace=" + SystemNamespace,
			"--quota-config-map=" + QuotaConfigMap,
			"--quota-config-map-key=" + QuotaKey,
			"--kube-api-qps=500", "--kube-api-burst=1000",
			"--queue-controller-users=" + e.queueControllerUser(),
			"--memory-unit-mib=" + strconv.FormatInt(int64(e.unitMiB), 10),
			"--v=2",
		}
		name := "rota-admission"
		if n > 1 {
			// As the chart runs its replicas: one admits, the other
			// stands by, not ready.
			name = "rota-admission-" + strconv.Itoa(i)
			args = append(args, "--leader-elect=true", "--leader-elect-resource-name="+WebhookName, "--identity="+name)
		} else {
			args = append(args, "--leader-elect=false")
		}
		if e.opts.Profiling {
			args = append(args, "--profiling")
		}
		w := &Webhook{Process: newProcess(e.binDir, "rota-admission", name, e.Dir, append(args, e.opts.AdmissionArgs...)),
			URL: "https://127.0.0.1:" + strconv.Itoa(ports[i])}
		e.Webhooks = append(e.Webhooks, w)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(serving.CAPEM)
	e.admClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	e.Admission = e.Webhooks[0].Process
	if n > 1 {
		if e.WebhookRouter, err = e.startWebhookRouter(port); err != nil {
			return fmt.Errorf("routing stand-in: %w", err)
		}
	}
	for i, w := range e.Webhooks {
		if err := w.Start(); err != nil {
			return err
		}
		// The first replica leads; a standby answers /healthz only.
		path := "/readyz"
		if i > 0 {
			path = "/healthz"
		}
		if err := waitHTTP(ctx, w.Process, w.URL+path, e.admClient); err != nil {
			return err
		}
	}
	return e.registerWebhook(ctx)
}

// registerWebhook creates the chart's ValidatingWebhookConfiguration (from
// the manifests, pointed at the local rota-admission: its rules,
// namespaceSelector and matchConditions are the chart's), and with
// Options.Queueing its MutatingWebhookConfiguration.
func (e *Env) registerWebhook(ctx context.Context) error {
	w, err := e.chartWebhooks()
	if err != nil {
		return err
	}
	if _, err := e.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, w.Validating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering the webhook: %w", err)
	}
	// The API server picks the configuration up asynchronously; a denied
	// dry-run proves the webhook is called.
	if err := e.waitWebhookCalled(ctx); err != nil {
		return err
	}
	if e.opts.Queueing {
		if _, err = e.SetQueueing(ctx, true); err != nil {
			return err
		}
	}
	if e.opts.AdminCredentials {
		// The policy lets only Rota's ServiceAccounts write Rota's
		// records, and Rota runs as the admin here.
		if e.opts.Logf != nil {
			e.opts.Logf("records policy not installed: Rota's processes run as the admin (Options.AdminCredentials)")
		}
		return nil
	}
	_, err = e.SetRecordsPolicy(ctx, true)
	return err
}

// queueControllerUser is the user rota-extender (the queue controller)
// authenticates as: its ServiceAccount, or the admin test/cluster's admin
// certificate names.
func (e *Env) queueControllerUser() string {
	if e.opts.AdminCredentials {
		return "rota-admin"
	}
	return cluster.ServiceAccountUser(SystemNamespace, ExtenderServiceAccount)
}

// waitWebhookCalled creates (dry-run) a pod with an invalid GPU request
// until the webhook denies it.
func (e *Env) waitWebhookCalled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rota-webhook-probe", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceName(e.Names.GPU): mustQuantity("1"), corev1.ResourceName(e.Names.GPUMemory): mustQuantity("1")}}}}},
	}
	for {
		_, err := e.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if isWebhookDenial(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server does not call the webhook (last answer: %w)\n%s", err, e.Admission.LogTail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the kubelet stand-in, the device plugins, rota-admission,
// rota-extender and the control plane, and removes the folder if asked.
func (e *Env) Stop() error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	nodes := make([]*GPUNode, 0, len(e.gpuNodes))
	for _, n := range e.gpuNodes {
		nodes = append(nodes, n)
	}
	e.mu.Unlock()
	var errs []error
	if e.cancel != nil {
		e.cancel()
		e.Kubelet.wait()
	}
	for _, n := range nodes {
		if n.Plugin != nil {
			errs = append(errs, n.Plugin.Stop(5*time.Second))
		}
		if n.Stub != nil {
			errs = append(errs, n.Stub.Close())
		}
		if n.podRes != nil {
			errs = append(errs, n.podRes.Close())
		}
	}
	for _, rt := range []*Router{e.Router, e.WebhookRouter} {
		if rt != nil {
			errs = append(errs, rt.Close())
		}
	}
	for _, p := range append(e.webhookProcesses(), e.extenderProcesses()...) {
		if p != nil {
			errs = append(errs, p.Stop(5*time.Second))
		}
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	if e.opts.RemoveDir {
		errs = append(errs, os.RemoveAll(e.Dir))
	}
	return errors.Join(errs...)
}

// LogTails returns the end of every Rota process log, for failure reports.
func (e *Env) LogTails(n int) string {
	var s string
	for _, p := range append(e.extenderProcesses(), e.webhookProcesses()...) {
		if p != nil {
			s += "\n" + p.LogTail(n)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, gn := range e.gpuNodes {
		if gn.Plugin != nil {
			s += "\n" + gn.Plugin.LogTail(n/2)
		}
	}
	return s
}

// waitHTTP polls url until it answers 200, the process exits or ctx ends.
func waitHTTP(ctx context.Context, p *Process, url string, client *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-p.Exited():
			return p.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %w)\n%s", p.Name, ctx.Err(), last, p.LogTail(30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// rotaBinDir returns dir, $ROTA_BIN, or bin/ at the repository root.
func rotaBinDir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	if d := os.Getenv("ROTA_BIN"); d != "" {
		return filepath.Abs(d)
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("%w; set ROTA_BIN", err)
	}
	return filepath.Join(root, "bin"), nil
}

// repoRoot returns the repository root: the folder above .cache/k8s/bin
// (cluster.BinDir), or with $ROTA_K8S_BIN set, the first folder with a
// go.mod above the working directory.
func repoRoot() (string, error) {
	k8s, err := cluster.BinDir()
	if err != nil {
		return "", err
	}
	if os.Getenv(cluster.BinDirEnv) == "" {
		// BinDir is <root>/.cache/k8s/bin.
		return filepath.Dir(filepath.Dir(filepath.Dir(k8s))), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above the working directory")
		}
	}
}
