package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
	"github.com/rota-sched/rota/test/kueue"
)

// kueueStack runs Kueue's controller manager, as its documentation
// recommends for batch work of several teams, beside the default
// kube-scheduler: a ClusterQueue per team with the team's guarantee as its
// nominal quota, all in one cohort with a ClusterQueue holding the shared
// pool, fair sharing on, waitForPodsReady for all-or-nothing starts,
// topology-aware scheduling on the same rack labels Rota's tiers use (a
// Topology of racks and hosts, the flavor on it; a gang prefers one rack,
// as Rota's gangs take the smallest tier that holds them), and the Job
// webhooks served to the API server by URL with a certificate made here.
// Whole GPUs only, as with NVIDIA's device plugin.
type kueueStack struct {
	root string
	stockStack
	manager *kueue.Manager
}

func (s *kueueStack) start(ctx context.Context, sc evaluate.Scenario, dir string) error {
	if _, err := kueue.Module(); err != nil {
		return err
	}
	if err := s.stockStack.startCluster(ctx, sc, dir); err != nil {
		return err
	}
	m, err := kueue.Start(ctx, s.c, kueue.Options{Root: s.root, Dir: dir})
	s.manager = m
	if err != nil {
		return err
	}
	return s.queues(ctx, sc)
}

// localQueue is the LocalQueue of every team namespace.
const localQueue = "team"

// queues makes the flavor, a ClusterQueue per team in one cohort with the
// shared pool's own ClusterQueue, and a LocalQueue in each team's
// namespace.
func (s *kueueStack) queues(ctx context.Context, sc evaluate.Scenario) error {
	m := s.manager
	if err := m.Create(ctx, kueue.Topologies, "", fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: racks}
spec:
  levels:
  - {nodeLabel: %s}
  - {nodeLabel: kubernetes.io/hostname}
`, evalkit.RackLabel)); err != nil {
		return err
	}
	if err := m.Create(ctx, kueue.ResourceFlavors, "", fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
spec:
  nodeLabels: {%s: gpu}
  topologyName: racks
`, poolLabel)); err != nil {
		return err
	}
	cq := func(name string, gpus, borrow int64) string {
		cpu, mem := sc.Cluster.CPUMilli/1000*int64(sc.Cluster.Nodes), sc.Cluster.HostMiB*int64(sc.Cluster.Nodes)
		return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohortName: all
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, %s]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "%d"}
      - {name: memory, nominalQuota: "%dMi"}
      - {name: %s, nominalQuota: "%d", borrowingLimit: "%d"}
`, name, names.GPU, cpu, mem, names.GPU, gpus, borrow)
	}
	if err := m.Create(ctx, kueue.ClusterQueues, "", cq("shared-pool", sc.Pool(), 0)); err != nil {
		return err
	}
	for _, t := range sc.Teams {
		if err := m.Create(ctx, kueue.ClusterQueues, "", cq(t.Name, t.GPUs, sc.Pool())); err != nil {
			return err
		}
		lq := fmt.Sprintf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: %s, namespace: %s}\nspec: {clusterQueue: %s}\n",
			localQueue, s.namespace(t.Name), t.Name)
		if err := m.Create(ctx, kueue.LocalQueues, s.namespace(t.Name), lq); err != nil {
			return err
		}
	}
	return nil
}

func (s *kueueStack) shape() evalkit.Shape {
	return evalkit.Shape{Labels: map[string]string{"kueue.x-k8s.io/queue-name": localQueue},
		GangAnnotations: map[string]string{"kueue.x-k8s.io/podset-preferred-topology": evalkit.RackLabel}}
}

func (s *kueueStack) pids() map[string]int {
	out := s.stockStack.pids()
	if pid := s.manager.PID(); pid != 0 {
		out["kueue"] = pid
	}
	return out
}

func (s *kueueStack) stop() error {
	return errors.Join(s.manager.Stop(), s.stockStack.stop())
}
