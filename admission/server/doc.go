// Package server wires rota-admission together: the client-go informers
// that feed the usage view (pods, namespaces, nodes) and the quota
// ConfigMap, leader election, the HTTPS server with certificate reload, the
// health and metrics endpoints (the validating webhook on /validate, the
// mutating one on /mutate), and graceful shutdown. main builds a
// config.Config and calls Run.
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
// the lease expires (--lease-duration, 15 s); the old one stops admitting
// when it cannot renew within --renew-deadline (10 s), before the lease can
// pass on, and every pod it admitted is persisted by the API server within
// the webhook timeout (5 s), so the new leader's informer shows it.
// Deploy the replicas with strategy Recreate (see deploy/admission): a
// standby is never ready, so a rolling update would wait for it forever.
package server
