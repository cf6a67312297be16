package contract

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Health of one GPU as published in the topology annotation.
type Health string

const (
	Healthy   Health = "Healthy"
	Unhealthy Health = "Unhealthy"
)

// MaxGPUsPerNode bounds the GPU list of one node document.
const MaxGPUsPerNode = 64

// MaxAnnotationBytes bounds any annotation document Rota parses.
const MaxAnnotationBytes = 256 << 10

// Topology is the Node annotation the device plugin writes and the extender
// reads: the node's GPUs, how they are connected, and their health.
type Topology struct {
	Version string `json:"version"`
	// MemoryUnitMiB is the size of one gpu-memory unit on this node.
	MemoryUnitMiB MiB `json:"memoryUnitMiB"`
	// GPUs are listed by index; indexes are unique.
	GPUs []TopologyGPU `json:"gpus"`
	// Leaf and Rack copy the node's topology label values (informational;
	// placement reads the labels of the Node itself).
	Leaf string `json:"leaf,omitempty"`
	Rack string `json:"rack,omitempty"`
	// Generation increases each time the device plugin publishes a change.
	Generation int64 `json:"generation,omitempty"`
	// MPS says whether the device plugin runs CUDA MPS control daemons for
	// memory shares on this node, so a share's memory limit is enforced by
	// the MPS server. Absent when the plugin does not manage MPS (documents
	// written before this field existed read the same: nothing is said).
	MPS *TopologyMPS `json:"mps,omitempty"`
	// Preview holds the next version's test fields (empty in a release).
	Preview
}

// TopologyMPS is the node's CUDA MPS state as the device plugin sees it.
type TopologyMPS struct {
	// Available is true when the plugin can start an MPS control daemon for
	// a GPU that holds shares (nvidia-cuda-mps-control found and runnable).
	Available bool `json:"available"`
	// Reason says why MPS is not available, e.g. "nvidia-cuda-mps-control
	// not found in $PATH".
	Reason string `json:"reason,omitempty"`
}

// MaxReasonBytes bounds the MPS reason of a topology document.
const MaxReasonBytes = 1024

// TopologyGPU describes one GPU of a node.
type TopologyGPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB MiB    `json:"memoryMiB"`
	// NUMA is the NUMA node the GPU hangs off; -1 when unknown.
	NUMA int `json:"numa"`
	// Island numbers the NVLink island (GPUs connected by NVLink share one);
	// GPUs without NVLink each form an island of their own.
	Island int `json:"island"`
	// Peers lists the indexes of the GPUs this one reaches over NVLink.
	Peers  []int  `json:"peers,omitempty"`
	Health Health `json:"health"`
	// Reason says why the GPU is unhealthy, e.g. "XID 79".
	Reason string `json:"reason,omitempty"`
	// LeakedMiB is GPU memory held by processes of no live pod assigned to
	// this GPU (a container that exited while the driver kept its memory,
	// a process outside Kubernetes), seen for longer than the device
	// plugin's grace period. The plugin already subtracts it from MemoryMiB
	// (never below the memory assigned to the GPU's live pods), so readers
	// that only count MemoryMiB place nothing into it; MemoryMiB+LeakedMiB
	// is then at most the GPU's physical memory. 0 (absent): none seen.
	LeakedMiB MiB `json:"leakedMiB,omitempty"`
}

