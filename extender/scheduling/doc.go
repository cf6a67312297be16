// Package scheduling is rota-extender's decision layer: it answers
// kube-scheduler's extender verbs (filter, prioritize, bind, preempt) by
// calling the one placement engine (pkg/placement) on a ledger snapshot, and
// maps the engine's reasons and scores onto the extender/v1 wire types.
//
// Filter and prioritize only read (one ledger snapshot per call). Bind
// first checks what kube-scheduler would have (checkNode: the pod's
// scheduler, node selector, required node affinity, tolerations and, for a
// GPU-free pod, CPU and memory), since a bind request is not trusted to
// follow the scheduler's filters; then it is two-phase: it re-runs placement.Fit on the current snapshot (or takes the
// pod's gang slot), reserves in the ledger with a TTL (the ledger
// serializes, so two binds never take the same memory), creates the
// Binding carrying the assignment annotation (one API write; the API server
// copies the annotation onto the pod as it binds it) and commits. Gangs are planned as a whole at the first member
// filtered once every member exists (placement.PlanGang); the plan reserves
// a slot per member and lives as long as they do, on the extender's clock
// (each member's bind renews it; Expire drops it).
//
// Every decision is counted in metrics, logged once at V(4) (per-node detail
// at V(5)), kept for GET /debug/pods, and a refusal becomes a Warning event
// on the pod.
//
// Time comes from Options.Now. An Extender is safe for concurrent use.
package scheduling
