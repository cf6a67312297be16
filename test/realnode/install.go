package realnode

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// installControllers are the kube-controller-manager controllers the
// chart's objects need: Deployments and DaemonSets make pods, the
// ServiceAccount and root CA publisher controllers give every namespace
// what a pod's API token mounts, EndpointSlices back the Services
// kube-proxy programs, and the garbage collector removes what helm
// uninstall leaves to it (ReplicaSets, pods).
var installControllers = []string{
	"deployment", "replicaset", "daemonset", "serviceaccount", "root-ca-cert-publisher",
	"endpointslice", "garbagecollector",
}

// installAPIServerArgs are appended to the API server's flags with
// Options.Install (a later flag wins): it listens on the node's address too
// (pods reach it through the "kubernetes" Service, which kube-proxy sends
// to the advertised address) and keeps that Service's endpoints. Pods get
// their ServiceAccount token through cluster.Options.ServiceAccountAdmission.
func installAPIServerArgs(nodeIP string) []string {
	return []string{
		"--bind-address=0.0.0.0",
		"--advertise-address=" + nodeIP,
		"--endpoint-reconciler-type=lease",
	}
}

// startKubeProxy runs kube-proxy in iptables mode as user system:kube-proxy
// (the default RBAC binds it to system:node-proxier). It leaves the
// conntrack sysctls alone (they are not per network namespace) and serves
// its health and metrics on 127.0.0.1.
func (e *Env) startKubeProxy(ctx context.Context, binDir string, healthPort, metricsPort int) error {
	kubeconfig, err := e.Cluster.UserKubeconfig("system:kube-proxy")
	if err != nil {
		return err
	}
	cfg, err := yaml.Marshal(map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   e.NodeName,
		"mode":               "iptables",
		"bindAddress":        e.opts.NodeIP,
		"healthzBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort),
		"metricsBindAddress": "127.0.0.1:" + strconv.Itoa(metricsPort),
		"nodePortAddresses":  []string{e.opts.NodeIP + "/32"},
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	})
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(e.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return err
	}
	e.kubeProxy = newProcess("kube-proxy", filepath.Join(binDir, "kube-proxy"), e.Dir,
		[]string{"--config=" + cfgFile, "--v=2"})
	if err := e.kubeProxy.Start(); err != nil {
		return err
	}
	return e.waitHTTP(ctx, e.kubeProxy, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/healthz")
}

// waitNodeReady waits until the real node is Ready.
func (e *Env) waitNodeReady(ctx context.Context) error {
	return waitUntil(ctx, time.Minute, "node "+e.NodeName+" Ready", e.kubelet, func() (bool, string) {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeReady(n), fmt.Sprintf("conditions %v", n.Status.Conditions)
	})
}

// ImportImages imports OCI image archives into the node's containerd.
func (e *Env) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if err := e.containerd.importImages(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// OwnNetwork is the network of RunInOwnNetwork's namespace: a veth pair
// whose first end holds NodeIP and the default route, so that the kubelet,
// the API server and kube-proxy see a node address that is not loopback.
const (
	OwnNetworkNodeIP = "10.250.0.1"
	ownNetworkEnv    = "ROTA_REALNODE_OWN_NETWORK"
)

// RunInOwnNetwork runs test t again, alone, in a child process in a new
// network namespace, and reports whether the caller is that child: the
// parent returns false once the child has finished (its output is logged
// line by line, and its failure fails t), the child sets up its network
// (OwnNetworkNodeIP) and returns true. Everything the child starts listens
// inside the namespace, so servers may bind all addresses there; the
// namespace goes away with the child's last process. The host's mounts,
// cgroups and files are shared as for any real-node test.
func RunInOwnNetwork(t *testing.T, timeout time.Duration) bool {
	t.Helper()
	if os.Getenv(ownNetworkEnv) == "1" {
		if err := setUpOwnNetwork(); err != nil {
			t.Fatalf("network namespace: %v", err)
		}
		return true
	}
	if err := Prerequisites(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1",
		"-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), ownNetworkEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	// The child's own -test.timeout ends it first; this is the last resort.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the test in a new network namespace: %v", err)
	}
	logLines(t, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the test in its own network namespace failed: %v", err)
	}
	return false
}

// logLines logs r's lines as they come, without the child's own test
// framing (its RUN/PASS lines would read as this process's).
func logLines(t *testing.T, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== ") || line == "PASS" || line == "FAIL" {
			continue
		}
		t.Log("| " + strings.TrimPrefix(strings.TrimPrefix(line, "--- "), "    "))
	}
}

// setUpOwnNetwork brings loopback up and adds the veth pair rota0/rota1
// with OwnNetworkNodeIP on rota0 and the default route through it.
func setUpOwnNetwork() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "rota0", "type", "veth", "peer", "name", "rota1"},
		{"addr", "add", OwnNetworkNodeIP + "/24", "dev", "rota0"},
		{"link", "set", "rota0", "up"},
		{"link", "set", "rota1", "up"},
		{"route", "add", "default", "dev", "rota0"},
	} {
		if b, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, b)
		}
	}
	return nil
}
