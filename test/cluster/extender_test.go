//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/test/cluster"
)

// TestClusterCallsExtender checks that Options.Extender produces a
// configuration the real kube-scheduler accepts and follows: it calls the
// extender's filter for a pod requesting a managed resource, honours its
// answer, and does not call it for a pod without one.
func TestClusterCallsExtender(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		calls.Add(1)
		// Only gpu-1 fits, whatever the scheduler thinks.
		res := extenderv1.ExtenderFilterResult{NodeNames: &[]string{"gpu-1"}, FailedNodes: extenderv1.FailedNodesMap{}}
		for _, n := range *args.NodeNames {
			if n != "gpu-1" {
				res.FailedNodes[n] = "test extender: only gpu-1"
			}
		}
		_ = json.NewEncoder(w).Encode(res)
	}))
	defer srv.Close()

	c := cluster.StartT(t, cluster.Options{Extender: &cluster.Extender{
		URL: srv.URL, FilterVerb: "filter", NodeCacheCapable: true, HTTPTimeout: 5 * time.Second,
		ManagedResources: []cluster.ManagedResource{{Name: "example.com/gpu"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
		if _, err := c.CreateNode(ctx, name, nil, map[string]string{"example.com/gpu": "8"}); err != nil {
			t.Fatal(err)
		}
	}

	gpu := corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
	for i, name := range []string{"a", "b", "c"} {
		pod := schedulePod(ctx, t, c, "gpu-"+name, gpu)
		if pod.Spec.NodeName != "gpu-1" {
			t.Errorf("pod %d bound to %s, want gpu-1 (the only node the extender allows)", i, pod.Spec.NodeName)
		}
	}
	if calls.Load() == 0 {
		t.Fatal("extender was never called")
	}
	before := calls.Load()
	schedulePod(ctx, t, c, "cpu-only", nil)
	if got := calls.Load(); got != before {
		t.Errorf("extender called %d times for a pod without a managed resource", got-before)
	}
}
