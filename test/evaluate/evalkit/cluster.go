package evalkit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/e2e/harness"
)

var names = contract.Default

// NodeName is the i-th node's name; RackOf its rack's label value.
func NodeName(i int) string { return fmt.Sprintf("gpu-%02d", i) }

// RackOf is the rack of the scenario's i-th node.
func RackOf(sc evaluate.Scenario, i int) string {
	return fmt.Sprintf("rack-%d", i/max(sc.Cluster.RackSize, 1))
}

// RackLabel is the leaf tier label every stack's nodes carry.
var RackLabel = names.Domain + "/leaf"

// CreateTeams makes a namespace per team, labelled by labels, and the
// PriorityClass of the urgent jobs.
func CreateTeams(ctx context.Context, c kubernetes.Interface, sc evaluate.Scenario, ns func(string) string, labels func(team string) map[string]string) error {
	for _, t := range sc.Teams {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(t.Name), Labels: labels(t.Name)}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: HighPriority}, Value: 1000}
	if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// ChartExtenderArgs are the chart's default rota-extender flags that the
// harness does not set itself.
var ChartExtenderArgs = []string{"--policy=binpack", "--filter-best-only", "--max-preemptible-gang-size=8",
	"--queue-narrow-candidates=3", "--reserve=true", "--reserve-large-gpus=64", "--reserve-max-age=30m",
	"--reserve-max-hold=2h", "--reserve-cool-off=30m", "--reserve-max=4"}

// RotaQuota is Rota's quota document for the scenario's teams: each
// guaranteed its GPUs (and their memory), each allowed to borrow the shared
// pool.
func RotaQuota(sc evaluate.Scenario) string {
	var b strings.Builder
	b.WriteString("teams:\n")
	per := sc.Cluster.GPUMemoryGiB
	for _, t := range sc.Teams {
		fmt.Fprintf(&b, "  %s: {gpus: %d, gpuMemoryGiB: %d, borrow: {gpus: %d, gpuMemoryGiB: %d}}\n",
			t.Name, t.GPUs, t.GPUs*per, sc.Pool(), sc.Pool()*per)
	}
	fmt.Fprintf(&b, "sharedPool: {gpus: %d, gpuMemoryGiB: %d}\n", sc.Pool(), sc.Pool()*per)
	// The harness checks the queue gate with a pod in a namespace of no
	// team; every job of the evaluation runs in its team's namespace.
	b.WriteString("unknownTeams: unlimited\n")
	return b.String()
}

// RotaNodes are the scenario's GPU nodes as the harness simulates them;
// the first plugins of them run a real rota-device-plugin.
func RotaNodes(sc evaluate.Scenario, plugins int) []harness.GPUNodeSpec {
	var specs []harness.GPUNodeSpec
	for i := range sc.Cluster.Nodes {
		specs = append(specs, harness.GPUNodeSpec{Name: NodeName(i), Model: "NVIDIA H100 80GB HBM3",
			Count: sc.Cluster.GPUsPerNode, MemoryMiB: contract.MiB(sc.Cluster.GPUMemoryGiB) * 1024,
			Labels: map[string]string{RackLabel: RackOf(sc, i)},
			CPU:    strconv.FormatInt(sc.Cluster.CPUMilli/1000, 10), Memory: fmt.Sprintf("%dMi", sc.Cluster.HostMiB),
			Plugin: i < plugins})
	}
	return specs
}
