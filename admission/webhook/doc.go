// Package webhook is Rota's two admission webhooks as http.Handlers. Each
// decodes an admission.k8s.io/v1 AdmissionReview and encodes the reply.
//
// The mutating webhook (NewMutating) adds Rota's queue gate
// (contract.Names.QueueGate) as a scheduling gate to every pod that asks
// for Rota's resources at CREATE, unless queueing is off for it (its
// namespace is labelled with queueing off, or the quota configuration says
// queueing: off) or it is bound at creation. It never refuses a
// well-formed pod and leaves a pod that has the gate already alone.
//
// The validating webhook (New) validates the pod's GPU request and the
// queue's annotations with pkg/podreq, then asks the usage view
// (admission/view): a gated pod is queued unless it can never run
// (view.Queue); a pod without the gate is admitted now within its team's
// quota or refused (view.Admit). On UPDATE it refuses changes to the labels
// and annotations quota and gangs depend on (gang, gang size, pod group,
// team), and the removal of the queue gate by anyone but the configured
// queue controllers (Options.QueueControllers).
//
// Pods that ask for no Rota resource are allowed after one scan of their
// containers. A Handler holds no mutable state of its own and is safe for
// concurrent use.
package webhook
