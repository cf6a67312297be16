package cluster

import (
	"bytes"
	"fmt"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

var schedulerConfigAPIVersion = configv1.SchemeGroupVersion.String()

// Extender is the scheduler-extender entry Start adds to the scheduler's
// configuration (a subset of KubeSchedulerConfiguration's extenders[]).
// Empty verbs leave that call out.
type Extender struct {
	// URL is the extender's base URL (urlPrefix), e.g. "http://127.0.0.1:8888/rota".
	URL            string
	FilterVerb     string // e.g. "filter"
	PrioritizeVerb string // e.g. "prioritize"
	BindVerb       string // e.g. "bind"
	PreemptVerb    string // e.g. "preempt"
	Weight         int64  // prioritize weight; 0 means 1 when PrioritizeVerb is set
	// NodeCacheCapable makes the scheduler send node names instead of full Node objects.
	NodeCacheCapable bool
	// ManagedResources are the extended resources the extender handles; the
	// scheduler only calls it for pods that request one of them.
	ManagedResources []ManagedResource
	// Ignorable lets scheduling go on when the extender is unreachable.
	Ignorable bool
	// HTTPTimeout bounds each call; 0 keeps the scheduler's default (5s).
	HTTPTimeout time.Duration
	// TLS, when set, turns on enableHTTPS with this tlsConfig (URL should
	// then be https://).
	TLS *ExtenderTLS
}

// ExtenderTLS is an extender entry's tlsConfig: the client certificate the
// scheduler presents and the CA that checks the extender's serving
// certificate.
type ExtenderTLS struct {
	CertFile, KeyFile, CAFile string
	// ServerName overrides the host name the serving certificate is checked for.
	ServerName string
}

func (t *ExtenderTLS) config() *configv1.ExtenderTLSConfig {
	return &configv1.ExtenderTLSConfig{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, ServerName: t.ServerName}
}

// ManagedResource is one extended resource an Extender manages.
type ManagedResource struct {
	Name string
	// IgnoredByScheduler makes the scheduler's own resource-fit check skip this
	// resource, leaving it entirely to the extender.
	IgnoredByScheduler bool
}

func (e *Extender) config() configv1.Extender {
	x := configv1.Extender{URLPrefix: e.URL, FilterVerb: e.FilterVerb, PrioritizeVerb: e.PrioritizeVerb,
		BindVerb: e.BindVerb, PreemptVerb: e.PreemptVerb, NodeCacheCapable: e.NodeCacheCapable, Ignorable: e.Ignorable,
		HTTPTimeout: metav1.Duration{Duration: e.HTTPTimeout}}
	if e.PrioritizeVerb != "" {
		x.Weight = max(e.Weight, 1)
	}
	if e.TLS != nil {
		x.EnableHTTPS, x.TLSConfig = true, e.TLS.config()
	}
	for _, r := range e.ManagedResources {
		x.ManagedResources = append(x.ManagedResources, configv1.ExtenderManagedResource{Name: r.Name, IgnoredByScheduler: r.IgnoredByScheduler})
	}
	return x
}

// SchedulerTemplateData is what Options.SchedulerConfig templates see.
type SchedulerTemplateData struct {
	Kubeconfig string // the scheduler's kubeconfig file
}

// schedulerConfig renders the KubeSchedulerConfiguration the scheduler runs
// with: the caller's template (or an empty configuration), with the
// kubeconfig filled in when the template leaves it out, leader election
// forced off, and ext appended to extenders. With tlsAll, every extender
// entry without a tlsConfig of its own gets enableHTTPS and tlsAll.
func schedulerConfig(tmpl string, kubeconfig string, ext *Extender, tlsAll *ExtenderTLS) ([]byte, error) {
	var cfg configv1.KubeSchedulerConfiguration
	if tmpl != "" {
		t, err := template.New("scheduler-config").Option("missingkey=error").Parse(tmpl)
		if err != nil {
			return nil, fmt.Errorf("parsing Options.SchedulerConfig: %w", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, SchedulerTemplateData{Kubeconfig: kubeconfig}); err != nil {
			return nil, fmt.Errorf("rendering Options.SchedulerConfig: %w", err)
		}
		if err := yaml.UnmarshalStrict(buf.Bytes(), &cfg); err != nil {
			return nil, fmt.Errorf("Options.SchedulerConfig is not a %s KubeSchedulerConfiguration: %w", schedulerConfigAPIVersion, err)
		}
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = schedulerConfigAPIVersion
	}
	if cfg.Kind == "" {
		cfg.Kind = "KubeSchedulerConfiguration"
	}
	if cfg.ClientConnection.Kubeconfig == "" {
		cfg.ClientConnection.Kubeconfig = kubeconfig
	}
	if cfg.ClientConnection.QPS == 0 {
		// The default (50/100) throttles scale tests; the API server is ours.
		cfg.ClientConnection.QPS, cfg.ClientConnection.Burst = 1000, 2000
	}
	leaderElect := false
	cfg.LeaderElection.LeaderElect = &leaderElect
	if ext != nil {
		cfg.Extenders = append(cfg.Extenders, ext.config())
	}
	if tlsAll != nil {
		for i := range cfg.Extenders {
			if cfg.Extenders[i].TLSConfig == nil {
				cfg.Extenders[i].EnableHTTPS, cfg.Extenders[i].TLSConfig = true, tlsAll.config()
			}
		}
	}
	return yaml.Marshal(&cfg)
}
