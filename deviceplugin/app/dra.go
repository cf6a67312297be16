package app

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
)

// Node event reasons of the DRA check.
const (
	ReasonDRAManaged = "GPUsManagedByDRA"
	ReasonDRAGone    = "GPUsNoLongerManagedByDRA"
)

// draCheck reads whether DRA manages this node's GPUs (pkg/dra): the
// node's ResourceSlices (field selector spec.nodeName) and every
// DeviceClass. It returns the reason, "" when DRA does not; an API server
// that does not serve resource.k8s.io/v1 manages nothing.
type draCheck struct {
	client kubernetes.Interface
	node   string
	uuids  []string
	rules  dra.Rules
}

func newDRACheck(cfg config.Config, client kubernetes.Interface, names contract.Names, uuids []string) *draCheck {
	return &draCheck{client: client, node: cfg.NodeName, uuids: uuids,
		rules: dra.NewRules(cfg.DRAGPUDrivers, names)}
}

func (c *draCheck) why(ctx context.Context) (string, error) {
	list, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.node).String()})
	if apierrors.IsNotFound(err) {
		return "", nil // resource.k8s.io/v1 not served
	}
	if err != nil {
		return "", fmt.Errorf("listing this node's ResourceSlices: %w", err)
	}
	ss := dra.NodeSlices(c.node, list.Items)
	if len(ss) == 0 {
		return "", nil
	}
	classes, err := c.client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing DeviceClasses: %w", err)
	}
	return c.rules.Why(c.uuids, ss, dra.Classes(classes.Items)), nil
}

// serveUnlessDRA runs serve (the plugins' registration with the kubelet)
// while DRA does not manage this node's GPUs, checking every interval.
// While DRA does, nothing is advertised: serve is stopped (the plugin
// sockets go, and the kubelet marks the devices unhealthy), the reason is
// logged and put on the Node as a Warning event. A check that fails keeps
// the last answer: an API server outage does not stop a serving plugin.
// It returns when ctx ends or serve fails.
func serveUnlessDRA(ctx context.Context, check *draCheck, interval time.Duration, serve func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	managed := ""
	known := false
	for ctx.Err() == nil {
		why, err := check.why(ctx)
		switch {
		case err != nil && !known:
			// Nothing known yet: do not advertise GPUs that DRA may
			// hand out; try again soon.
			logger.Error(err, "Could not check whether DRA manages this node's GPUs; not advertising them yet")
			if !sleep(ctx, min(interval, 5*time.Second)) {
				return nil
			}
			continue
		case err != nil:
			logger.Error(err, "Could not check whether DRA manages this node's GPUs; keeping the last answer", "managed", managed != "")
			why = managed
		}
		if why != managed || !known {
			switch {
			case why != "":
				logger.Error(nil, "This node's GPUs are managed by DRA: not advertising them to the kubelet", "reason", why)
				event(ctx, check.client, check.node, corev1.EventTypeWarning, ReasonDRAManaged, "rota-device-plugin does not advertise this node's GPUs: "+why)
			case known:
				logger.Info("This node's GPUs are no longer managed by DRA: advertising them again")
				event(ctx, check.client, check.node, corev1.EventTypeNormal, ReasonDRAGone, "rota-device-plugin advertises this node's GPUs again: no DRA driver publishes them")
			}
		}
		managed, known = why, true
		if managed != "" {
			if !sleep(ctx, interval) {
				return nil
			}
			continue
		}
		if err := serveWhile(ctx, check, interval, serve); err != nil {
			return err
		}
	}
	return nil
}

// serveWhile runs serve until ctx ends, serve fails, or a check says DRA
// now manages the node's GPUs (a failed check changes nothing).
func serveWhile(ctx context.Context, check *draCheck, interval time.Duration, serve func(context.Context) error) error {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- serve(sctx) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if why, err := check.why(ctx); err == nil && why != "" {
				stop()
				return <-done
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
