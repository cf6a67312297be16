// Package remediation is rota-extender's fault controller: it watches GPU
// health (the topology annotation the device plugin publishes), Node Ready
// conditions and node Leases, and acts on the pods a fault touches.
//
// Why inside rota-extender (and not a controller of its own): the extender
// already holds the pod informer with every pod's GPU assignment and gang,
// and the ledger that placement reads. Quarantine and recovery have to
// change what placement sees (Adjust, applied by extender/state when it
// converts a node's topology), which only the ledger's owner can do
// without a second source of truth. It is off by default because it
// deletes pods: turn it on with --remediation=dry-run first, read the
// events and rota_extender_remediation_actions_total, then --remediation=on.
//
// Modes (pkg/remediation.Mode):
//   - off: nothing runs.
//   - dry-run: faults and what would be done are reported as Warning events
//     (reason RemediationDryRun), log lines and metrics; no pod condition,
//     no deletion, no taint, and placement is not changed by quarantine or
//     recovery (the unhealthy GPU itself is still skipped, as always).
//   - on: affected pods get a Warning event and the pod condition
//     <domain>/GPUFailure (status subresource), then are deleted gracefully
//     so their controllers recreate them elsewhere. A gang member's fault
//     deletes the whole gang; pods labelled <domain>/remediation=mark-only
//     are only marked. Deletions are rate-limited (pkg/remediation.Limiter:
//     cluster-wide and per faulty node; one token per workload, a gang
//     counts once); a deferred pod is retried on a later pass.
//
// Quarantine: a GPU (each Healthy→Unhealthy turn) or node (each failed GPU
// pod, each NotReady turn) with --quarantine-threshold failures within
// --quarantine-window leaves placement until an admin releases it. The
// controller writes what it quarantined into the Node annotation
// <domain>/quarantine ("node", GPU UUIDs) and, for a node, the taint
// <domain>/quarantined:NoSchedule; the annotation survives a restart. An
// admin writes <domain>/quarantine=release (kubectl rota release NODE) to
// return the node and its GPUs.
//
// Recovery: a GPU published Healthy again, or a node Ready again with a
// fresh Lease, takes new work after --recovery-quiet unless quarantined.
//
// Checkpoints: Kubernetes cannot send a chosen signal through the API; a
// deletion sends SIGTERM and, after the grace period, SIGKILL. A pod that
// wants time to checkpoint sets <domain>/checkpoint-grace (e.g. "60s",
// capped by --max-checkpoint-grace), which becomes the deletion's grace
// period; its preStop hook or SIGTERM handler saves the checkpoint (a
// preStop hook can forward the signal named in <domain>/checkpoint-signal,
// e.g. `kill -USR1 1`). Sending a signal through an exec or ephemeral
// container is out of scope.
//
// A Controller is safe for concurrent use: Adjust and PodFailed are called
// from informer handlers while Run's single loop reconciles.
package remediation
