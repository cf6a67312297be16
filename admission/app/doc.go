// Package app wires rota-admission together and runs it: New builds the
// parts from config.Config, Run serves until its context ends. main only
// parses flags.
//
// Wiring. The usage view (admission/view) is built first; the client-go
// informers (non-terminal pods, namespaces, nodes, and the quota ConfigMap
// through the quota loader) feed it, and both webhooks (admission/webhook:
// the validating one on /validate, the mutating one on /mutate) read it.
// Whether this replica admits GPU pods is one flag, made before the
// webhooks that read it and set by leader election in Run. Run also
// serves /healthz, /readyz, /metrics and, with --profiling, /debug/pprof/
// (internal/profiling), over HTTPS with a serving
// certificate re-read when its files change (extender/server/servingtls),
// and shuts down gracefully.
//
// # Guarantee across replicas
//
// Quota is exact within one process (admission/view serialises decisions
// and holds in-flight reservations). Across replicas Rota uses one active
// replica: with --leader-elect the replica that holds the Lease
// <namespace>/<lease-name> admits GPU pods; the others answer GPU pod
// CREATEs with an error (fail closed: the API server, under failurePolicy
// Fail, rejects the pod and the client retries) and report not ready, so the
// Service sends requests only to the leader. Pods without Rota resources and
// UPDATE checks are answered by any replica. A new leader takes over after
// the lease expires (--leader-elect-lease-duration, 15 s); the old one stops admitting
// when it cannot renew within --leader-elect-renew-deadline (10 s), before the lease can
// pass on, and every pod it admitted is persisted by the API server within
// the webhook timeout (5 s), so the new leader's informer shows it.
// Deploy the replicas with strategy Recreate (see deploy/admission): a
// standby is never ready, so a rolling update would wait for it forever.
package app
