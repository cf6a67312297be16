package podreq

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// The Parser answers from memory only for the pod version it parsed: an
// edit (a new resourceVersion) is read afresh, so what a pod's owner
// changes is never hidden behind an older parse; Forget and the bound drop
// what it keeps.
func TestParserOncePerVersion(t *testing.T) {
	p := NewParser(opts, Records{}, 3)
	a := pod(ctr(names.GPU, "2"))
	a.ResourceVersion = "10"
	first := p.Of(a)
	if first.Err != nil || first.Request.GPUs != 2 || first.Key() != "ns/p" {
		t.Fatalf("Of = %+v; want 2 GPUs keyed ns/p", first)
	}
	if again := p.Of(a.DeepCopy()); again != first {
		t.Error("the same version was parsed again")
	}
	edited := pod(ctr(names.GPU, "8"))
	edited.ResourceVersion = "11"
	if got := p.Of(edited); got == first || got.Request.GPUs != 8 {
		t.Errorf("after an edit Of = %+v; want the new request (8 GPUs)", got.Request)
	}
	unversioned := pod(ctr(names.GPU, "1"))
	if once := p.Of(unversioned); once == p.Of(unversioned) {
		t.Error("a pod without a resourceVersion was answered from memory")
	}
	if p.Len() != 1 {
		t.Errorf("Len = %d; want 1 (one UID)", p.Len())
	}
	p.Forget(a.UID)
	if p.Len() != 0 {
		t.Errorf("Len after Forget = %d; want 0", p.Len())
	}
	for i := range 4 {
		q := pod(ctr(names.GPU, "1"))
		q.UID, q.ResourceVersion = types.UID(fmt.Sprint("u", i)), "1"
		p.Of(q)
	}
	if p.Len() > 3 {
		t.Errorf("Len = %d past its bound 3", p.Len())
	}
}

// A Parsed carries the same answers as the functions it stands for.
func TestParseMatchesItsParts(t *testing.T) {
	q := pod(ctr(names.GPUMemory, "20"))
	q.Labels = map[string]string{names.GangLabel: "g"}
	q.Annotations = map[string]string{names.GangSizeAnnotation: "4", names.GPUModelsAnnotation: "A100,H100"}
	got := Parse(q, opts, Records{})
	req, err := FromPod(q, opts)
	ref, gerr := GangOf(q, names)
	models, merr := GPUModels(q, names)
	if err != nil || gerr != nil || merr != nil {
		t.Fatalf("parts: %v %v %v", err, gerr, merr)
	}
	req.Job = WorkloadKey(q, ref)
	if got.Request.MemoryUnits != req.MemoryUnits || got.Key() != req.Job || got.Gang == nil || got.Gang.Size != 4 ||
		fmt.Sprint(got.Models) != fmt.Sprint(models) {
		t.Errorf("Parse = %+v (gang %+v); want %+v, gang %+v, models %v", got.Request, got.Gang, req, ref, models)
	}
}
