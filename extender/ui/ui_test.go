package ui_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/server"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

var (
	names = contract.Default
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

const gib = contract.MiB(1024)

// fixture is a ledger with node gpu-a (4 x 80 GiB: GPU 0 whole to
// team-a/train, GPU 1 shared 20 GiB by team-b/infer, GPU 2 reserved whole
// for team-a/next, GPU 3 unhealthy) and node gpu-b (2 idle GPUs), a pending
// pod team-b/big with a filter refusal in the decision log, and a pending
// pod team-b/new with no decision yet.
func fixture(t *testing.T) *ui.UI {
	t.Helper()
	led := ledger.New()
	a := topology.FromSpec(topology.Spec{Name: "gpu-a", Model: "H100", Count: 4, MemoryMiB: 80 * gib, Tiers: []string{"leaf-1"}})
	a.GPUs[3].Healthy, a.GPUs[3].Reason = false, "XID 79"
	led.UpsertNode(a)
	led.UpsertNode(topology.FromSpec(topology.Spec{Name: "gpu-b", Model: "H100", Count: 2, MemoryMiB: 80 * gib}))
	share := func(i int, mib contract.MiB) []ledger.Share {
		return []ledger.Share{{Index: i, UUID: a.GPUs[i].UUID, MemoryMiB: mib}}
	}
	for _, al := range []ledger.Allocation{
		{PodUID: "u-train", Pod: "team-a/train", Node: "gpu-a", Whole: true, GPUs: share(0, 80*gib), State: ledger.Committed},
		{PodUID: "u-infer", Pod: "team-b/infer", Node: "gpu-a", GPUs: share(1, 20*gib), State: ledger.Committed},
	} {
		if err := led.Restore(al); err != nil {
			t.Fatal(err)
		}
	}
	if err := led.Reserve(ledger.Allocation{PodUID: "u-next", Pod: "team-a/next", Node: "gpu-a", Whole: true,
		GPUs: share(2, 80*gib)}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pending := func(ns, name string, res string, q string, created time.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("u-" + name), CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse(q)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
	}
	for _, p := range []*corev1.Pod{
		pending("team-b", "big", names.GPU, "4", t0.Add(-90*time.Second)),
		pending("team-b", "new", names.GPUMemory, "10", t0.Add(-5*time.Second)),
		// Ruled out by kube-scheduler's own filters: the extender never saw it.
		func() *corev1.Pod {
			p := pending("team-b", "picky", names.GPU, "1", t0.Add(-30*time.Second))
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: "Unschedulable", Message: "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
				LastTransitionTime: metav1.NewTime(t0.Add(-20 * time.Second))}}
			return p
		}(),
		// Bound, or not asking for GPUs: not waiting.
		func() *corev1.Pod {
			p := pending("team-a", "train", names.GPU, "1", t0)
			p.Spec.NodeName = "gpu-a"
			return p
		}(),
		pending("team-c", "cpu", string(corev1.ResourceCPU), "1", t0),
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	decisions := func(ns, name string) []scheduling.Decision {
		if ns+"/"+name != "team-b/big" {
			return nil
		}
		return []scheduling.Decision{
			{Time: t0.Add(-80 * time.Second), Verb: "filter", Outcome: "nofit", Message: "older refusal"},
			{Time: t0.Add(-10 * time.Second), Verb: "filter", Outcome: "nofit",
				Message: "0/2 nodes fit the GPU request: 2 like gpu-a: 1 idle healthy GPU, pod needs 4"},
			{Time: t0.Add(-9 * time.Second), Verb: "preempt", Outcome: "none"},
		}
	}
	return ui.New(ui.Options{Names: names, Snapshot: led.Snapshot, Pods: corelisters.NewPodLister(idx),
		Decisions: decisions, Workload: placement.DefaultWorkload(), Now: func() time.Time { return t0 }})
}

// diff compares want and got by their indented JSON (the module does not
// depend on go-cmp) and returns both when they differ.
func diff(want, got any) string {
	w, _ := json.MarshalIndent(want, "", "  ")
	g, _ := json.MarshalIndent(got, "", "  ")
	if string(w) == string(g) {
		return ""
	}
	return "-want:\n" + string(w) + "\n+got:\n" + string(g)
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// router is the extender's real router with the UI mounted.
func router(u *ui.UI) http.Handler { return server.New(nil, server.Options{UI: u}).Handler() }

func TestState(t *testing.T) {
	rec := get(t, router(fixture(t)), "/ui/api/state")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /ui/api/state: %d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var got ui.State
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}

	wantTotals := ui.Totals{Nodes: 2, GPUs: 6, Busy: 3, Unhealthy: 1, MemoryMiB: 6 * 80 * gib, UsedMiB: 180 * gib, Waiting: 3}
	if diff := diff(wantTotals, got.Totals); diff != "" {
		t.Errorf("totals mismatch (-want +got):\n%s", diff)
	}

	type cell struct {
		Node, Use string
		Pods      []ui.GPUPod
	}
	var cells []cell
	for _, n := range got.Nodes {
		for _, g := range n.GPUs {
			cells = append(cells, cell{Node: n.Name, Use: g.Use, Pods: g.Pods})
		}
	}
	wantCells := []cell{
		{"gpu-a", ui.UseWhole, []ui.GPUPod{{Pod: "team-a/train", MemoryMiB: 80 * gib, Whole: true, State: "committed"}}},
		{"gpu-a", ui.UseShared, []ui.GPUPod{{Pod: "team-b/infer", MemoryMiB: 20 * gib, State: "committed"}}},
		{"gpu-a", ui.UseReserved, []ui.GPUPod{{Pod: "team-a/next", MemoryMiB: 80 * gib, Whole: true, State: "reserved"}}},
		{"gpu-a", ui.UseUnhealthy, nil},
		{"gpu-b", ui.UseIdle, nil},
		{"gpu-b", ui.UseIdle, nil},
	}
	if diff := diff(wantCells, cells); diff != "" {
		t.Errorf("GPU map mismatch (-want +got):\n%s", diff)
	}
	if g := got.Nodes[0].GPUs[3]; g.Reason != "XID 79" || g.Healthy {
		t.Errorf("unhealthy GPU: healthy=%v reason %q, want false and XID 79", g.Healthy, g.Reason)
	}

	wantQueue := []ui.Waiting{
		{Pod: "team-b/big", Request: "4 whole GPUs", Since: t0.Add(-90 * time.Second), WaitingSeconds: 90,
			Reason: "0/2 nodes fit the GPU request: 2 like gpu-a: 1 idle healthy GPU, pod needs 4",
			Verb:   "filter", Outcome: "nofit", ReasonAt: t0.Add(-10 * time.Second)},
		{Pod: "team-b/picky", Request: "1 whole GPU", Since: t0.Add(-30 * time.Second), WaitingSeconds: 30,
			Reason: "kube-scheduler: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
			Verb:   "kube-scheduler", Outcome: "Unschedulable", ReasonAt: t0.Add(-20 * time.Second)},
		{Pod: "team-b/new", Request: "10 GiB on one GPU", Since: t0.Add(-5 * time.Second), WaitingSeconds: 5,
			Reason: "no extender decision yet: kube-scheduler may have ruled out every node itself (see the pod's events, or kubectl rota why)"},
	}
	if diff := diff(wantQueue, got.Queue); diff != "" {
		t.Errorf("queue mismatch (-want +got):\n%s", diff)
	}

	wantUse := []ui.NamespaceUse{
		{Namespace: "team-a", GPUs: 2, WholeGPUs: 2, MemoryMiB: 160 * gib, Pods: 2},
		{Namespace: "team-b", GPUs: 0.25, MemoryMiB: 20 * gib, Pods: 1, Waiting: 3},
	}
	if diff := diff(wantUse, got.Namespaces); diff != "" {
		t.Errorf("namespace use mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(got.UsageNote, "quota") {
		t.Errorf("usage note %q does not say where use against quota is shown", got.UsageNote)
	}
	if len(got.Fragmentation) != 1 || got.Fragmentation[0].FreeGPUs != 2.75 {
		t.Errorf("fragmentation = %+v, want one sample taken now with 2.75 free GPUs (0.75 of gpu-a GPU 1, 2 idle on gpu-b)", got.Fragmentation)
	}
}

func TestFragmentationRing(t *testing.T) {
	led := ledger.New()
	led.UpsertNode(topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 2, MemoryMiB: 80 * gib}))
	now := t0
	u := ui.New(ui.Options{Names: names, Snapshot: led.Snapshot, SampleEvery: 10 * time.Second, Keep: 3,
		Now: func() time.Time { return now }})
	for range 5 {
		u.Sample()
		now = now.Add(10 * time.Second)
	}
	var got []time.Time
	for _, s := range u.State().Fragmentation {
		got = append(got, s.Time)
	}
	// The ring keeps the 3 newest samples (t0+20s..t0+40s); State adds one taken now.
	want := []time.Time{t0.Add(20 * time.Second), t0.Add(30 * time.Second), t0.Add(40 * time.Second), t0.Add(50 * time.Second)}
	if diff := diff(want, got); diff != "" {
		t.Errorf("sample times mismatch (-want +got):\n%s", diff)
	}
}

