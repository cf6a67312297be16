package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

func args(p *corev1.Pod, nodes ...string) *extenderv1.ExtenderArgs {
	return &extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes}
}

// half is node "half": 2 GPUs of 80 GiB, GPU 0 with 62 GiB assigned, GPU 1
// owned whole.
func halfUsed() []runtimeObj {
	n := node("half", 2, 80, 1, "leaf-a")
	p1 := pod("p1").mem(62).obj()
	p2 := pod("p2").gpus(1).obj()
	return []runtimeObj{n, bound(p1, "half", 0, 62*1024, false), bound(p2, "half", 1, 80*1024, true)}
}

// bound marks p as bound to node with an assignment of one GPU.
func bound(p *corev1.Pod, nodeName string, gpu int, mib contract.MiB, whole bool) *corev1.Pod {
	n := topology.FromSpec(topology.Spec{Name: nodeName, Count: 8, MemoryMiB: 80 * 1024})
	as := contract.Assignment{Version: contract.Version, Node: nodeName, Whole: whole,
		GPUs: []contract.AssignedGPU{{Index: gpu, UUID: n.GPUs[gpu].UUID, MemoryMiB: mib}}}
	data, err := as.Marshal()
	if err != nil {
		panic(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[names.AssignmentAnnotation] = string(data)
	p.Spec.NodeName = nodeName
	p.Status.Phase = corev1.PodRunning
	return p
}

func TestFilter(t *testing.T) {
	sick := topology.FromSpec(topology.Spec{Name: "sick", Model: "H100", Count: 1, MemoryMiB: 80 * 1024})
	sick.GPUs[0].Healthy, sick.GPUs[0].Reason = false, "XID 79"
	objs := append(halfUsed(),
		node("empty", 8, 80, 4, "leaf-a"),
		nodeWith("sick", sick.Document(), "leaf-b"),
		&corev1.Node{ObjectMeta: metaName("cpu-only")},
	)
	f := newFixture(t, fixtureOpts{}, objs...)
	tests := []struct {
		name             string
		givePod          *corev1.Pod
		giveNodes        []string
		wantPassed       []string
		wantFailed       map[string]string
		wantUnresolvable map[string]string
	}{
		{
			name: "share fits on the empty node, not on the used one", givePod: pod("a").mem(40).obj(),
			giveNodes:  []string{"half", "empty"},
			wantPassed: []string{"empty"},
			wantFailed: map[string]string{"half": "GPU 0 has 18 GiB free, pod needs 40 GiB"},
		},
		{
			name: "share larger than any GPU is unresolvable", givePod: pod("b").mem(100).obj(),
			giveNodes: []string{"empty"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{"empty": "pod needs 100 GiB on one GPU; the largest GPU here has 80 GiB"},
		},
		{
			name: "whole GPUs: too few free", givePod: pod("c").gpus(2).obj(),
			giveNodes: []string{"half", "empty"}, wantPassed: []string{"empty"},
			wantFailed: map[string]string{"half": "0 free GPUs, pod needs 2"},
		},
		{
			name: "node without topology and unhealthy GPU", givePod: pod("d").mem(10).obj(),
			giveNodes: []string{"cpu-only", "sick", "missing"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{
				"cpu-only": "node has not published its GPU topology yet",
				"missing":  "node has not published its GPU topology yet",
				"sick":     "GPU 0 unhealthy: XID 79",
			},
		},
		{
			name: "pod without Rota resources passes every node", givePod: pod("e").obj(),
			giveNodes: []string{"cpu-only", "half", "missing"}, wantPassed: []string{"cpu-only", "half", "missing"},
		},
		{
			name: "invalid request is refused on every node", givePod: pod("f").mem(10).gpus(1).obj(),
			giveNodes: []string{"empty"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{"empty": "invalid GPU request: spec.containers[0].resources.limits: asks for both example.com/gpu and example.com/gpu-memory; ask for whole GPUs (example.com/gpu) or a memory share on one GPU (example.com/gpu-memory), not both"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got extenderv1.ExtenderFilterResult
			if code := f.post("/filter", args(tc.givePod, tc.giveNodes...), &got); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if got.Error != "" {
				t.Fatalf("Error = %q", got.Error)
			}
			if got.NodeNames == nil || !reflect.DeepEqual(*got.NodeNames, tc.wantPassed) {
				t.Errorf("NodeNames = %v, want %v", deref(got.NodeNames), tc.wantPassed)
			}
			if len(tc.wantPassed) > 0 {
				// Some node passed: kube-scheduler ignores the reasons, so
				// they stay off the wire and go to the decision record.
				if len(got.FailedNodes)+len(got.FailedAndUnresolvableNodes) > 0 {
					t.Errorf("reasons on the wire although nodes passed: %v %v", got.FailedNodes, got.FailedAndUnresolvableNodes)
				}
				f.wantDecisionReasons(tc.givePod, tc.wantFailed, tc.wantUnresolvable)
			} else {
				if !equalMaps(got.FailedNodes, tc.wantFailed) {
					t.Errorf("FailedNodes = %v, want %v", got.FailedNodes, tc.wantFailed)
				}
				if !equalMaps(got.FailedAndUnresolvableNodes, tc.wantUnresolvable) {
					t.Errorf("FailedAndUnresolvableNodes = %v, want %v", got.FailedAndUnresolvableNodes, tc.wantUnresolvable)
				}
			}
			if got.Nodes != nil {
				t.Errorf("Nodes = %v, want nil (nodeCacheCapable)", got.Nodes)
			}
		})
	}
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger.Check() = %v", errs)
	}
}

func TestFilterRefusalIsExplained(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, halfUsed()...)
	var got extenderv1.ExtenderFilterResult
	f.post("/filter", args(pod("big").mem(40).obj(), "half"), &got)
	select {
	case ev := <-f.recorder.Events:
		if !strings.Contains(ev, "GPUUnschedulable") || !strings.Contains(ev, "GPU 0 has 18 GiB free, pod needs 40 GiB") {
			t.Errorf("event = %q", ev)
		}
	default:
		t.Fatal("no refusal event")
	}
	// The same refusal again within a minute emits no second event.
	f.post("/filter", args(pod("big").mem(40).obj(), "half"), &got)
	select {
	case ev := <-f.recorder.Events:
		t.Errorf("second event %q", ev)
	default:
	}
	resp, err := http.Get(f.srv.URL + "/debug/pods/default/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dbg struct {
		Pod       string `json:"pod"`
		Decisions []struct {
			Verb, Outcome string
			Nodes, Fits   int
			Reasons       []struct {
				Code    string
				Nodes   int
				Example string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&dbg); err != nil {
		t.Fatal(err)
	}
	if len(dbg.Decisions) != 2 || dbg.Decisions[0].Outcome != "nofit" || len(dbg.Decisions[0].Reasons) != 1 ||
		dbg.Decisions[0].Reasons[0].Code != "InsufficientMemory" || dbg.Decisions[0].Reasons[0].Nodes != 1 {
		t.Errorf("debug = %+v", dbg)
	}
	if resp, err := http.Get(f.srv.URL + "/debug/pods/default/nobody"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown pod: %v %v", resp.StatusCode, err)
	}
}

func TestFilterBadBodies(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	tests := []struct {
		name      string
		path      string
		giveBody  []byte
		wantCode  int
		wantError string
	}{
		{"filter malformed", "/filter", []byte(`{"Pod": [`), http.StatusOK, "filter: request body is not valid extender/v1 JSON"},
		{"filter no pod", "/filter", []byte(`{}`), http.StatusOK, "filter: the request names no pod"},
		{"filter too large", "/filter", append([]byte(`{"NodeNames":["`), bytes.Repeat([]byte("a"), 17<<20)...), http.StatusOK, "larger than 16777216 bytes"},
		{"bind malformed", "/bind", []byte(`nope`), http.StatusOK, "bind: request body is not valid extender/v1 JSON"},
		{"bind empty", "/bind", []byte(`{}`), http.StatusOK, "bind: podName, podNamespace, podUID and node are required"},
		{"prioritize malformed", "/prioritize", []byte(`[`), http.StatusBadRequest, ""},
		{"preempt malformed", "/preempt", []byte(`[`), http.StatusBadRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct{ Error string }
			code := f.post(tc.path, tc.giveBody, &got)
			if code != tc.wantCode {
				t.Fatalf("status %d, want %d", code, tc.wantCode)
			}
			if !strings.Contains(got.Error, tc.wantError) {
				t.Errorf("Error = %q, want it to contain %q", got.Error, tc.wantError)
			}
		})
	}
}

func TestFilterBestOnly(t *testing.T) {
	objs := append(halfUsed(), node("empty", 2, 80, 1, "leaf-a"))
	f := newFixture(t, fixtureOpts{filterBestOnly: true}, objs...)
	var got extenderv1.ExtenderFilterResult
	f.post("/filter", args(pod("s").mem(10).obj(), "empty", "half"), &got)
	if !reflect.DeepEqual(deref(got.NodeNames), []string{"half"}) {
		t.Errorf("NodeNames = %v, want [half] (binpack's best)", deref(got.NodeNames))
	}
	if len(got.FailedNodes) > 0 {
		t.Errorf("FailedNodes = %v, want none on the wire (a node passed)", got.FailedNodes)
	}
	f.wantDecisionReasons(pod("s").obj(), map[string]string{"empty": "another node scores higher under the binpack policy ("}, nil)
}

func TestProbes(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, halfUsed()...)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	f.post("/filter", args(pod("m").mem(10).obj(), "half"), nil)
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(bytes.Buffer)
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`rota_extender_request_duration_seconds_count{verb="filter"} 1`,
		`rota_extender_decisions_total{outcome="fit",reason="",verb="filter"} 1`,
		`rota_extender_gpu_memory_allocated_bytes 1.52471339008e+11`,
		`rota_extender_gpus_whole_used 1`,
		`rota_extender_gpus_total{health="healthy"} 2`,
		`rota_extender_allocations{state="committed"} 2`,
		`rota_extender_ledger_invariant_violations 0`,
	} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func deref(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

func equalMaps(a, b map[string]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// wantDecisionReasons checks that p's latest filter decision explains each
// refused node: its reason group names the node (or counts it) with a
// message that starts with the wanted one.
func (f *fixture) wantDecisionReasons(p *corev1.Pod, resolvable, unresolvable map[string]string) {
	f.t.Helper()
	ds := f.ext.Decisions(p.Namespace, p.Name)
	var last *scheduling.Decision
	for i := range ds {
		if ds[i].Verb == "filter" {
			last = &ds[i]
		}
	}
	if last == nil {
		f.t.Fatalf("no filter decision recorded for %s", p.Name)
	}
	for want, isResolvable := range map[*map[string]string]bool{&resolvable: true, &unresolvable: false} {
		for node, msg := range *want {
			found := false
			for _, r := range last.Reasons {
				if r.Resolvable == isResolvable && r.ExampleNode == node && strings.HasPrefix(r.Example, msg) {
					found = true
				}
			}
			if !found {
				f.t.Errorf("decision reasons %+v: none says %q for node %s", last.Reasons, msg, node)
			}
		}
	}
}
