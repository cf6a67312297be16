// Package realnode runs one real GPU node beside test/cluster's control
// plane and simulated nodes: containerd, a real kubelet (built by
// hack/k8s-tools.sh) and rota-device-plugin on its fake GPU backend, with
// kube-scheduler calling rota-extender. The scenario tests (build tag e2e)
// assert on what containers really see (their environment, read back
// through the kubelet's logs endpoint) and on the kubelet's PodResources API.
//
// Host requirements: root, and containerd, runc, the CNI plugins and
// iptables (hack/realnode-deps.sh installs them). containerd is started by
// hand with its configuration and state in the Env's folder; there is no
// registry: the images are one static Go binary
// (cmd/rota-realnode-image), packed into an image archive by hack/images/oci
// (go-containerregistry, the layout `docker save` writes) and
// imported with ctr. Pods run with hostNetwork, so no CNI plugin acts.
//
// What the harness changes outside its folder, and puts back in Stop:
// the kubelet's cgroupRoot in every cgroup hierarchy (created by the
// harness, filled by the kubelet and runc), the sysctls the kubelet sets,
// iptables chains and rules, mounts (container root file systems, volumes)
// and new files under /var/lib/kubelet/device-plugins (fixed in the
// kubelet), /var/log/containers and /run/containerd. Stop then compares the
// host with the state taken before the start and fails on any difference.
// Processes (containerd, kubelet, device plugin, extender, containers,
// shims) are stopped by PID, also when a test fails. Only one real node can
// run per host: the device plugin folder is fixed.
//
// An Env is safe for concurrent use.
package realnode
