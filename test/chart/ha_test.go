//go:build e2e

package chart

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/test/cluster"
)

// extenderHA is what the chart renders for the extender's active-standby
// pair.
type extenderHA struct {
	replicas  int64
	strategy  string
	selector  map[string]string
	args, env []string
	pdb       *unstructured.Unstructured
	role      *unstructured.Unstructured
}

func renderHA(t *testing.T, sets []string) extenderHA {
	t.Helper()
	var h extenderHA
	for _, o := range decode(t, render(t, sets)) {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "rota-extender":
			h.replicas = num(o, "spec", "replicas")
			h.strategy, _, _ = unstructured.NestedString(o.Object, "spec", "strategy", "type")
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			for _, a := range c["args"].([]any) {
				h.args = append(h.args, a.(string))
			}
			if env, ok := c["env"].([]any); ok {
				for _, e := range env {
					m := e.(map[string]any)
					path, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
					h.env = append(h.env, m["name"].(string)+"="+path)
				}
			}
		case o.GetKind() == "Service" && o.GetName() == "rota-extender":
			h.selector, _, _ = unstructured.NestedStringMap(o.Object, "spec", "selector")
		case o.GetKind() == "PodDisruptionBudget" && o.GetName() == "rota-extender":
			h.pdb = o
		case o.GetKind() == "Role" && o.GetName() == "rota-extender-leader-election":
			h.role = o
		}
	}
	if h.args == nil || h.selector == nil {
		t.Fatalf("%v: no extender Deployment or Service rendered", sets)
	}
	return h
}

// num reads a number field (decoded from YAML as an int64 or a float64).
func num(o *unstructured.Unstructured, fields ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(o.Object, fields...)
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}

func (h extenderHA) arg(name string) string {
	for _, a := range h.args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// By default the extender is an active-standby pair: two replicas, leader
// election on the release namespace's Lease with figures the extender
// accepts, the Service routing to the leader's label only, rollouts that
// surge a standby, a budget of one unavailable pod, and a Role that grants
// the Lease and nothing else.
func TestChartExtenderActiveStandby(t *testing.T) {
	h := renderHA(t, nil)
	if h.replicas != 2 || h.strategy != "RollingUpdate" {
		t.Errorf("replicas %d, strategy %s; want 2, RollingUpdate", h.replicas, h.strategy)
	}
	if h.selector["example.com/extender-leader"] != "true" || h.selector["app.kubernetes.io/component"] != "extender" {
		t.Errorf("Service selector %v does not select the leader", h.selector)
	}
	if !slices.Contains(h.env, "POD_NAME=metadata.name") || !slices.Contains(h.env, "POD_NAMESPACE=metadata.namespace") {
		t.Errorf("env %v lacks the downward API's POD_NAME and POD_NAMESPACE", h.env)
	}
	cfg := extconfig.Default()
	le := &cfg.LeaderElection
	le.Enabled = h.arg("leader-elect") == "true"
	le.Namespace, le.Name = h.arg("leader-elect-resource-namespace"), h.arg("leader-elect-resource-name")
	le.PodName, le.PodNamespace = "rota-extender-0", "rota-system"
	for flag, d := range map[string]*time.Duration{"leader-elect-lease-duration": &le.LeaseDuration,
		"leader-elect-renew-deadline": &le.RenewDeadline, "leader-elect-retry-period": &le.RetryPeriod} {
		v, err := time.ParseDuration(h.arg(flag))
		if err != nil {
			t.Fatalf("--%s: %v", flag, err)
		}
		*d = v
	}
	if !le.Enabled || le.Namespace != "rota-system" || le.Name != "rota-extender" {
		t.Errorf("leader election %+v: want on, Lease rota-system/rota-extender", *le)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the extender refuses the chart's leader election: %v", err)
	}
	if want := extconfig.DefaultLeaderElection(); le.LeaseDuration != want.LeaseDuration || le.RenewDeadline != want.RenewDeadline ||
		le.RetryPeriod != want.RetryPeriod {
		t.Errorf("chart's figures %v/%v/%v differ from the extender's defaults %v/%v/%v (README quotes both as one)",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod, want.LeaseDuration, want.RenewDeadline, want.RetryPeriod)
	}
	if h.pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if v := num(h.pdb, "spec", "maxUnavailable"); v != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %d, want 1", v)
	}
	if h.role == nil || h.role.GetNamespace() != "rota-system" {
		t.Fatalf("no leader-election Role in the release namespace: %v", h.role)
	}
	rules, _, _ := unstructured.NestedSlice(h.role.Object, "rules")
	var got []string
	for _, r := range rules {
		m := r.(map[string]any)
		names, _, _ := unstructured.NestedStringSlice(m, "resourceNames")
		res, _, _ := unstructured.NestedStringSlice(m, "resources")
		verbs, _, _ := unstructured.NestedStringSlice(m, "verbs")
		got = append(got, strings.Join(res, ",")+"["+strings.Join(names, ",")+"]:"+strings.Join(verbs, ","))
	}
	if want := []string{"leases[]:create", "leases[rota-extender]:get,update"}; !slices.Equal(got, want) {
		t.Errorf("leader-election Role rules %v, want %v", got, want)
	}
}

// One replica may run without leader election (then it is replaced, never
// run beside another, and the Service selects it without the label); two
// may not: the chart refuses to render two ledgers.
func TestChartExtenderRefusesTwoLedgers(t *testing.T) {
	h := renderHA(t, []string{"extender.leaderElection.enabled=false", "extender.replicas=1"})
	if h.strategy != "Recreate" || h.arg("leader-elect") != "false" || h.pdb != nil || h.role != nil {
		t.Errorf("one replica without election: strategy %s, --leader-elect=%s, PDB %v, Role %v", h.strategy, h.arg("leader-elect"), h.pdb != nil, h.role != nil)
	}
	if _, ok := h.selector["example.com/extender-leader"]; ok {
		t.Errorf("without election the Service still selects the leader label: %v", h.selector)
	}

	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), "template", "rota", "charts/rota", "--namespace", "rota-system",
		"--kube-version", "1.37.2", "--set", "extender.leaderElection.enabled=false", "--set", "extender.replicas=2")
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "hand out the same GPUs twice") {
		t.Errorf("two replicas without leader election rendered (err %v): %s", err, stderr.String())
	}
}
