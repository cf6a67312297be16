// Package cli is kubectl-rota's command layer: flags, fetching from the API
// server through a kubernetes.Interface (and, optionally, the extender's
// /debug/pods endpoint), and printing kubectl/report's structs as aligned
// tables, JSON or YAML. main builds the Env; tests pass a fake clientset.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/topology"
)

// Env is what a run talks to. Only main builds a real one.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment (NO_COLOR, KUBECONFIG via clientcmd).
	Getenv func(string) string
	// Terminal reports whether Stdout is a terminal.
	Terminal func() bool
	// Client builds the clientset from the resolved kubeconfig.
	Client func(clientcmd.ClientConfig) (kubernetes.Interface, error)
	// HTTP calls the extender's debug endpoint.
	HTTP *http.Client
	// Now is the clock ages are computed from.
	Now func() time.Time
}

// options are the parsed flags.
type options struct {
	output        string
	rotaNamespace string
	quotaCM       string
	quotaKey      string
	extenderURL   string
	domain        string
	memoryUnitMiB int64
	gang          string
	node          string
	color         string
	dryRun        bool
	wait          time.Duration
	team          string
	draDrivers    string
}

const usage = `kubectl rota explains Rota's GPU scheduling.

Usage:
  kubectl rota why POD [-n NAMESPACE] [--extender-url URL]
  kubectl rota why --gang NAME [-n NAMESPACE]
  kubectl rota why job/NAME [-n NAMESPACE]
  kubectl rota why jobset/NAME [-n NAMESPACE]
  kubectl rota top nodes|gpus|teams [--node NODE]
  kubectl rota top pods [-n NAMESPACE] [--node NODE]
  kubectl rota ledger --node NODE
  kubectl rota queue [--team TEAM] [--extender-url URL]
  kubectl rota release NODE [--dry-run] [--wait[=DURATION]]

Commands:
  why      why a pod (or gang) is pending: submitted at, team and quota, the
           latest scheduling refusal, gang progress, and what would make it fit;
           for a Job or JobSet queued suspended, whether it waits, runs or was taken back
  top      GPU use per node, per GPU (memory, whole GPUs, health, NVLink
           island) or per team (quota, running, pending); cluster fragmentation;
           top pods: each GPU pod's SM utilization, GPU memory used and idle
           mark as its device plugin publishes them on the pod (all
           namespaces unless -n is given)
  ledger   one node's GPU allocations rebuilt from pod annotations, with any
           violation of Rota's ledger invariants
  queue    the pods waiting in Rota's queue, by team in queue order, with
           their position and what they wait for (the Queued condition; with
           --extender-url the queue controller's live view)
  release  return a node that rota-extender's remediation quarantined (too
           many failures in its window) to placement, with its quarantined
           GPUs: writes the annotation <domain>/quarantine=release, which
           rota-extender acts on (taint and annotation removed). A GPU is
           released with its node (kubectl rota release gpu UUID names it)

Flags:
`

// errUsage marks errors that should print the usage.
var errUsage = errors.New("usage")

