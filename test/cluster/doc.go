// Package cluster starts a real Kubernetes control plane for tests and demos:
// etcd, kube-apiserver and kube-scheduler, built from the Go module proxy by
// hack/k8s-tools.sh into .cache/k8s/bin, running as child processes on
// 127.0.0.1 with their state and logs in one temporary folder.
//
// There is no kube-controller-manager and no kubelet. The package stands in for
// the parts of them that scheduling tests depend on:
//
//   - NodeSimulator registers Nodes with the capacity a test asks for (including
//     extended resources such as example.com/gpu), marks them Ready, and renews
//     their Leases.
//   - PodSimulator plays the kubelet for pods bound to those nodes: it reports
//     them Running and finishes their graceful deletion.
//   - The API server runs without the ServiceAccount and TaintNodesByCondition
//     admission plugins: without the controller manager, namespaces get no
//     default ServiceAccount (so every pod would be rejected) and new Nodes
//     would keep the node.kubernetes.io/not-ready taint forever.
//
// Namespaces that a test deletes stay Terminating (there is no namespace
// controller); use a fresh namespace name per test instead.
//
// A typical test:
//
//	c := cluster.StartT(t, cluster.Options{Extender: &cluster.Extender{URL: srv.URL}})
//	c.CreateNode(ctx, "gpu-0", nil, map[string]string{"example.com/gpu": "8"})
//	... create pods with c.Client() ...
//
// The processes run in their own process groups and are stopped by PID in
// Cluster.Stop. StartT registers Stop with t.Cleanup, and when the test fails it
// keeps the folder and prints the end of every log.
package cluster