func TestPageServed(t *testing.T) {
	h := router(fixture(t))
	tests := []struct {
		givePath        string
		wantContentType string
		wantBody        string
	}{
		{givePath: "/ui", wantContentType: "text/html", wantBody: `<script src="/ui/app.js"`},
		{givePath: "/ui/app.js", wantContentType: "text/javascript", wantBody: `fetch("/ui/api/state"`},
		{givePath: "/ui/style.css", wantContentType: "text/css", wantBody: ".gpu"},
	}
	for _, tc := range tests {
		t.Run(tc.givePath, func(t *testing.T) {
			rec := get(t, h, tc.givePath)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: %d", tc.givePath, rec.Code)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.wantContentType) {
				t.Errorf("Content-Type %q, want %s", ct, tc.wantContentType)
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("Content-Security-Policy %q does not lock the page to its own files", csp)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("GET %s does not contain %q", tc.givePath, tc.wantBody)
			}
		})
	}
	if rec := get(t, h, "/ui/nope"); rec.Code != http.StatusNotFound {
		t.Errorf("GET /ui/nope: %d, want 404", rec.Code)
	}
}

// TestNoExternalURL reads every file the page is made of: nothing may load
// from or link to another origin.
func TestNoExternalURL(t *testing.T) {
	h := router(fixture(t))
	external := regexp.MustCompile(`(?i)(https?:|wss?:|ftp:)//|(src|href|action)\s*=\s*["']?//|@import|url\(\s*["']?(https?:)?//`)
	for _, p := range ui.Paths() {
		if p == ui.PathState {
			continue
		}
		body, _ := io.ReadAll(get(t, h, p).Result().Body)
		if len(body) == 0 {
			t.Errorf("GET %s: empty", p)
		}
		if m := external.Find(body); m != nil {
			t.Errorf("GET %s holds an external reference %q", p, m)
		}
	}
	// And the embedded folder holds nothing the routes do not serve.
	n := 0
	_ = fs.WalkDir(ui.Assets(), ".", func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != len(ui.Paths())-1 {
		t.Errorf("embedded assets: %d files, routes serve %d", n, len(ui.Paths())-1)
	}
}
