package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// SimulatedNodeLabel marks Nodes that a NodeSimulator registered.
const SimulatedNodeLabel = "rota.test/simulated-node"

// Capacity that CreateNode gives a node unless the caller names the resource.
var defaultCapacity = map[string]string{
	string(corev1.ResourceCPU):              "64",
	string(corev1.ResourceMemory):           "512Gi",
	string(corev1.ResourcePods):             "110",
	string(corev1.ResourceEphemeralStorage): "1Ti",
}

// NodeSimulator registers Nodes that have no kubelet behind them and keeps
// them looking alive: capacity and allocatable exactly as the test asks
// (extended resources included), a Ready condition, no not-ready taint, and a
// Lease in kube-node-lease renewed every LeaseInterval.
//
// Why not kwok: kwok would be one more binary to build (about 2.5 more minutes
// on a cold cache) and one more process to supervise, and tests would steer it
// through its own CRDs and annotations. Scheduling tests need only Nodes that
// advertise chosen capacities and pods that reach Running; writing those
// objects directly is a few API calls, and the test controls every field.
// The simulator does not update the Ready condition's heartbeat time: without
// kube-controller-manager nothing reads it.
//
// A NodeSimulator is safe for concurrent use.
type NodeSimulator struct {
	// KubeletVersion is reported in each node's status.nodeInfo.
	KubeletVersion string
	// LeaseInterval is how often Run renews the leases (default 10s); a
	// negative interval makes Run renew nothing.
	LeaseInterval time.Duration

	client kubernetes.Interface

	mu     sync.Mutex
	nodes  map[string]netip.Addr // name -> InternalIP
	nextIP netip.Addr
	silent map[string]bool // nodes whose heartbeat is stopped
}

// NewNodeSimulator returns a NodeSimulator that writes through client.
func NewNodeSimulator(client kubernetes.Interface) *NodeSimulator {
	return &NodeSimulator{
		LeaseInterval: 10 * time.Second,
		client:        client,
		nodes:         map[string]netip.Addr{},
		nextIP:        netip.MustParseAddr("172.16.0.1"),
		silent:        map[string]bool{},
	}
}

// CreateNode registers node name with labels (added to kubernetes.io/hostname,
// os and arch) and capacity, a map of resource name to quantity such as
// {"example.com/gpu": "8"}. cpu, memory, pods and ephemeral-storage default to
// 64, 512Gi, 110 and 1Ti. Allocatable equals capacity. It returns the node as
// stored after its status was written.
func (s *NodeSimulator) CreateNode(ctx context.Context, name string, labels, capacity map[string]string) (*corev1.Node, error) {
	resources := corev1.ResourceList{}
	for _, m := range []map[string]string{defaultCapacity, capacity} {
		for k, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("node %s: capacity %s=%q: %w", name, k, v, err)
			}
			resources[corev1.ResourceName(k)] = q
		}
	}
	allLabels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		SimulatedNodeLabel:     "true",
	}
	for k, v := range labels {
		allLabels[k] = v
	}
	ip := s.register(name)

	node, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: allLabels},
	}, metav1.CreateOptions{})
	if err != nil {
		s.forget(name)
		return nil, fmt.Errorf("creating node %s: %w", name, err)
	}
	now := metav1.Now()
	status := corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources.DeepCopy(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "simulated node is ready", now),
			condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "", now),
			condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "", now),
			condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "", now),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip.String()},
			{Type: corev1.NodeHostName, Address: name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          s.KubeletVersion,
			OperatingSystem:         "linux",
			Architecture:            "amd64",
			ContainerRuntimeVersion: "rota-simulated://0",
		},
	}
	// An admission plugin or a controller (node lifecycle, where it runs)
	// may have added the not-ready taint or written the status meanwhile.
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if taints := withoutNotReady(node.Spec.Taints); len(taints) != len(node.Spec.Taints) {
			node.Spec.Taints = taints
			updated, err := s.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			if err != nil {
				return s.refetch(ctx, node, err)
			}
			node = updated
		}
		node.Status = *status.DeepCopy()
		updated, err := s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		if err != nil {
			return s.refetch(ctx, node, err)
		}
		node = updated
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writing taints and status of node %s: %w", name, err)
	}
	if err := s.renewLease(ctx, node.Name, node.UID); err != nil {
		return nil, err
	}
	return node, nil
}

