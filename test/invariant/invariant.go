// Package invariant checks a live cluster against the invariants of
// DESIGN.md, reading only what any observer can read from the API server:
// every Node's GPU topology annotation, every Pod's assignment annotation,
// pod phases, gang labels and namespace team labels. The e2e scenarios and
// the demo call it after (and during) their workloads; it knows nothing of
// the services' internals.
//
// Checked:
//   - capacity: on every GPU the assigned memory is at most the GPU's
//     memory, and a GPU held whole is held by one pod and shared with none;
//     assignments name GPUs that exist on their node;
//   - gangs: all members of a gang are bound or none is (the gang size comes
//     from the gang-size annotation), until a member has succeeded: then the
//     gang is ending, and members that started later may still run;
//   - quota (when a quota configuration is given): per team, pending +
//     running use is within guarantee + borrow limit, and the teams together
//     borrow no more than the shared pool;
//   - health: no bound pod that has not started yet holds an unhealthy GPU
//     (a pod placed after its GPU turned unhealthy never starts);
//   - bookkeeping: every bound pod that asks for Rota resources carries a
//     readable assignment, and the assignment names the pod's node;
//   - node pools (when the quota configuration has them): every bound GPU
//     pod runs on a node of its namespace's team's pool, and no other;
//   - records against the truth (Options.Grants): a bound pod's assignment
//     names the GPUs the kubelet granted it; capacity counts granted GPUs;
//     quota counts each pod against its own team, never the team its
//     admission record names.
//
// The functions are safe for concurrent use; they keep no state.
package invariant

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// Kind names the invariant a Violation breaks.
type Kind string

const (
	OverCapacity     Kind = "GPUOverCapacity"
	WholeShared      Kind = "WholeGPUShared"
	UnknownGPU       Kind = "UnknownGPU"
	PartialGang      Kind = "PartialGang"
	QuotaExceeded    Kind = "QuotaExceeded"
	PoolExceeded     Kind = "SharedPoolExceeded"
	UnhealthyGPU     Kind = "NewWorkOnUnhealthyGPU"
	MissingAssign    Kind = "BoundWithoutAssignment"
	BadAssignment    Kind = "UnreadableAssignment"
	NodeMismatch     Kind = "AssignmentNodeMismatch"
	GrantMismatch    Kind = "AssignmentNotGranted"
	BadTopology      Kind = "UnreadableTopology"
	UnreadableGangSz Kind = "UnreadableGangSize"
	OutsidePool      Kind = "OutsideNodePool"
)

