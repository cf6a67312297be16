//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// extenderMetrics scrapes rota-extender's /metrics.
func extenderMetrics(ctx context.Context) (harness.Samples, error) { return env.ExtenderMetrics(ctx) }

const (
	metricReserved  = `rota_extender_allocations{state="reserved"}`
	metricCommitted = `rota_extender_allocations{state="committed"}`
	metricExpired   = `rota_extender_reservations_expired_total`
	metricNodes     = `rota_extender_nodes`
)

// waitMetric polls the extender's metrics until cond holds.
func waitMetric(ctx context.Context, t *testing.T, what string, cond func(harness.Samples) bool) harness.Samples {
	t.Helper()
	var last harness.Samples
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		m, err := extenderMetrics(ctx)
		lastErr = err
		if err != nil {
			return false, nil
		}
		last = m
		return cond(m), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last scrape error %v; reserved=%v committed=%v expired=%v)",
			what, err, lastErr, last[metricReserved], last[metricCommitted], last.Sum(metricExpired))
	}
	return last
}

// ledgerState reads the extender's view of its ledger (the status page's JSON).
func ledgerState(ctx context.Context) (*ui.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.ExtenderURL+ui.PathState, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", ui.PathState, resp.Status)
	}
	var s ui.State
	return &s, json.NewDecoder(resp.Body).Decode(&s)
}

// ledgerPods lists, for the namespace's pods in the extender's ledger,
// "ns/name" -> node/state.
func ledgerPods(s *ui.State, ns string) map[string]string {
	out := map[string]string{}
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			for _, p := range g.Pods {
				if strings.HasPrefix(p.Pod, ns+"/") {
					out[p.Pod] = n.Name + "/" + p.State
				}
			}
		}
	}
	return out
}

// ledgerMatchesAPI compares the extender's ledger with the API server for
// one namespace: every bound pod with an assignment is committed on its
// node, and the ledger holds nothing else (no deleted pod, no pod on
// another node). It returns the differences.
func ledgerMatchesAPI(s *ui.State, pods []corev1.Pod, ns string) []string {
	led := ledgerPods(s, ns)
	var diffs []string
	for i := range pods {
		p := &pods[i]
		key := ns + "/" + p.Name
		got, ok := led[key]
		delete(led, key)
		a, _ := env.Assignment(p)
		switch {
		case p.Spec.NodeName == "" || a == nil:
			// Pending pods may hold a gang slot (reserved); nothing else.
			if ok && !strings.HasSuffix(got, "/reserved") {
				diffs = append(diffs, fmt.Sprintf("%s is pending but the ledger holds %s", key, got))
			}
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s is bound to %s with an assignment but not in the ledger", key, p.Spec.NodeName))
		case got != p.Spec.NodeName+"/committed":
			diffs = append(diffs, fmt.Sprintf("%s is bound to %s but the ledger holds %s", key, p.Spec.NodeName, got))
		}
	}
	for k, v := range led {
		diffs = append(diffs, fmt.Sprintf("the ledger holds %s (%s), which is not a pod of the API server", k, v))
	}
	return diffs
}

// waitLedgerMatches waits until the extender's ledger agrees with the API
// server about the namespace's pods.
func waitLedgerMatches(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var diffs []string
	var err, perr error
	werr := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var s *ui.State
		var pods []corev1.Pod
		s, err = ledgerState(ctx)
		pods, perr = env.Pods(ctx, ns)
		if err != nil || perr != nil {
			return false, nil
		}
		diffs = ledgerMatchesAPI(s, pods, ns)
		return len(diffs) == 0, nil
	})
	if werr != nil {
		t.Fatalf("the extender's ledger disagrees with the API server (%v; %v %v):\n  %s", werr, err, perr, strings.Join(diffs, "\n  "))
	}
}

// settle waits until the namespace holds total pods, each bound or pending
// with a FailedScheduling reason from Rota (not the scheduler's error about
// an unreachable extender), and the bound count has not changed for quiet.
// It returns the pods and the pending reasons by pod name.
func settle(ctx context.Context, t *testing.T, ns string, total int, quiet time.Duration) ([]corev1.Pod, map[string]string) {
	t.Helper()
	var lastBound = -1
	var stableSince time.Time
	var pending map[string]string
	pods := waitPods(ctx, t, ns, "every pod bound or pending with a reason", func(ps []corev1.Pod) bool {
		if len(ps) != total {
			return false
		}
		b := harness.Bound(ps)
		if b != lastBound {
			lastBound, stableSince = b, time.Now()
			return false
		}
		if time.Since(stableSince) < quiet {
			return false
		}
		if b == total {
			pending = map[string]string{}
			return true
		}
		evs, err := env.NamespaceEvents(ctx, ns, "FailedScheduling")
		if err != nil {
			return false
		}
		pending = map[string]string{}
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				continue
			}
			e := evs[p.Name]
			if len(e) == 0 {
				return false
			}
			msg := e[len(e)-1].Message
			if extenderDown(msg) {
				return false // the last word is still "extender down"; wait for a retry
			}
			if strings.Contains(msg, "failed calling webhook") {
				return false // a bind met the webhook down; the scheduler retries it
			}
			pending[p.Name] = msg
		}
		return true
	})
	return pods, pending
}

// extenderDown reports whether a FailedScheduling message is the
// scheduler's word that it could not reach the extender (or that the
// extender was still rebuilding, or a restarted one still waited for the
// lease of its previous run to lapse), a transient state, not a reason.
func extenderDown(msg string) bool {
	return strings.Contains(msg, env.VerbsURL) || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "is starting") || (strings.Contains(msg, "extender") && strings.Contains(msg, "error")) ||
		strings.Contains(msg, "is standby; leader is") || strings.Contains(msg, "is taking over the lease")
}

// rotaReasons fails the test for pending reasons that are not Rota's and
// logs them grouped.
func rotaReasons(t *testing.T, pending map[string]string) {
	t.Helper()
	reasons := map[string]int{}
	for _, msg := range pending {
		reasons[msg]++
	}
	for msg, n := range reasons {
		t.Logf("%d pending: %s", n, msg)
		if !strings.Contains(msg, "GiB") && !strings.Contains(msg, "GPU") && !strings.Contains(msg, "gang") {
			t.Errorf("%d pods pending with a reason that is not Rota's: %q", n, msg)
		}
	}
}

// waitWebhook waits until the API server calls rota-admission again: a
// dry-run pod with an invalid GPU request is denied by the webhook.
func waitWebhook(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	bad := harness.Pod(ns, "webhook-probe").GPUs(1).Memory(1).Obj()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = env.Client.CoreV1().Pods(ns).Create(ctx, bad, dryRun)
		return harness.IsWebhookDenial(last), nil
	})
	if err != nil {
		t.Fatalf("rota-admission is not called again: %v (last: %v)\n%s", err, last, env.Admission.LogTail(20))
	}
}

// waitExtenderReady polls rota-extender's /readyz (without restarting it).
func waitExtenderReady(ctx context.Context, t *testing.T) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.ExtenderURL+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, nil
			}
			err = fmt.Errorf("/readyz: %s", resp.Status)
		}
		last = err
		return false, nil
	})
	if err != nil {
		t.Fatalf("rota-extender not ready: %v (last: %v)\n%s", err, last, env.Extender.LogTail(20))
	}
}
