package config

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/pkg/contract"
)

// SchedulerOptions tune the extender entry SchedulerConfig writes.
type SchedulerOptions struct {
	// Domain of the managed resources; empty means contract.DefaultDomain.
	Domain string
	// Weight multiplies the extender's 0..10 priorities; kube-scheduler
	// scales them by 10 and adds them to its plugins' 0..100 scores, so 10
	// makes one rank of Rota's score worth 100 plugin points.
	Weight int64
	// HTTPTimeout bounds each extender call.
	HTTPTimeout time.Duration
	// NoPreempt leaves the preempt verb out.
	NoPreempt bool
	// FilterBestOnly is for a rota-extender run with --filter-best-only:
	// every node its filter passes is in the best score class, so
	// prioritize would give them all the same score; the verb is left out
	// and the scheduler saves one HTTP round trip per pod.
	FilterBestOnly bool
	// GPUFreePods sends every pod through the extender, also those that
	// ask for no GPU: managedResources is left out, so kube-scheduler asks
	// the extender about every pod, and the extender places CPU-only pods
	// where they strand the fewest GPUs (a node without GPUs first).
	// ignorable stays false: while the extender is down, no pod of this
	// scheduler is placed.
	GPUFreePods bool
	// QPS and Burst of the scheduler's own client (0: 1000/2000).
	QPS   int
	Burst int
	// TLS, when set, turns on enableHTTPS with this tlsConfig.
	TLS *SchedulerTLS
	// PercentageOfNodesToScore, when above 0, is the configuration's
	// percentageOfNodesToScore (100: every node); unset or 0 leaves it to
	// kube-scheduler's adaptive default.
	PercentageOfNodesToScore *int32
}

// SchedulerTLS is the tlsConfig of kube-scheduler's extender entry: the
// client certificate it presents to rota-extender (whose --client-ca-file
// signed it) and the CA that verifies rota-extender's serving certificate.
//
// kube-scheduler (v1.37) builds one HTTP client per extender at start-up
// (client-go's rest.TLSConfigFor): it reads CAFile once, so a new CA needs
// a scheduler restart; it re-reads CertFile and KeyFile for each new
// connection (at most once a second), so a renewed client certificate is
// used from the next connection on, without a restart. Connections kept
// alive keep the certificate they were opened with.
type SchedulerTLS struct {
	CertFile, KeyFile, CAFile string
	// ServerName, when set, is the name the serving certificate is checked
	// against instead of urlPrefix's host (e.g. urlPrefix names the
	// Service's cluster IP, ServerName its DNS name).
	ServerName string
}

// SchedulerOption sets one SchedulerOptions field.
type SchedulerOption func(*SchedulerOptions)

// WithDomain sets the resource domain.
func WithDomain(d string) SchedulerOption { return func(o *SchedulerOptions) { o.Domain = d } }

// WithWeight sets the prioritize weight.
func WithWeight(w int64) SchedulerOption { return func(o *SchedulerOptions) { o.Weight = w } }

// WithHTTPTimeout sets the per-call timeout.
func WithHTTPTimeout(d time.Duration) SchedulerOption {
	return func(o *SchedulerOptions) { o.HTTPTimeout = d }
}

// WithoutPreempt leaves the preempt verb out.
func WithoutPreempt() SchedulerOption { return func(o *SchedulerOptions) { o.NoPreempt = true } }

// WithFilterBestOnly leaves the prioritize verb out, for an extender run
// with --filter-best-only (see SchedulerOptions.FilterBestOnly).
func WithFilterBestOnly() SchedulerOption {
	return func(o *SchedulerOptions) { o.FilterBestOnly = true }
}

// WithGPUFreePods sets SchedulerOptions.GPUFreePods.
func WithGPUFreePods(on bool) SchedulerOption {
	return func(o *SchedulerOptions) { o.GPUFreePods = on }
}

// WithClientRate sets the scheduler client's QPS and burst.
func WithClientRate(qps, burst int) SchedulerOption {
	return func(o *SchedulerOptions) { o.QPS, o.Burst = qps, burst }
}

// WithPercentageOfNodesToScore sets SchedulerOptions.PercentageOfNodesToScore.
func WithPercentageOfNodesToScore(p int32) SchedulerOption {
	return func(o *SchedulerOptions) { o.PercentageOfNodesToScore = &p }
}

