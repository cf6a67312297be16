package publish

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ParseOverride reads the admin's health override annotation:
// "<uuid>=healthy[,<uuid>=healthy...]". It returns the UUIDs to force healthy.
func ParseOverride(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		uuid, state, ok := strings.Cut(f, "=")
		if !ok || strings.TrimSpace(uuid) == "" || strings.TrimSpace(state) != "healthy" {
			return nil, fmt.Errorf("%q is not <gpu-uuid>=healthy", f)
		}
		out = append(out, strings.TrimSpace(uuid))
	}
	return out, nil
}

// WatchOverrides watches the Node's override annotation key and calls apply
// with the UUIDs each time its value changes to a non-empty list. It blocks
// until ctx is done.
func WatchOverrides(ctx context.Context, client kubernetes.Interface, node, key string, apply func(uuids []string)) {
	logger := klog.FromContext(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}))
	inf := f.Core().V1().Nodes().Informer()
	last := ""
	handle := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		v := n.Annotations[key]
		if v == last {
			return
		}
		last = v
		if v == "" {
			return
		}
		uuids, err := ParseOverride(v)
		if err != nil {
			logger.Error(err, "Ignoring unreadable GPU health override", "node", node, "annotation", key)
			return
		}
		logger.Info("Admin GPU health override", "node", node, "gpus", uuids)
		apply(uuids)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}
