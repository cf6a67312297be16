package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/topology"
)

// Input is what the caller fetched from the API server.
type Input struct {
	Nodes      []corev1.Node
	Pods       []corev1.Pod
	Namespaces []corev1.Namespace
	// Jobs are the batch/v1 Jobs (for the Jobs queued suspended); none
	// when the command does not read them.
	Jobs []batchv1.Job
	// JobSets are the JobSets (for those queued suspended); none when the
	// command does not read them or the JobSet API is not served.
	JobSets []podreq.JobSet
	// Events are the events the report may read (a pod's, or the
	// FailedCreate events of controllers); others are ignored.
	Events []corev1.Event
	// Quota is the quota ConfigMap; nil when it does not exist.
	Quota *corev1.ConfigMap
	// QuotaError, when set, says why the quota ConfigMap could not be read
	// (for example: forbidden); Quota is then ignored.
	QuotaError string
	// ResourceSlices and DeviceClasses say which nodes' GPUs DRA manages
	// (pkg/dra); none when the cluster does not serve them.
	ResourceSlices []resourcev1.ResourceSlice
	DeviceClasses  []resourcev1.DeviceClass
	// Now is the time ages are computed from.
	Now time.Time
}

// Options say how to read the cluster; they must match the components'
// settings (the extender's domain and tier labels, the webhook's memory unit
// and quota ConfigMap).
type Options struct {
	Names contract.Names
	// MemoryUnitMiB is the webhook's gpu-memory unit; 0 means 1 GiB.
	MemoryUnitMiB contract.MiB
	// Tiers are the node labels of the topology tiers, narrowest first.
	Tiers topology.Labels
	// QuotaKey is the ConfigMap key of the quota document.
	QuotaKey string
	// QuotaSource names the ConfigMap in messages ("ConfigMap rota-system/rota-quota").
	QuotaSource string
	// DRAGPUDrivers are the DRA drivers whose devices are GPUs (the
	// chart's dra.gpuDrivers).
	DRAGPUDrivers []string
}

// DefaultOptions are the components' defaults.
func DefaultOptions() Options {
	return Options{
		Names:         contract.Default,
		MemoryUnitMiB: contract.DefaultMemoryUnitMiB,
		Tiers:         topology.DefaultLabels(contract.Default),
		QuotaKey:      "quota.yaml",
		QuotaSource:   "ConfigMap rota-system/rota-quota",
		DRAGPUDrivers: []string{"gpu.nvidia.com"},
	}
}

// Cluster is the input read into Rota's model: the ledger rebuilt from
// annotations, team usage, the quota configuration. Build it with Build.
type Cluster struct {
	o   Options
	in  Input
	now time.Time

	snap  *ledger.Snapshot
	nodes map[string]*corev1.Node
	// only, when set, limits the nodes an analysis considers (forPod).
	only func(node string) bool
	// topoErr holds the nodes whose topology annotation does not parse.
	topoErr map[string]error
	// noTopo counts nodes without a topology annotation.
	noTopo int

	pods     map[string]*corev1.Pod // by namespace/name
	byUID    map[string]*corev1.Pod
	allocs   map[string]ledger.Allocation // accounted GPU allocations by pod UID
	problems map[string][]string          // per node: allocations not accounted
	checks   []error                      // ledger.Check after the rebuild

	nsLabels map[string]map[string]string

	quota    quota.Config
	quotaOK  bool
	quotaErr string
	usage    map[string]quota.Usage
	// teamNS lists the namespaces charged to each team.
	teamNS map[string][]string
}