// WithTLS makes the scheduler call the extender over HTTPS with a client
// certificate (see SchedulerTLS); extenderURL should then start with https://.
func WithTLS(t SchedulerTLS) SchedulerOption { return func(o *SchedulerOptions) { o.TLS = &t } }

// SchedulerConfig renders a KubeSchedulerConfiguration (YAML) that sends
// every pod asking for Rota's resources through the extender at extenderURL
// (its base URL, e.g. "http://127.0.0.1:8888"; the verbs are appended):
//
//   - filterVerb, prioritizeVerb, bindVerb, preemptVerb, nodeCacheCapable: the
//     scheduler sends and receives node names, never Node objects;
//   - managedResources <domain>/gpu and <domain>/gpu-memory with
//     ignoredByScheduler: false, so only pods asking for them reach the
//     extender (left out with WithGPUFreePods: then every pod does), and the
//     scheduler's NodeResourcesFit still counts them per node (a coarse,
//     always-consistent check beside the extender's per-GPU ledger). Its
//     preemption dry run needs that: with the resources ignored it never
//     finds a victim and never calls the preempt verb (measured on
//     kube-scheduler v1.37.2);
//   - ignorable: false: when the extender is down, GPU pods wait instead of
//     landing on GPUs nobody accounted for;
//   - with WithTLS, enableHTTPS: true and tlsConfig (certFile, keyFile,
//     caFile, serverName): only a scheduler holding a client certificate
//     of the extender's --client-ca-file may call the verbs.
//
// kubeconfigPath goes to clientConnection.kubeconfig; the e2e harness may
// pass "{{.Kubeconfig}}" and use the result as its template. Leader
// election is off (one scheduler).
func SchedulerConfig(extenderURL, kubeconfigPath string, opts ...SchedulerOption) string {
	out, err := yaml.Marshal(schedulerConfiguration(extenderURL, kubeconfigPath, opts...))
	if err != nil {
		// A KubeSchedulerConfiguration of strings, numbers and bools always marshals.
		return ""
	}
	return string(out)
}

// schedulerConfiguration is SchedulerConfig's document as kube-scheduler's
// own typed configuration (k8s.io/kube-scheduler/config/v1).
func schedulerConfiguration(extenderURL, kubeconfigPath string, opts ...SchedulerOption) *configv1.KubeSchedulerConfiguration {
	o := SchedulerOptions{Weight: 10, HTTPTimeout: 5 * time.Second, QPS: 1000, Burst: 2000}
	for _, f := range opts {
		f(&o)
	}
	names, err := contract.NewNames(o.Domain)
	if err != nil {
		names = contract.Default
	}
	ext := configv1.Extender{
		URLPrefix:        strings.TrimRight(extenderURL, "/"),
		FilterVerb:       "filter",
		BindVerb:         "bind",
		NodeCacheCapable: true,
		Ignorable:        false,
		HTTPTimeout:      metav1.Duration{Duration: o.HTTPTimeout},
	}
	if !o.GPUFreePods {
		ext.ManagedResources = []configv1.ExtenderManagedResource{
			{Name: names.GPU, IgnoredByScheduler: false},
			{Name: names.GPUMemory, IgnoredByScheduler: false},
		}
	}
	if !o.NoPreempt {
		ext.PreemptVerb = "preempt"
	}
	if t := o.TLS; t != nil {
		ext.EnableHTTPS = true
		ext.TLSConfig = &configv1.ExtenderTLSConfig{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, ServerName: t.ServerName}
	}
	if !o.FilterBestOnly {
		ext.PrioritizeVerb, ext.Weight = "prioritize", max(o.Weight, 1)
	}
	var percentage *int32
	if p := o.PercentageOfNodesToScore; p != nil && *p > 0 {
		percentage = p
	}
	leaderElect := false
	return &configv1.KubeSchedulerConfiguration{
		PercentageOfNodesToScore: percentage,
		TypeMeta:                 metav1.TypeMeta{APIVersion: configv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			Kubeconfig: kubeconfigPath, QPS: float32(o.QPS), Burst: int32(o.Burst),
		},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{LeaderElect: &leaderElect},
		Extenders:      []configv1.Extender{ext},
	}
}