// refetch reads node again after a conflict, so that the next try writes
// over the latest version; it returns err (what RetryOnConflict judges).
func (s *NodeSimulator) refetch(ctx context.Context, node *corev1.Node, err error) error {
	if !apierrors.IsConflict(err) {
		return err
	}
	cur, gerr := s.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if gerr != nil {
		return gerr
	}
	*node = *cur
	return err
}

// CreateNode registers a simulated node; see NodeSimulator.CreateNode.
func (c *Cluster) CreateNode(ctx context.Context, name string, labels, capacity map[string]string) (*corev1.Node, error) {
	return c.Nodes.CreateNode(ctx, name, labels, capacity)
}

// Simulated reports whether node name was created by this simulator.
func (s *NodeSimulator) Simulated(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.nodes[name]
	return ok
}

// hostIP returns the InternalIP of simulated node name.
func (s *NodeSimulator) hostIP(name string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip, ok := s.nodes[name]
	return ip, ok
}

// Names returns the simulated nodes' names, sorted.
func (s *NodeSimulator) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run renews every simulated node's lease each LeaseInterval until ctx ends.
func (s *NodeSimulator) Run(ctx context.Context) {
	if s.LeaseInterval < 0 {
		return
	}
	interval := s.LeaseInterval
	if interval == 0 {
		interval = 10 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, name := range s.Names() {
			if s.Silent(name) {
				continue
			}
			if err := s.renewLease(ctx, name, ""); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Renewing simulated node lease", "node", name, "err", err)
			}
		}
	}
}

// SetHeartbeat stops (on false) or resumes (on true) node name's
// heartbeat, its Lease renewals, as a kubelet cut off from the API server
// or a node powered off. With kube-controller-manager's node lifecycle
// controller running, the node turns NotReady (Unknown) and is tainted
// unreachable once its Lease is older than the controller's grace period.
// Resuming renews the Lease at once and posts the Ready condition again,
// as a kubelet does when it reaches the API server after a partition.
func (s *NodeSimulator) SetHeartbeat(ctx context.Context, name string, on bool) error {
	s.mu.Lock()
	if _, ok := s.nodes[name]; !ok {
		s.mu.Unlock()
		return fmt.Errorf("node %s is not simulated", name)
	}
	if !on {
		s.silent[name] = true
		s.mu.Unlock()
		return nil
	}
	delete(s.silent, name)
	s.mu.Unlock()
	if err := s.renewLease(ctx, name, ""); err != nil {
		return err
	}
	// The node lifecycle controller may be marking the silent node's
	// status Unknown at the same moment: read again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		ready := condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "simulated node is ready", now)
		found := false
		for i, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					ready.LastTransitionTime = c.LastTransitionTime
				}
				node.Status.Conditions[i], found = ready, true
			}
		}
		if !found {
			node.Status.Conditions = append(node.Status.Conditions, ready)
		}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("posting node %s ready: %w", name, err)
	}
	return nil
}

// Silent reports whether node name's heartbeat is stopped (SetHeartbeat).
func (s *NodeSimulator) Silent(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silent[name]
}

// renewLease creates or renews the node's Lease. uid, when known, makes the
// Node the Lease's owner so that deleting the Node deletes the Lease.
func (s *NodeSimulator) renewLease(ctx context.Context, name string, uid types.UID) error {
	leaseSeconds := int32(40)
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": now}})
	if err != nil {
		return err
	}
	_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || uid == "" {
		return err
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: name, UID: uid,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &name,
			LeaseDurationSeconds: &leaseSeconds,
			RenewTime:            &now,
		},
	}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating lease of node %s: %w", name, err)
	}
	return nil
}

func (s *NodeSimulator) register(name string) netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ip, ok := s.nodes[name]; ok {
		return ip
	}
	ip := s.nextIP
	s.nextIP = s.nextIP.Next()
	s.nodes[name] = ip
	return ip
}

func (s *NodeSimulator) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, name)
}

func withoutNotReady(taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
			out = append(out, t)
		}
	}
	return out
}

func condition(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now}
}
