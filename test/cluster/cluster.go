package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

const (
	// serviceCIDR is the service IP range; serviceIP is the first address in
	// it, the "kubernetes" Service's cluster IP, which the serving certificate names.
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"

	defaultStartTimeout = 2 * time.Minute
	stopGrace           = 10 * time.Second
	// After SIGTERM, kube-apiserver stops listening within milliseconds but
	// then waits (up to 60s) for open watch connections to end, and clients
	// such as the scheduler keep theirs open. Its state is in etcd, so a
	// short grace before SIGKILL loses nothing.
	apiServerStopGrace = 2 * time.Second
)

// Options configures Start. The zero value starts etcd, kube-apiserver and a
// kube-scheduler with the default profile, in a new temporary folder.
type Options struct {
	// BinDir holds etcd, kube-apiserver and kube-scheduler; default BinDir().
	BinDir string
	// Dir is the folder for state, certificates, kubeconfigs and logs. Default:
	// a new folder under os.TempDir(), removed by Stop unless KeepDir is set.
	// A Dir the caller supplies is never removed.
	Dir string
	// KeepDir keeps the temporary folder after Stop (its path is Cluster.Dir).
	KeepDir bool

	// SchedulerConfig is a text/template of a KubeSchedulerConfiguration
	// (YAML); {{.Kubeconfig}} expands to the scheduler's kubeconfig file (see
	// SchedulerTemplateData). Start fills in clientConnection.kubeconfig when
	// the template leaves it out, forces leaderElection.leaderElect to false,
	// and appends Extender to extenders. Empty means the default profile.
	SchedulerConfig string
	// Extender, when set, is added to the scheduler configuration.
	Extender *Extender
	// ExtenderTLS, when set, is the tlsConfig (with enableHTTPS) of every
	// extender entry of the scheduler configuration that has none: the
	// client certificate kube-scheduler presents to an extender that
	// requires one.
	ExtenderTLS *ExtenderTLS
	// NoScheduler starts only etcd and the API server; StartScheduler starts it later.
	NoScheduler bool
	// ServiceAccountAdmission keeps the API server's ServiceAccount admission
	// plugin on (pods get their API token), for a test that runs
	// kube-controller-manager's serviceaccount controller.
	ServiceAccountAdmission bool

	// APIServerArgs and SchedulerArgs are appended to the generated flags
	// (a later flag wins over an earlier one).
	APIServerArgs []string
	SchedulerArgs []string

	// NoPodSimulator turns off the PodSimulator that reports pods bound to
	// simulated nodes as Running.
	NoPodSimulator bool
	// NodeLeaseInterval is how often simulated nodes renew their Lease;
	// 0 means 10s, negative turns renewal off.
	NodeLeaseInterval time.Duration

	// StartTimeout bounds the wait for each component to become ready; default 2m.
	StartTimeout time.Duration

	// AuditLog turns on the API server's audit log, written as JSON lines
	// to Cluster.AuditLogFile (<Dir>/audit.log). The default policy,
	// DefaultAuditPolicy, records requests of service accounts only, at
	// Metadata level (who, verb, resource, response code; no bodies), which
	// costs little next to the requests themselves.
	AuditLog bool
	// AuditPolicy replaces DefaultAuditPolicy (an audit.k8s.io/v1 Policy in YAML).
	AuditPolicy string
}

