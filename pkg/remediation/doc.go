// Package remediation is the pure core of Rota's fault handling: which pods
// a GPU or node fault touches and what to do with each (mark, delete, or
// only report in dry-run), the token buckets that stop a flapping node from
// evicting the cluster, the failure windows that quarantine a GPU or node,
// and the quiet period after which a recovered GPU or node takes new work
// again.
//
// It imports only the standard library; time comes in as arguments (no
// time.Now), so every decision is a deterministic function of its inputs.
// The adapter (extender/remediation) owns the clock, the informers and the
// API writes.
//
// Concurrency: Limiter, Windows, Quarantine and Recovery are NOT safe for
// concurrent use; the controller calls them from its single reconcile loop.
// Plan is a pure function.
package remediation
