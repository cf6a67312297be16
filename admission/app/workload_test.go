package app

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// The webhook's reads of workloads get the object the owner reference
// names, and only that one: another JobSet of the same name (a UID that
// differs) is not found. Reads are kept.
func TestWorkloadReads(t *testing.T) {
	js := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "llm", "namespace": "ml", "uid": "u1"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "workers", "replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"parallelism": int64(4), "completions": int64(4), "completionMode": "Indexed",
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c",
					"resources": map[string]any{"limits": map[string]any{"example.com/gpu": "8"}}}}}}}}}}}}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{jobSetsGVR: "JobSetList"}, js)
	g := newWorkloadReads(nil, client, contract.Default)
	shape, err := g.JobSet(t.Context(), "ml", "llm", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if name, size, ok := podreq.JobSetGang(shape, "workers", contract.Default); !ok || name != "llm" || size != 8 {
		t.Fatalf("JobSetGang of the read JobSet = %q, %d, %v; want llm of 8", name, size, ok)
	}
	if _, err := g.JobSet(t.Context(), "ml", "llm", "u0"); !apierrors.IsNotFound(err) {
		t.Fatalf("a JobSet of another UID: err %v, want not found", err)
	}
	if err := client.Resource(jobSetsGVR).Namespace("ml").Delete(t.Context(), "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.JobSet(t.Context(), "ml", "llm", "u1"); err != nil {
		t.Fatalf("a kept read: %v", err)
	}
}
