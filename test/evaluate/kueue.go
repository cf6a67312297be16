package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/pkg/evaluate"
)

// kueueStack runs the Kueue controller manager beside the default
// kube-scheduler.
type kueueStack struct {
	root string
	stockStack
}

var errNoKueue = errors.New("the Kueue manager is not built")

func (s *kueueStack) start(ctx context.Context, sc evaluate.Scenario, dir string) error {
	bin := kueueBinary(s.root)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (%s: run make kueue)", errNoKueue, bin)
	}
	return fmt.Errorf("running Kueue beside the control plane is not wired yet")
}

func (s *kueueStack) client() kubernetes.Interface { return s.stockStack.client() }
func (s *kueueStack) shape() shape {
	return shape{labels: map[string]string{"kueue.x-k8s.io/queue-name": "team"}, suspend: true}
}
