// Package queue is Rota's queue: the order in which queued (gated) GPU work
// is admitted, the fair share across teams, and the choice of what to
// reclaim. It is pure: the caller (rota-extender's queue controller) builds
// an Input from the API, passes a Fitter that tries to hold room in the
// ledger for a workload, and carries out the returned decisions.
//
// The rules, in order:
//
//   - Inside a team, workloads are ordered by priority (higher first), then
//     by age (older first, the owning workload's creation where there is
//     one), then by key. A workload that cannot be admitted (quota or room)
//     does not block a later one that can: the later one fits room the
//     earlier one cannot use.
//   - Across teams, the next admission goes to the team whose weighted
//     dominant share is lowest: the largest, over GPUs, GPU memory and CPU,
//     of the team's admitted use divided by the cluster's capacity, divided
//     by the team's weight.
//   - A workload is admitted when one of its quota accounts stays within
//     guarantee, or within guarantee plus borrow while the shared pool has
//     room (quota.Config.CheckAccount), and the Fitter holds room for all of
//     its members at once. A gang is admitted only whole, and only once all
//     of its members exist.
//   - Quota counts admitted work (ungated pods, pending or running), never
//     queued work.
//
// Nothing here reads the clock or the API; Plan is deterministic for a
// given Input and Fitter.
package queue
