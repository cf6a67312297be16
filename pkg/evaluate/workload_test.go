package evaluate

import (
	"reflect"
	"regexp"
	"testing"
	"time"
)

var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// demand is the GPUs the scenario's jobs ask for at once, against the
// cluster's (shares count their part of a GPU); jobs bigger than the
// cluster are left out, jobs over their team's quota are not (their team
// asks for them all the same).
func demand(s Scenario) float64 {
	var gpus float64
	for _, j := range s.Jobs {
		if j.TotalGPUs() > s.Cluster.GPUs() {
			continue
		}
		gpus += float64(j.TotalGPUs()) + float64(j.MemoryGiB*int64(j.Pods))/float64(s.Cluster.GPUMemoryGiB)
	}
	return gpus / float64(s.Cluster.GPUs())
}

// Every scenario is the same for the same seed, names its jobs uniquely as
// Kubernetes names, fits every job but the ones marked as never fitting,
// and has at least one of those; contention asks for two to three times
// the cluster.
func TestScenarios(t *testing.T) {
	for _, size := range []Size{Small, Full} {
		for _, name := range ScenarioNames {
			s := Scenarios[name](7, size)
			if again := Scenarios[name](7, size); !reflect.DeepEqual(s, again) {
				t.Errorf("%s: not the same for the same seed", name)
			}
			if other := Scenarios[name](8, size); reflect.DeepEqual(s.Jobs, other.Jobs) {
				t.Errorf("%s: the same for another seed", name)
			}
			seen, never := map[string]bool{}, 0
			for _, j := range s.Jobs {
				if seen[j.Name] || !dnsName.MatchString(j.Name) || len(j.Name) > 50 {
					t.Errorf("%s: job name %q repeated or not a Kubernetes name", name, j.Name)
				}
				seen[j.Name] = true
				limit := s.Cluster.GPUs() / 2 // a team's guarantee (a quarter) and the pool (a quarter)
				fits := j.GPUs <= int64(s.Cluster.GPUsPerNode) && j.MemoryGiB <= s.Cluster.GPUMemoryGiB &&
					j.TotalGPUs() <= limit && j.CPUMilli <= s.Cluster.CPUMilli
				if j.NeverFits {
					never++
					if j.TotalGPUs() <= limit {
						t.Errorf("%s: %s is marked never fitting but fits", name, j.Name)
					}
				} else if !fits {
					t.Errorf("%s: %s does not fit the cluster", name, j.Name)
				}
				if j.Kind == Short && j.Runtime < 5*time.Second {
					t.Errorf("%s: %s runs %v, under the runtime floor", name, j.Name, j.Runtime)
				}
			}
			if never == 0 {
				t.Errorf("%s: no job that can never fit", name)
			}
			if d := demand(s); name == "contention" && (d < 2 || d > 3) {
				t.Errorf("contention (size %d) asks for %.2fx the cluster; want 2-3x", size, d)
			}
		}
	}
}
