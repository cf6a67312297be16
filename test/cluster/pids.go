package cluster

// PIDs returns the process IDs of the running control-plane components by
// name ("etcd", "kube-apiserver", "kube-scheduler"), for tests that account
// for their CPU time or memory.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for name, p := range map[string]*Process{"etcd": c.etcd, "kube-apiserver": c.apiServer, "kube-scheduler": c.scheduler} {
		if p != nil && p.Running() {
			out[name] = p.PID()
		}
	}
	return out
}