// Build reads in under o.
func Build(in Input, o Options) *Cluster {
	if o.MemoryUnitMiB <= 0 {
		o.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	c := &Cluster{o: o, in: in, now: in.Now, nodes: map[string]*corev1.Node{}, topoErr: map[string]error{},
		pods: map[string]*corev1.Pod{}, byUID: map[string]*corev1.Pod{}, allocs: map[string]ledger.Allocation{},
		problems: map[string][]string{}, nsLabels: map[string]map[string]string{}, usage: map[string]quota.Usage{},
		teamNS: map[string][]string{}}
	for i := range in.Namespaces {
		c.nsLabels[in.Namespaces[i].Name] = in.Namespaces[i].Labels
	}
	for i := range in.Pods {
		p := &in.Pods[i]
		c.pods[p.Namespace+"/"+p.Name] = p
		c.byUID[string(p.UID)] = p
	}
	c.readQuota()
	c.rebuildLedger()
	c.countUsage()
	return c
}

// readQuota parses the quota ConfigMap the way the webhook does
// (quota.ParseYAML).
func (c *Cluster) readQuota() {
	cm := c.in.Quota
	if c.in.QuotaError != "" {
		c.quotaErr = c.in.QuotaError
		return
	}
	if cm == nil {
		c.quotaErr = c.o.QuotaSource + " not found"
		return
	}
	data, ok := cm.Data[c.o.QuotaKey]
	if !ok {
		c.quotaErr = fmt.Sprintf("%s has no key %q", c.o.QuotaSource, c.o.QuotaKey)
		return
	}
	q, err := quota.ParseYAML([]byte(data))
	if err != nil {
		c.quotaErr = fmt.Sprintf("%s: %v", c.o.QuotaSource, err)
		return
	}
	c.quota, c.quotaOK = q, true
}

// rebuildLedger does what the extender's cache does on start-up: every node
// with a valid topology annotation and its allocatable CPU and memory, then
// every pod as podreq.Classify reads it, restored in pod UID order: a bound
// pod's assignment for its node, and the CPU and host memory of bound pods
// without an assignment on nodes the ledger knows. Pods whose GPUs cannot be
// accounted are recorded as problems of their node, in the words the
// extender logs them with.
func (c *Cluster) rebuildLedger() {
	l := ledger.New()
	for i := range c.in.Nodes {
		n := &c.in.Nodes[i]
		c.nodes[n.Name] = n
		ann, ok := n.Annotations[c.o.Names.TopologyAnnotation]
		if !ok {
			c.noTopo++
			continue
		}
		t, err := contract.ParseTopology([]byte(ann))
		if err != nil {
			c.topoErr[n.Name] = err
			continue
		}
		tn := topology.New(n.Name, n.Labels, c.o.Tiers, t)
		tn.CPUMilli, tn.HostMemoryMiB = podreq.Allocatable(n)
		tn.Closed = c.draWhy(tn)
		l.UpsertNode(tn)
	}
	var allocs []ledger.Allocation
	for i := range c.in.Pods {
		p := &c.in.Pods[i]
		cl := podreq.Classify(p, c.o.Names)
		if cl.Kind.Problem() {
			c.problem(cl.Node, fmt.Sprintf("pod %s/%s: %s", p.Namespace, p.Name, cl.Problem()))
		}
		if cl.Allocation == nil || (cl.Kind.CPUOnly() && !l.HasNode(cl.Node)) {
			continue
		}
		allocs = append(allocs, *cl.Allocation)
	}
	slices.SortFunc(allocs, func(a, b ledger.Allocation) int { return cmp.Compare(a.PodUID, b.PodUID) })
	for _, a := range allocs {
		if err := l.Restore(a); err != nil {
			c.problem(a.Node, fmt.Sprintf("pod %s: assignment conflicts with pods restored before it (by UID), not accounted: %v", a.Pod, err))
			continue
		}
		if len(a.GPUs) > 0 {
			c.allocs[a.PodUID] = a
		}
	}
	c.snap = l.Snapshot()
	c.checks = l.Check()
}

// draWhy says why DRA keeps Rota off a node, as the extender decides it
// (pkg/dra), or "".
func (c *Cluster) draWhy(n *topology.Node) string {
	ss := dra.NodeSlices(n.Name, c.in.ResourceSlices)
	return dra.NewRules(c.o.DRAGPUDrivers, c.o.Names).Why(dra.UUIDs(n), ss, dra.Classes(c.in.DeviceClasses))
}

func (c *Cluster) problem(node, msg string) { c.problems[node] = append(c.problems[node], msg) }

// countUsage counts every team's GPU use the way the admission webhook's
// view does: non-terminal pods with a valid Rota request; bound pods are
// running, the others pending; a pod is charged to its namespace's team, or
// to its own team label when the configuration allows overrides.
func (c *Cluster) countUsage() {
	for i := range c.in.Pods {
		p := &c.in.Pods[i]
		amt, ok := c.amountOf(p)
		if !ok {
			continue
		}
		team := c.teamOf(p)
		u := c.usage[team]
		if p.Spec.NodeName != "" {
			u.Running = u.Running.Add(amt)
		} else {
			u.Pending = u.Pending.Add(amt)
		}
		c.usage[team] = u
	}
	for ns, labels := range c.nsLabels {
		if t := labels[c.o.Names.TeamLabel]; t != "" {
			c.teamNS[t] = append(c.teamNS[t], ns)
		}
	}
	for t := range c.teamNS {
		slices.Sort(c.teamNS[t])
	}
}

// amountOf is what the pod counts against quota; false when it holds nothing.
func (c *Cluster) amountOf(p *corev1.Pod) (quota.Amount, bool) {
	if podreq.Terminal(p) || !podreq.Wants(p, c.o.Names) {
		return quota.Amount{}, false
	}
	r, err := podreq.FromPod(p, podreq.Options{Names: c.o.Names, MemoryUnitMiB: c.o.MemoryUnitMiB})
	if err != nil || r.GPUFree() {
		return quota.Amount{}, false
	}
	return quota.AmountOf(r.GPUs, r.MemoryUnits, c.o.MemoryUnitMiB), true
}

// teamOf is the team a pod is charged to, as podreq.Team under the quota
// configuration's override setting.
func (c *Cluster) teamOf(p *corev1.Pod) string {
	return podreq.Team(p, c.nsLabels[p.Namespace], c.o.Names, c.quotaOK && c.quota.AllowPodTeamOverride)
}

// teamSource says where a pod's team comes from.
func (c *Cluster) teamSource(p *corev1.Pod) string {
	if c.quotaOK && c.quota.AllowPodTeamOverride && p.Labels[c.o.Names.TeamLabel] != "" {
		return "pod label " + c.o.Names.TeamLabel
	}
	if c.nsLabels[p.Namespace][c.o.Names.TeamLabel] != "" {
		return "namespace " + p.Namespace + " label " + c.o.Names.TeamLabel
	}
	return "namespace " + p.Namespace + " has no " + c.o.Names.TeamLabel + " label"
}

// age formats how long ago t was, like kubectl's AGE column.
func (c *Cluster) age(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration.HumanDuration(c.now.Sub(t))
}

// Amount is a quantity of Rota resources, as reports print it.
type Amount struct {
	GPUs      int64        `json:"gpus"`
	MemoryMiB contract.MiB `json:"memoryMiB"`
}

func amount(a quota.Amount) Amount { return Amount{GPUs: a.GPUs, MemoryMiB: a.MemoryMiB} }

// String is "8 GPUs + 160 GiB", "8 GPUs", "160 GiB" or "0".
func (a Amount) String() string {
	var parts []string
	if a.GPUs != 0 {
		parts = append(parts, plural(int(a.GPUs), "GPU"))
	}
	if a.MemoryMiB != 0 {
		parts = append(parts, a.MemoryMiB.String())
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " + ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// podKey is "namespace/name".
func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podPhase is the phase kubectl would show, with Terminating.
func podPhase(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	if p.Status.Phase == "" {
		return string(corev1.PodPending)
	}
	return string(p.Status.Phase)
}
