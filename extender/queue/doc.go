// Package queue is rota-extender's queue controller: it admits queued GPU
// pods (those rota-admission gated with the queue's scheduling gate at
// creation) by team quota, fair share and room, as pkg/queue decides.
//
// One pass, every Interval, on the leader only:
//
//  1. Read every pod that asks for Rota's resources from the extender's pod
//     informer. Gated pods are queued work (one workload per pod, or per
//     gang with all its members); ungated pods that have not finished are
//     admitted use, charged to the account their admission record names.
//  2. Plan: pkg/queue orders the queued work and calls back HoldRoom for
//     each candidate, so the room is held in the ledger before the pod is
//     admitted and two admissions never count the same free GPUs.
//  3. Admit each chosen pod in one update: the gate removed, the admission
//     record (account, time, hold) written, a gang narrowed to its planned
//     tier, the declared runtime written into activeDeadlineSeconds. If the
//     update fails, the hold is released and the pod stays queued.
//  4. Say where every other pod stands: the pod condition <domain>/Queued
//     (position, what it waits for, the team's use), written at most once
//     per pod per ConditionInterval and at most ConditionQPS per second in
//     all; Queued and Admitted events; metrics.
//
// Nothing is kept that the API does not hold: a restarted or new leader
// rebuilds the queue from the gates, creation times and priorities, and
// admitted use and holds from the admission records.
package queue
