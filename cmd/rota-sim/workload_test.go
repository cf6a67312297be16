package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/sim"
)

// --write-workload writes the pod list's shapes in the format rota-extender
// --workload-file reads back, equal to what the simulator's policies use.
func TestWriteWorkload(t *testing.T) {
	pods := "../../testdata/openb/openb_pod_list_default.csv"
	nodes := "../../testdata/openb/openb_node_list_gpu_node.csv"
	path := filepath.Join(t.TempDir(), "w.yaml")
	var out bytes.Buffer
	if err := run([]string{"--pods", pods, "--nodes", nodes, "--write-workload", path}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "pod shapes of") {
		t.Errorf("output %q", out.String())
	}
	got, err := config.LoadWorkload(path)
	if err != nil {
		t.Fatal(err)
	}
	list, err := readFile(pods, sim.ReadPods)
	if err != nil {
		t.Fatal(err)
	}
	if want := sim.WorkloadOf(list, sim.WorkloadOptions{}); !reflect.DeepEqual(got, want) {
		t.Errorf("read back %d shapes, want %d equal to sim.WorkloadOf", len(got), len(want))
	}
	if err := run([]string{"--pods", pods + "," + pods, "--nodes", nodes, "--write-workload", path}, &out, &out); err == nil ||
		!strings.Contains(err.Error(), "give one pod list") {
		t.Errorf("two lists: err = %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
