// Package app wires rota-extender together and runs it: New builds the
// parts from config.Config and remediation.Config, Run serves until its
// context ends. main only parses flags.
//
// Wiring. The cache (extender/state) is built first, since every other part
// reads it: the decision layer (extender/scheduling), remediation, the
// metrics and the status page. What flows back to those parts from the
// cache (GPUs released, a GPU pod failed, a node's topology to adjust) goes
// through one small hub (events) whose fields New sets before Run starts
// the informers, the only source of those events.
//
// Active-standby. Two replicas elect a leader on a Lease (client-go's
// leaderelection; config.LeaderElection). Both keep their informers and
// ledger warm, so a standby takes over in seconds, but only the leader
// serves the verbs (server.Options.Serving; the standby answers every verb
// with "rota-extender <id> is standby; leader is <holder>", which the
// scheduler retries, and closes the connection) and writes to the API
// server (fence). The leader carries names.LeaderLabel on its own Pod; the
// chart's Service selects it, so the scheduler reaches the leader.
//
// No two replicas act at once. client-go's election does not fence, so this
// replica decides by its own clock on every verb and every write: it acts
// only while its last successful renewal began less than RenewDeadline
// ago. A standby acquires only after it has watched the Lease unchanged for
// LeaseDuration on its own clock (client-go's acquire), which is after the
// old leader stopped (RenewDeadline < LeaseDuration); a new leader needs no
// wait of its own beyond that. It then writes its Pod's label and waits for
// its informer to deliver that write, so its ledger holds every binding
// the old leader made before it decides anything (App.lead).
//
// What survives a takeover. Committed GPU assignments are on the pods, so
// every replica has them. Reservations and gang plans are memory-only: a
// new leader starts without them and re-derives them from the pods' state
// (see extender/scheduling's takeover.go: gangs are re-planned around their
// bound members, and one member of each waiting gang is requeued).
//
// Leader-only work (AddLeaderLoop) runs while this replica leads, with a
// context cancelled when it stops: remediation's reconcile loop is one;
// anything that writes to the API server belongs there.
package app
