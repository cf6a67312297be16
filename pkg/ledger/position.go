package ledger

// At returns the info of the node at position i of Names (0 <= i < Len):
// readers that walk every node read them in order without a name lookup.
func (s *Snapshot) At(i int) *NodeInfo { return s.infos[i] }

// SameNodes reports whether o lists the same nodes at the same positions
// as s (the set of nodes did not change between them), so that what a
// reader keeps per position of one snapshot holds for the other.
func (s *Snapshot) SameNodes(o *Snapshot) bool { return o != nil && s.index == o.index }
