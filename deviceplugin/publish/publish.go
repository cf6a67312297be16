// Package publish writes the node's GPU topology to the Node annotation
// (contract.Names.TopologyAnnotation) with a JSON merge patch, only when the
// document changes, retrying with backoff on API errors; and it watches the
// admin's GPU health override annotation on the same Node.
//
// Publisher is safe for concurrent use; Run is meant to be called once.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/pkg/contract"
)

// Source returns the current document and a channel closed when it changes.
type Source func() (contract.Topology, <-chan struct{})

// Publisher keeps one Node's topology annotation up to date.
type Publisher struct {
	client  kubernetes.Interface
	node    string
	key     string
	metrics *metrics.Metrics

	// MinBackoff and MaxBackoff bound the retry delay after API errors.
	MinBackoff, MaxBackoff time.Duration
}

// New publishes to the annotation key of node.
func New(client kubernetes.Interface, node, key string, m *metrics.Metrics) *Publisher {
	return &Publisher{client: client, node: node, key: key, metrics: m,
		MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second}
}

// Run publishes src's document now and after every change until ctx is done.
func (p *Publisher) Run(ctx context.Context, src Source) {
	logger := klog.FromContext(ctx)
	var last []byte // published document with generation 0
	var gen int64
	known := false
	retry := p.backoff()
	for {
		doc, changed := src()
		body, err := canonical(doc)
		if err != nil {
			logger.Error(err, "Topology document is invalid; not publishing")
		} else if !bytes.Equal(body, last) {
			if !known {
				gen, last, err = p.current(ctx)
				if err == nil {
					known = true
				}
			}
			if err == nil && !bytes.Equal(body, last) {
				doc.Generation = gen + 1
				err = p.patch(ctx, doc)
				if err == nil {
					gen, last = doc.Generation, body
					logger.Info("Published GPU topology", "node", p.node, "generation", gen)
				}
			}
			if err != nil {
				p.metrics.PublishError()
				delay := retry.Step()
				logger.Error(err, "Publishing GPU topology failed; retrying", "node", p.node, "retryIn", delay)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				continue
			}
		}
		retry = p.backoff()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// backoff is the retry delay after API errors: MinBackoff, doubling up to
// MaxBackoff, for as long as the errors last.
func (p *Publisher) backoff() wait.Backoff {
	return wait.Backoff{Duration: p.MinBackoff, Factor: 2, Cap: p.MaxBackoff, Steps: math.MaxInt32}
}

// current reads the annotation already on the Node: its generation and its
// canonical body (nil when absent or unreadable).
func (p *Publisher) current(ctx context.Context) (int64, []byte, error) {
	n, err := p.client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil, fmt.Errorf("node %s does not exist (is --node-name right?): %w", p.node, err)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("get node %s: %w", p.node, err)
	}
	v, ok := n.Annotations[p.key]
	if !ok {
		return 0, nil, nil
	}
	t, err := contract.ParseTopology([]byte(v))
	if err != nil {
		return 0, nil, nil // unreadable: overwrite it
	}
	body, err := canonical(t)
	if err != nil {
		return 0, nil, nil
	}
	return t.Generation, body, nil
}

func (p *Publisher) patch(ctx context.Context, doc contract.Topology) error {
	value, err := doc.Marshal()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{p.key: string(value)}}})
	if err != nil {
		return err
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: %w", p.node, err)
	}
	return nil
}

// canonical is the document's JSON with the generation cleared, used to
// decide whether anything changed.
func canonical(t contract.Topology) ([]byte, error) {
	t.Generation = 0
	return t.Marshal()
}
