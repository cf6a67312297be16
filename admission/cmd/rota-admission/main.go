// Command rota-admission is Rota's admission webhooks: the mutating one
// gates every GPU pod at creation for Rota's queue (unless queueing is off
// for it); the validating one rejects malformed GPU requests and queued
// pods that can never run, lets only the queue controller remove the gate,
// and for pods that are not queued enforces team quota (pending + running)
// with a borrowable shared pool at creation, keeping gangs whole. See admission/app for
// the guarantee across replicas and deploy/admission for manifests.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/app"
	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/pkg/version"
)

func main() {
	cfg := config.Default()
	if h, err := os.Hostname(); err == nil {
		cfg.Identity = h
	}
	fs := flag.NewFlagSet("rota-admission", flag.ExitOnError)
	klog.InitFlags(fs)
	version.AddFlag(fs, "rota-admission")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTPS address to serve on (host:port)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", cfg.TLSCertFile, "serving certificate (PEM); re-read when it changes")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", cfg.TLSKeyFile, "serving key (PEM); re-read when it changes")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig file; empty means in-cluster")
	qps := fs.Float64("kube-api-qps", float64(cfg.KubeQPS), "API requests per second")
	fs.IntVar(&cfg.KubeBurst, "kube-api-burst", cfg.KubeBurst, "API request burst")
	fs.StringVar(&cfg.Namespace, "quota-namespace", cfg.Namespace, "namespace of the quota ConfigMap (and, by default, of the leader Lease)")
	fs.StringVar(&cfg.ConfigMap, "quota-config-map", cfg.ConfigMap, "quota ConfigMap name; empty disables quota (requests are still validated)")
	fs.StringVar(&cfg.ConfigMapKey, "quota-config-map-key", cfg.ConfigMapKey, "key of the quota YAML in the ConfigMap")
	fs.StringVar(&cfg.Domain, "domain", cfg.Domain, "resource and label domain")
	fs.Int64Var(&cfg.MemoryUnitMiB, "memory-unit-mib", cfg.MemoryUnitMiB, "size of one gpu-memory unit in MiB (must match the device plugins)")
	fs.DurationVar(&cfg.InFlightTTL, "in-flight-ttl", cfg.InFlightTTL, "how long a pod let through is counted against quota before the informer shows it")
	fs.BoolVar(&cfg.LeaderElect, "leader-elect", cfg.LeaderElect, "admit GPU pods only while holding the Lease (required with more than one replica)")
	fs.StringVar(&cfg.LeaseName, "leader-elect-resource-name", cfg.LeaseName, "name of the leader Lease")
	fs.StringVar(&cfg.LeaseNamespace, "leader-elect-resource-namespace", cfg.LeaseNamespace, "namespace of the leader Lease (default: --quota-namespace)")
	fs.StringVar(&cfg.Identity, "identity", cfg.Identity, "leader election identity (default: host name)")
	fs.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", cfg.LeaseDuration, "leader lease duration")
	fs.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", cfg.RenewDeadline, "leader renew deadline")
	fs.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", cfg.RetryPeriod, "leader election retry period")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long to let requests in flight finish on shutdown")
	fs.StringVar(&cfg.SuspendJobs, "suspend-jobs", cfg.SuspendJobs, "where top-level GPU Jobs are queued suspended (no pods while they wait): "+
		"labelled (namespaces labelled <domain>/queueing=suspend) or all (every namespace but those labelled <domain>/queueing=gate, off or kueue); "+
		"the webhook configuration's namespaceSelector must match")
	fs.BoolVar(&cfg.Profiling, "profiling", cfg.Profiling, "serve Go runtime profiles under /debug/pprof/ (on --listen, beside /metrics)")
	queueUsers := fs.String("queue-controller-users", "", "comma-separated users that may remove the queue gate from a pod "+
		"(Rota's queue controller); empty means "+config.DefaultQueueController("<--namespace>"))
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	cfg.KubeQPS = float32(*qps)
	cfg.QueueControllers = config.ParseUsers(*queueUsers)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := klog.Background().WithName("rota-admission")
	logger.Info("Starting rota-admission", "version", version.Version, "revision", version.Revision())
	ctx = klog.NewContext(ctx, logger)
	a, err := app.New(ctx, cfg)
	if err == nil {
		err = a.Run(ctx)
	}
	stop()
	if err != nil {
		logger.Error(err, "rota-admission failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
