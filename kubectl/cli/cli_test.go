package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/clustertest"
	"github.com/rota-sched/rota/kubectl/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// extenderAnswer is what a fake rota-extender answers on /debug/pods.
const extenderAnswer = `{"pod":"research/big-sweep","decisions":[{"time":"2026-07-01T11:59:00Z","verb":"filter","outcome":"nofit","nodes":6,` +
	`"message":"0/6 nodes fit the GPU request: 4 like h100-a1: 0 free GPUs, pod needs 8; 1 like h100-b1: GPU 5 unhealthy: XID 79; 1 like t4-c1: node has 1 healthy GPUs, pod needs 8",` +
	`"reasons":[{"code":"InsufficientGPUs","resolvable":true,"nodes":4,"exampleNode":"h100-a1","example":"0 free GPUs, pod needs 8"}],"duration":"180µs"}]}`

type run struct {
	stdout, stderr bytes.Buffer
	err            error
}

// runCLI runs one command line against the fixture cluster.
func runCLI(t *testing.T, terminal bool, getenv map[string]string, args ...string) *run {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join("testdata", "kubeconfig"))
	r := &run{}
	env := Env{
		Stdout: &r.stdout, Stderr: &r.stderr,
		Getenv:   func(k string) string { return getenv[k] },
		Terminal: func() bool { return terminal },
		Client: func(clientcmd.ClientConfig) (kubernetes.Interface, error) {
			return fake.NewClientset(clustertest.Objects()...), nil
		},
		HTTP: http.DefaultClient,
		Now:  func() time.Time { return clustertest.Now },
	}
	r.err = Run(t.Context(), args, env)
	return r
}

func fakeExtender(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pods/research/big-sweep" {
			http.Error(w, "no recent decision for pod", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(extenderAnswer))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s (run go test -update to create it): %v", path, err)
	}
	if diff := diffLines(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (run go test -update to accept):\n%s", path, diff)
	}
}

func TestGolden(t *testing.T) {
	ext := fakeExtender(t)
	tests := []struct {
		name     string
		giveArgs []string
	}{
		{"why-gang-member", []string{"why", "train-7-12"}},
		{"why-gang", []string{"why", "--gang", "train-7", "-n", "llm"}},
		{"why-whole", []string{"--context", "lab-research", "why", "big-sweep", "--extender-url", ext.URL}},
		{"why-whole-json", []string{"why", "big-sweep", "-n", "research", "--extender-url", ext.URL, "-o", "json"}},
		{"why-extender-404", []string{"why", "pod/detector-ft", "-n", "vision", "--extender-url", ext.URL}},
		{"why-running", []string{"why", "resnet-ddp-0", "--namespace=vision"}},
		{"why-gang-member-yaml", []string{"why", "train-7-3", "-o", "yaml"}},
		{"top-nodes", []string{"top", "nodes"}},
		{"top-nodes-json", []string{"top", "nodes", "-o", "json"}},
		{"top-gpus", []string{"top", "gpus"}},
		{"top-gpus-node", []string{"top", "gpus", "--node", "h100-b1"}},
		{"top-teams", []string{"top", "teams"}},
		{"top-teams-json", []string{"top", "teams", "-o", "json"}},
		{"ledger-violation", []string{"ledger", "--node", "t4-c1"}},
		{"ledger-shares", []string{"ledger", "--node", "h100-b2"}},
		{"ledger-json", []string{"ledger", "--node", "h100-b1", "-o", "json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, false, nil, tc.giveArgs...)
			if r.err != nil {
				t.Fatalf("Run(%q) = %v; stderr: %s", tc.giveArgs, r.err, r.stderr.String())
			}
			if r.stderr.Len() > 0 {
				t.Errorf("stderr: %s", r.stderr.String())
			}
			golden(t, tc.name, bytes.ReplaceAll(r.stdout.Bytes(), []byte(ext.URL), []byte("http://rota-extender:8888")))
		})
	}
}

