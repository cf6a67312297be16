// Package ui is rota-extender's read-only status page: GET /ui serves a
// plain HTML page with a small vanilla script (embedded, no framework, no
// external URL), and GET /ui/api/state the JSON it renders:
//
//   - the GPU map: every node's GPUs, coloured by use (idle, shared, whole,
//     reserved) and health, with the pods and memory each GPU holds;
//   - the queue: GPU pods waiting for a node, how long they have waited and
//     the latest reason from the extender's decision log;
//   - with the queue controller on, each team's queue and admitted use (what
//     its quota counts), from the same view /debug/queue serves
//     (contract.QueueView): the queued pods in queue order with where each
//     stands; a queued pod's reason in the waiting list is its position;
//   - GPU use per namespace (reserved and committed GPUs, not use against
//     quota);
//   - fragmentation over time, from an in-memory ring of samples that Run
//     takes (by default one every 10 s, the last hour).
//
// It reads the ledger snapshot, the pod lister, the decision log and the
// queue's view; it writes nothing. It may import extender/scheduling (for the decision type)
// but no other adapter. A UI is safe for concurrent use.
package ui
