// Package report is the pure half of kubectl-rota: it turns lists of Nodes,
// Pods, Namespaces and Events plus the quota ConfigMap (as fetched by the
// caller) into the structs the plugin prints: why a pod or gang is pending,
// per-node and per-GPU use, per-team quota, and one node's GPU ledger.
//
// It reads the cluster the way Rota's own components do, through pkg/:
// nodes' topology annotations and allocatable CPU and memory, and pods as
// podreq.Classify reads them (assignments, and the CPU and memory of pods
// without one), rebuild a ledger (pkg/ledger) as the extender's cache does,
// with its problems in the extender's words; team usage is counted like the
// admission webhook counts it (pkg/podreq, pkg/quota); "what would make it
// fit" runs the extender's placement engine (pkg/placement) on that ledger.
//
// The package does no I/O and reads no clock: the caller passes the lists
// and Now. Reports are plain values, safe to share once built; Build's
// result (*Cluster) is immutable and safe for concurrent use.
package report
