package config

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// ProfileWeight is the extender weight SchedulerProfile uses by default.
// kube-scheduler multiplies an extender priority (0..10) by 10 and by the
// weight, so one of Rota's ranks (see scheduling.RankScores) is worth
// 10 x ProfileWeight = 1000 points. The in-tree score plugins the profile
// keeps (TaintToleration 3, NodeAffinity 2, PodTopologySpread 2,
// InterPodAffinity 2, NodeResourcesFit 1) add at most 10 x 100 = 1000
// points, so they can never outvote one rank of Rota's order: they only
// choose among nodes Rota scores the same.
const ProfileWeight = 100

// ProfileDisabledScorePlugins are the in-tree score plugins SchedulerProfile
// turns off, and why:
//
//   - NodeResourcesBalancedAllocation prefers nodes whose CPU and memory
//     use stay balanced: it spreads pods by host resources, which says
//     nothing about GPUs and pulls against packing;
//   - ImageLocality prefers nodes that already hold the image: on a GPU
//     fleet that is a packing-blind preference (and in a replay nobody has
//     images, so it only adds noise).
//
// NodeResourcesFit stays, with the MostAllocated strategy instead of the
// default LeastAllocated (which spreads pods to the emptiest node and
// fights Rota's packing among nodes Rota scores the same).
var ProfileDisabledScorePlugins = []string{"NodeResourcesBalancedAllocation", "ImageLocality"}

// SchedulerProfile renders the KubeSchedulerConfiguration Rota recommends
// for placement quality: SchedulerConfig's extender entry (weight
// ProfileWeight unless WithWeight says otherwise; GPU-free pods included
// unless WithGPUFreePods(false) says otherwise: a CPU-only pod placed
// without Rota takes CPU that GPU pods on that node need, and strands its
// GPUs; docs/performance.md has the replay figures) plus
//
//   - percentageOfNodesToScore left to kube-scheduler's adaptive default
//     (WithPercentageOfNodesToScore sets it): it stops filtering once it
//     has found max(100, (50 - nodes/125)%, 5%) feasible nodes, starting
//     where the previous cycle stopped, so the extender chooses among a
//     rotating sample. Scoring every node (100) places barely better and
//     costs kube-scheduler and the extender much more CPU per pod at
//     thousands of nodes (docs/performance.md, "The scheduler profile").
//     Pods the queue narrows see only their few candidates either way;
//   - the default profile with ProfileDisabledScorePlugins off and
//     NodeResourcesFit scoring MostAllocated on cpu and memory.
//
// What stays random: kube-scheduler picks at random among the nodes with
// the highest total score. RankScores gives every node of Rota's best score
// class 10, so among a tie of the policy (equal fine scores) the choice is
// the scheduler's, unless the remaining plugins separate those nodes. The
// extender's --filter-best-only narrows the scheduler's choice to that
// class, so nothing the scheduler adds can pick a worse class; it does not
// break the tie itself.
func SchedulerProfile(extenderURL, kubeconfigPath string, opts ...SchedulerOption) string {
	opts = append([]SchedulerOption{WithWeight(ProfileWeight), WithGPUFreePods(true)}, opts...)
	cfg := schedulerConfiguration(extenderURL, kubeconfigPath, opts...)
	fit, err := json.Marshal(&configv1.NodeResourcesFitArgs{ScoringStrategy: &configv1.ScoringStrategy{
		Type:      configv1.MostAllocated,
		Resources: []configv1.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}},
	}})
	if err != nil {
		return ""
	}
	disabled := make([]configv1.Plugin, 0, len(ProfileDisabledScorePlugins))
	for _, p := range ProfileDisabledScorePlugins {
		disabled = append(disabled, configv1.Plugin{Name: p})
	}
	name := "default-scheduler"
	cfg.Profiles = []configv1.KubeSchedulerProfile{{
		SchedulerName: &name,
		Plugins:       &configv1.Plugins{Score: configv1.PluginSet{Disabled: disabled}},
		PluginConfig:  []configv1.PluginConfig{{Name: "NodeResourcesFit", Args: runtime.RawExtension{Raw: fit}}},
	}}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return ""
	}
	return string(out)
}
