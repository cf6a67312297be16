// Package reserve plans reservations: where a queued job that does not fit
// yet will fit soonest, when that is, and what to hold there so that it
// starts then (see ledger.Claim for how the hold works and who may still
// use held room: the job itself and backfill pods that end by its expected
// start).
//
// The plan, for one job whose members each ask for whole GPUs:
//
//   - Domains are the node sets the job could run in: for a gang each group
//     of the narrowest topology tier (a leaf switch), then of each wider
//     tier (a zone), then the whole cluster; for a single pod each node.
//   - In each domain the pods that occupy it leave at their expected ends
//     (ledger.Allocation.Ends: a declared maximum runtime counted from the
//     pod's start, or an estimate); a pod with no expected end never
//     leaves. The domain's start is the first moment its nodes hold every
//     member (placement.Slots on the node as it will be then).
//   - The chosen domain is the one with the earliest start; among equal
//     starts the one whose start rests on fewer estimates, then the
//     narrower tier, then the name. A domain whose start is unknown (it
//     waits for pods that never end) comes last, the one that lacks the
//     fewest members first. The previous plan's domain is kept while its
//     start is at most Options.Slack later than the best (plans do not
//     flap as estimates move).
//   - The claims hold, on the fewest nodes of that domain that hold every
//     member at the start, what the members need there.
//
// It is pure: time comes from the caller.
package reserve
