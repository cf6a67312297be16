//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// rbacScenario is the name of the RBAC check in the closing summary.
const rbacScenario = "rbac-least-privilege"

// rbacAllowlist lists grants of the chart that the scenarios do not use
// but a path they do not reach needs. Keep it short: every entry needs a
// reason, and an entry that the scenarios do use, or that the chart no
// longer grants, fails the check too. (list next to a used watch is
// excused by rule, see listFallback.)
var rbacAllowlist = map[string]map[harness.Permission]string{
	harness.ExtenderServiceAccount: {
		{APIGroup: "scheduling.x-k8s.io", Resource: "podgroups", Verb: "get"}: "PodGroup gangs: the test cluster serves no PodGroup CRD, so the extender never reads one",
	},
	harness.AdmissionServiceAccount: {
		{Resource: "namespaces", Verb: "get"}:                                 "a pod's namespace the informer has not delivered yet (webhook learnNamespace); the scenarios create namespaces well before pods",
		{APIGroup: "coordination.k8s.io", Resource: "leases", Verb: "get"}:    "leader election (chart: admission.replicas > 1); the scenarios run one rota-admission with --leader-elect=false",
		{APIGroup: "coordination.k8s.io", Resource: "leases", Verb: "create"}: "leader election, as leases get",
		{APIGroup: "coordination.k8s.io", Resource: "leases", Verb: "update"}: "leader election, as leases get",
		{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Verb: "get"}:   "Kubernetes' gang API: served only with the GenericWorkload gate, which TestPodGroupGang turns on in a control plane of its own (whose audit log this check does not read)",
		{APIGroup: "kubeflow.org", Resource: "pytorchjobs", Verb: "get"}:      trainingJobRead,
		{APIGroup: "kubeflow.org", Resource: "tfjobs", Verb: "get"}:           trainingJobRead,
		{APIGroup: "kubeflow.org", Resource: "xgboostjobs", Verb: "get"}:      trainingJobRead,
		{APIGroup: "kubeflow.org", Resource: "jaxjobs", Verb: "get"}:          trainingJobRead,
		{APIGroup: "kubeflow.org", Resource: "paddlejobs", Verb: "get"}:       trainingJobRead,
		{APIGroup: "kubeflow.org", Resource: "mpijobs", Verb: "get"}:          trainingJobRead,
	},
}

// rbacSometimes lists grants that only some runs of the scenarios use: the
// path needs a race a fault may or may not hit. Unused, they are excused as
// rbacAllowlist's entries are; used, they are not stale.
var rbacSometimes = map[string]map[harness.Permission]string{
	// A pod the kubelet admits before the plugin's informer has delivered
	// it, after a broken watch (an API server restart); deviceplugin/handoff's
	// tests cover it.
	harness.DevicePluginServiceAccount: {
		{Resource: "pods", Verb: "get"}: "a pod the kubelet admits before the plugin's informer has it (after a broken watch; some runs of the fault scenarios only)",
	},
}

// trainingJobRead explains rota-admission's grants on training operators'
// jobs.
const trainingJobRead = "a training operator's job that controls a GPU pod (its gang): the test cluster serves no kubeflow.org API; admission/webhook's and pkg/podreq's tests cover the reads"

// listFallback: a granted list on a resource whose watch was used is not
// over-privilege. client-go's informers stream their initial list over the
// watch (WatchListClient), so the audit log shows no list, but they fall
// back to a plain list when the API server refuses or does not support a
// streaming watch-list (an older or differently configured server).
const listFallback = "informer's fallback when a streaming watch-list is refused (watch used)"

// rbacWarmup is how long after an API server start is ready that a 403 on
// a request the chart's grants cover counts as the RBAC authorizer still
// reading its roles (clients reconnect before /readyz answers), not as
// missing grants.
const rbacWarmup = 5 * time.Second

