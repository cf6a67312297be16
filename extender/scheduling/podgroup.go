package scheduling

import (
	"context"
	"fmt"
	"time"

	gocache "github.com/patrickmn/go-cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// PodGroupGVR is scheduler-plugins' PodGroup resource.
var PodGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

// DynamicPodGroups reads PodGroups through the dynamic client, caching each
// minMember for a short TTL. Safe for concurrent use.
type DynamicPodGroups struct {
	client dynamic.Interface
	cache  *gocache.Cache
}

// NewDynamicPodGroups returns a PodGroups reader, or nil when the API server
// does not serve the PodGroup resource (the CRD is not installed); gangs
// that use the pod-group label then need the gang-size annotation.
func NewDynamicPodGroups(disc discovery.DiscoveryInterface, client dynamic.Interface, ttl time.Duration) (*DynamicPodGroups, error) {
	list, err := disc.ServerResourcesForGroupVersion(PodGroupGVR.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", PodGroupGVR.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == PodGroupGVR.Resource {
			return &DynamicPodGroups{client: client, cache: gocache.New(ttl, ttl)}, nil
		}
	}
	return nil, nil
}

// MinMember implements PodGroups.
func (p *DynamicPodGroups) MinMember(ctx context.Context, namespace, name string) (int, error) {
	key := namespace + "/" + name
	if v, ok := p.cache.Get(key); ok {
		if n, ok := v.(int); ok {
			return n, nil
		}
	}
	u, err := p.client.Resource(PodGroupGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("PodGroup %s does not exist; create it or set the gang-size annotation", key)
	}
	if err != nil {
		return 0, fmt.Errorf("read PodGroup %s: %w", key, err)
	}
	n, found, err := unstructured.NestedInt64(u.Object, "spec", "minMember")
	if err != nil || !found {
		return 0, fmt.Errorf("PodGroup %s has no spec.minMember", key)
	}
	p.cache.SetDefault(key, int(n))
	return int(n), nil
}
