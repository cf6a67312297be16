package placement

import (
	"fmt"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Code classifies why a node does not fit.
type Code string

const (
	NoGPUs             Code = "NoGPUs"
	ModelMismatch      Code = "ModelMismatch"
	ShareTooLarge      Code = "ShareTooLarge"
	InsufficientMemory Code = "InsufficientMemory"
	InsufficientGPUs   Code = "InsufficientGPUs"
	TooFewGPUs         Code = "TooFewGPUs"
	Unhealthy          Code = "Unhealthy"
	UnknownNode        Code = "UnknownNode"
	GangSlot           Code = "GangSlot"
	GangNoFit          Code = "GangNoFit"
	GangIncomplete     Code = "GangIncomplete"
	InsufficientCPU    Code = "InsufficientCPU"
	// InsufficientHostMemory is host (not GPU) memory.
	InsufficientHostMemory Code = "InsufficientHostMemory"
	// Held: the room is held for a queued job (a reservation) and the pod
	// does not end before that job's expected start.
	Held Code = "Held"
	// NoMPS: the node cannot enforce a memory share's limit (no CUDA MPS)
	// and the pod did not opt in.
	NoMPS Code = "NoMPS"
	// NoShares: the node takes no memory shares (topology.Node.NoShares).
	NoShares Code = "NoShares"
	// Closed: the node takes no new GPU work (topology.Node.Closed).
	Closed Code = "Closed"
	// OtherPool: the node is in another node pool than the pod's team
	// places on (topology.Node.Pool, Request.Pool).
	OtherPool Code = "OtherPool"
)

// Reason says why a request does not fit a node, in data; Message formats it
// for people. Resolvable reports whether evicting pods could make room (the
// extender uses it to tell the scheduler where preemption may help).
type Reason struct {
	Code Code
	Node string
	// GPU is the index the reason is about, -1 when none.
	GPU        int
	NeedMiB    MiB
	FreeMiB    MiB
	NeedGPUs   int
	FreeGPUs   int
	Health     string
	Models     []string
	NeedCPU    int64
	FreeCPU    int64
	Resolvable bool
	// Claim and Ends describe a Held reason: the reservation, and the
	// pod's declared end (zero: none).
	Claim *ledger.Claim
	Ends  time.Time
	// Pool and WantPool describe an OtherPool reason: the node's pool and
	// the pod's ("" for none).
	Pool, WantPool string
	// Text overrides the generated message (gang reasons).
	Text string
}

// Message is the reason as a user reads it in FailedScheduling.
func (r *Reason) Message() string {
	if r.Text != "" {
		return r.Text
	}
	switch r.Code {
	case NoGPUs:
		return "node has no GPUs managed by Rota"
	case ModelMismatch:
		return fmt.Sprintf("pod needs GPU model %s; node has %s", strings.Join(r.Models, " or "), r.Health)
	case ShareTooLarge:
		return fmt.Sprintf("pod needs %s on one GPU; the largest GPU here has %s", r.NeedMiB, r.FreeMiB)
	case InsufficientMemory:
		if r.GPU < 0 {
			return fmt.Sprintf("no GPU has memory free, pod needs %s", r.NeedMiB)
		}
		return fmt.Sprintf("GPU %d has %s free, pod needs %s", r.GPU, r.FreeMiB, r.NeedMiB)
	case InsufficientGPUs:
		if r.FreeGPUs == 1 {
			return fmt.Sprintf("1 free GPU, pod needs %d", r.NeedGPUs)
		}
		return fmt.Sprintf("%d free GPUs, pod needs %d", r.FreeGPUs, r.NeedGPUs)
	case TooFewGPUs:
		return fmt.Sprintf("node has %d healthy GPUs, pod needs %d", r.FreeGPUs, r.NeedGPUs)
	case Unhealthy:
		return fmt.Sprintf("GPU %d unhealthy: %s", r.GPU, r.Health)
	case InsufficientCPU:
		return fmt.Sprintf("node has %dm CPU free, pod needs %dm", r.FreeCPU, r.NeedCPU)
	case InsufficientHostMemory:
		return fmt.Sprintf("node has %s host memory free, pod needs %s", r.FreeMiB, r.NeedMiB)
	case UnknownNode:
		return "node has not published its GPU topology yet"
	case Held:
		return heldMessage(r.Claim, r.Ends)
	case Closed:
		return "node takes no new GPU work: " + r.Health
	case OtherPool:
		return poolMessage(r.Pool, r.WantPool)
	case NoShares:
		return "node takes no memory shares: " + r.Health
	case NoMPS:
		why := ""
		if r.Health != "" {
			why = " (" + r.Health + ")"
		}
		return "node cannot enforce a memory share's limit: CUDA MPS is not available" + why +
			`; annotate the pod <domain>/share-without-mps: "true" to accept a share whose limit is not enforced`
	}
	return string(r.Code)
}

func (r *Reason) String() string { return r.Message() }

// poolMessage says why a node of one pool is closed to a pod of another.
func poolMessage(node, pod string) string {
	switch {
	case pod == "":
		return fmt.Sprintf("node is in node pool %s; the pod's team places on nodes without a pool", node)
	case node == "":
		return fmt.Sprintf("node is in no node pool; the pod's team places on node pool %s only", pod)
	}
	return fmt.Sprintf("node is in node pool %s; the pod's team places on node pool %s only", node, pod)
}

// heldMessage says why a reservation's room is closed to a pod: "GPU held
// for gang ml/pretrain-3, expected start 14:40 UTC; this pod declares no
// maximum runtime".
func heldMessage(c *ledger.Claim, ends time.Time) string {
	if c == nil {
		return "room held for a queued job"
	}
	what := "pod " + c.Job
	if c.Gang {
		what = "gang " + c.Job
	}
	start := "expected start not known yet"
	if !c.Start.IsZero() {
		start = "expected start " + c.Start.UTC().Format("2006-01-02 15:04 MST")
	}
	why := "this pod declares no maximum runtime, so it cannot backfill"
	switch {
	case c.Start.IsZero():
		why = "nothing may backfill until it is known"
	case !ends.IsZero():
		why = "this pod may run until " + ends.UTC().Format("2006-01-02 15:04 MST") + ", past it"
	}
	return fmt.Sprintf("GPU held for %s, %s; %s", what, start, why)
}