// checkRBAC compares, for each ServiceAccount that Rota's processes ran as,
// the requests the API server's audit log recorded for it during the
// scenarios with what the chart grants it, and prints a table per
// ServiceAccount. It returns the failures:
//
//   - a 403 answered to a Rota identity: the chart grants too little;
//   - a granted permission no allowed request used, unless rbacAllowlist
//     explains it: the chart grants too much. Only enforced when every
//     scenario ran (no -run, -skip or -short), since a partial run leaves
//     permissions unused;
//   - a stale allowlist entry.
//
// Identities that no process ran as (rota-scheduler: the test cluster's
// kube-scheduler is system:kube-scheduler) are listed but not checked.
func checkRBAC(full bool) []string {
	if env.RBAC == nil {
		return []string{"the harness ran Rota's processes with admin credentials; nothing to compare"}
	}
	files, err := env.Cluster.AuditLogFiles()
	if err != nil || len(files) == 0 {
		return []string{fmt.Sprintf("no audit log (files %v): %v", files, err)}
	}
	reqs, err := harness.ReadAuditLog(files...)
	if err != nil {
		return []string{err.Error()}
	}
	runs := env.Cluster.APIServerRuns()
	var failures []string
	fail := func(format string, a ...any) { failures = append(failures, fmt.Sprintf(format, a...)) }
	checked := map[string]bool{}
	totalGranted, totalUsed, totalExcused := 0, 0, 0
	for _, bin := range slices.Sorted(maps.Keys(env.Users)) {
		user := env.Users[bin]
		sa := user[strings.LastIndex(user, ":")+1:]
		checked[sa] = true
		grants := env.RBAC.Grants(harness.SystemNamespace, sa)
		warmup := func(a harness.AuditRequest) bool {
			if !slices.ContainsFunc(grants, func(g harness.Grant) bool { return g.Covers(a) }) {
				return false
			}
			return slices.ContainsFunc(runs, func(r cluster.APIServerRun) bool {
				return !a.Received.Before(r.Started) && a.Received.Before(r.Ready.Add(rbacWarmup))
			})
		}
		rep := harness.Usage(user, grants, reqs, warmup)
		unused := harness.UnusedGrants(grants, reqs, user)
		allow := maps.Clone(rbacAllowlist[sa])
		if allow == nil {
			allow = map[harness.Permission]string{}
		}
		maps.Copy(allow, rbacSometimes[sa])
		for _, r := range rep.Rows {
			w := r.Permission
			w.Verb = "watch"
			if r.Verb == "list" && slices.ContainsFunc(rep.Rows, func(o harness.PermissionUse) bool { return o.Permission == w && o.Used() }) {
				allow[r.Permission] = listFallback
			}
		}
		isUnused := func(p harness.Permission) bool {
			return slices.ContainsFunc(unused, func(g harness.Grant) bool {
				return g.APIGroup == p.APIGroup && g.Resource == p.Resource && g.Verb == p.Verb
			})
		}

		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  PERMISSION\tGRANTED BY\tREQUESTS\t403\tNAMESPACES\tVERDICT\n")
		warm := 0
		granted, used, excused := 0, 0, 0
		for _, r := range rep.Rows {
			var by []string
			for _, g := range r.Grants {
				by = append(by, strings.TrimPrefix(strings.TrimPrefix(g.Role, "ClusterRole/"), "Role/")+namesSuffix(g))
			}
			verdict := "ok"
			switch {
			case r.Forbidden > 0:
				verdict = "FORBIDDEN (chart grants too little)"
				fail("%s: %d requests %s forbidden (403): the chart does not grant it", sa, r.Forbidden, r.Permission)
			case len(r.Grants) == 0 || r.Uncovered > 0:
				verdict = "allowed by the built-in policy, not the chart"
			case isUnused(r.Permission) && allow[r.Permission] != "":
				verdict = "unused, allowlisted: " + allow[r.Permission]
				excused++
			case isUnused(r.Permission):
				verdict = "UNUSED (chart grants too much)"
				if full {
					fail("%s: %s granted by the chart but never used by the scenarios", sa, r.Permission)
				}
			}
			if len(r.Grants) > 0 {
				granted++
				if r.Used() {
					used++
				}
			}
			if allow[r.Permission] != "" && allow[r.Permission] != listFallback && rbacSometimes[sa][r.Permission] == "" && !isUnused(r.Permission) {
				if len(r.Grants) == 0 {
					fail("%s: allowlisted %s is not granted by the chart any more: drop it from rbacAllowlist", sa, r.Permission)
				} else {
					fail("%s: allowlisted %s is used by the scenarios: drop it from rbacAllowlist", sa, r.Permission)
				}
			}
			grantedBy := strings.Join(by, ",")
			if grantedBy == "" {
				grantedBy = "-"
			}
			ns := strings.Join(r.Namespaces, ",")
			if ns == "" || (len(r.Namespaces) > 3) {
				ns = fmt.Sprintf("(%d)", len(r.Namespaces))
			}
			if r.Transient > 0 {
				warm += r.Transient
				verdict += fmt.Sprintf(" (+%d 403 during an API server restart)", r.Transient)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\n", r.Permission, grantedBy, r.Requests, r.Forbidden+r.Transient, ns, verdict)
		}
		for p := range allow {
			if allow[p] == listFallback {
				continue
			}
			if !slices.ContainsFunc(rep.Rows, func(r harness.PermissionUse) bool { return r.Permission == p }) {
				fail("%s: allowlisted %s is not granted by the chart any more: drop it from rbacAllowlist", sa, p)
			}
		}
		tw.Flush()
		totalGranted += granted
		totalUsed += used
		totalExcused += excused
		extra := ""
		if warm > 0 {
			extra = fmt.Sprintf("; %d requests refused while a restarted API server's authorizer warmed up (covered by the grants, not failed)", warm)
		}
		fmt.Printf("RBAC %s as %s: %d of %d granted permissions used, %d unused with a reason%s\n%s",
			bin, user, used, granted, excused, extra, b.String())
		if len(rep.NonResource) > 0 {
			var paths []string
			for _, p := range slices.Sorted(maps.Keys(rep.NonResource)) {
				paths = append(paths, fmt.Sprintf("%s (%d)", p, rep.NonResource[p]))
			}
			fmt.Printf("  non-resource requests (built-in system:discovery): %s\n", strings.Join(paths, ", "))
		}
		for _, g := range rep.External {
			fmt.Printf("  bound to %s, which the chart does not define (not compared)\n", g.Role)
		}
	}
	for _, sa := range env.RBAC.ServiceAccounts {
		if !checked[sa.Name] {
			var roles []string
			for _, g := range env.RBAC.Grants(sa.Namespace, sa.Name) {
				if !slices.Contains(roles, g.Role) {
					roles = append(roles, g.Role)
				}
			}
			fmt.Printf("RBAC %s/%s: no process of the scenarios runs as it (not checked); roles %s\n",
				sa.Namespace, sa.Name, strings.Join(roles, ", "))
		}
	}
	fmt.Printf("RBAC: %d of %d granted permissions used by the scenarios, %d unused with a reason, %d requests audited\n",
		totalUsed, totalGranted, totalExcused, len(reqs))
	note(rbacScenario, "%d of %d granted permissions used, %d unused with a reason, %d failures",
		totalUsed, totalGranted, totalExcused, len(failures))
	if !full {
		fmt.Println("RBAC: partial run (-run, -skip or -short): unused grants are reported, not failed")
	}
	return failures
}

func namesSuffix(g harness.Grant) string {
	if len(g.ResourceNames) == 0 {
		return ""
	}
	return "[" + strings.Join(g.ResourceNames, ",") + "]"
}

// fullRun reports whether m.Run ran every scenario.
func fullRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil {
			if v := f.Value.String(); v != "" && !(name == "test.run" && (v == "." || v == ".*")) {
				return false
			}
		}
	}
	return !testing.Short()
}

// runRBACCheck runs checkRBAC after the scenarios and records it in the
// summary; it returns false when it failed.
func runRBACCheck() bool {
	fmt.Println("=== RUN   RBAC (used vs granted per ServiceAccount, from the API server's audit log)")
	failures := checkRBAC(fullRun())
	resultsMu.Lock()
	note := notes[rbacScenario]
	resultsMu.Unlock()
	return reportCheck("RBAC", rbacScenario, note, failures)
}

// reportCheck records a post-suite check in the summary and prints its
// verdict the way go test prints a test's; it returns false when it failed.
func reportCheck(label, scenario, note string, failures []string) bool {
	resultsMu.Lock()
	results = append(results, result{name: scenario, passed: len(failures) == 0, note: note})
	resultsMu.Unlock()
	if len(failures) > 0 {
		fmt.Println("--- FAIL: " + label)
		for _, f := range failures {
			fmt.Println("    " + f)
		}
		return false
	}
	fmt.Println("--- PASS: " + label)
	return true
}
