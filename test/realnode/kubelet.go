package realnode

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeletSettings are the values the kubelet configuration is made from.
type kubeletSettings struct {
	rootDir          string
	logsDir          string
	containerdSocket string
	cgroupRoot       string
	clientCAFile     string
	port, healthPort int
}

// kubeletConfig renders the KubeletConfiguration. Choices, and why:
//   - address 127.0.0.1: the API server reaches the kubelet by host name,
//     which resolves to loopback; nothing else needs to;
//   - x509 client authentication against the harness's own CA, and
//     AlwaysAllow: the only client is the API server;
//   - cgroupfs driver under cgroupRoot (created, and removed, by the
//     harness), failCgroupV1 false: the test hosts run cgroup v1;
//   - 1s node status updates: device capacity reaches the Node within a
//     second of the plugin's ListAndWatch;
//   - eviction and image garbage collection effectively off: a full test
//     disk must not evict the pods under test or delete their images.
func kubeletConfig(s kubeletSettings) ([]byte, error) {
	// A map, not k8s.io/kubelet/config/v1beta1: that package pulls in
	// k8s.io/component-base, which go.mod does not require. The kubelet
	// decodes its configuration strictly, so a misspelt field fails its start.
	cfg := map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"address":            "127.0.0.1",
		"port":               s.port,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        s.healthPort,
		"authentication": map[string]any{
			"x509":      map[string]any{"clientCAFile": s.clientCAFile},
			"webhook":   map[string]any{"enabled": false},
			"anonymous": map[string]any{"enabled": false},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"containerRuntimeEndpoint":    "unix://" + s.containerdSocket,
		"imageServiceEndpoint":        "unix://" + s.containerdSocket,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  s.cgroupRoot,
		"cgroupsPerQOS":               true,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"podLogsDir":                  s.logsDir,
		"nodeStatusUpdateFrequency":   "1s",
		"nodeStatusReportFrequency":   "1s",
		"syncFrequency":               "5s",
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%",
		},
		"mergeDefaultEvictionSettings": false,
		"makeIPTablesUtilChains":       false,
		"resolvConf":                   "/etc/resolv.conf",
		"kubeAPIQPS":                   100,
		"kubeAPIBurst":                 200,
		"eventRecordQPS":               100,
	}
	return yaml.Marshal(cfg)
}

// nodeName returns the host's name when it resolves to loopback only (the
// kubelet's --hostname-override, which the API server dials), else
// "localhost".
func nodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	h = strings.ToLower(h)
	addrs, err := net.LookupHost(h)
	if err != nil || len(addrs) == 0 {
		return "localhost"
	}
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil || !ip.IsLoopback() {
			return "localhost"
		}
	}
	return h
}

// kubeletArgs are the kubelet's flags; everything else is in the config file.
// nodeIP, when set, is the Node's InternalIP (else the kubelet's choice).
func kubeletArgs(configFile, kubeconfig, rootDir, name, nodeIP string) []string {
	args := []string{
		"--config=" + configFile,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + rootDir,
		"--cert-dir=" + filepath.Join(rootDir, "pki"),
		"--hostname-override=" + name,
		"--v=2",
	}
	if nodeIP != "" {
		args = append(args, "--node-ip="+nodeIP)
	}
	return args
}

// podResourcesSocket is the kubelet's PodResources API socket: it follows
// --root-dir (unlike the device plugin folder).
func podResourcesSocket(rootDir string) string {
	return filepath.Join(rootDir, "pod-resources", "kubelet.sock")
}

func checkSocketPath(p string) error {
	if len(p) >= 108 {
		return fmt.Errorf("socket path %s is %d bytes; unix sockets allow 107 (use a shorter TMPDIR)", p, len(p))
	}
	return nil
}
