// Package webhook is Rota's validating admission webhook as an http.Handler:
// it decodes an admission.k8s.io/v1 AdmissionReview, validates the pod's GPU
// request with pkg/podreq, asks the usage view (admission/view) for the
// team quota and gang decision, and encodes the reply.
//
// Pods that ask for no Rota resource are allowed after one scan of their
// containers. On UPDATE the webhook only refuses changes to the labels and
// annotations quota and gangs depend on (gang, gang size, pod group, team).
//
// The Handler holds no mutable state of its own and is safe for concurrent
// use.
package webhook
