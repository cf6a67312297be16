package main

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// stack is one scheduling stack on a fresh control plane of its own.
type stack interface {
	// start brings the control plane, the stack and the scenario's nodes
	// and teams up.
	start(ctx context.Context, sc evaluate.Scenario, dir string) error
	client() kubernetes.Interface
	shape() evalkit.Shape
	// namespace is a team's namespace.
	namespace(team string) string
	// pids are the processes whose CPU the report counts, by name.
	pids() map[string]int
	auditFiles() ([]string, error)
	// check runs the invariant checks that apply to the stack.
	check(ctx context.Context) []evaluate.Check
	// playsNode says whether a node's pods are the Sleeper's to end.
	playsNode(node string) bool
	stop() error
}

var names = contract.Default

const poolLabel = "rota.eval/pool"

// ---- stock: kube-scheduler's default profile, whole GPUs, ResourceQuota.

type stockStack struct {
	c *cluster.Cluster
}

func (s *stockStack) start(ctx context.Context, sc evaluate.Scenario, dir string) error {
	if err := s.startCluster(ctx, sc, dir); err != nil {
		return err
	}
	// A team may use its guarantee and the shared pool: the closest a
	// ResourceQuota (a hard cap, no borrowing) comes to the others' quota.
	for _, t := range sc.Teams {
		rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: s.namespace(t.Name)},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
				corev1.ResourceName("requests." + names.GPU): *resource.NewQuantity(t.GPUs+sc.Pool(), resource.DecimalSI)}}}
		if _, err := s.c.Client().CoreV1().ResourceQuotas(rq.Namespace).Create(ctx, rq, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// startCluster starts the control plane with kube-scheduler's default
// profile, the Job and ResourceQuota controllers, the nodes (whole GPUs as
// an extended resource) and the teams' namespaces.
func (s *stockStack) startCluster(ctx context.Context, sc evaluate.Scenario, dir string) error {
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, AuditLog: true, AuditPolicy: writesPolicy})
	if err != nil {
		return err
	}
	s.c = c
	if err := c.StartControllerManager(ctx, "job", "resourcequota"); err != nil {
		return err
	}
	for i := range sc.Cluster.Nodes {
		capacity := map[string]string{"cpu": strconv.FormatInt(sc.Cluster.CPUMilli/1000, 10),
			"memory": fmt.Sprintf("%dMi", sc.Cluster.HostMiB), "pods": "110",
			names.GPU: strconv.Itoa(sc.Cluster.GPUsPerNode)}
		if _, err := c.CreateNode(ctx, evalkit.NodeName(i), map[string]string{evalkit.RackLabel: evalkit.RackOf(sc, i), poolLabel: "gpu"}, capacity); err != nil {
			return err
		}
	}
	return evalkit.CreateTeams(ctx, c.Client(), sc, s.namespace, func(string) map[string]string { return nil })
}

func (s *stockStack) client() kubernetes.Interface { return s.c.Client() }
func (s *stockStack) shape() evalkit.Shape         { return evalkit.Shape{} }
func (s *stockStack) namespace(team string) string { return "team-" + team }
func (s *stockStack) pids() map[string]int         { return s.c.PIDs() }
func (s *stockStack) auditFiles() ([]string, error) {
	return s.c.AuditLogFiles()
}
func (s *stockStack) playsNode(node string) bool { return s.c.Nodes.Simulated(node) }
func (s *stockStack) check(context.Context) []evaluate.Check {
	return nil // the record checks (capacity, quota) apply; kube-scheduler places no gang whole
}
func (s *stockStack) stop() error {
	if s.c == nil {
		return nil
	}
	return s.c.Stop()
}

// ---- Rota: the chart's defaults, each team's namespace queueing its Jobs
// suspended (example.com/queueing=suspend), as Kueue queues them.

type rotaStack struct {
	env *harness.Env
	q   *quota.Config
}

func (s *rotaStack) start(ctx context.Context, sc evaluate.Scenario, dir string) error {
	doc := evalkit.RotaQuota(sc)
	q, err := quota.ParseYAML([]byte(doc))
	if err != nil {
		return fmt.Errorf("the evaluation's quota: %w", err)
	}
	s.q = &q
	s.env, err = harness.Start(ctx, harness.Options{Dir: dir, Quota: doc, Queueing: true, AuditLog: true,
		AuditPolicy: writesPolicy, ExtenderArgs: evalkit.ChartExtenderArgs})
	if err != nil {
		return err
	}
	if err := s.env.StartControllerManager(ctx, "job"); err != nil {
		return err
	}
	specs := evalkit.RotaNodes(sc, 0)
	if _, err := s.env.AddGPUNodes(ctx, specs...); err != nil {
		return err
	}
	return evalkit.CreateTeams(ctx, s.env.Client, sc, s.namespace, func(team string) map[string]string {
		return map[string]string{names.TeamLabel: team, names.QueueingLabel: contract.QueueingSuspend}
	})
}

func (s *rotaStack) client() kubernetes.Interface { return s.env.Client }
func (s *rotaStack) shape() evalkit.Shape         { return evalkit.Shape{Shares: true, GangsWhole: true} }
func (s *rotaStack) namespace(team string) string { return "team-" + team }
func (s *rotaStack) pids() map[string]int {
	out := s.env.Cluster.PIDs()
	out["rota-extender"] = s.env.Extender.PID()
	out["rota-admission"] = s.env.Admission.PID()
	return out
}
func (s *rotaStack) auditFiles() ([]string, error) { return s.env.Cluster.AuditLogFiles() }
func (s *rotaStack) playsNode(node string) bool    { return s.env.GPUNode(node) != nil }
func (s *rotaStack) check(ctx context.Context) []evaluate.Check {
	vs, err := s.env.CheckInvariants(ctx, s.q)
	c := evaluate.Check{Name: "invariant checker (capacity, exclusive GPUs, shares, quota, gangs whole, grants)"}
	if err != nil {
		c.Violations = append(c.Violations, "the checker could not run: "+err.Error())
	}
	for _, v := range vs {
		c.Violations = append(c.Violations, fmt.Sprintf("%s %s: %s", v.Kind, v.Object, v.Message))
	}
	return []evaluate.Check{c, s.queuedSuspended(ctx)}
}

// queuedSuspended checks that the run measured what it says: each GPU Job
// was created suspended and marked by rota-admission, and admitted by the
// queue, rather than run as gated pods.
func (s *rotaStack) queuedSuspended(ctx context.Context) evaluate.Check {
	c := evaluate.Check{Name: "Jobs queued suspended: every GPU Job created suspended, marked and admitted by the queue"}
	jobs, err := s.env.Client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
	if err != nil {
		c.Violations = append(c.Violations, "listing the Jobs: "+err.Error())
		return c
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		switch {
		case j.Labels[evalkit.KindLabel] == string(evaluate.Preprocess):
			// CPU preprocessing asks for no GPU: not the queue's.
		case j.Annotations[names.QueuedJobAnnotation] != "true":
			c.Violations = append(c.Violations, fmt.Sprintf("Job %s/%s was not queued suspended", j.Namespace, j.Name))
		case j.Status.StartTime != nil && j.Annotations[names.AdmissionAnnotation] == "":
			// The Job controller clears startTime when a Job is suspended.
			c.Violations = append(c.Violations, fmt.Sprintf("Job %s/%s started without the queue's admission record", j.Namespace, j.Name))
		}
		if len(c.Violations) >= 5 {
			break
		}
	}
	return c
}
func (s *rotaStack) stop() error {
	if s.env == nil {
		return nil
	}
	return s.env.Stop()
}
