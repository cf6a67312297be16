package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// traceRow is one pod of the openb trace.
type traceRow struct {
	Name                string
	CPUMilli, MemoryMiB int64
	NumGPU, GPUMilli    int64
	Creation, Deletion  int64 // seconds from the trace start; Deletion 0: never
	HasDeletion         bool
	Kind                string // "cpu", "share" or "whole"
	Model               string // for shares: the model whose memory the share is of
	Units               int64  // for shares: gpu-memory units
	CreateAt, DeleteAt  time.Duration
	DeleteDuringReplay  bool
}

// readTrace reads the openb pod list (header required).
func readTrace(path string) ([]*traceRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, c := range []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s: no column %q", path, c)
		}
	}
	var out []*traceRow
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		num := func(c string) (int64, error) {
			s := rec[col[c]]
			if s == "" {
				return 0, nil
			}
			return strconv.ParseInt(s, 10, 64)
		}
		row := &traceRow{Name: rec[col["name"]]}
		for _, f := range []struct {
			c string
			v *int64
		}{{"cpu_milli", &row.CPUMilli}, {"memory_mib", &row.MemoryMiB}, {"num_gpu", &row.NumGPU},
			{"gpu_milli", &row.GPUMilli}, {"creation_time", &row.Creation}, {"deletion_time", &row.Deletion}} {
			if *f.v, err = num(f.c); err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %w", path, line, f.c, err)
			}
		}
		row.HasDeletion = rec[col["deletion_time"]] != ""
		out = append(out, row)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Creation < out[j].Creation })
	return out, nil
}

// model is one GPU model of the demo fleet.
type model struct {
	Name   string // short name, also the rota.demo/gpu-model label value
	Spec   harness.GPUNodeSpec
	MemGiB int64
	Nodes  int
	// Dedicated is how many of the model's first nodes are the training
	// team's pool.
	Dedicated int
	Leaves    []string // leaf of each node
	CPU, Mem  string
}

// plan maps rows to pods and compresses the trace's times into replay.
// Shares are spread over the models in turn by a hash of the pod name.
func plan(rows []*traceRow, models []model, replay, minLife time.Duration) {
	if len(rows) == 0 {
		return
	}
	t0, t1 := rows[0].Creation, rows[len(rows)-1].Creation
	span := max(float64(t1-t0), 1)
	scale := float64(replay) / span // wall-clock per trace second
	for _, r := range rows {
		switch {
		case r.NumGPU == 0:
			r.Kind = "cpu"
		case r.GPUMilli >= 1000:
			r.Kind = "whole"
		default:
			r.Kind = "share"
			h := fnv.New32a()
			h.Write([]byte(r.Name))
			m := models[int(h.Sum32())%len(models)]
			r.Model = m.Name
			r.Units = int64(math.Ceil(float64(r.GPUMilli) / 1000 * float64(m.MemGiB)))
		}
		r.CreateAt = time.Duration(float64(r.Creation-t0) * scale)
		if r.HasDeletion {
			life := max(time.Duration(float64(r.Deletion-r.Creation)*scale), minLife)
			r.DeleteAt = r.CreateAt + life
			r.DeleteDuringReplay = r.DeleteAt < replay
		}
	}
}

// pod builds the Kubernetes pod for a row.
func (r *traceRow) pod(namespace string) *corev1.Pod {
	b := harness.Pod(namespace, r.Name).Label("rota.demo/kind", r.Kind)
	switch r.Kind {
	case "whole":
		b.GPUs(int(r.NumGPU))
	case "share":
		b.Memory(r.Units).NodeSelector(modelLabel, r.Model).Label("rota.demo/model", r.Model)
	}
	p := b.Obj()
	c := &p.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if r.CPUMilli > 0 {
		c.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.CPUMilli, resource.DecimalSI)
	}
	if r.MemoryMiB > 0 {
		c.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI)
	}
	return p
}