// Run runs one kubectl-rota command line (args without the program name).
func Run(ctx context.Context, args []string, env Env) error {
	fs := pflag.NewFlagSet("kubectl-rota", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: a table)")
	fs.StringVar(&o.rotaNamespace, "rota-namespace", "rota-system", "namespace of Rota's quota ConfigMap")
	fs.StringVar(&o.quotaCM, "quota-configmap", "rota-quota", "name of Rota's quota ConfigMap")
	fs.StringVar(&o.quotaKey, "quota-key", "quota.yaml", "key of the quota document in the ConfigMap")
	fs.StringVar(&o.extenderURL, "extender-url", "", "rota-extender's base URL (its ops port, e.g. http://localhost:8889 after kubectl port-forward to the leader); why then shows its decision log, queue the live positions")
	fs.StringVar(&o.domain, "domain", contract.DefaultDomain, "Rota's resource and label domain")
	fs.Int64Var(&o.memoryUnitMiB, "memory-unit-mib", int64(contract.DefaultMemoryUnitMiB), "size of one gpu-memory unit in MiB (as the webhook's --memory-unit-mib)")
	fs.StringVar(&o.gang, "gang", "", "why: explain this gang instead of a pod")
	fs.StringVar(&o.node, "node", "", "ledger: the node; top gpus: only this node")
	fs.StringVar(&o.team, "team", "", "queue: only this team's queue")
	fs.StringVar(&o.draDrivers, "dra-gpu-drivers", "gpu.nvidia.com", "DRA drivers whose devices are GPUs, comma-separated (as the chart's dra.gpuDrivers): their nodes take no GPU work from Rota")
	fs.StringVar(&o.color, "color", "auto", "colour: auto (a terminal and NO_COLOR unset), always or never")
	fs.BoolVar(&o.dryRun, "dry-run", false, "release: say what would be released; write nothing")
	fs.DurationVar(&o.wait, "wait", 0, "release: wait up to this long (1m when given without a value) until rota-extender has cleared the quarantine")
	fs.Lookup("wait").NoOptDefVal = "1m"
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	help := fs.BoolP("help", "h", false, "show this help")

	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fmt.Fprint(w, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (see kubectl rota --help)", err)
	}
	if *help {
		printUsage(env.Stdout)
		return nil
	}
	if fs.NArg() == 0 {
		printUsage(env.Stderr)
		return fmt.Errorf("%w: no command given", errUsage)
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf("--output=%s: want json or yaml (or leave it out for a table)", o.output)
	}
	switch o.color {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("--color=%s: want auto, always or never", o.color)
	}
	names, err := contract.NewNames(o.domain)
	if err != nil {
		return fmt.Errorf("--domain: %w", err)
	}
	if o.memoryUnitMiB <= 0 {
		return fmt.Errorf("--memory-unit-mib=%d: must be positive", o.memoryUnitMiB)
	}
	drivers, err := dra.ParseDrivers(o.draDrivers)
	if err != nil {
		return fmt.Errorf("--dra-gpu-drivers: %w", err)
	}
	ro := report.Options{Names: names, MemoryUnitMiB: contract.MiB(o.memoryUnitMiB), Tiers: topology.DefaultLabels(names),
		QuotaKey: o.quotaKey, QuotaSource: "ConfigMap " + o.rotaNamespace + "/" + o.quotaCM, DRAGPUDrivers: drivers}

	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if err := checkArgs(cmd, rest, o); err != nil {
		return err
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	ns, _, err := cc.Namespace()
	if err != nil {
		return fmt.Errorf("read the kubeconfig: %w", err)
	}
	cs, err := env.Client(cc)
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	f := &fetcher{cs: cs, o: o, warn: env.Stderr}
	p := newPrinter(env, o)

	switch cmd {
	case "why":
		return runWhy(ctx, f, p, env, ro, ns, rest, o)
	case "top":
		if rest[0] == "pods" {
			return runTopPods(ctx, f, p, env, ro, overrides.Context.Namespace, o)
		}
		return runTop(ctx, f, p, env, ro, rest[0], o)
	case "release":
		return runRelease(ctx, cs, p, names, rest, o)
	case "queue":
		return runQueue(ctx, f, p, env, ro, o)
	case "ledger":
		in, err := f.input(ctx, need{})
		if err != nil {
			return err
		}
		in.Now = env.Now()
		l, err := report.Build(in, ro).Ledger(o.node)
		if err != nil {
			return err
		}
		return p.print(l, func(w io.Writer) error { return p.ledgerText(w, l) })
	}
	return nil
}

// checkArgs validates the command and its arguments before any API call.
func checkArgs(cmd string, rest []string, o options) error {
	if cmd != "queue" && o.team != "" {
		return fmt.Errorf("%s: --team applies to queue only", cmd)
	}
	if cmd != "release" && (o.dryRun || o.wait != 0) {
		return fmt.Errorf("%s: --dry-run and --wait apply to release only", cmd)
	}
	switch cmd {
	case "why":
		switch {
		case o.gang != "" && len(rest) > 0:
			return fmt.Errorf("why: give a pod or --gang, not both")
		case o.gang == "" && len(rest) != 1:
			return fmt.Errorf("why: name one pod (kubectl rota why POD -n NAMESPACE) or a gang (--gang NAME)")
		}
		if o.node != "" {
			return fmt.Errorf("why: --node does not apply")
		}
		if len(rest) == 1 && strings.Contains(rest[0], "/") {
			kind, _, _ := strings.Cut(rest[0], "/")
			if kind != "pod" && kind != "pods" && kind != "po" && !isJobKind(kind) && !isJobSetKind(kind) {
				return fmt.Errorf("why: %s: only pods, Jobs and JobSets can be explained (or a gang with --gang)", rest[0])
			}
		}
	case "top":
		if len(rest) != 1 || (rest[0] != "nodes" && rest[0] != "gpus" && rest[0] != "teams" && rest[0] != "pods") {
			return fmt.Errorf("top: want one of nodes, gpus, teams, pods")
		}
		if o.gang != "" || (o.node != "" && rest[0] != "gpus" && rest[0] != "pods") || o.extenderURL != "" {
			return fmt.Errorf("top %s: --gang, --extender-url and --node (except for gpus and pods) do not apply", rest[0])
		}
	case "ledger":
		if o.node == "" || len(rest) != 0 {
			return fmt.Errorf("ledger: name the node with --node NODE")
		}
		if o.gang != "" || o.extenderURL != "" {
			return fmt.Errorf("ledger: --gang and --extender-url do not apply")
		}
	case "queue":
		if len(rest) != 0 || o.gang != "" || o.node != "" {
			return fmt.Errorf("queue: takes no arguments; --gang and --node do not apply (use --team TEAM)")
		}
	case "release":
		if len(rest) != 1 && len(rest) != 2 {
			return fmt.Errorf("release: name one node (kubectl rota release NODE)")
		}
		if o.gang != "" || o.node != "" || o.extenderURL != "" {
			return fmt.Errorf("release: --gang, --node and --extender-url do not apply")
		}
		if o.wait < 0 {
			return fmt.Errorf("release: --wait=%s is negative", o.wait)
		}
	default:
		return fmt.Errorf("unknown command %q: want why, top, ledger, queue or release (see kubectl rota --help)", cmd)
	}
	return nil
}

func runWhy(ctx context.Context, f *fetcher, p *printer, env Env, ro report.Options, ns string, rest []string, o options) error {
	job, jobSet := false, false
	if o.gang == "" {
		kind, _, ok := strings.Cut(rest[0], "/")
		job, jobSet = ok && isJobKind(kind), ok && isJobSetKind(kind)
	}
	in, err := f.input(ctx, need{namespaces: true, quota: true, podEvents: ns, jobs: job || jobSet})
	if err != nil {
		return err
	}
	in.Now = env.Now()
	c := report.Build(in, ro)
	var w report.Why
	switch {
	case o.gang != "":
		w, err = c.WhyGang(ns, o.gang)
	case job:
		_, name, _ := strings.Cut(rest[0], "/")
		w, err = c.WhyJob(ns, name)
	case jobSet:
		_, name, _ := strings.Cut(rest[0], "/")
		w, err = c.WhyJobSet(ns, name)
	default:
		name := rest[0]
		if _, n, ok := strings.Cut(name, "/"); ok {
			name = n
		}
		w, err = c.WhyPod(ns, name)
	}
	if err != nil {
		return err
	}
	if o.extenderURL != "" && !job && !jobSet {
		podNS, podName, _ := strings.Cut(w.Pod, "/")
		w.Extender = fetchExtender(ctx, env.HTTP, o.extenderURL, podNS, podName)
	}
	return p.print(w, func(out io.Writer) error { return p.whyText(out, w) })
}

func runTop(ctx context.Context, f *fetcher, p *printer, env Env, ro report.Options, what string, o options) error {
	nd := need{}
	if what == "teams" {
		nd = need{namespaces: true, quota: true, createEvents: true}
	}
	in, err := f.input(ctx, nd)
	if err != nil {
		return err
	}
	in.Now = env.Now()
	c := report.Build(in, ro)
	switch what {
	case "nodes":
		r := c.TopNodes()
		return p.print(r, func(w io.Writer) error { return p.nodesText(w, r) })
	case "gpus":
		r, err := c.TopGPUs(o.node)
		if err != nil {
			return err
		}
		return p.print(r, func(w io.Writer) error { return p.gpusText(w, r) })
	}
	r := c.TopTeams()
	return p.print(r, func(w io.Writer) error { return p.teamsText(w, r) })
}

// isJobKind reports whether a kubectl kind names batch/v1 Jobs.
func isJobKind(kind string) bool {
	return kind == "job" || kind == "jobs" || kind == "job.batch" || kind == "jobs.batch"
}

func isJobSetKind(kind string) bool {
	return kind == "jobset" || kind == "jobsets" || kind == "jobset.jobset.x-k8s.io" || kind == "jobsets.jobset.x-k8s.io"
}

// IsUsage reports whether err asks for the usage to be shown (exit code 2).
func IsUsage(err error) bool { return errors.Is(err, errUsage) }

// runQueue prints the queue: from the API (gated pods and their Queued
// conditions), or with --extender-url the queue controller's live view.
func runQueue(ctx context.Context, f *fetcher, p *printer, env Env, ro report.Options, o options) error {
	if o.extenderURL != "" {
		v, err := fetchQueue(ctx, env.HTTP, o.extenderURL, o.team)
		if err != nil {
			return err
		}
		return p.print(v, func(w io.Writer) error { return p.liveQueueText(w, v) })
	}
	in, err := f.input(ctx, need{namespaces: true, jobs: true})
	if err != nil {
		return err
	}
	in.Now = env.Now()
	q := report.Build(in, ro).Queue(o.team)
	return p.print(q, func(w io.Writer) error { return p.queueText(w, q) })
}
