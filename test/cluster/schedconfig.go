package cluster

import (
	"bytes"
	"fmt"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"
)

const schedulerConfigAPIVersion = "kubescheduler.config.k8s.io/v1"

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

func (t *ExtenderTLS) config() map[string]any {
	m := map[string]any{"certFile": t.CertFile, "keyFile": t.KeyFile, "caFile": t.CAFile}
	if t.ServerName != "" {
		m["serverName"] = t.ServerName
	}
	return m
}

// ManagedResource is one extended resource an Extender manages.
type ManagedResource struct {
	Name string
	// IgnoredByScheduler makes the scheduler's own resource-fit check skip this
	// resource, leaving it entirely to the extender.
	IgnoredByScheduler bool
}

func (e *Extender) config() map[string]any {
	m := map[string]any{"urlPrefix": e.URL, "nodeCacheCapable": e.NodeCacheCapable, "ignorable": e.Ignorable}
	for key, verb := range map[string]string{"filterVerb": e.FilterVerb, "prioritizeVerb": e.PrioritizeVerb,
		"bindVerb": e.BindVerb, "preemptVerb": e.PreemptVerb} {
		if verb != "" {
			m[key] = verb
		}
	}
	if e.PrioritizeVerb != "" {
		w := e.Weight
		if w == 0 {
			w = 1
		}
		m["weight"] = w
	}
	if e.HTTPTimeout > 0 {
		m["httpTimeout"] = e.HTTPTimeout.String()
	}
	if e.TLS != nil {
		m["enableHTTPS"], m["tlsConfig"] = true, e.TLS.config()
	}
	if len(e.ManagedResources) > 0 {
		var rs []any
		for _, r := range e.ManagedResources {
			rs = append(rs, map[string]any{"name": r.Name, "ignoredByScheduler": r.IgnoredByScheduler})
		}
		m["managedResources"] = rs
	}
	return m
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
	cfg := map[string]any{}
	if tmpl != "" {
		t, err := template.New("scheduler-config").Option("missingkey=error").Parse(tmpl)
		if err != nil {
			return nil, fmt.Errorf("parsing Options.SchedulerConfig: %w", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, SchedulerTemplateData{Kubeconfig: kubeconfig}); err != nil {
			return nil, fmt.Errorf("rendering Options.SchedulerConfig: %w", err)
		}
		if err := yaml.Unmarshal(buf.Bytes(), &cfg); err != nil {
			return nil, fmt.Errorf("Options.SchedulerConfig is not YAML: %w", err)
		}
		if cfg == nil {
			cfg = map[string]any{}
		}
	}
	if _, ok := cfg["apiVersion"]; !ok {
		cfg["apiVersion"] = schedulerConfigAPIVersion
	}
	if _, ok := cfg["kind"]; !ok {
		cfg["kind"] = "KubeSchedulerConfiguration"
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	if k, _ := conn["kubeconfig"].(string); k == "" {
		conn["kubeconfig"] = kubeconfig
	}
	if _, ok := conn["qps"]; !ok {
		// The default (50/100) throttles scale tests; the API server is ours.
		conn["qps"] = 1000
		conn["burst"] = 2000
	}
	cfg["clientConnection"] = conn
	le, _ := cfg["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	le["leaderElect"] = false
	cfg["leaderElection"] = le
	if ext != nil {
		exts, _ := cfg["extenders"].([]any)
		cfg["extenders"] = append(exts, ext.config())
	}
	if tlsAll != nil {
		exts, _ := cfg["extenders"].([]any)
		for _, x := range exts {
			if m, ok := x.(map[string]any); ok && m["tlsConfig"] == nil {
				m["enableHTTPS"], m["tlsConfig"] = true, tlsAll.config()
			}
		}
	}
	return yaml.Marshal(cfg)
}
