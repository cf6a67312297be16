package contract

// RequeueAnnotation is the Pod annotation the extender writes on a pod it
// rejected earlier to make kube-scheduler try the pod again now (a gang was
// planned, or GPUs were released). kube-scheduler retries pods an extender
// rejected on any cluster event, and an update of the pod itself is one; the
// value (a timestamp and a short reason) only has to change. Nothing reads it.
func (n Names) RequeueAnnotation() string { return n.Domain + "/requeue" }
