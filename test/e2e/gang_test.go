//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

const (
	gangSize    = 16
	gangGPUs    = 8
	gangName    = "train"
	gangStartup = 15 * time.Second // how long "none binds" is watched
)

// TestGangAllOrNothing: a 16-pod gang of 8 GPUs each, with room for only
// 12 members, binds no member; every member reports the same reason. When
// four more nodes join (they exist from the start but are cordoned, since
// rota-admission rightly refuses a gang larger than the whole cluster), all
// 16 bind. The gang is then created again on
// the grown fleet to measure the seconds from the last member's creation
// to all members bound.
func TestGangAllOrNothing(t *testing.T) {
	const name = "gang"
	ctx, ns := setup(t, name, "", 5*time.Minute)
	spec := h200
	spec.Count, spec.IslandSize = 8, 4
	spec.Labels = map[string]string{env.Names.Domain + "/leaf": "leaf-a"}
	gangNodes := nodes(ctx, t, name, "gang", 16, spec)
	for _, n := range gangNodes[12:] {
		if err := env.Cordon(ctx, n.Spec.Name, true); err != nil {
			t.Fatal(err)
		}
	}

	createGang := func() time.Time {
		for i := range gangSize {
			create(ctx, t, pod(ns, fmt.Sprintf("%s-%02d", gangName, i), name).Gang(gangName, gangSize).GPUs(gangGPUs).Obj())
		}
		return time.Now()
	}

	// Room for 12 of 16: nothing binds, for as long as we watch.
	createGang()
	holdsFor(ctx, t, gangStartup, 500*time.Millisecond, func(ctx context.Context) error {
		pods, err := env.Pods(ctx, ns)
		if err != nil {
			return err
		}
		if b := harness.Bound(pods); b > 0 {
			return fmt.Errorf("%d of %d gang members bound with room for only 12\n%s", b, gangSize, describe(ctx, pods))
		}
		return nil
	})
	checkInvariants(ctx, t, nil)

	// Every member says why, and they all say the same thing: the newest
	// refusal of each member, with its own name taken out.
	reasons := map[string][]string{}
	waitPods(ctx, t, ns, "a refusal on every member", func(pods []corev1.Pod) bool {
		clear(reasons)
		for _, p := range pods {
			msg, err := env.LastFailedScheduling(ctx, ns, p.Name)
			if err != nil || msg == "" {
				return false
			}
			key := normalize(msg)
			reasons[key] = append(reasons[key], p.Name)
		}
		return len(reasons) == 1
	})
	for r, members := range reasons {
		t.Logf("all %d members: %s", len(members), r)
		if want := "gang " + ns + "/" + gangName + ": 12 of 16 members fit"; !strings.Contains(r, want) {
			t.Errorf("the members' reason %q does not say %q", r, want)
		}
	}

	// Four more nodes join: all 16 bind.
	for _, n := range gangNodes[12:] {
		if err := env.Cordon(ctx, n.Spec.Name, false); err != nil {
			t.Fatal(err)
		}
	}
	roomAt := time.Now()
	waitPods(ctx, t, ns, "all members bound after 4 nodes joined", func(p []corev1.Pod) bool {
		return harness.Bound(p) == gangSize
	})
	afterRoom := time.Since(roomAt)
	checkInvariants(ctx, t, nil)

	// The measurement: the whole gang again, room available.
	if err := env.DeletePods(ctx, ns); err != nil {
		t.Fatal(err)
	}
	lastCreated := createGang()
	waitPods(ctx, t, ns, "all members bound", func(p []corev1.Pod) bool { return harness.Bound(p) == gangSize })
	bound := time.Since(lastCreated)
	pods := waitPods(ctx, t, ns, "all members running", func(p []corev1.Pod) bool { return harness.Running(p) == gangSize })
	checkInvariants(ctx, t, nil)
	perNode := map[string]int{}
	for i := range pods {
		a := assignment(t, &pods[i])
		if !a.Whole || len(a.GPUs) != gangGPUs {
			t.Errorf("%s: assignment %+v, want %d whole GPUs", pods[i].Name, a, gangGPUs)
		}
		perNode[pods[i].Spec.NodeName]++
	}
	if len(perNode) != gangSize {
		t.Errorf("members share nodes: %v", perNode)
	}
	t.Logf("gang of %d x %d GPUs: all bound %.2fs after 4 nodes were uncordoned; %.2fs from last member created to all bound",
		gangSize, gangGPUs, afterRoom.Seconds(), bound.Seconds())
	note(name, "all bound %.1fs after room appeared; %.1fs from last member creation to all bound", afterRoom.Seconds(), bound.Seconds())
}

var memberRE = regexp.MustCompile(gangName + `-\d\d`)

// normalize takes member names out of a message so that
// the members' reasons compare equal when they say the same thing.
func normalize(msg string) string {
	return memberRE.ReplaceAllString(msg, "<member>")
}
