package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
)

// MiB re-exports the contract's memory type.
type MiB = contract.MiB

// MilliPerGPU is one whole GPU in gpu_milli.
const MilliPerGPU = 1000

// Pod is one row of a pod list.
type Pod struct {
	Name          string
	CPUMilli      int64
	HostMemoryMiB MiB
	// GPUs is num_gpu; GPUMilli the per-GPU share (1000 = whole GPUs).
	GPUs     int
	GPUMilli int
	// Models lists the GPU models the pod accepts (nil: any).
	Models []string
	// Created and Deleted are seconds from the trace start; -1 when unknown.
	Created, Deleted int64
}

// GPUMilliTotal is the pod's GPU request in thousandths of a GPU.
func (p Pod) GPUMilliTotal() int64 { return int64(p.GPUs) * int64(p.GPUMilli) }

// Request turns the pod into the placement engine's request on simulated
// GPUs (1000 MiB, unit 1 MiB): a share of m thousandths is m memory units.
func (p Pod) Request(uid string) placement.Request {
	r := placement.Request{UID: uid, Pod: p.Name, Models: p.Models, CPUMilli: p.CPUMilli, HostMemoryMiB: p.HostMemoryMiB}
	switch {
	case p.GPUs == 0:
	case p.GPUMilli >= MilliPerGPU:
		r.GPUs = p.GPUs
	default:
		r.MemoryUnits = int64(p.GPUMilli)
	}
	return r
}

// Node is one row of a node list.
type Node struct {
	Name          string
	CPUMilli      int64
	HostMemoryMiB MiB
	GPUs          int
	Model         string
	// Leaf is the node's leaf switch (topology tier 0; "": unknown).
	Leaf string
}

// Errors of the CSV readers; match them with errors.Is.
var (
	ErrMissingColumn = errors.New("missing column")
	ErrBadValue      = errors.New("bad value")
)

// table is a CSV file read by header name.
type table struct {
	r    *csv.Reader
	cols map[string]int
	row  []string
	line int
}

func newTable(r io.Reader) (*table, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("empty file: %w", ErrMissingColumn)
		}
		return nil, fmt.Errorf("read header: %w", err)
	}
	t := &table{r: cr, cols: map[string]int{}, line: 1}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if _, dup := t.cols[h]; !dup {
			t.cols[h] = i
		}
	}
	return t, nil
}

// require checks that one of each group of column names is present.
func (t *table) require(groups ...[]string) error {
	var errs []error
	for _, g := range groups {
		if !slices.ContainsFunc(g, func(c string) bool { _, ok := t.cols[c]; return ok }) {
			errs = append(errs, fmt.Errorf("need column %s: %w", strings.Join(g, " or "), ErrMissingColumn))
		}
	}
	return errors.Join(errs...)
}

func (t *table) next() (bool, error) {
	row, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t.line++
	t.row = row
	return true, nil
}

// str returns the first present column's trimmed value.
func (t *table) str(names ...string) string {
	for _, n := range names {
		if i, ok := t.cols[n]; ok && i < len(t.row) {
			return strings.TrimSpace(t.row[i])
		}
	}
	return ""
}

// int returns an integer column; empty means def.
func (t *table) int(def int64, names ...string) (int64, error) {
	s := t.str(names...)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Some exports write integers as floats ("12000.0").
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != float64(int64(f)) {
			return 0, fmt.Errorf("line %d: %s = %q is not an integer: %w", t.line, names[0], s, ErrBadValue)
		}
		v = int64(f)
	}
	return v, nil
}

// Largest values the readers accept, to keep sums far from overflow.
const (
	maxCPUMilli = 1 << 32
	maxMemMiB   = 1 << 40
	maxGPUs     = 1 << 12
)

// ReadPods reads a pod list. The header names the columns, in any order;
// the openb pod lists and the generic format (cmd/rota-sim/README.md) both
// use these names:
//
//	name           optional; default pod-<row>
//	cpu_milli      CPU request, milli-cores
//	memory_mib     optional; host memory request, MiB
//	num_gpu        GPUs requested (0 for CPU-only pods)
//	gpu_milli      per-GPU share in thousandths; 1000 = whole GPUs; < 1000
//	               only with num_gpu = 1; 0 or empty with num_gpu = 0
//	gpu_spec       optional; accepted GPU models separated by '|'
//	creation_time  optional; seconds
//	deletion_time  optional; seconds
func ReadPods(r io.Reader) ([]Pod, error) {
	t, err := newTable(r)
	if err != nil {
		return nil, err
	}
	if err := t.require([]string{"num_gpu"}, []string{"gpu_milli"}, []string{"cpu_milli"}); err != nil {
		return nil, err
	}
	var pods []Pod
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return pods, nil
		}
		p, err := t.pod(len(pods))
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
}