// ParseTopology decodes and validates a node topology annotation, under the
// version rule (versions.go).
func ParseTopology(data []byte) (Topology, error) {
	t, err := decodeDoc[Topology](data, "topology")
	if err != nil {
		return Topology{}, err
	}
	if err := t.Validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// Marshal encodes t (after validating it) as the annotation value.
func (t Topology) Marshal() ([]byte, error) {
	t.Preview.stamp(t.Version)
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// Validate checks every field and returns the first problem as a *FieldError.
func (t Topology) Validate() error {
	if err := checkVersion("topology.version", t.Version); err != nil {
		return err
	}
	if err := t.Preview.check("topology", t.Version); err != nil {
		return err
	}
	if t.MemoryUnitMiB <= 0 {
		return fieldErr("topology.memoryUnitMiB", t.MemoryUnitMiB, "is not positive",
			"write the size of one gpu-memory unit in MiB, for example 1024 for 1 GiB")
	}
	if len(t.GPUs) > MaxGPUsPerNode {
		return fieldErr("topology.gpus", len(t.GPUs), fmt.Sprintf("GPUs are more than %d", MaxGPUsPerNode),
			"list only the GPUs of this node")
	}
	seenIdx := make(map[int]bool, len(t.GPUs))
	seenUUID := make(map[string]bool, len(t.GPUs))
	for i, g := range t.GPUs {
		f := fmt.Sprintf("topology.gpus[%d]", i)
		if g.Index < 0 || g.Index >= MaxGPUsPerNode {
			return fieldErr(f+".index", g.Index, "is out of range", fmt.Sprintf("use 0..%d", MaxGPUsPerNode-1))
		}
		if seenIdx[g.Index] {
			return fieldErr(f+".index", g.Index, "is a duplicate GPU index", "give every GPU its own index")
		}
		seenIdx[g.Index] = true
		if g.UUID == "" {
			return fieldErr(f+".uuid", nil, "is empty", "write the GPU UUID reported by NVML, e.g. GPU-8f2c…")
		}
		if seenUUID[g.UUID] {
			return fieldErr(f+".uuid", g.UUID, "is a duplicate GPU UUID", "give every GPU its own UUID")
		}
		seenUUID[g.UUID] = true
		if g.MemoryMiB <= 0 {
			return fieldErr(f+".memoryMiB", g.MemoryMiB, "is not positive", "write the GPU's total memory in MiB, e.g. 81920")
		}
		if g.MemoryMiB < t.MemoryUnitMiB {
			return fieldErr(f+".memoryMiB", g.MemoryMiB, "is smaller than one memory unit",
				fmt.Sprintf("use a memory unit of at most %d MiB", g.MemoryMiB))
		}
		if g.Health != Healthy && g.Health != Unhealthy {
			return fieldErr(f+".health", g.Health, "is not a known health", `write "Healthy" or "Unhealthy"`)
		}
		if g.NUMA < -1 {
			return fieldErr(f+".numa", g.NUMA, "is negative", "write the NUMA node, or -1 when unknown")
		}
		if g.Island < 0 {
			return fieldErr(f+".island", g.Island, "is negative", "number NVLink islands from 0")
		}
		if g.LeakedMiB < 0 {
			return fieldErr(f+".leakedMiB", g.LeakedMiB, "is negative", "write the leaked memory in MiB, or leave it out when none")
		}
	}
	if t.MPS != nil && len(t.MPS.Reason) > MaxReasonBytes {
		return fieldErr("topology.mps.reason", fmt.Sprintf("%d bytes", len(t.MPS.Reason)), "is too long", fmt.Sprintf("keep it under %d bytes", MaxReasonBytes))
	}
	for i, g := range t.GPUs {
		for j, p := range g.Peers {
			f := fmt.Sprintf("topology.gpus[%d].peers[%d]", i, j)
			if !seenIdx[p] {
				return fieldErr(f, p, "names a GPU that does not exist on this node",
					"list only indexes of this node's GPUs")
			}
			if p == g.Index {
				return fieldErr(f, p, "names the GPU itself", "list only other GPUs")
			}
		}
	}
	return nil
}

// GPUByIndex returns the GPU with index idx.
func (t Topology) GPUByIndex(idx int) (TopologyGPU, bool) {
	i := slices.IndexFunc(t.GPUs, func(g TopologyGPU) bool { return g.Index == idx })
	if i < 0 {
		return TopologyGPU{}, false
	}
	return t.GPUs[i], true
}
