package webhook

// Structured log keys of the webhook.
const (
	keyPod       = "pod"
	keyUID       = "uid"
	keyOperation = "operation"
	keyTeam      = "team"
	keyAllowed   = "allowed"
	keyReason    = "reason"
	keyMessage   = "message"
	keyMutating  = "mutating"
)
