//go:build e2e

// Package e2e runs Rota's scenarios against a real control plane: etcd,
// kube-apiserver and kube-scheduler from .cache/k8s/bin, the rota-extender
// and rota-admission binaries from bin/, and simulated GPU nodes, some with
// a real rota-device-plugin behind a kubelet stand-in (see test/e2e/harness).
// Every scenario asserts on API objects, events and Allocate responses.
//
// One control plane serves all scenarios; each works in its own namespace
// and on its own nodes (label rota.test/scenario, matched by the pods'
// node selector), so scenarios do not see each other's capacity.
//
// Run with: go test -tags e2e ./test/e2e/ (after make build k8s-tools).
// Missing binaries fail the run; set ROTA_E2E_SKIP=1 to skip it instead.
// Set ROTA_KEEP_CLUSTER=1 to keep the folder with every log.
//
// Rota's processes run as the chart's ServiceAccounts (RBAC from
// deploy/rota.yaml); after the scenarios, an RBAC check compares what each
// one used (the API server's audit log) with what the chart grants it
// (rbac_test.go).
package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// ScenarioLabel marks the nodes of one scenario.
const ScenarioLabel = "rota.test/scenario"

var env *harness.Env

// quotaDoc is the quota of the shared control plane: configured teams for
// the quota scenarios (kubectl is the kubectl-rota scenario's own, so other
// scenarios' pods of vision cannot change what it reads; queue is the
// queue admission scenarios'); every other
// namespace is an unknown team, which is unlimited.
const quotaDoc = `teams:
  vision:
    gpus: 4
    gpuMemoryGiB: 40
    borrow: {gpus: 0, gpuMemoryGiB: 0}
  kubectl:
    gpus: 4
    borrow: {gpus: 0}
  nlp:
    gpus: 2
    borrow: {gpus: 2}
  queue:
    gpus: 4
    borrow: {gpus: 2}
    maxQueuedPods: 3
  qorder:
    gpus: 2
  qjob:
    gpus: 2
  qsusp:
    gpus: 2
  qwave:
    gpus: 2
  qjsusp:
    gpus: 4
  qskilljs:
    gpus: 8
  qskillj:
    gpus: 8
  qmodel:
    models: {"Rota Model A GPU": {gpus: 2}}
  qui:
    gpus: 1
  qrecords:
    gpus: 2
    maxQueuedPods: 20
  qfair-a:
    models: {"Rota Queue GPU": {gpus: 0, borrow: {gpus: 8}}}
  qfair-b:
    models: {"Rota Queue GPU": {gpus: 0, borrow: {gpus: 8}}}
  qkill:
    gpus: 16
  qreclaim-g:
    models: {"Rota Reclaim GPU": {gpus: 4}}
  qreclaim-b:
    models: {"Rota Reclaim GPU": {gpus: 0, borrow: {gpus: 4}}}
  qlost-g:
    models: {"Rota Lost GPU": {gpus: 4}}
  qlost-b:
    models: {"Rota Lost GPU": {gpus: 0, borrow: {gpus: 4}}}
  qyoung-g:
    models: {"Rota Young GPU": {gpus: 4}}
  qyoung-b:
    minRuntime: 1h
    models: {"Rota Young GPU": {gpus: 0, borrow: {gpus: 4}}}
  qrsusp-g:
    models: {"Rota SJob GPU": {gpus: 4}}
  qrsusp-b:
    models: {"Rota SJob GPU": {gpus: 0, borrow: {gpus: 4}}}
  qrjs-g:
    models: {"Rota SJS GPU": {gpus: 4}}
  qrjs-b:
    models: {"Rota SJS GPU": {gpus: 0, borrow: {gpus: 4}}}
  qpdb-g:
    models: {"Rota PDB GPU": {gpus: 4}}
  qpdb-b:
    models: {"Rota PDB GPU": {gpus: 0, borrow: {gpus: 4}}}
  qguard-a:
    models: {"Rota Guard GPU": {gpus: 2, borrow: {gpus: 2}}}
  qguard-u:
    models: {"Rota Guard GPU": {gpus: 3}}
  qdeadline:
    gpus: 1
  qdefrag:
    defrag: true
    models: {"Rota Defrag GPU": {gpus: 4}}
  qtree-p1: {gpus: 1, borrow: {gpus: 10}, group: qtree-t}
  qtree-q1: {borrow: {gpus: 10}, group: qtree-u}
  qtree-p2: {gpus: 1, group: qtree-t}
  qpool-canary: {gpus: 8}
  qlend-t: {borrow: {gpus: 10}, group: qlend-g}
  qlend-x: {borrow: {gpus: 10}, group: qlend-h}
  qpool-rest: {gpus: 8}
# The nested-groups scenario's tree: department qtree-dept (pool 2, never
# borrowing from the shared pool) holds qtree-t (pool 2) and qtree-u.
groups:
  qtree-dept: {gpus: 2, borrow: {gpus: 0}}
  qtree-t: {parent: qtree-dept, gpus: 2}
  qtree-u: {parent: qtree-dept}
# The lent-pool scenario's tree: qlend-g's pool (2) is lent to its
# sibling qlend-h while unused; nothing comes from above qlend-dept.
  qlend-dept: {gpus: 0, borrow: {gpus: 0}}
  qlend-g: {parent: qlend-dept, gpus: 2, lend: {gpus: 2}}
  qlend-h: {parent: qlend-dept}
sharedPool: {gpus: 2, gpuMemoryGiB: 0}
# The queue scenarios' own pools (per GPU model), apart from the shared one.
modelPools:
  "Rota Queue GPU": {gpus: 8}
  "Rota Reclaim GPU": {gpus: 4}
  "Rota Lost GPU": {gpus: 4}
  "Rota Young GPU": {gpus: 4}
  "Rota PDB GPU": {gpus: 4}
  "Rota SJob GPU": {gpus: 4}
  "Rota SJS GPU": {gpus: 4}
  "Rota Guard GPU": {gpus: 2}
  "Rota Defrag GPU": {gpus: 4}
unknownTeams: unlimited
# The node-pool scenario's canary: team qpool-canary's pods go to the nodes
# labelled <domain>/node-pool=qpool, placed there by spread.
nodePools:
  qpool: {owner: qpool-canary, policy: spread}
`

