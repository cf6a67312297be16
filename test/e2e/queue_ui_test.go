//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueUI: the status page shows each team's queue and admitted use,
// from the queue controller's view (the /debug/queue document): team qui
// (quota 1 GPU) with its running pod's GPU admitted and its two queued pods
// in queue order with where each stands; the waiting list gives a queued
// pod its queue position as the reason. Rendered by headless Chromium.
func TestQueueUI(t *testing.T) {
	const name = "qui"
	bin := chromiumBin()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("headless Chromium is needed for the status page test and %s is missing: run hack/chromium-deps.sh (or set ROTA_CHROMIUM)", bin)
	}
	ctx, ns := setup(t, name, "qui", 3*time.Minute) // qui: 1 GPU, no borrowing
	queueing(ctx, t)
	nodes(ctx, t, name, "qui", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 2})
	create(ctx, t, pod(ns, "p-0", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "p-0 running", func(p []corev1.Pod) bool { return running(p, "p-0") })
	create(ctx, t, pod(ns, "p-1", name).GPUs(1).Obj())
	time.Sleep(1100 * time.Millisecond) // p-1 is older than p-2 by a clear margin
	create(ctx, t, pod(ns, "p-2", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "p-1 and p-2 queued with their positions", func(p []corev1.Pod) bool {
		a, b := byName(p, "p-1"), byName(p, "p-2")
		return a != nil && b != nil && queuedCondition(a) != nil && queuedCondition(b) != nil &&
			strings.HasPrefix(queuedCondition(b).Message, "position 2 of 2")
	})

	dom := chromium(ctx, t, t.TempDir(), "--dump-dom", env.ExtenderURL+"/ui")
	team := regexp.MustCompile(`(?s)<div class="team" data-team="qui">.*?</table></div>`).FindString(dom)
	if team == "" {
		t.Fatalf("rendered page has no team queue for qui:\n%s", dom)
	}
	for _, want := range []string{"1 GPU admitted", "2 queued"} {
		if !strings.Contains(team, want) {
			t.Errorf("team qui's block does not say %q: %s", want, team)
		}
	}
	rows := regexp.MustCompile(`<tr data-queued-pod="`+regexp.QuoteMeta(ns)+`/(p-\d)"><td class="position">(\d of \d)</td>.*?</tr>`).FindAllStringSubmatch(team, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1]+" "+r[2])
	}
	if want := []string{"p-1 1 of 2", "p-2 2 of 2"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("team qui's queue rows %v, want %v", got, want)
	}
	if !strings.Contains(team, "waiting for quota: team qui: quota 1 GPU") {
		t.Errorf("team qui's queue does not say what its pods wait for: %s", team)
	}
	waitRow := regexp.MustCompile(`(?s)<tr data-pod="` + regexp.QuoteMeta(ns) + `/p-1">.*?</tr>`).FindString(dom)
	if !strings.Contains(waitRow, "position 1 of 2 in team qui") {
		t.Errorf("waiting list row of p-1 %q does not give its queue position", waitRow)
	}
	// The shared quota has groups (qtree-dept over qtree-t and qtree-u):
	// the page draws the tree, children indented under their parent.
	groups := regexp.MustCompile(`(?s)<table class="queue quota-groups">.*?</table>`).FindString(dom)
	for _, want := range []string{`<tr data-group="qtree-dept"><td class="group-name" style="padding-left: 0.3em;">qtree-dept</td><td class="num">2 GPUs</td>`,
		`<tr data-group="qtree-t"><td class="group-name" style="padding-left: 1.5em;">qtree-t</td>`,
		`<tr data-group="qtree-u"><td class="group-name" style="padding-left: 1.5em;">qtree-u</td>`} {
		if !strings.Contains(groups, want) {
			t.Errorf("the quota tree on /ui does not hold %s: %s", want, groups)
		}
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", dom)
	}
	note(name, "team qui's admitted use and queue (2 pods, in order) on /ui, and the quota tree, rendered by %s", bin)
}
