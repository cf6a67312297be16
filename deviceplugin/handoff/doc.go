// Package handoff decides which pod a kubelet Allocate call is for, so the
// container gets exactly the GPUs the extender chose. The kubelet's device
// plugin API carries no pod identity: GetPreferredAllocation and Allocate see
// only device IDs and counts. Matcher keeps the pods bound to this node with
// their assignment annotations and applies the rule written down in
// deviceplugin/README.md ("The Allocate handoff").
//
// Matcher is safe for concurrent use; it reads no clock except through the
// wait deadline its callers pass, and performs no I/O.
package handoff
