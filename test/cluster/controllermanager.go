package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// controllerManagerBin is kube-controller-manager's name in BinDir, as
// hack/k8s-tools.sh writes it. Unlike the other binaries it is optional: only
// StartControllerManager needs it.
const controllerManagerBin = "kube-controller-manager"

// ControllerManagerUser is the user kube-controller-manager authenticates
// as; the default RBAC policy (system:kube-controller-manager) lets it mint
// a token for each controller's ServiceAccount in kube-system
// (--use-service-account-credentials), so each controller has only its own
// role, system:controller:<name>, as in a kubeadm cluster.
const ControllerManagerUser = "system:kube-controller-manager"

// StartControllerManager starts kube-controller-manager with only the named
// controllers (its --controllers names, e.g. "job", "garbage-collector"),
// and waits until it reports healthy. The cluster runs without one by
// default: nothing here needs Deployments, ReplicaSets or node lifecycle,
// and each controller adds load. Calling it again with the same
// controllers while it runs does nothing; with others it is an error (stop
// it first). Stop stops it.
func (c *Cluster) StartControllerManager(ctx context.Context, controllers ...string) error {
	if len(controllers) == 0 {
		return errors.New("kube-controller-manager: name at least one controller")
	}
	for _, name := range controllers {
		if name == "" || name == "*" || strings.HasPrefix(name, "-") || strings.Contains(name, ",") {
			return fmt.Errorf("kube-controller-manager: controller %q: name each controller to run", name)
		}
	}
	want := slices.Sorted(slices.Values(controllers))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster is stopped")
	}
	if c.controllerManager != nil && c.controllerManager.Running() {
		if slices.Equal(c.controllers, want) {
			return nil
		}
		return fmt.Errorf("kube-controller-manager already runs controllers %v, not %v", c.controllers, want)
	}
	bin := filepath.Join(c.opts.BinDir, controllerManagerBin)
	if info, err := os.Stat(bin); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s not found in %s: run make k8s-tools (hack/k8s-tools.sh) first", controllerManagerBin, c.opts.BinDir)
	}
	cert, err := c.pki.ClientCert(ControllerManagerUser)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dir, "controller-manager.kubeconfig")
	if err := c.writeKubeconfig(kubeconfig, cert); err != nil {
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	port := ports[0]
	c.controllerManager = NewProcess(controllerManagerBin, bin, filepath.Join(c.Dir, controllerManagerBin+".log"),
		controllerManagerArgs(c.Dir, kubeconfig, port, want))
	c.controllers = want
	if err := c.controllerManager.Start(); err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // its self-signed serving cert
	}}
	return c.waitHTTP(ctx, c.controllerManager, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", insecure)
}

// StopControllerManager stops kube-controller-manager if it runs.
func (c *Cluster) StopControllerManager() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.controllerManager == nil {
		return nil
	}
	return c.controllerManager.Stop(stopGrace)
}

func controllerManagerArgs(dir, kubeconfig string, port int, controllers []string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		// Each controller acts as its own ServiceAccount, with its own role.
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "controller-manager-certs"),
		// The client-go default (20 QPS) would pace a Job's pod creations.
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--v=1",
	}
}
