// Package handoff decides which pod a kubelet Allocate call is for, so the
// container gets exactly the GPUs the extender chose. The kubelet's device
// plugin API carries no pod identity: GetPreferredAllocation and Allocate see
// only device IDs and counts. Matcher keeps the pods bound to this node with
// their assignment annotations and applies the rule written down in
// deviceplugin/README.md ("The Allocate handoff").
//
// The kubelet's PodResources list (a PodLister the caller supplies) says
// which of the pending pods the kubelet is admitting.
//
// Matcher is safe for concurrent use; it reads no clock except through the
// wait deadline its callers pass (and the short backoff between PodResources
// retries), and its only I/O is the caller's PodLister, called without the
// matcher's lock held.
package handoff
