package state

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
)

// PodsSeen turns true once the pod handler has finished with a pod event at
// or after the resourceVersion asked for, and not before: a new leader's
// barrier on its own Pod's label write.
func TestPodsSeen(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rota-system", Name: "rota-extender-0", UID: "u0", ResourceVersion: "95"}}
	c, _, client, _ := startCache(ctx, t, self)
	if !c.PodsSeen("95") || !c.PodsSeen("9") {
		t.Error("the initial list's pods are not seen")
	}
	if c.PodsSeen("96") || c.PodsSeen("100") {
		t.Error("a later resourceVersion is seen before any event carries it")
	}
	if c.PodsSeen("") || c.PodsSeen("x") {
		t.Error("an invalid resourceVersion is seen")
	}
	up := self.DeepCopy()
	up.Labels, up.ResourceVersion = map[string]string{"example.com/extender-leader": "true"}, "100"
	if _, err := client.CoreV1().Pods("rota-system").Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.PodsSeen("100") {
		if time.Now().After(deadline) {
			t.Fatal("the update at resourceVersion 100 is never seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c.PodsSeen("101") {
		t.Error("resourceVersion 101 seen after the update at 100")
	}
}
