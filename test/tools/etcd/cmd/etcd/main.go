// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 for the
// real-control-plane tests. etcd's own main package lives in the go.etcd.io/etcd/v3
// root module, which is not published on the Go module proxy for v3.7; its
// main.go is exactly this call.
//
// It is a module of its own because etcd's server requires newer grpc and
// OpenTelemetry versions than k8s.io/kubernetes pins; sharing one module would
// upgrade the API server's dependencies behind its back.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
