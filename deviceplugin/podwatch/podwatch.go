// Package podwatch feeds the handoff Matcher: a pod informer limited to the
// pods bound to this node (field selector spec.nodeName), and a periodic
// reconciliation with the kubelet's PodResources API (v1 List), which says
// which containers already hold which devices.
package podwatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// StartPods starts an informer on the pods bound to node that keeps m (and
// any also handlers) up to date, and waits for its first sync. The informer
// stops when ctx ends.
func StartPods(ctx context.Context, client kubernetes.Interface, node string, m *handoff.Matcher, also ...cache.ResourceEventHandler) error {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(m, obj) },
		UpdateFunc: func(_, obj any) { upsert(m, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				m.Delete(string(p.UID))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("pod informer handler: %w", err)
	}
	for _, h := range also {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("pod informer handler: %w", err)
		}
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer for node %s did not sync: %w", node, ctx.Err())
	}
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
	return nil
}

func upsert(m *handoff.Matcher, obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		m.Upsert(p)
	}
}

// Reconcile lists the kubelet's pod resources from socket every interval
// and feeds them to m. A missing socket is not an error: the kubelet may
// not expose the API, and Allocate's own bookkeeping then stands alone.
func Reconcile(ctx context.Context, socket string, interval time.Duration, m *handoff.Matcher, met *metrics.Metrics) {
	logger := klog.FromContext(ctx)
	if socket == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	warned := false
	for {
		list, err := List(ctx, socket)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !warned {
				logger.Info("Kubelet PodResources socket absent; reconciliation off until it appears", "socket", socket)
				warned = true
			}
		case err != nil:
			logger.Error(err, "Listing kubelet pod resources failed", "socket", socket)
		default:
			warned = false
			mm := m.Reconcile(list)
			for _, x := range mm {
				logger.Info("Container holds devices outside its pod's assignment (the kubelet did not follow the preferred allocation)",
					"pod", x.Pod, "container", x.Container, "resource", x.Resource, "devices", x.DeviceIDs)
			}
			met.Mismatch(len(mm))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// List calls the kubelet PodResources v1 List on socket.
func List(ctx context.Context, socket string) ([]handoff.PodDevices, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial pod resources %s: %w", socket, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(cctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources list: %w", err)
	}
	out := make([]handoff.PodDevices, 0, len(resp.PodResources))
	for _, p := range resp.PodResources {
		pd := handoff.PodDevices{Namespace: p.Namespace, Name: p.Name, Containers: map[string]map[string][]string{}}
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if pd.Containers[c.Name] == nil {
					pd.Containers[c.Name] = map[string][]string{}
				}
				pd.Containers[c.Name][d.ResourceName] = append(pd.Containers[c.Name][d.ResourceName], d.DeviceIds...)
			}
		}
		out = append(out, pd)
	}
	return out, nil
}
