package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/test/fixture"
)

// hostileBodies are malformed bodies for any JSON endpoint: empty,
// truncated copies of a valid body, oversized, deeply nested, non-JSON and
// non-UTF-8. max is the endpoint's body limit.
func hostileBodies(valid []byte, max int) map[string][]byte {
	out := map[string][]byte{
		"empty":                       {},
		"whitespace":                  []byte(" \n\t "),
		"open brace":                  []byte(`{`),
		"open bracket":                []byte(`[`),
		"close brace":                 []byte(`}`),
		"bare word":                   []byte(`nope`),
		"NUL bytes":                   {0, 0, 0},
		"non-UTF-8 bytes":             {0xff, 0xfe, 0xfd},
		"unterminated string":         []byte(`{"Pod": "`),
		"bad escape":                  []byte(`{"Pod": "\x"}`),
		"trailing comma":              []byte(`{"Pod": {},}`),
		"single quotes":               []byte(`{'Pod': {}}`),
		"NaN":                         []byte(`{"Pod": NaN}`),
		"comment":                     []byte(`/* */ {}`),
		"200000 nested arrays":        bytes.Repeat([]byte(`[`), 200000),
		"200000 nested objects":       bytes.Repeat([]byte(`{"a":`), 200000),
		"20000 closed nested arrays":  append(bytes.Repeat([]byte(`[`), 20000), bytes.Repeat([]byte(`]`), 20000)...),
		"over the body limit":         append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), max+1024)...),
		"over the body limit, spaces": bytes.Repeat([]byte(" "), max+1),
		"UTF-16 BOM + valid":          append([]byte{0xfe, 0xff}, valid...),
		"UTF-8 BOM + valid":           append([]byte{0xef, 0xbb, 0xbf}, valid...),
	}
	const cuts = 24
	for i := 1; i < cuts; i++ {
		n := len(valid) * i / cuts
		out[fmt.Sprintf("truncated at %d/%d bytes", n, len(valid))] = valid[:n]
	}
	return out
}

