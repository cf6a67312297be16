// Command kubectl-rota is Rota's kubectl plugin: put it on PATH and run
// `kubectl rota why POD`, `kubectl rota top nodes|gpus|teams`,
// `kubectl rota ledger --node NODE` or `kubectl rota release NODE` (return
// a quarantined node and its GPUs to placement). It reads the kubeconfig as kubectl does
// (KUBECONFIG, --kubeconfig, --context, -n/--namespace).
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"time"

	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	env := cli.Env{
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Getenv:   os.Getenv,
		Terminal: func() bool { return term.IsTerminal(int(os.Stdout.Fd())) },
		Client: func(cc clientcmd.ClientConfig) (kubernetes.Interface, error) {
			rc, err := cc.ClientConfig()
			if err != nil {
				return nil, err
			}
			// A few list calls per run; kubectl's own defaults.
			rc.QPS, rc.Burst = 50, 100
			rc.UserAgent = "kubectl-rota"
			return kubernetes.NewForConfig(rc)
		},
		HTTP: &http.Client{Timeout: 10 * time.Second},
		Now:  time.Now,
	}
	err := cli.Run(ctx, os.Args[1:], env)
	stop()
	switch {
	case err == nil:
	case cli.IsUsage(err):
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