type result struct {
	name   string
	passed bool
	took   time.Duration
	note   string
}

var (
	resultsMu sync.Mutex
	results   []result
	notes     = map[string]string{}
)

// scenario registers t as a named scenario for the closing summary.
func scenario(t *testing.T, name string) {
	t.Helper()
	began := time.Now()
	t.Cleanup(func() {
		resultsMu.Lock()
		defer resultsMu.Unlock()
		results = append(results, result{name: name, passed: !t.Failed() && !t.Skipped(), took: time.Since(began), note: notes[name]})
	})
}

// note attaches a measurement to a scenario's summary line.
func note(name, format string, args ...any) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	notes[name] = fmt.Sprintf(format, args...)
}

func TestMain(m *testing.M) {
	if err := harness.CheckBinaries(); err != nil {
		if os.Getenv("ROTA_E2E_SKIP") == "1" {
			fmt.Printf("SKIP: e2e scenarios not run because ROTA_E2E_SKIP=1 is set and %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: e2e scenarios cannot run: %v\n(set ROTA_E2E_SKIP=1 to skip them explicitly)\n", err)
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	var err error
	// Rota's processes run as the chart's ServiceAccounts; the audit log
	// records their requests for the RBAC check after the scenarios.
	env, err = harness.Start(ctx, harness.Options{Quota: quotaDoc, AuditLog: true,
		// Gangs of 16 GPUs are held for at once (TestBackfill*); the
		// other scenarios' workloads are smaller.
		// Holds lapse after 20 s (5 minutes by default), so that a narrowed
		// pod no candidate takes is requeued within the scenario
		// (TestQueueNarrowing); the others bind within seconds of admission.
		ExtenderArgs: []string{fmt.Sprintf("--reserve-large-gpus=%d", reserveLargeGPUs), "--admission-hold-ttl=20s"},
		Logf:         func(f string, a ...any) { fmt.Printf("e2e: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the control plane with Rota: %v\n", err)
		return 1
	}
	fmt.Printf("e2e: control plane with Rota ready in %s (folder %s)\n", time.Since(began).Round(100*time.Millisecond), env.Dir)
	code := m.Run()
	// Last, once every scenario has made its requests: does the chart grant
	// each ServiceAccount what it used, and no more (rbac_test.go)?
	if !runRBACCheck() && code == 0 {
		code = 1
	}
	if !runSecretsCheck() && code == 0 {
		code = 1
	}
	if code != 0 {
		fmt.Println(env.LogTails(40))
	}
	keep := code != 0 || os.Getenv("ROTA_KEEP_CLUSTER") == "1"
	if stopErr := env.Stop(); stopErr != nil {
		fmt.Fprintf(os.Stderr, "stopping: %v\n", stopErr)
	}
	if keep {
		fmt.Printf("e2e: folder kept: %s\n", env.Dir)
	} else {
		os.RemoveAll(env.Dir)
	}
	summary(env.Version, time.Since(began))
	return code
}

func summary(version string, took time.Duration) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	var passed, failed []string
	for _, r := range results {
		s := fmt.Sprintf("%s %.1fs", r.name, r.took.Seconds())
		if r.note != "" {
			s += " (" + r.note + ")"
		}
		if r.passed {
			passed = append(passed, s)
		} else {
			failed = append(failed, s)
		}
	}
	slices.Sort(failed)
	line := fmt.Sprintf("SUMMARY: %d scenarios passed against Kubernetes %s (etcd + kube-apiserver + kube-scheduler on 127.0.0.1, real rota-extender, rota-admission, rota-device-plugin) in %s",
		len(passed), version, took.Round(time.Second))
	if len(failed) > 0 {
		line += fmt.Sprintf("; %d FAILED: %s", len(failed), strings.Join(failed, ", "))
	}
	fmt.Println(line)
	for _, p := range passed {
		fmt.Println("  passed: " + p)
	}
}