func (t *table) pod(i int) (Pod, error) {
	p := Pod{Name: t.str("name"), Created: -1, Deleted: -1}
	if p.Name == "" {
		p.Name = fmt.Sprintf("pod-%d", i)
	}
	var errs []error
	cpu, err := t.int(0, "cpu_milli")
	errs = append(errs, err)
	mem, err := t.int(0, "memory_mib")
	errs = append(errs, err)
	gpus, err := t.int(0, "num_gpu")
	errs = append(errs, err)
	milli, err := t.int(0, "gpu_milli")
	errs = append(errs, err)
	p.Created, err = t.int(-1, "creation_time")
	errs = append(errs, err)
	p.Deleted, err = t.int(-1, "deletion_time")
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return Pod{}, err
	}
	bad := func(format string, args ...any) (Pod, error) {
		return Pod{}, fmt.Errorf("line %d (pod %s): %s: %w", t.line, p.Name, fmt.Sprintf(format, args...), ErrBadValue)
	}
	switch {
	case cpu < 0 || cpu > maxCPUMilli:
		return bad("cpu_milli %d is out of range", cpu)
	case mem < 0 || mem > maxMemMiB:
		return bad("memory_mib %d is out of range", mem)
	case gpus < 0 || gpus > maxGPUs:
		return bad("num_gpu %d is out of range", gpus)
	case milli < 0 || milli > MilliPerGPU:
		return bad("gpu_milli %d is not in 0..1000", milli)
	case gpus == 0 && milli != 0:
		return bad("gpu_milli %d with num_gpu 0", milli)
	case gpus > 0 && milli == 0:
		return bad("num_gpu %d with gpu_milli 0", gpus)
	case gpus > 1 && milli != MilliPerGPU:
		return bad("num_gpu %d with a share of %d: shares are of one GPU", gpus, milli)
	}
	p.CPUMilli, p.HostMemoryMiB, p.GPUs, p.GPUMilli = cpu, MiB(mem), int(gpus), int(milli)
	if spec := t.str("gpu_spec"); spec != "" {
		for m := range strings.SplitSeq(spec, "|") {
			if m = strings.TrimSpace(m); m != "" && !slices.Contains(p.Models, m) {
				p.Models = append(p.Models, m)
			}
		}
	}
	return p, nil
}

// ReadNodes reads a node list. Columns, in any order:
//
//	sn or name  node name (unique)
//	cpu_milli   CPU capacity, milli-cores (0: not tracked)
//	memory_mib  optional; host memory, MiB (0 or empty: not tracked)
//	gpu         number of GPUs
//	model       optional; GPU model
func ReadNodes(r io.Reader) ([]Node, error) {
	t, err := newTable(r)
	if err != nil {
		return nil, err
	}
	if err := t.require([]string{"sn", "name"}, []string{"gpu"}, []string{"cpu_milli"}); err != nil {
		return nil, err
	}
	var nodes []Node
	seen := map[string]bool{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nodes, nil
		}
		n := Node{Name: t.str("sn", "name"), Model: t.str("model")}
		cpu, err1 := t.int(0, "cpu_milli")
		mem, err2 := t.int(0, "memory_mib")
		gpus, err3 := t.int(0, "gpu")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		switch {
		case n.Name == "":
			return nil, fmt.Errorf("line %d: empty node name: %w", t.line, ErrBadValue)
		case seen[n.Name]:
			return nil, fmt.Errorf("line %d: node %s appears twice: %w", t.line, n.Name, ErrBadValue)
		case cpu < 0 || cpu > maxCPUMilli || mem < 0 || mem > maxMemMiB || gpus < 0 || gpus > maxGPUs:
			return nil, fmt.Errorf("line %d (node %s): cpu_milli, memory_mib or gpu out of range: %w", t.line, n.Name, ErrBadValue)
		}
		seen[n.Name] = true
		n.CPUMilli, n.HostMemoryMiB, n.GPUs = cpu, MiB(mem), int(gpus)
		nodes = append(nodes, n)
	}
}