// extenderHostile is the body set for one extender verb: the generic
// malformed bodies plus verb-specific wrong-typed and meaningless ones.
func extenderHostile(path string) map[string][]byte {
	valid := map[string][]byte{
		"/filter":     mustJSON(args(pending(), "half", "empty")),
		"/prioritize": mustJSON(args(pending(), "half", "empty")),
		"/bind":       mustJSON(bindArgs(pending(), "empty")),
		"/preempt": mustJSON(&extenderv1.ExtenderPreemptionArgs{Pod: fixture.Pod("default", "hi").MemoryMiB(40 * gib).Priority(10).Obj(),
			NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"half": {Pods: []*extenderv1.MetaPod{{UID: "uid-p1"}}}}}),
	}[path]
	out := hostileBodies(valid, 16<<20)
	add := func(name, body string) { out[name] = []byte(body) }
	gpuLimit := func(q string) string {
		return `{"Pod":{"metadata":{"name":"pending","namespace":"default","uid":"uid-pending"},"spec":{"containers":[{"name":"main","resources":{"limits":{"example.com/gpu-memory":` + q + `}}}]}},"NodeNames":["half","empty"]}`
	}
	switch path {
	case "/filter", "/prioritize":
		add("null", `null`)
		add("empty object", `{}`)
		add("array", `[]`)
		add("string", `"pod"`)
		add("Pod is a string", `{"Pod":"pending","NodeNames":["half"]}`)
		add("Pod is a number", `{"Pod":7,"NodeNames":["half"]}`)
		add("Pod is an array", `{"Pod":[],"NodeNames":["half"]}`)
		add("Pod is null", `{"Pod":null,"NodeNames":["half"]}`)
		add("metadata is a string", `{"Pod":{"metadata":"x"},"NodeNames":["half"]}`)
		add("containers is an object", `{"Pod":{"spec":{"containers":{"a":1}}},"NodeNames":["half"]}`)
		add("priority is a string", `{"Pod":{"spec":{"priority":"high"}},"NodeNames":["half"]}`)
		add("quantity is an object", gpuLimit(`{"x":1}`))
		add("quantity is not a number", gpuLimit(`"ten"`))
		add("quantity 1e99999", gpuLimit(`"1e99999"`))
		add("NodeNames is a string", `{"Pod":{"metadata":{"name":"pending"}},"NodeNames":"half"}`)
		add("NodeNames holds numbers", `{"Pod":{"metadata":{"name":"pending"}},"NodeNames":[1,2]}`)
		add("NodeNames is an object", `{"Pod":{"metadata":{"name":"pending"}},"NodeNames":{"half":true}}`)
		add("Nodes is a string", `{"Pod":{"metadata":{"name":"pending"}},"Nodes":"half"}`)
		add("Nodes.items is a number", `{"Pod":{"metadata":{"name":"pending"}},"Nodes":{"items":3}}`)
		add("deep unknown field, no pod", `{"x":`+strings.Repeat(`{"x":`, 5000)+`1`+strings.Repeat(`}`, 5001))
	case "/bind":
		add("null", `null`)
		add("empty object", `{}`)
		add("array", `[]`)
		add("PodName is a number", `{"PodName":5,"PodNamespace":"default","PodUID":"uid-pending","Node":"empty"}`)
		add("PodUID is an object", `{"PodName":"pending","PodNamespace":"default","PodUID":{},"Node":"empty"}`)
		add("Node is an array", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":["empty"]}`)
		add("Node is a number", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":7}`)
		add("no Node", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending"}`)
		add("no PodName", `{"PodNamespace":"default","PodUID":"uid-pending","Node":"empty"}`)
		add("unknown pod", `{"PodName":"ghost","PodNamespace":"default","PodUID":"uid-ghost","Node":"empty"}`)
		add("unknown node", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"nowhere"}`)
		add("wrong UID", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-other","Node":"empty"}`)
		add("NUL in the node name", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"empty\u0000"}`)
		add("1 MiB node name", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"`+strings.Repeat("n", 1<<20)+`"}`)
		add("invalid UTF-8 pod name", "{\"PodName\":\"pend\xffing\",\"PodNamespace\":\"default\",\"PodUID\":\"uid-pending\",\"Node\":\"empty\"}")
		add("deep unknown field", `{"x":`+strings.Repeat(`[`, 5000)+strings.Repeat(`]`, 5000)+`}`)
		// Well-formed binds kube-scheduler would never ask for (see
		// refusedPods).
		add("no PodUID", `{"PodName":"pending","PodNamespace":"default","Node":"empty"}`)
		add("pod of another scheduler", `{"PodName":"foreign","PodNamespace":"default","PodUID":"uid-foreign","Node":"empty"}`)
		add("node the pod's selector excludes", `{"PodName":"picky","PodNamespace":"default","PodUID":"uid-picky","Node":"empty"}`)
		add("node whose taint the pod does not tolerate", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"tainted"}`)
		add("pod bound elsewhere", `{"PodName":"p1","PodNamespace":"default","PodUID":"uid-p1","Node":"empty"}`)
		add("GPU pod that does not fit", `{"PodName":"hog","PodNamespace":"default","PodUID":"uid-hog","Node":"empty"}`)
		add("GPU-free pod over the node's CPU", `{"PodName":"cruncher","PodNamespace":"default","PodUID":"uid-cruncher","Node":"small"}`)
		add("GPU-free pod on a node its selector excludes", `{"PodName":"cruncher","PodNamespace":"default","PodUID":"uid-cruncher","Node":"empty"}`)
	case "/preempt":
		add("null", `null`)
		add("empty object", `{}`)
		add("array", `[]`)
		add("Pod is a number", `{"Pod":5}`)
		add("NodeNameToMetaVictims is an array", `{"Pod":{"metadata":{"name":"hi"}},"NodeNameToMetaVictims":[]}`)
		add("MetaVictims.Pods is a string", `{"Pod":{"metadata":{"name":"hi"}},"NodeNameToMetaVictims":{"half":{"Pods":"x"}}}`)
		add("NumPDBViolations is a string", `{"Pod":{"metadata":{"name":"hi"}},"NodeNameToMetaVictims":{"half":{"NumPDBViolations":"x"}}}`)
		add("NumPDBViolations overflows", `{"Pod":{"metadata":{"name":"hi"}},"NodeNameToMetaVictims":{"half":{"NumPDBViolations":1e400}}}`)
		add("Victims.Pods holds numbers", `{"Pod":{"metadata":{"name":"hi"}},"NodeNameToVictims":{"half":{"Pods":[5]}}}`)
		add("deep unknown field, no pod", `{"x":`+strings.Repeat(`{"x":`, 5000)+`1`+strings.Repeat(`}`, 5001))
	}
	return out
}

// refusedPods are pods and nodes every bind of which the extender must
// refuse: "foreign" belongs to another scheduler, "picky" selects zone b
// (no node has it), node "tainted" has a taint no pod tolerates, "hog" asks
// for more GPUs than any node has, and "cruncher" (no GPU, 64 cores,
// selecting zone a) fits no node's CPU: node "small" (zone a) has 2 cores.
func refusedPods() []runtime.Object {
	share := func(name string) *fixture.PodBuilder { return fixture.Pod("default", name).MemoryMiB(10 * gib) }
	tainted := node("tainted", 8, 80, 4, "leaf-a")
	tainted.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
	return []runtime.Object{share("foreign").SchedulerName("other-scheduler").Obj(), share("picky").NodeSelector("zone", "b").Obj(),
		tainted, fixture.Pod("default", "hog").GPUs(16).Obj(),
		fixture.Node("small").Allocatable("2", "4Gi").Label("zone", "a").Obj(),
		fixture.Pod("default", "cruncher").Requests("64", "1Gi").NodeSelector("zone", "a").Obj()}
}

// pending is the 10 GiB share the hostile bodies name.
func pending() *corev1.Pod { return fixture.Pod("default", "pending").MemoryMiB(10 * gib).Obj() }

// bindRefusals are the reasons the well-formed hostile binds must give.
var bindRefusals = map[string]string{
	"no PodUID":                        "podUID and node are required",
	"unknown pod":                      "pod default/ghost no longer exists",
	"unknown node":                     "node nowhere is unknown to the extender",
	"wrong UID":                        "the request names uid-other (the pod was replaced)",
	"pod of another scheduler":         `has schedulerName "other-scheduler"; this extender binds only pods of default-scheduler`,
	"node the pod's selector excludes": "node empty does not match the pod's nodeSelector zone=b",
	"node whose taint the pod does not tolerate":   "node tainted has taint dedicated=infra:NoSchedule that the pod does not tolerate",
	"pod bound elsewhere":                          "pod default/p1 is already bound to half",
	"GPU pod that does not fit":                    "node empty no longer fits the pod's GPU request: node has 8 healthy GPUs, pod needs 16",
	"GPU-free pod over the node's CPU":             "node small has 2000m CPU free (allocatable 2000m, requested 0m), pod requests 64000m",
	"GPU-free pod on a node its selector excludes": "node empty does not match the pod's nodeSelector zone=a",
}

// extenderView is what hostile requests must leave alone: the ledger, its
// generation, and the API objects (no writes).
type extenderView struct {
	Generation  uint64
	Allocations []ledger.Allocation
	Writes      []string
}

func viewExtender(f *served) extenderView {
	v := extenderView{Generation: f.ledger.Snapshot().Generation, Allocations: f.ledger.Allocations()}
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			v.Writes = append(v.Writes, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return v
}

// TestHostileBodies sends every verb malformed, truncated, oversized,
// deeply nested, wrong-typed and meaningless bodies: each gets an error
// (filter and bind: 200 with Error set; prioritize and preempt: 400) and
// the ledger, its generation and the API objects are unchanged.
func TestHostileBodies(t *testing.T) {
	objs := append(halfUsed(), node("empty", 8, 80, 4, "leaf-a"), pending(),
		member("g0", 2), member("g1", 2))
	objs = append(objs, refusedPods()...)
	f := newFixture(t, fixtureOpts{}, objs...)
	for _, name := range []string{"pending", "foreign", "picky", "hog", "cruncher"} {
		f.waitPod("default", name, func(*corev1.Pod) bool { return true })
	}
	f.eventually("nodes in the cache", func() bool {
		_, ok1 := f.cache.Node("tainted")
		_, ok2 := f.cache.Node("small")
		return ok1 && ok2
	})
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	before := viewExtender(f)
	for name := range bindRefusals {
		if _, ok := extenderHostile("/bind")[name]; !ok {
			t.Fatalf("bindRefusals names %q, which is no /bind body", name)
		}
	}
	client := &http.Client{Timeout: 20 * time.Second}
	total, neutral := 0, 0
	var counts []string
	for _, path := range []string{"/filter", "/prioritize", "/bind", "/preempt"} {
		bodies := extenderHostile(path)
		for name, body := range bodies {
			resp, err := client.Post(f.srv.URL+path, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("%s %s: %v", path, name, err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch path {
			case "/filter":
				// An error, or every node refused: no node passes.
				var res extenderv1.ExtenderFilterResult
				if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &res) != nil ||
					(res.Error == "" && (res.NodeNames == nil || len(*res.NodeNames) > 0 || res.Nodes != nil && len(res.Nodes.Items) > 0)) {
					t.Errorf("%s %s: %d %q, want 200 with Error set or every node refused", path, name, resp.StatusCode, cutBody(raw))
				}
				if res.Error == "" {
					neutral++
				}
			case "/bind":
				var res extenderv1.ExtenderBindingResult
				if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &res) != nil || res.Error == "" {
					t.Errorf("%s %s: %d %q, want 200 with Error set", path, name, resp.StatusCode, cutBody(raw))
				}
				if want, ok := bindRefusals[name]; ok && !strings.Contains(res.Error, want) {
					t.Errorf("%s %s: Error %q, want it to say %q", path, name, res.Error, want)
				}
			case "/prioritize":
				// 400, or (a pod that asks for nothing valid) every node
				// scored 0.
				var res extenderv1.HostPriorityList
				if resp.StatusCode == http.StatusOK && json.Unmarshal(raw, &res) == nil &&
					!slices.ContainsFunc(res, func(h extenderv1.HostPriority) bool { return h.Score != 0 }) {
					neutral++
				} else if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s %s: %d %q, want 400 or every score 0", path, name, resp.StatusCode, cutBody(raw))
				}
			default:
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s %s: %d %q, want 400", path, name, resp.StatusCode, cutBody(raw))
				}
			}
			// Error messages may quote the request (a 1 MiB node name
			// comes back in bind's Error), never much more.
			if len(raw) > len(body)+64<<10 {
				t.Errorf("%s %s: %d-byte answer to a %d-byte body", path, name, len(raw), len(body))
			}
			if errs := f.ledger.Check(); len(errs) > 0 {
				t.Fatalf("%s %s: ledger.Check() = %v", path, name, errs)
			}
			if diff := cmp.Diff(before, viewExtender(f)); diff != "" {
				t.Fatalf("%s %s changed the ledger or the API (-before +after):\n%s", path, name, diff)
			}
		}
		total += len(bodies)
		counts = append(counts, fmt.Sprintf("%s %d", path, len(bodies)))
	}
	t.Logf("hostile inputs: surface=extender-http sent=%d crashes=0 ledger-changes=0 (refused-by-every-node or all-zero-score answers: %d); by verb: %s",
		total, neutral, strings.Join(counts, ", "))
}

func cutBody(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