// Violation is one broken invariant, in words.
type Violation struct {
	Kind Kind
	// Object names what is wrong: "node/gpu-3 GPU 2", "pod ns/name", "gang ns/g", "team vision".
	Object  string
	Message string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s: %s", v.Kind, v.Object, v.Message) }

// Options say how to read the cluster.
type Options struct {
	// Names is the wire contract; zero means contract.Default.
	Names contract.Names
	// MemoryUnitMiB converts gpu-memory requests of nodes without a
	// topology annotation (and for quota) to MiB; 0 means 1024.
	MemoryUnitMiB contract.MiB
	// Quota, when set, turns on the quota check.
	Quota *quota.Config
	// Namespace restricts the pod checks to one namespace; "" means all.
	// Capacity is always checked over every pod.
	Namespace string
	// Grants are the devices the kubelet granted each pod, by pod UID: a
	// real node's PodResources API, or the e2e kubelet stand-in's Allocate
	// calls. No user can write them, so they are the truth the records are
	// checked against: a bound pod's assignment must name exactly the GPUs
	// it was granted (AssignmentNotGranted), and capacity counts each pod
	// on the GPUs it was granted, whatever its record says. Pods without an
	// entry (not started yet, or on a node without a device plugin) are
	// checked by their records alone.
	Grants map[types.UID]Grant
	// Jobs are the cluster's batch/v1 Jobs (Check lists them when Quota
	// is set): a Job queued suspended that is running holds quota for all
	// its pods, created or not (see checkQuota).
	Jobs []batchv1.Job
	// JobSets are the cluster's JobSets, counted as Jobs are (Check lists
	// them through Dynamic when it is set and the JobSet API is served).
	JobSets []podreq.JobSet
	// Dynamic, when set, lets Check list JobSets.
	Dynamic dynamic.Interface
}

// Grant is what the kubelet granted one pod: the GPUs it holds whole (by
// UUID) and the memory units it holds on shared GPUs (units per GPU UUID).
type Grant struct {
	Whole  []string
	Shared map[string]int
}

// gpus lists the granted GPUs' UUIDs, sorted.
func (g Grant) gpus() []string {
	out := slices.Clone(g.Whole)
	for u := range g.Shared {
		out = append(out, u)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Check lists Nodes, Pods and Namespaces from the API server and returns
// every violation found. An error means the cluster could not be read.
func Check(ctx context.Context, client kubernetes.Interface, o Options) ([]Violation, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var namespaces []corev1.Namespace
	if o.Quota != nil {
		nsl, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing namespaces: %w", err)
		}
		namespaces = nsl.Items
		jobs, err := client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		o.Jobs = jobs.Items
		if o.Dynamic != nil {
			if o.JobSets, err = listJobSets(ctx, o.Dynamic); err != nil {
				return nil, err
			}
		}
	}
	return Evaluate(nodes.Items, pods.Items, namespaces, o), nil
}

// Evaluate checks the given objects; Check calls it with what it listed.
func Evaluate(nodes []corev1.Node, pods []corev1.Pod, namespaces []corev1.Namespace, o Options) []Violation {
	if o.Names.Domain == "" {
		o.Names = contract.Default
	}
	if o.MemoryUnitMiB <= 0 {
		o.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	var out []Violation
	add := func(k Kind, obj, format string, args ...any) {
		out = append(out, Violation{Kind: k, Object: obj, Message: fmt.Sprintf(format, args...)})
	}

	// Topology of every node that publishes one.
	topo := map[string]contract.Topology{}
	for i := range nodes {
		n := &nodes[i]
		v, ok := n.Annotations[o.Names.TopologyAnnotation]
		if !ok {
			continue
		}
		t, err := contract.ParseTopology([]byte(v))
		if err != nil {
			add(BadTopology, "node/"+n.Name, "%v", err)
			continue
		}
		topo[n.Name] = t
	}

	// Every live pod's assignment, and the per-GPU sums.
	type holder struct {
		pod   string
		whole bool
		mib   contract.MiB
	}
	perGPU := map[string][]holder{} // node + "/" + uuid -> holders
	inScope := func(p *corev1.Pod) bool { return o.Namespace == "" || p.Namespace == o.Namespace }
	for i := range pods {
		p := &pods[i]
		key := "pod " + p.Namespace + "/" + p.Name
		// The pod as the extender and kubectl-rota read it.
		cl := podreq.Classify(p, o.Names)
		switch cl.Kind {
		case podreq.KindUnbound:
			// An assignment written before Binding holds nothing until
			// the pod is bound, but must still be readable.
			if _, err := podreq.Assignment(p, o.Names); err != nil && inScope(p) {
				add(BadAssignment, key, "%v", err)
			}
			continue
		case podreq.KindInvalid:
			if inScope(p) {
				add(BadAssignment, key, "%v", cl.Err)
			}
			if _, ok := o.Grants[p.UID]; !ok {
				continue
			}
			cl.Assignment = &contract.Assignment{} // the grant below says what it holds
		case podreq.KindUnaccounted:
			if inScope(p) {
				add(MissingAssign, key, "bound to %s and asks for Rota GPUs but carries no %s annotation",
					cl.Node, o.Names.AssignmentAnnotation)
			}
			if _, ok := o.Grants[p.UID]; !ok {
				continue
			}
			cl.Assignment = &contract.Assignment{}
		case podreq.KindWrongNode:
			if inScope(p) {
				add(NodeMismatch, key, "bound to %s but its assignment names node %s", cl.Node, cl.Assignment.Node)
			}
			// Its GPUs still count on the node it runs on (capacity).
		case podreq.KindAllocated:
		default: // terminal, or GPU-free
			continue
		}
		a := cl.Assignment
		t, haveTopo := topo[p.Spec.NodeName]
		if g, ok := o.Grants[p.UID]; ok {
			// The kubelet's grant, not the record, says which GPUs the
			// pod holds.
			// (A missing or unreadable record is reported above.)
			recorded := cl.Kind == podreq.KindAllocated || cl.Kind == podreq.KindWrongNode
			if got := g.gpus(); recorded && !slices.Equal(got, assignedGPUs(a)) && inScope(p) {
				add(GrantMismatch, key, "assignment names GPUs %v on %s, but the kubelet granted the pod %v: the record is not what the pod holds",
					assignedGPUs(a), p.Spec.NodeName, got)
			}
			for _, u := range g.Whole {
				k := p.Spec.NodeName + "/" + u
				perGPU[k] = append(perGPU[k], holder{pod: p.Namespace + "/" + p.Name, whole: true})
			}
			for u, n := range g.Shared {
				k := p.Spec.NodeName + "/" + u
				perGPU[k] = append(perGPU[k], holder{pod: p.Namespace + "/" + p.Name, mib: contract.MiB(n) * unitOf(t, haveTopo, o)})
			}
			continue
		}
		for _, g := range a.GPUs {
			if haveTopo {
				tg, ok := gpuByUUID(t, g.UUID)
				if !ok {
					add(UnknownGPU, key, "assignment names GPU %s, which node %s does not have", g.UUID, p.Spec.NodeName)
					continue
				}
				if tg.Health == contract.Unhealthy && p.Status.Phase != corev1.PodRunning && p.DeletionTimestamp == nil && inScope(p) {
					add(UnhealthyGPU, key, "was placed on GPU %d (%s) of node %s, which is unhealthy (%s), and has not started",
						tg.Index, tg.UUID, p.Spec.NodeName, orUnknown(tg.Reason))
				}
			}
			k := p.Spec.NodeName + "/" + g.UUID
			perGPU[k] = append(perGPU[k], holder{pod: p.Namespace + "/" + p.Name, whole: a.Whole, mib: g.MemoryMiB})
		}
	}
	keys := make([]string, 0, len(perGPU))
	for k := range perGPU {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs := perGPU[k]
		node, uuid, _ := strings.Cut(k, "/")
		obj := "node/" + node + " GPU " + uuid
		var capMiB contract.MiB
		if t, ok := topo[node]; ok {
			if tg, ok := gpuByUUID(t, uuid); ok {
				capMiB = tg.MemoryMiB
				obj = fmt.Sprintf("node/%s GPU %d (%s)", node, tg.Index, tg.Model)
			}
		}
		var whole, all []string
		var sum contract.MiB
		for _, h := range hs {
			all = append(all, h.pod)
			if h.whole {
				whole = append(whole, h.pod)
				continue
			}
			sum += h.mib
		}
		slices.Sort(all)
		if len(whole) > 0 && len(hs) > 1 {
			add(WholeShared, obj, "held whole by %s but also assigned to %s", strings.Join(whole, ","), strings.Join(all, ","))
		}
		if capMiB > 0 && sum > capMiB {
			add(OverCapacity, obj, "memory shares add up to %s, more than its %s (%s)", sum, capMiB, strings.Join(all, ","))
		}
	}

	out = append(out, checkGangs(pods, o)...)
	if o.Quota != nil {
		out = append(out, checkQuota(pods, namespaces, topo, o)...)
		out = append(out, checkNodePools(nodes, pods, namespaces, o)...)
	}
	return out
}

// checkNodePools checks, with a quota configuration that has node pools,
// that every bound GPU pod runs on a node of its team's pool: the pool its
// team owns, else its nearest group's, else the nodes without the
// node-pool label. The team is the pod's namespace's (never its admission
// record's), and the pool is found here by walking the tree, apart from
// pkg/quota. Pods placed before an edit that moved their team to another
// pool are reported too: the check assumes the pools did not change while
// the pods ran.
func checkNodePools(nodes []corev1.Node, pods []corev1.Pod, namespaces []corev1.Namespace, o Options) []Violation {
	cfg := *o.Quota
	if len(cfg.NodePools) == 0 {
		return nil
	}
	owned := map[string]string{}
	for pool, np := range cfg.NodePools {
		owned[np.Owner] = pool
	}
	poolOf := func(team string) string {
		t, ok := cfg.Teams[team]
		if !ok {
			return ""
		}
		if p, ok := owned[team]; ok {
			return p
		}
		for g, depth := t.Group, 0; g != "" && depth < 64; g, depth = cfg.Groups[g].Parent, depth+1 {
			if p, ok := owned[g]; ok {
				return p
			}
		}
		return ""
	}
	label := o.Names.Domain + "/node-pool"
	nodePool := map[string]string{}
	for i := range nodes {
		nodePool[nodes[i].Name] = nodes[i].Labels[label]
	}
	nsLabels := map[string]map[string]string{}
	for i := range namespaces {
		nsLabels[namespaces[i].Name] = namespaces[i].Labels
	}
	var out []Violation
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || podreq.Terminal(p) || !podreq.Wants(p, o.Names) ||
			(o.Namespace != "" && p.Namespace != o.Namespace) {
			continue
		}
		req, err := podreq.FromPod(p, podreq.Options{Names: o.Names, MemoryUnitMiB: o.MemoryUnitMiB})
		if err != nil || req.GPUFree() {
			continue
		}
		team := podreq.Team(p, nsLabels[p.Namespace], o.Names, cfg.AllowPodTeamOverride)
		if want, got := poolOf(team), nodePool[p.Spec.NodeName]; want != got {
			out = append(out, Violation{Kind: OutsidePool, Object: "pod " + p.Namespace + "/" + p.Name,
				Message: fmt.Sprintf("team %s places on node pool %s, but the pod runs on node %s of pool %s",
					orUnknown(team), orNone(want), p.Spec.NodeName, orNone(got))})
		}
	}
	return out
}

func orNone(pool string) string {
	if pool == "" {
		return "(none)"
	}
	return pool
}

// accountOf is the account a pod counts against: always its own team's
// (the namespace's label, or the pod's where overrides are allowed), never
// the team its admission record names, which the pod's owner could have
// rewritten. Of a team with accounts per GPU model, a bound pod counts
// against the model of the GPU it was granted (or assigned); one not bound
// yet against the model its record chose, when the team has that account,
// else the team's first.
func accountOf(p *corev1.Pod, team string, topo map[string]contract.Topology, cfg quota.Config, o Options) quota.Account {
	accts := cfg.Accounts(team, nil)
	has := func(model string) bool { return slices.Contains(accts, quota.Account{Team: team, Model: model}) }
	if t, ok := topo[p.Spec.NodeName]; ok && p.Spec.NodeName != "" {
		var uuids []string
		if g, ok := o.Grants[p.UID]; ok {
			uuids = g.gpus()
		} else if a, err := podreq.Assignment(p, o.Names); err == nil && a != nil {
			uuids = assignedGPUs(a)
		}
		if len(uuids) > 0 {
			if g, ok := gpuByUUID(t, uuids[0]); ok && has(g.Model) {
				return quota.Account{Team: team, Model: g.Model}
			}
		}
	}
	if adm, err := podreq.AdmissionOf(p, o.Names); err == nil && adm != nil && adm.Team == team && has(adm.Model) {
		return quota.Account{Team: team, Model: adm.Model}
	}
	if len(accts) > 0 {
		return accts[0]
	}
	return quota.Account{Team: team}
}

// assignedGPUs lists the UUIDs an assignment names, sorted.
func assignedGPUs(a *contract.Assignment) []string {
	out := make([]string, 0, len(a.GPUs))
	for _, g := range a.GPUs {
		out = append(out, g.UUID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unitOf is the size of one gpu-memory unit on a node: its topology's, else
// the configured one.
func unitOf(t contract.Topology, ok bool, o Options) contract.MiB {
	if ok && t.MemoryUnitMiB > 0 {
		return t.MemoryUnitMiB
	}
	return o.MemoryUnitMiB
}

// checkGangs reports gangs with some but not all members bound.
func checkGangs(pods []corev1.Pod, o Options) []Violation {
	type gang struct {
		size          int
		bound, exists int
		sizeErr       error
		// finished counts members that ran and succeeded: a gang whose
		// first members have finished is ending, not starting, and its
		// others may run on for as long as they started later (a slow
		// container start, a device plugin that answered late).
		finished int
	}
	gangs := map[string]*gang{}
	for i := range pods {
		p := &pods[i]
		if o.Namespace != "" && p.Namespace != o.Namespace {
			continue
		}
		ref, err := podreq.GangOf(p, o.Names)
		if ref == nil && err == nil {
			continue
		}
		key := podreq.GangKey(p, o.Names)
		if key == "" {
			key = p.Namespace + "/" // an empty gang label: no gang to name, its error is reported
		}
		g := gangs[key]
		if g == nil {
			g = &gang{}
			gangs[key] = g
		}
		if podreq.Terminal(p) {
			if p.Status.Phase == corev1.PodSucceeded && p.Spec.NodeName != "" {
				g.finished++
			}
			continue
		}
		g.exists++
		if p.Spec.NodeName != "" {
			g.bound++
		}
		switch {
		case err != nil:
			g.sizeErr = err
		case ref.Size > 0:
			g.size = max(g.size, ref.Size)
		}
	}
	keys := make([]string, 0, len(gangs))
	for k := range gangs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	for _, k := range keys {
		g := gangs[k]
		size := g.size
		if size == 0 {
			size = g.exists // pod-group gang without the annotation: all that exist
		}
		if g.bound > 0 && g.bound < size && g.finished == 0 {
			out = append(out, Violation{Kind: PartialGang, Object: "gang " + k,
				Message: fmt.Sprintf("%d of %d members bound (%d exist); a gang binds all or nothing", g.bound, size, g.exists)})
		}
		if g.sizeErr != nil && g.bound > 0 {
			out = append(out, Violation{Kind: UnreadableGangSz, Object: "gang " + k,
				Message: fmt.Sprintf("members are bound although the gang size is unreadable: %v", g.sizeErr)})
		}
	}
	return out
}

// checkQuota sums each team's pending + running use and compares it with
// its guarantee plus borrow limit, and the teams' borrowing with the pool.
func checkQuota(pods []corev1.Pod, namespaces []corev1.Namespace, topo map[string]contract.Topology, o Options) []Violation {
	cfg := *o.Quota
	nsLabels := map[string]map[string]string{}
	for i := range namespaces {
		nsLabels[namespaces[i].Name] = namespaces[i].Labels
	}
	usage := map[quota.Account]quota.Usage{}
	jobs := runningQueuedJobs(o)
	for _, j := range jobs {
		j.team = podreq.Team(j.pod, nsLabels[j.pod.Namespace], o.Names, cfg.AllowPodTeamOverride)
	}
	for i := range pods {
		p := &pods[i]
		// Queued (gated) pods hold no quota: only admitted work counts.
		if podreq.Terminal(p) || !podreq.Wants(p, o.Names) || podreq.Queued(p, o.Names) {
			continue
		}
		team := podreq.Team(p, nsLabels[p.Namespace], o.Names, cfg.AllowPodTeamOverride)
		if _, ok := cfg.Team(team); !ok {
			continue
		}
		req, err := podreq.FromPod(p, podreq.Options{Names: o.Names, MemoryUnitMiB: o.MemoryUnitMiB})
		if err != nil {
			continue
		}
		acct := accountOf(p, team, topo, cfg, o)
		amt := quota.Amount{GPUs: int64(req.GPUs), MemoryMiB: contract.MiB(req.MemoryUnits) * o.MemoryUnitMiB}
		u := usage[acct]
		if p.Spec.NodeName != "" {
			u.Running = u.Running.Add(amt)
		} else {
			u.Pending = u.Pending.Add(amt)
		}
		usage[acct] = u
		j := jobs[podreq.JobSetControllerUID(p)]
		if j == nil {
			j = jobs[podreq.JobControllerUID(p)]
		}
		if j != nil && j.team == team && j.amt == amt {
			j.present++
		}
	}
	for _, j := range jobs {
		if j.present >= j.members {
			continue
		}
		if _, ok := cfg.Team(j.team); !ok {
			continue
		}
		acct := accountOf(j.pod, j.team, topo, cfg, o)
		u := usage[acct]
		u.Pending = u.Pending.Add(j.amt.Times(int64(j.members - j.present)))
		usage[acct] = u
	}
	accts := make([]quota.Account, 0, len(usage))
	pools := map[string]bool{"": true}
	for a := range usage {
		accts = append(accts, a)
		if _, _, pool, ok := cfg.AccountLimits(a); ok {
			pools[pool] = true
		}
	}
	sort.Slice(accts, func(i, j int) bool { return accts[i].String() < accts[j].String() })
	var out []Violation
	for _, a := range accts {
		u := usage[a]
		limit := cfg.ReachableAccount(a)
		if !u.Total().Fits(limit) {
			out = append(out, Violation{Kind: QuotaExceeded, Object: "team " + a.String(),
				Message: fmt.Sprintf("admitted %s (running %s, pending %s), more than its guarantee plus borrow limit %s",
					u.Total(), u.Running, u.Pending, limit)})
		}
	}
	if cfg.Nested() {
		out = append(out, checkTree(cfg, usage)...)
		delete(pools, "") // the tree's pools lend to it, not the shared pool alone
	}
	for pool := range pools {
		if used, size := cfg.AccountPoolUsed(pool, usage), cfg.PoolSize(pool); !used.Fits(size) {
			name := "shared pool"
			if pool != "" {
				name = "pool of " + pool
			}
			out = append(out, Violation{Kind: PoolExceeded, Object: name,
				Message: fmt.Sprintf("teams borrow %s in all, more than the pool's %s", used, size)})
		}
	}
	return out
}

// queuedJobCharge is a running Job queued suspended, as checkQuota counts it.
type queuedJobCharge struct {
	pod     *corev1.Pod // one of its pods as its template makes them
	team    string
	amt     quota.Amount
	members int // pods it runs at once
	present int // its admitted pods that have not ended
}

// runningQueuedJobs are the Jobs queued suspended (marked) that are
// unsuspended and have not ended, by UID. Each holds quota for all the
// pods it runs at once (in its last wave, the completions it has left,
// from the Job controller's status), whether the Job controller made them
// yet or not:
// the pods that exist count as pods, the rest as pending. Whether the
// queue admitted the Job (its record) is not asked: only what runs, or
// will, is counted.
func runningQueuedJobs(o Options) map[types.UID]*queuedJobCharge {
	out := map[types.UID]*queuedJobCharge{}
	for i := range o.Jobs {
		j := &o.Jobs[i]
		if !podreq.QueuedJob(j, o.Names) || podreq.Suspended(j) || podreq.JobFinished(j) || j.DeletionTimestamp != nil {
			continue
		}
		if c := chargeOf(podreq.JobPods(j, o.Names), o); c != nil {
			out[j.UID] = c
		}
	}
	for i := range o.JobSets {
		j := &o.JobSets[i]
		if j.Annotations[o.Names.QueuedJobAnnotation] != "true" || podreq.JobSetSuspended(j) || podreq.JobSetFinished(j) || j.DeletionTimestamp != nil {
			continue
		}
		if c := chargeOf(podreq.JobSetPods(j, o.Names), o); c != nil {
			out[j.UID] = c
		}
	}
	return out
}

// chargeOf is what a running Job or JobSet queued suspended holds: its
// planned pods, each of the first one's request (rota-admission queues
// only workloads of one request per pod).
func chargeOf(planned []*corev1.Pod, o Options) *queuedJobCharge {
	if len(planned) == 0 {
		return nil
	}
	req, err := podreq.FromPod(planned[0], podreq.Options{Names: o.Names, MemoryUnitMiB: o.MemoryUnitMiB})
	if err != nil {
		return nil
	}
	return &queuedJobCharge{pod: planned[0], members: len(planned),
		amt: quota.Amount{GPUs: int64(req.GPUs), MemoryMiB: contract.MiB(req.MemoryUnits) * o.MemoryUnitMiB}}
}

// listJobSets lists the cluster's JobSets (none when the API is not
// served).
func listJobSets(ctx context.Context, dyn dynamic.Interface) ([]podreq.JobSet, error) {
	gvr := schema.GroupVersionResource{Group: podreq.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"}
	l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing JobSets: %w", err)
	}
	out := make([]podreq.JobSet, 0, len(l.Items))
	for i := range l.Items {
		var js podreq.JobSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &js); err != nil {
			return nil, fmt.Errorf("reading JobSet %s/%s: %w", l.Items[i].GetNamespace(), l.Items[i].GetName(), err)
		}
		out = append(out, js)
	}
	return out, nil
}

// checkTree checks a nested quota configuration (quota.Group) from the
// admitted use, apart from pkg/quota's accounting: for each group, what its
// subtree's teams take past their guarantees, less the group's own pool, is
// what the group borrows from above; that must fit the group's borrow
// limit, and what the top of the tree borrows must fit the shared pool
// plus what groups lend. A group's lending is counted at its limit, the
// most it can give, so a violation reported here is one under any lending.
func checkTree(cfg quota.Config, usage map[quota.Account]quota.Usage) []Violation {
	children := map[string][]string{}
	for name, g := range cfg.Groups {
		children[g.Parent] = append(children[g.Parent], name)
	}
	over := map[string]quota.Amount{} // per group ("" the top): its teams' use past their guarantees
	for a, u := range usage {
		g, _, pool, ok := cfg.AccountLimits(a)
		if !ok || pool != "" {
			continue
		}
		d := u.Total().Sub(g)
		parent := ""
		if a.Model == "" {
			parent = cfg.Teams[a.Team].Group
		}
		over[parent] = over[parent].Add(quota.Amount{GPUs: max(d.GPUs, 0), MemoryMiB: max(d.MemoryMiB, 0)})
	}
	var out []Violation
	lent := map[string]quota.Amount{}
	var up func(name string) quota.Amount
	up = func(name string) quota.Amount {
		need := over[name]
		for _, ch := range children[name] {
			need = need.Add(up(ch))
		}
		g := cfg.Groups[name]
		pool := quota.Limits{GPUs: g.GPUs, GPUMemoryGiB: g.GPUMemoryGiB}.Amount()
		lent[g.Parent] = lent[g.Parent].Add(g.Lend.Amount())
		rest := need.Sub(pool).Sub(lent[name])
		rest = quota.Amount{GPUs: max(rest.GPUs, 0), MemoryMiB: max(rest.MemoryMiB, 0)}
		if g.Borrow != nil && !rest.Fits(g.Borrow.Amount()) {
			out = append(out, Violation{Kind: PoolExceeded, Object: "group " + name,
				Message: fmt.Sprintf("its teams borrow %s past the group's pool %s, more than its borrow limit %s", rest, pool, g.Borrow.Amount())})
		}
		return rest
	}
	top := over[""]
	tops := children[""]
	sort.Strings(tops)
	for _, name := range tops {
		top = top.Add(up(name))
	}
	if room := cfg.SharedPool.Amount().Add(lent[""]); !top.Fits(room) {
		out = append(out, Violation{Kind: PoolExceeded, Object: "shared pool",
			Message: fmt.Sprintf("the tree borrows %s past its groups' pools, more than the shared pool and what groups lend, %s", top, room)})
	}
	return out
}

func gpuByUUID(t contract.Topology, uuid string) (contract.TopologyGPU, bool) {
	for _, g := range t.GPUs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return contract.TopologyGPU{}, false
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// Summary formats violations one per line, or "no violations".
func Summary(vs []Violation) string {
	if len(vs) == 0 {
		return "no violations"
	}
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = v.String()
	}
	return strings.Join(lines, "\n")
}
