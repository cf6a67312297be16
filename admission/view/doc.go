// Package view is the admission webhook's in-memory picture of the cluster:
// GPU use per namespace (from a Pod informer), the team label of every
// namespace, the gangs and their members, the largest GPU and node (from
// the Nodes' topology annotations), the quota configuration, and the
// in-flight reservations of pods the webhook admitted but the informer has
// not shown yet.
//
// Queued work: a pod that carries Rota's queue gate (see Gated) waits in the
// queue and never counts against quota; the view counts such pods per team
// separately (for maxQueuedPods and messages). Queue decides on a new gated
// pod: it refuses only what can never run and otherwise holds a place under
// the team's queued-pod cap until the informer shows the pod. Admitted use
// is every ungated pod, pending or running, plus reservations.
//
// Admit makes the quota decision and records the reservation under one
// mutex, so within one process admissions are serialised: two pods can never
// both take the last free GPU. One lock for all teams (not one per team) is
// deliberate: the shared pool couples teams, and the critical section is a
// few microseconds.
//
// Reservations are keyed by namespace/name (and the UID when the request
// carries one). A reservation ends when the informer shows the pod, or
// after the reservation TTL if the pod never appears (rejected by a later
// admission step, or a dry run), so admitted-but-never-created pods do not
// leak quota.
//
// Gangs: the first member of a gang reserves room for the whole gang; later
// members are covered by that reservation. The unfilled part of a gang's
// reservation also expires after the TTL, counted from the last member
// admitted.
//
// The package knows client-go objects but not client-go: informer wiring
// lives in admission/app, which calls the Upsert/Delete methods. All
// methods are safe for concurrent use.
package view
