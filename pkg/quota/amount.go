package quota

import (
	"fmt"

	"github.com/rota-sched/rota/pkg/contract"
)

// Amount is a quantity of Rota resources: whole GPUs and GPU memory shares.
type Amount struct {
	GPUs      int64
	MemoryMiB contract.MiB
}

// AmountOf is what a request counts in quota: gpus whole GPUs, and
// memoryUnits units of GPU memory of unit MiB each. The webhook, the
// queue, its preempt guard and kubectl-rota all convert through it, so that
// they charge a pod alike.
func AmountOf(gpus int, memoryUnits int64, unit contract.MiB) Amount {
	return Amount{GPUs: int64(gpus), MemoryMiB: contract.MiB(memoryUnits) * unit}
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	return Amount{GPUs: a.GPUs + b.GPUs, MemoryMiB: a.MemoryMiB + b.MemoryMiB}
}

// Sub returns a-b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{GPUs: a.GPUs - b.GPUs, MemoryMiB: a.MemoryMiB - b.MemoryMiB}
}

// Times returns a scaled by n (a gang of n members).
func (a Amount) Times(n int64) Amount {
	return Amount{GPUs: a.GPUs * n, MemoryMiB: a.MemoryMiB * contract.MiB(n)}
}

// IsZero reports whether a holds nothing.
func (a Amount) IsZero() bool { return a.GPUs == 0 && a.MemoryMiB == 0 }

// Fits reports whether a is no larger than limit in every resource.
func (a Amount) Fits(limit Amount) bool {
	return a.GPUs <= limit.GPUs && a.MemoryMiB <= limit.MemoryMiB
}

// String formats a for people: "8 GPUs", "20 GiB of GPU memory", or both.
func (a Amount) String() string {
	switch {
	case a.MemoryMiB == 0:
		return gpus(a.GPUs)
	case a.GPUs == 0:
		return a.MemoryMiB.String() + " of GPU memory"
	default:
		return fmt.Sprintf("%s and %s of GPU memory", gpus(a.GPUs), a.MemoryMiB)
	}
}

func gpus(n int64) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// Usage is what a team uses now, split for messages: Running is placed on a
// node; Pending is admitted but not placed (queued pods, and admissions the
// caller has not seen come back yet).
type Usage struct {
	Running, Pending Amount
}

// Total is running plus pending: what counts against quota.
func (u Usage) Total() Amount { return u.Running.Add(u.Pending) }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{Running: u.Running.Add(o.Running), Pending: u.Pending.Add(o.Pending)}
}
