// Package logkey lists the well-known structured log keys of rota-extender,
// so every package writes the same key for the same thing. It holds only
// constants.
package logkey

// Structured log keys, lowerCamel.
const (
	Pod        = "pod"
	Node       = "node"
	GPU        = "gpu"
	Gang       = "gang"
	Verb       = "verb"
	Outcome    = "outcome"
	Reason     = "reason"
	Nodes      = "nodes"
	Fits       = "fits"
	Message    = "message"
	Duration   = "duration"
	Allocation = "allocation"
	Count      = "count"
	Expires    = "expires"
	Annotation = "annotation"
	Score      = "score"
	Victims    = "victims"
)
