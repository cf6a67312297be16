// Package state is rota-extender's cache: client-go informers for Nodes and
// Pods feeding the one GPU ledger (pkg/ledger).
//
//   - Nodes: the topology annotation is parsed (contract.ParseTopology) and,
//     with the tier labels, becomes the node's topology.Node; a change takes
//     effect at once. A node without the annotation, or with an invalid one,
//     is not in the ledger (it gets no GPU work).
//   - Pods: a non-terminal pod bound to a node with an assignment annotation
//     holds a committed allocation (podreq.ToAllocation, ledger.Restore). A
//     pod that finishes or is deleted releases at once.
//   - The informers' initial lists restore every allocation through the same
//     handlers, so "rebuilt" is "the handlers have seen the initial lists":
//     Ready reports it.
//
// Both informers trim objects (SetTransform) to the fields the extender
// reads, which keeps 100,000 pods in a few hundred MiB: for bind's node
// checks, a node keeps its labels and NoSchedule/NoExecute taints, and a
// pending pod its node selector, required node affinity and tolerations
// (Node, NodeRequests).
//
// Invalid annotations are logged and counted (Stats), never fatal.
// A Cache is safe for concurrent use.
package state
