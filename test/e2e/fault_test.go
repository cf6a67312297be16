//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/test/e2e/harness"
)

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// createAll creates the pods with workers in parallel and returns how many
// were created and the errors of the others.
func createAll(ctx context.Context, workers int, pods []*corev1.Pod, created func(*corev1.Pod)) (int, []error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	n := 0
	work := make(chan *corev1.Pod)
	for range workers {
		wg.Go(func() {
			for p := range work {
				got, err := env.CreatePod(ctx, p)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					n++
					if created != nil {
						created(got)
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	return n, errs
}

// TestExtenderKilledFiveTimes: 1,000 pods (memory shares, whole GPUs and one
// gang of 4 x 2 GPUs) arrive in five waves of 200 while rota-extender is
// killed with SIGKILL five times at random moments and started again each
// time, so the kills land while pods are being placed. At the
// end every pod is bound or pending with Rota's reason, the gang is whole or
// absent, no GPU is over capacity, and the restarted extender's ledger
// matches the API server pod for pod.
func TestExtenderKilledFiveTimes(t *testing.T) {
	const name = "kill5"
	const total = 1000
	const waves = 5
	const kills = 5
	ctx, ns := setup(t, name, "", 3*time.Minute)
	spec := h100
	spec.Count, spec.IslandSize = 8, 4
	nodes(ctx, t, name, "k5", 30, spec) // 240 GPUs

	// The gang first (so that it has room), then 905 shares of 10..40 GiB
	// and 91 one-GPU pods mixed: more than 240 GPUs hold, so some wait.
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, pod(ns, fmt.Sprintf("gang-%d", i), name).Gang("g", 4).GPUs(2).Obj())
	}
	for i := range total - 4 {
		b := pod(ns, fmt.Sprintf("p-%03d", i), name)
		if i%11 == 10 {
			pods = append(pods, b.GPUs(1).Obj())
		} else {
			pods = append(pods, b.Memory(int64(10*(1+i%4))).Obj())
		}
	}

	began := time.Now()
	rng := rand.New(rand.NewPCG(uint64(began.UnixNano()), 5))
	killDone := make(chan []string, 1)
	go func() {
		var log []string
		defer func() { killDone <- log }()
		for k := range kills {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(300+rng.IntN(1500)) * time.Millisecond):
			}
			ps, _ := env.Pods(ctx, ns)
			if err := env.KillExtender(); err != nil {
				t.Errorf("kill %d: %v", k+1, err)
				return
			}
			down := time.Duration(200+rng.IntN(1300)) * time.Millisecond
			time.Sleep(down)
			if err := env.StartExtender(ctx); err != nil {
				t.Errorf("restart %d: %v", k+1, err)
				return
			}
			log = append(log, fmt.Sprintf("#%d at %.1fs (%d created, %d bound) down %.1fs",
				k+1, time.Since(began).Seconds(), len(ps), harness.Bound(ps), down.Seconds()))
		}
	}()
	n := 0
	for w := range waves {
		m, errs := createAll(ctx, 8, pods[w*total/waves:(w+1)*total/waves], nil)
		n += m
		for _, err := range errs {
			t.Errorf("creating: %v", err)
		}
		time.Sleep(time.Second)
	}
	created := time.Since(began)
	killLog := <-killDone
	if len(killLog) != kills {
		t.Fatalf("only %d of %d kills happened: %v", len(killLog), kills, killLog)
	}
	for _, l := range killLog {
		t.Logf("rota-extender killed %s", l)
	}
	lastRestart := time.Now()

	all, pending := settle(ctx, t, ns, n, 4*time.Second)
	rotaReasons(t, pending)
	checkInvariants(ctx, t, nil)
	waitLedgerMatches(ctx, t, ns)
	gangBound := 0
	for _, p := range all {
		if strings.HasPrefix(p.Name, "gang-") && p.Spec.NodeName != "" {
			gangBound++
		}
	}
	t.Logf("%d pods created in %.1fs; %d bound, %d pending with Rota's reason; gang %d/4 bound; settled %.1fs after the last restart",
		n, created.Seconds(), harness.Bound(all), len(pending), gangBound, time.Since(lastRestart).Seconds())
	note(name, "%d kills; %d bound, %d pending with a reason, gang %d/4; ledger = API", kills, harness.Bound(all), len(pending), gangBound)
}

// TestWebhookKilledDuringAdmission: 200 pods of team vision (quota 4 GPUs,
// 40 GiB, no borrowing) are created in parallel while rota-admission is
// killed (SIGKILL) and started again. Creations fail or are denied, but
// the admitted pods never exceed the team's quota, and once the webhook is
// back new pods are judged again.
func TestWebhookKilledDuringAdmission(t *testing.T) {
	const name = "webhook-kill"
	const total = 200
	ctx, ns := setup(t, name, "vision", 2*time.Minute)
	q, err := config.ParseQuota([]byte(quotaDoc))
	if err != nil {
		t.Fatal(err)
	}
	spec := h100
	spec.Count = 8
	nodes(ctx, t, name, "wk", 1, spec)

	var pods []*corev1.Pod
	for i := range total {
		b := pod(ns, fmt.Sprintf("v-%03d", i), name)
		if i%2 == 0 {
			pods = append(pods, b.GPUs(1).Obj())
		} else {
			pods = append(pods, b.Memory(2).Obj())
		}
	}
	var attempts atomic.Int64
	killed := make(chan time.Duration, 1)
	go func() {
		for attempts.Load() < 30 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if err := env.Admission.Kill(); err != nil {
			t.Errorf("killing rota-admission: %v", err)
		}
		began := time.Now()
		time.Sleep(1500 * time.Millisecond)
		if err := env.Admission.Start(); err != nil {
			t.Errorf("starting rota-admission: %v", err)
		}
		killed <- time.Since(began)
	}()
	var admitted []*corev1.Pod
	var denied, failed int
	var wg sync.WaitGroup
	var mu sync.Mutex
	work := make(chan *corev1.Pod)
	for range 8 {
		wg.Go(func() {
			for p := range work {
				attempts.Add(1)
				got, err := env.CreatePod(ctx, p)
				mu.Lock()
				switch {
				case err == nil:
					admitted = append(admitted, got)
				case harness.IsWebhookDenial(err):
					denied++
				default:
					failed++
				}
				mu.Unlock()
				time.Sleep(40 * time.Millisecond) // spread the 200 over the outage
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	down := <-killed
	waitWebhook(ctx, t, ns)
	// A client retries what failed while the webhook was down: the
	// restarted webhook counts the pods admitted before the kill.
	var retried int
	for _, p := range pods {
		if slices.ContainsFunc(admitted, func(a *corev1.Pod) bool { return a.Name == p.Name }) {
			continue
		}
		got, err := env.CreatePod(ctx, p)
		switch {
		case err == nil:
			admitted = append(admitted, got)
			retried++
		case harness.IsWebhookDenial(err):
		default:
			t.Errorf("retrying %s after the webhook came back: %v", p.Name, err)
		}
	}

	var gpus, memGiB int64
	for _, p := range admitted {
		c := p.Spec.Containers[0].Resources.Requests
		g := c[corev1.ResourceName(env.Names.GPU)]
		m := c[corev1.ResourceName(env.Names.GPUMemory)]
		gpus += g.Value()
		memGiB += m.Value()
	}
	t.Logf("%d admitted (%d GPUs, %d GiB; %d of them on retry), %d denied by the webhook, %d failed (webhook down %.1fs)",
		len(admitted), gpus, memGiB, retried, denied, failed, down.Seconds())
	if gpus > 4 || memGiB > 40 {
		t.Errorf("team vision admitted %d GPUs and %d GiB, over its quota of 4 GPUs and 40 GiB", gpus, memGiB)
	}
	if failed == 0 {
		t.Logf("note: no creation failed while the webhook was down (the outage fell between creations)")
	}
	// The webhook judges again: one more GPU pod is denied (the team is full
	// if 4 GPUs were admitted) or admitted within quota.
	if _, err := env.CreatePod(ctx, pod(ns, "after", name).GPUs(1).Obj()); err == nil {
		gpus++
		admitted = append(admitted, nil)
	} else if !harness.IsWebhookDenial(err) {
		t.Errorf("after the restart a creation failed, not denied: %v", err)
	}
	if gpus > 4 {
		t.Errorf("after the restart team vision holds %d GPUs, quota 4", gpus)
	}
	_, pending := settle(ctx, t, ns, len(admitted), 2*time.Second)
	rotaReasons(t, pending)
	checkInvariants(ctx, t, &q)
	note(name, "%d admitted (%d GPUs, %d GiB of 4/40), %d denied, %d failed while down", len(admitted), gpus, memGiB, denied, failed)
}

// TestAPIServerRestartUnderLoad: kube-apiserver and etcd are restarted
// while 120 pods are being created and scheduled. rota-extender and rota-admission
// recover by themselves (their watches reconnect): /readyz answers, the
// webhook is called again, new pods bind, and the ledger matches the API.
func TestAPIServerRestartUnderLoad(t *testing.T) {
	const name = "apiserver-restart"
	const total = 120
	ctx, ns := setup(t, name, "", 3*time.Minute)
	spec := h100
	spec.Count, spec.IslandSize = 8, 4
	nodes(ctx, t, name, "ar", 6, spec) // 48 GPUs

	var pods []*corev1.Pod
	for i := range total {
		b := pod(ns, fmt.Sprintf("p-%03d", i), name)
		if i%6 == 5 {
			pods = append(pods, b.GPUs(1).Obj())
		} else {
			pods = append(pods, b.Memory(int64(10*(1+i%3))).Obj())
		}
	}
	var attempts atomic.Int64
	restarted := make(chan time.Duration, 1)
	go func() {
		for attempts.Load() < 40 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		began := time.Now()
		if err := env.Cluster.RestartStorage(ctx); err != nil {
			t.Errorf("restarting etcd and kube-apiserver: %v", err)
		}
		restarted <- time.Since(began)
	}()
	work := make(chan *corev1.Pod)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lost []*corev1.Pod
	for range 4 {
		wg.Go(func() {
			for p := range work {
				attempts.Add(1)
				if _, err := env.CreatePod(ctx, p); err != nil {
					mu.Lock()
					lost = append(lost, p)
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	took := <-restarted
	t.Logf("etcd and kube-apiserver restarted in %.1fs; %d creations failed meanwhile", took.Seconds(), len(lost))

	// The services recover by themselves.
	waitExtenderReady(ctx, t)
	waitWebhook(ctx, t, ns)
	// Creations that failed during the outage are retried (a client would);
	// one may have been stored although its answer was lost.
	for _, p := range lost {
		if _, err := env.CreatePod(ctx, p); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Errorf("retrying %s: %v", p.Name, err)
		}
	}
	// New pods, created after the restart, bind.
	afterAt := time.Now()
	for i := range 4 {
		create(ctx, t, pod(ns, fmt.Sprintf("after-%d", i), name).Memory(5).Obj())
	}
	waitPods(ctx, t, ns, "the pods created after the restart bound", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if strings.HasPrefix(p.Name, "after-") && p.Spec.NodeName != "" {
				n++
			}
		}
		return n == 4
	})
	after := time.Since(afterAt)
	all, pending := settle(ctx, t, ns, total+4, 3*time.Second)
	rotaReasons(t, pending)
	checkInvariants(ctx, t, nil)
	waitLedgerMatches(ctx, t, ns)
	t.Logf("%d bound, %d pending with a reason; new pods bound %.1fs after creation", harness.Bound(all), len(pending), after.Seconds())
	note(name, "restart %.1fs; %d creations retried; %d bound, %d pending; new pods bound in %.1fs",
		took.Seconds(), len(lost), harness.Bound(all), len(pending), after.Seconds())
}

// TestNodeDeletedWithGangMembers: a running 4-member gang of whole nodes
// loses one node. The node is deleted and its pods with it (force, as the
// pod garbage collector does). The extender forgets the deleted pods: when
// a node of the same name rejoins, its GPUs are free in the ledger; the
// survivors keep their assignments; the member created again (as its Job
// would) is planned alone and binds; the ledger matches the API server.
func TestNodeDeletedWithGangMembers(t *testing.T) {
	const name = "node-delete"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h200
	spec.Count, spec.IslandSize = 8, 4
	spec.Labels = map[string]string{env.Names.Domain + "/leaf": "leaf-nd"}
	nodes(ctx, t, name, "nd", 5, spec)

	member := func(i int) *corev1.Pod {
		return pod(ns, fmt.Sprintf("train-%d", i), name).Gang("train", 4).GPUs(8).Obj()
	}
	for i := range 4 {
		create(ctx, t, member(i))
	}
	create(ctx, t, pod(ns, "share", name).Memory(20).Obj())
	pods := waitPods(ctx, t, ns, "the gang and the share running", func(ps []corev1.Pod) bool {
		return len(ps) == 5 && harness.Running(ps) == 5
	})
	checkInvariants(ctx, t, nil)
	waitLedgerMatches(ctx, t, ns)
	before := map[string]string{}
	victim := ""
	for i := range pods {
		before[pods[i].Name] = fmt.Sprint(assignment(t, &pods[i]).GPUs)
		if pods[i].Name == "train-0" {
			victim = pods[i].Spec.NodeName
		}
	}
	m0, err := extenderMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The node goes; its pods go with it.
	if err := env.Client.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var gone []string
	for _, p := range pods {
		if p.Spec.NodeName == victim {
			if err := env.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, deleteNow); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, p.Name)
		}
	}
	t.Logf("node %s deleted with %v", victim, gone)
	m1 := waitMetric(ctx, t, "the extender to drop the node and its pods", func(m harness.Samples) bool {
		return m[metricNodes] == m0[metricNodes]-1 && m[metricCommitted] == m0[metricCommitted]-float64(len(gone))
	})
	waitLedgerMatches(ctx, t, ns)
	if m1[metricReserved] != 0 {
		t.Errorf("%v allocations reserved after the node was deleted, want 0", m1[metricReserved])
	}
	survivors, err := env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for i := range survivors {
		if got := fmt.Sprint(assignment(t, &survivors[i]).GPUs); got != before[survivors[i].Name] {
			t.Errorf("%s: assignment changed from %s to %s", survivors[i].Name, before[survivors[i].Name], got)
		}
	}

	// The node rejoins under the same name: nothing of the deleted pods is left on it.
	rejoined := spec
	rejoined.Name = victim
	rejoined.Labels = map[string]string{ScenarioLabel: name, env.Names.Domain + "/leaf": "leaf-nd"}
	if _, err := env.AddGPUNodes(ctx, rejoined); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := ledgerState(ctx)
		if err == nil {
			i := slices.IndexFunc(s.Nodes, func(n ui.Node) bool { return n.Name == victim })
			if i >= 0 {
				for _, g := range s.Nodes[i].GPUs {
					if g.UsedMiB != 0 || len(g.Pods) != 0 {
						t.Fatalf("rejoined node %s: GPU %d still holds %v (%d MiB)", victim, g.Index, g.Pods, g.UsedMiB)
					}
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the extender never saw node %s rejoin", victim)
		case <-time.After(250 * time.Millisecond):
		}
	}

	// The lost member comes back (its Job recreates it): it alone is planned and binds.
	for _, g := range gone {
		if strings.HasPrefix(g, "train-") {
			p := member(0)
			p.Name = g
			create(ctx, t, p)
		} else {
			create(ctx, t, pod(ns, g, name).Memory(20).Obj())
		}
	}
	waitPods(ctx, t, ns, "the gang whole again", func(ps []corev1.Pod) bool {
		return len(ps) == 5 && harness.Running(ps) == 5
	})
	checkInvariants(ctx, t, nil)
	waitLedgerMatches(ctx, t, ns)
	waitMetric(ctx, t, "no reservation left", func(m harness.Samples) bool { return m[metricReserved] == 0 })
	note(name, "node with %d pods deleted; ledger dropped them, rejoined node empty, gang whole again", len(gone))
}

// TestGangReservationExpires: rota-extender runs with --gang-ttl=5s. A
// 2-member gang of whole nodes is planned while the API server refuses
// every Binding in the namespace (blockBindings), so every bind fails: no
// member binds, and the gang's reserved slots expire and are released
// (rota_extender_reservations_expired_total grows). Once bindings are
// allowed again the gang binds whole and nothing stays reserved.
func TestGangReservationExpires(t *testing.T) {
	const name = "gang-ttl"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count = 8
	gnodes := nodes(ctx, t, name, "gt", 2, spec)
	for _, n := range gnodes {
		if err := env.Cordon(ctx, n.Spec.Name, true); err != nil {
			t.Fatal(err)
		}
	}

	// The shared extender again, with a short gang TTL; restored afterwards.
	orig := slices.Clone(env.Extender.Args)
	restart := func(args []string) {
		if err := env.Extender.Stop(5 * time.Second); err != nil {
			t.Errorf("stopping rota-extender: %v", err)
		}
		env.Extender.Args = args
		if err := env.StartExtender(context.WithoutCancel(ctx)); err != nil {
			t.Fatalf("starting rota-extender %v: %v", args, err)
		}
	}
	restart(append(slices.Clone(orig), "--gang-ttl=5s"))
	t.Cleanup(func() { restart(orig) })

	for i := range 2 {
		create(ctx, t, pod(ns, fmt.Sprintf("ttl-%d", i), name).Gang("ttl", 2).GPUs(8).Obj())
	}
	failedScheduling(ctx, t, ns, "ttl-0") // no room: the nodes are cordoned
	m0, err := extenderMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Bindings refused, room appears: the gang is planned, its binds fail.
	unblock := blockBindings(ctx, t, ns)
	for _, n := range gnodes {
		if err := env.Cordon(ctx, n.Spec.Name, false); err != nil {
			t.Fatal(err)
		}
	}
	planned := waitMetric(ctx, t, "the gang planned (slots reserved)", func(m harness.Samples) bool {
		return m[metricReserved] >= m0[metricReserved]+1
	})
	plannedAt := time.Now()
	waitMetric(ctx, t, "the reserved slots to expire", func(m harness.Samples) bool {
		return m.Sum(metricExpired) > m0.Sum(metricExpired)
	})
	expiredAfter := time.Since(plannedAt)
	if ps, err := env.Pods(ctx, ns); err == nil && harness.Bound(ps) > 0 {
		t.Errorf("%d gang members bound while bindings were refused\n%s", harness.Bound(ps), describe(ctx, ps))
	}
	checkInvariants(ctx, t, nil)
	t.Logf("gang planned (%v reserved), slots expired %.1fs later", planned[metricReserved], expiredAfter.Seconds())

	// Bindings allowed again: the gang binds whole, nothing stays reserved.
	unblock()
	waitPods(ctx, t, ns, "the gang bound after bindings were allowed again", func(ps []corev1.Pod) bool {
		return harness.Bound(ps) == 2
	})
	m := waitMetric(ctx, t, "no reservation left", func(m harness.Samples) bool { return m[metricReserved] == 0 })
	checkInvariants(ctx, t, nil)
	waitLedgerMatches(ctx, t, ns)
	note(name, "slots expired %.1fs after planning (ttl 5s), %v expiries; gang bound once bindings were allowed again",
		expiredAfter.Seconds(), m.Sum(metricExpired)-m0.Sum(metricExpired))
}