// DefaultAuditPolicy records, at Metadata level, every request of a user in
// group system:serviceaccounts: service-account tokens carry that group, and
// so do the certificates ServiceAccountKubeconfig mints. An audit policy
// matches users by exact name or group, not by prefix, so the group stands
// for "users named system:serviceaccount:*". Everything else is not logged.
// RequestReceived is omitted (ResponseComplete repeats it with the answer);
// ResponseStarted is kept, since a watch that is still open at the end of a
// test has logged nothing else.
const DefaultAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
`

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	// Dir is the folder with state, certificates, kubeconfigs and the
	// processes' logs (etcd.log, kube-apiserver.log, kube-scheduler.log).
	Dir string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// SchedulerKubeconfig is the path of the kubeconfig the scheduler uses
	// (user system:kube-scheduler, bound by the default RBAC policy).
	SchedulerKubeconfig string
	// AuditLogFile is the API server's audit log with Options.AuditLog
	// (lumberjack rotates it to audit-<time>.log past 100 MB; AuditLogFiles
	// lists them all); empty without.
	AuditLogFile string
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string
	// EtcdURL is http://127.0.0.1:<port>.
	EtcdURL string

	// Nodes creates simulated nodes and renews their leases.
	Nodes *NodeSimulator
	// Pods plays the kubelet for pods on simulated nodes; nil with Options.NoPodSimulator.
	Pods *PodSimulator

	opts       Options
	removeDir  bool
	pki        *pki
	restConfig *rest.Config
	client     kubernetes.Interface

	mu            sync.Mutex // serializes starting and stopping processes
	etcd          *Process
	apiServer     *Process
	scheduler     *Process
	schedulerPort int
	// kube-controller-manager, once StartControllerManager ran, and its
	// controllers (sorted).
	controllerManager *Process
	controllers       []string
	stopped           bool
	apiServerRuns     []APIServerRun

	cancel context.CancelFunc // stops the simulators
	wg     sync.WaitGroup
}

// Start starts etcd, kube-apiserver and (unless opts.NoScheduler)
// kube-scheduler, and waits until each is ready. On error, everything it
// started is stopped again. The processes outlive ctx; Stop ends them.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	if err := checkBinaries(opts.BinDir); err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	c := &Cluster{opts: opts, Dir: opts.Dir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "rota-cluster-"); err != nil {
			return nil, err
		}
		c.removeDir = !opts.KeepDir
	} else if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// Keep the logs the error points at.
			c.removeDir = false
			if stopErr := c.Stop(); stopErr != nil {
				klog.ErrorS(stopErr, "Stopping a cluster that failed to start")
			}
		}
	}()

	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("creating certificates: %w", err)
	}
	c.pki = p
	ports, err := drawPorts(4)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.schedulerPort = ports[3]
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	if err := c.writeKubeconfigs(p); err != nil {
		return nil, err
	}

	// Each binary logs to <Dir>/<binary>.log.
	newProcess := func(name string, args []string) *Process {
		return NewProcess(name, filepath.Join(opts.BinDir, name), filepath.Join(c.Dir, name+".log"), args)
	}
	// A port FreePorts found free can be taken before the server binds it
	// (another test process's server, or its FreePorts probe): a server
	// that fails for that starts again on newly drawn ports, at most
	// portAttempts times.
	for attempt := 1; ; attempt++ {
		c.etcd = newProcess(etcdBin, etcdArgs(c.Dir, etcdClient, etcdPeer))
		from := logSize(c.etcd)
		err := c.etcd.Start()
		if err == nil {
			err = c.waitHTTP(ctx, c.etcd, c.EtcdURL+"/health", nil)
		}
		if err == nil {
			break
		}
		if attempt == portAttempts || !portTaken(c.etcd, from) {
			return nil, err
		}
		klog.InfoS("A port etcd drew was taken; starting it on others", "attempt", attempt, "err", err)
		_ = c.etcd.Kill()
		if err := os.RemoveAll(filepath.Join(c.Dir, "etcd")); err != nil {
			return nil, err
		}
		ports, err := FreePorts(2)
		if err != nil {
			return nil, err
		}
		etcdClient, etcdPeer = ports[0], ports[1]
		c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	}

	apiArgs := apiServerArgs(p, c.EtcdURL, apiPort)
	if opts.ServiceAccountAdmission {
		// A list flag: a second --disable-admission-plugins would add to it.
		apiArgs = slices.DeleteFunc(apiArgs, func(a string) bool { return strings.HasPrefix(a, "--disable-admission-plugins=") })
		apiArgs = append(apiArgs, "--disable-admission-plugins=TaintNodesByCondition")
	}
	if opts.AuditLog {
		auditArgs, err := c.auditArgs(opts.AuditPolicy)
		if err != nil {
			return nil, err
		}
		apiArgs = append(apiArgs, auditArgs...)
	}
	for attempt := 1; ; attempt++ {
		c.apiServer = newProcess(apiServerBin, append(slices.Clone(apiArgs), opts.APIServerArgs...))
		from := logSize(c.apiServer)
		err := c.startAPIServer(ctx)
		if err == nil {
			break
		}
		if attempt == portAttempts || !portTaken(c.apiServer, from) {
			return nil, err
		}
		klog.InfoS("The port kube-apiserver drew was taken; starting it on another", "attempt", attempt, "err", err)
		_ = c.apiServer.Kill()
		c.apiServerRuns = c.apiServerRuns[:len(c.apiServerRuns)-1]
		ports, err := FreePorts(1)
		if err != nil {
			return nil, err
		}
		old := "--secure-port=" + strconv.Itoa(apiPort)
		apiPort = ports[0]
		for i, a := range apiArgs {
			if a == old {
				apiArgs[i] = "--secure-port=" + strconv.Itoa(apiPort)
			}
		}
		c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		if err := c.writeKubeconfigs(p); err != nil {
			return nil, err
		}
	}

	schedConfigFile, err := c.writeSchedulerConfig(opts.SchedulerConfig)
	if err != nil {
		return nil, err
	}
	c.scheduler = newProcess(schedulerBin,
		append(schedulerArgs(c.Dir, schedConfigFile, c.schedulerPort), opts.SchedulerArgs...))
	if !opts.NoScheduler {
		for attempt := 1; ; attempt++ {
			from := logSize(c.scheduler)
			err := c.StartScheduler(ctx)
			if err == nil {
				break
			}
			if attempt == portAttempts || !portTaken(c.scheduler, from) {
				return nil, err
			}
			klog.InfoS("The port kube-scheduler drew was taken; starting it on another", "attempt", attempt, "err", err)
			_ = c.scheduler.Kill()
			ports, err := FreePorts(1)
			if err != nil {
				return nil, err
			}
			c.schedulerPort = ports[0]
			c.scheduler = newProcess(schedulerBin,
				append(schedulerArgs(c.Dir, schedConfigFile, c.schedulerPort), opts.SchedulerArgs...))
		}
	}

	version, err := c.Version()
	if err != nil {
		return nil, err
	}
	simCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.Nodes = NewNodeSimulator(c.client)
	c.Nodes.KubeletVersion = version
	if opts.NodeLeaseInterval != 0 {
		c.Nodes.LeaseInterval = opts.NodeLeaseInterval
	}
	c.wg.Go(func() { c.Nodes.Run(simCtx) })
	if !opts.NoPodSimulator {
		c.Pods = NewPodSimulator(c.client, c.Nodes)
		if err := c.Pods.Start(simCtx); err != nil {
			return nil, err
		}
	}
	klog.V(1).InfoS("Control plane ready", "dir", c.Dir, "apiServer", c.APIServerURL,
		"version", version, "took", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// Client returns an admin clientset with client-side throttling raised to
// 1000 QPS (the client-go default of 5 would dominate any measurement).
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Version returns the API server's version, e.g. "v1.37.2".
func (c *Cluster) Version() (string, error) {
	v, err := c.client.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the API server version: %w", err)
	}
	return v.GitVersion, nil
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port
// with the same etcd, and waits until it is ready. Clients keep working after
// their watches reconnect.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster is stopped")
	}
	if err := c.apiServer.Stop(apiServerStopGrace); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}

// RestartStorage stops kube-apiserver and etcd, starts etcd again on the
// same data folder and ports, and then kube-apiserver: the whole storage
// path goes away and comes back, as in a control-plane node's reboot.
func (c *Cluster) RestartStorage(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster is stopped")
	}
	if err := c.apiServer.Stop(apiServerStopGrace); err != nil {
		return err
	}
	if err := c.etcd.Stop(apiServerStopGrace); err != nil {
		return err
	}
	if err := c.etcd.Start(); err != nil {
		return fmt.Errorf("starting etcd again: %w", err)
	}
	if err := c.waitHTTP(ctx, c.etcd, c.EtcdURL+"/health", nil); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}

// StopScheduler stops kube-scheduler. Pods stay Pending until StartScheduler.
func (c *Cluster) StopScheduler() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scheduler.Stop(stopGrace)
}

// KillScheduler kills kube-scheduler with SIGKILL (kill -9). Pods stay
// Pending until StartScheduler.
func (c *Cluster) KillScheduler() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scheduler.Kill()
}

// SetSchedulerConfig renders tmpl as Options.SchedulerConfig is rendered
// and writes it as kube-scheduler's configuration: the next StartScheduler
// runs with it.
func (c *Cluster) SetSchedulerConfig(tmpl string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.writeSchedulerConfig(tmpl)
	return err
}

// writeSchedulerConfig renders tmpl (schedulerConfig) into the file
// kube-scheduler reads at its start, and returns the file's path.
func (c *Cluster) writeSchedulerConfig(tmpl string) (string, error) {
	config, err := schedulerConfig(tmpl, c.SchedulerKubeconfig, c.opts.Extender, c.opts.ExtenderTLS)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "scheduler-config.yaml")
	return path, os.WriteFile(path, config, 0o600)
}

// StartScheduler starts kube-scheduler (again) with the configuration Start
// (or SetSchedulerConfig) wrote, and waits until it reports ready.
func (c *Cluster) StartScheduler(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster is stopped")
	}
	if err := c.scheduler.Start(); err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // its self-signed serving cert
	}}
	return c.waitHTTP(ctx, c.scheduler, "https://127.0.0.1:"+strconv.Itoa(c.schedulerPort)+"/readyz", insecure)
}

// SchedulerRunning reports whether kube-scheduler is running.
func (c *Cluster) SchedulerRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scheduler != nil && c.scheduler.Running()
}

// LogFile returns the log path of component "etcd", "kube-apiserver",
// "kube-scheduler" or "kube-controller-manager".
func (c *Cluster) LogFile(component string) string {
	return filepath.Join(c.Dir, component+".log")
}

// Stop stops the simulators and then kube-scheduler, kube-apiserver and etcd
// (SIGTERM to each process group, SIGKILL after a grace period), and removes
// the temporary folder unless it is to be kept. It is safe to call more than once.
func (c *Cluster) Stop() error {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	if c.Pods != nil {
		c.Pods.Wait()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	for _, p := range []*Process{c.controllerManager, c.scheduler, c.apiServer, c.etcd} {
		if p == nil {
			continue
		}
		grace := stopGrace
		if p == c.apiServer {
			grace = apiServerStopGrace
		}
		errs = append(errs, p.Stop(grace))
	}
	if c.removeDir {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// APIServerRun is one start of kube-apiserver: when it was started and
// when it answered /readyz. Between the two, clients that reconnect early
// may be refused (403) by an RBAC authorizer that has not read its roles yet.
type APIServerRun struct{ Started, Ready time.Time }

// APIServerRuns returns every start of kube-apiserver (Start, then each
// RestartAPIServer), oldest first.
func (c *Cluster) APIServerRuns() []APIServerRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.apiServerRuns)
}

// startAPIServer is called by Start and, with c.mu held, RestartAPIServer.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	run := APIServerRun{Started: time.Now()}
	if err := c.apiServer.Start(); err != nil {
		return err
	}
	err := c.waitReady(ctx, c.apiServer, func(ctx context.Context) error {
		_, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
	run.Ready = time.Now()
	c.apiServerRuns = append(c.apiServerRuns, run)
	return err
}

func (c *Cluster) writeKubeconfigs(p *pki) error {
	admin, err := p.ClientCert("rota-admin", "system:masters")
	if err != nil {
		return err
	}
	sched, err := p.ClientCert("system:kube-scheduler")
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	c.SchedulerKubeconfig = filepath.Join(c.Dir, "scheduler.kubeconfig")
	for path, cert := range map[string]ClientCert{c.Kubeconfig: admin, c.SchedulerKubeconfig: sched} {
		if err := c.writeKubeconfig(path, cert); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.UserAgent = "rota-test-cluster"
	c.restConfig = cfg
	// The typed client speaks protobuf, as kube-scheduler and Rota's do, so
	// that the tests' own watches (make load's bind watch) ask the API
	// server for no JSON encoding that the parts under test do not.
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.client, err = kubernetes.NewForConfig(pb)
	return err
}

// writeKubeconfig writes a kubeconfig for the API server that
// authenticates with cert.
func (c *Cluster) writeKubeconfig(path string, cert ClientCert) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["rota"] = &clientcmdapi.Cluster{Server: c.APIServerURL, CertificateAuthorityData: c.pki.PEM}
	kc.AuthInfos["rota"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.CertPEM, ClientKeyData: cert.KeyPEM}
	kc.Contexts["rota"] = &clientcmdapi.Context{Cluster: "rota", AuthInfo: "rota"}
	kc.CurrentContext = "rota"
	return clientcmd.WriteToFile(*kc, path)
}

// UserKubeconfig mints a client certificate for user in groups (the API
// server's x509 authenticator takes the common name as the user name and
// the organizations as groups; every such user is also in
// system:authenticated) and writes a kubeconfig with it to
// <Dir>/user-<user>.kubeconfig, returning its path. The user has only what
// RBAC grants it.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	if user == "" {
		return "", errors.New("empty user name")
	}
	cert, err := c.pki.ClientCert(user, groups...)
	if err != nil {
		return "", err
	}
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, user)
	path := filepath.Join(c.Dir, "user-"+name+".kubeconfig")
	if err := c.writeKubeconfig(path, cert); err != nil {
		return "", err
	}
	return path, nil
}

// ServiceAccountUser returns the user name of service account
// namespace/name, system:serviceaccount:<namespace>:<name>: the name RBAC
// subjects of kind ServiceAccount match.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates exactly as
// a token of service account namespace/name would: user
// ServiceAccountUser(namespace, name) in groups system:serviceaccounts and
// system:serviceaccounts:<namespace>. RoleBindings and ClusterRoleBindings
// with that ServiceAccount as subject authorize it, and DefaultAuditPolicy
// records its requests. The ServiceAccount object itself need not exist.
func (c *Cluster) ServiceAccountKubeconfig(namespace, name string) (string, error) {
	return c.UserKubeconfig(ServiceAccountUser(namespace, name),
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// auditArgs writes the audit policy and returns the API server's audit flags.
func (c *Cluster) auditArgs(policy string) ([]string, error) {
	if policy == "" {
		policy = DefaultAuditPolicy
	}
	policyFile := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	c.AuditLogFile = filepath.Join(c.Dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policyFile,
		"--audit-log-path=" + c.AuditLogFile,
		"--audit-log-format=json",
		// Blocking: each event is written before the request returns, so
		// the file is complete when the test reads it.
		"--audit-log-mode=blocking",
		"--audit-log-maxbackup=0", // keep every rotated file
		"--audit-log-compress=false",
	}, nil
}

// AuditLogFiles returns the audit log and the files it was rotated to,
// oldest first; nil without Options.AuditLog.
func (c *Cluster) AuditLogFiles() ([]string, error) {
	if c.AuditLogFile == "" {
		return nil, nil
	}
	rotated, err := filepath.Glob(filepath.Join(c.Dir, "audit-*.log"))
	if err != nil {
		return nil, err
	}
	sort.Strings(rotated) // audit-<RFC 3339-like time>.log sorts by time
	return append(rotated, c.AuditLogFile), nil
}

// waitHTTP polls url until it answers 200 OK.
func (c *Cluster) waitHTTP(ctx context.Context, p *Process, url string, client *http.Client) error {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	return c.waitReady(ctx, p, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}

// waitReady polls ready until it succeeds, p exits, ctx ends or the start
// timeout passes.
func (c *Cluster) waitReady(ctx context.Context, p *Process, ready func(context.Context) error) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		last = ready(attempt)
		cancelAttempt()
		if last == nil {
			klog.V(2).InfoS("Component ready", "component", p.Name, "pid", p.cmd.Process.Pid,
				"took", time.Since(began).Round(time.Millisecond))
			return nil
		}
		select {
		case <-p.Exited():
			return p.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w (last check: %w)\n%s",
				p.Name, time.Since(began).Round(time.Second), ctx.Err(), last, p.LogTail(30))
		case <-tick.C:
		}
	}
}

func etcdArgs(dir string, clientPort, peerPort int) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	return []string{
		"--name=rota",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=rota=" + peer,
		"--initial-cluster-state=new",
		// Test data is thrown away; fsync would make every write wait for the disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func apiServerArgs(p *pki, etcdURL string, port int) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.servingCertFile,
		"--tls-private-key-file=" + p.servingKeyFile,
		"--client-ca-file=" + p.caFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		// Nothing else serves the "kubernetes" Service; don't publish 127.0.0.1 in its Endpoints.
		"--endpoint-reconciler-type=none",
		// See the package comment: without kube-controller-manager these two
		// would reject every pod and keep every new Node tainted.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		// ROTA_LOAD_PROFILE_APISERVER=1 (make load) serves /debug/pprof,
		// to cluster-admin only, for reading where its CPU goes.
		"--profiling=" + strconv.FormatBool(os.Getenv("ROTA_LOAD_PROFILE_APISERVER") == "1"),
		"--v=1",
	}
}

func schedulerArgs(dir, configFile string, port int) []string {
	return []string{
		"--config=" + configFile,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "scheduler-certs"),
		"--v=2",
	}
}

// drawPorts is FreePorts for Start's first draw (a test replaces it to
// hand out a taken port).
var drawPorts = FreePorts

// portAttempts bounds the starts of one server whose drawn port was taken.
const portAttempts = 3

// logSize is the size of p's log now (0 when there is none yet).
func logSize(p *Process) int64 {
	fi, err := os.Stat(p.LogPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// portTaken reports whether what p logged past offset from says it could
// not bind its port.
func portTaken(p *Process, from int64) bool {
	data, err := os.ReadFile(p.LogPath)
	if err != nil || int64(len(data)) < from {
		return false
	}
	return bytes.Contains(data[from:], []byte("address already in use"))
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1, chosen below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range) where there is
// room: a port from that range, free when asked, can be taken a moment later
// as the source port of any outgoing connection on the machine, and then the
// server meant for it fails to start. Another test process could still pick
// the same port first; the ports are drawn at random to make that rare.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	lo, hi := portsBelowEphemeral()
	for draws := 0; len(ports) < n; draws++ {
		addr := "127.0.0.1:0" // the kernel chooses, after 100 taken draws too
		if hi > lo && draws < 100 {
			addr = "127.0.0.1:" + strconv.Itoa(lo+rand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: draw another
			}
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portsBelowEphemeral is the range FreePorts draws from: from 20000 up to the
// ephemeral range's first port, or an empty range where that leaves fewer
// than 2,000 ports (the kernel then chooses, from its ephemeral range).
func portsBelowEphemeral() (lo, hi int) {
	const from = 20000
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-from < 2000 {
		return 0, 0
	}
	return from, first
}