// TestJSON decodes the JSON forms and checks the facts scripts rely on.
func TestJSON(t *testing.T) {
	t.Run("why gang", func(t *testing.T) {
		var w report.Why
		decode(t, &w, "why", "--gang", "train-7", "-n", "llm", "-o", "json")
		got := struct {
			Pod                            string
			Size, Created, Placed, Pending int
			Members                        int
			FitsNow                        bool
			Team, State                    string
		}{w.Pod, w.Gang.Size, w.Gang.Created, w.Gang.Placed, w.Gang.Pending, len(w.Gang.Members), w.Fit.FitsNow, w.Team, w.Quota.State}
		want := struct {
			Pod                            string
			Size, Created, Placed, Pending int
			Members                        int
			FitsNow                        bool
			Team, State                    string
		}{"llm/train-7-12", 16, 16, 12, 4, 16, false, "llm", report.StateWithin}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("why --gang -o json = %+v, want %+v", got, want)
		}
	})
	t.Run("top teams", func(t *testing.T) {
		var r report.Teams
		decode(t, &r, "top", "teams", "-o", "json")
		got := map[string]string{}
		for _, q := range r.Teams {
			got[q.Team] = q.State
		}
		want := map[string]string{"llm": report.StateWithin, "vision": report.StateAtQuota, "research": report.StateBorrowing,
			"speech": report.StateAtQuota}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("team states = %v, want %v", got, want)
		}
		if r.SharedPoolUsed != (report.Amount{GPUs: 4, MemoryMiB: 12 * 1024}) {
			t.Errorf("shared pool used = %+v, want 4 GPUs + 12 GiB", r.SharedPoolUsed)
		}
	})
	t.Run("ledger", func(t *testing.T) {
		var l report.NodeLedger
		decode(t, &l, "ledger", "--node", "t4-c1", "-o", "json")
		if len(l.Entries) != 2 || len(l.Violations) != 1 || !strings.Contains(l.Violations[0], "research/tiny-infer") {
			t.Errorf("ledger t4-c1: %d entries, violations %q; want 2 entries and one violation naming research/tiny-infer",
				len(l.Entries), l.Violations)
		}
	})
	t.Run("top gpus", func(t *testing.T) {
		var g report.GPUs
		decode(t, &g, "top", "gpus", "-o", "json")
		states := map[string]int{}
		for _, u := range g.GPUs {
			states[u.State]++
		}
		want := map[string]int{report.GPUWhole: 32, report.GPUShared: 4, report.GPUIdle: 4, report.GPUUnhealthy: 1}
		if !reflect.DeepEqual(want, states) {
			t.Errorf("GPU states = %v, want %v", states, want)
		}
	})
}

func decode(t *testing.T, v any, args ...string) {
	t.Helper()
	r := runCLI(t, false, nil, args...)
	if r.err != nil {
		t.Fatalf("Run(%q) = %v", args, r.err)
	}
	dec := json.NewDecoder(&r.stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %q output: %v", args, err)
	}
}

func TestColor(t *testing.T) {
	tests := []struct {
		name      string
		giveTerm  bool
		giveEnv   map[string]string
		giveArgs  []string
		wantColor bool
	}{
		{"terminal", true, nil, []string{"top", "nodes"}, true},
		{"NO_COLOR", true, map[string]string{"NO_COLOR": "1"}, []string{"top", "nodes"}, false},
		{"pipe", false, nil, []string{"top", "nodes"}, false},
		{"always", false, nil, []string{"top", "nodes", "--color=always"}, true},
		{"never", true, nil, []string{"top", "nodes", "--color", "never"}, false},
		{"json on a terminal", true, nil, []string{"top", "nodes", "-o", "json"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.giveTerm, tc.giveEnv, tc.giveArgs...)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := strings.Contains(r.stdout.String(), "\x1b["); got != tc.wantColor {
				t.Errorf("colour = %v, want %v", got, tc.wantColor)
			}
		})
	}
	// Colour must not change the alignment: stripped, it equals the plain output.
	colored := runCLI(t, true, nil, "top", "gpus").stdout.String()
	plainOut := runCLI(t, false, nil, "top", "gpus").stdout.String()
	for _, code := range []string{"\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[0m"} {
		colored = strings.ReplaceAll(colored, code, "")
	}
	if diff := diffLines(plainOut, colored); diff != "" {
		t.Errorf("coloured output, stripped, differs from plain:\n%s", diff)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		giveArgs []string
		wantErr  string
	}{
		{"no command", nil, "no command given"},
		{"unknown command", []string{"status"}, `unknown command "status"`},
		{"pod not found", []string{"why", "nope", "-n", "llm"}, "pod llm/nope not found"},
		{"gang not found", []string{"why", "--gang", "nope"}, "gang llm/nope"},
		{"pod and gang", []string{"why", "x", "--gang", "y"}, "not both"},
		{"not a pod or Job", []string{"why", "deployment/asr-eval"}, "only pods, Jobs and JobSets"},
		{"no such Job", []string{"why", "job/asr-eval"}, "job llm/asr-eval not found"},
		{"no such JobSet", []string{"why", "jobset/asr-eval"}, "jobset llm/asr-eval not found"},
		{"bad output", []string{"top", "nodes", "-o", "wide"}, "--output=wide"},
		{"top what", []string{"top", "jobs"}, "want one of nodes, gpus, teams, pods"},
		{"ledger without node", []string{"ledger"}, "--node NODE"},
		{"ledger unknown node", []string{"ledger", "--node", "h100-z9"}, "node h100-z9 not found"},
		{"ledger node without GPUs", []string{"ledger", "--node", "cpu-1"}, "has no example.com/gpu-topology annotation"},
		{"bad flag", []string{"top", "nodes", "--frobnicate"}, "unknown flag"},
		{"bad domain", []string{"top", "nodes", "--domain", "Nope"}, "--domain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, false, nil, tc.giveArgs...)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
				t.Errorf("Run(%q) = %v, want an error containing %q", tc.giveArgs, r.err, tc.wantErr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	r := runCLI(t, false, nil, "--help")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, want := range []string{"kubectl rota why POD", "--kubeconfig", "--context", "-n, --namespace", "--extender-url", "--quota-configmap"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// diffLines lists the lines that differ ("-" want, "+" got); "" when equal.
// (go-cmp is not a dependency of the module.)
func diffLines(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %q\n+ %q\n", i+1, wl, gl)
		}
	}
	return b.String()
}
