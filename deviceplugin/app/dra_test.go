package app

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/pkg/contract"
)

func nodeSlice(name, node, driver string, attrs ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i, a := range attrs {
		v := a
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "d" + string(rune('0'+i)),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {StringValue: &v}}})
	}
	return s
}

func eventsWithReason(t *testing.T, client *fake.Clientset, reason string) []corev1.Event {
	t.Helper()
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func TestServeUnlessDRA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := fake.NewClientset()
	names, _ := contract.NewNames(contract.DefaultDomain)
	cfg := config.Default()
	cfg.NodeName = "n1"
	check := newDRACheck(cfg, client, names, []string{"GPU-aaa"})

	var serving atomic.Int32 // 1 while serve runs
	var starts atomic.Int32
	serve := func(ctx context.Context) error {
		starts.Add(1)
		serving.Store(1)
		<-ctx.Done()
		serving.Store(0)
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- serveUnlessDRA(ctx, check, 20*time.Millisecond, serve) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the plugin to serve on a node without DRA", func() bool { return serving.Load() == 1 })

	// Another node's slice and a NIC driver's slice change nothing.
	rs := client.ResourceV1().ResourceSlices()
	for _, s := range []*resourcev1.ResourceSlice{nodeSlice("other", "n2", "gpu.nvidia.com"), nodeSlice("nic", "n1", "nic.example.com", "eth0")} {
		if _, err := rs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if serving.Load() != 1 || starts.Load() != 1 {
		t.Fatalf("serving %d, starts %d: slices of another node or of a NIC stopped the plugin", serving.Load(), starts.Load())
	}

	// A driver Rota was not told about publishes one of this node's GPUs.
	if _, err := rs.Create(ctx, nodeSlice("acme", "n1", "gpu.acme.example", "GPU-aaa"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the plugin to stop advertising", func() bool { return serving.Load() == 0 })
	waitFor("a Warning event on the node", func() bool { return len(eventsWithReason(t, client, ReasonDRAManaged)) == 1 })
	ev := eventsWithReason(t, client, ReasonDRAManaged)[0]
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "n1" || !strings.Contains(ev.Message, "GPU-aaa") {
		t.Errorf("event = %+v", ev)
	}
	time.Sleep(100 * time.Millisecond)
	if serving.Load() != 0 || len(eventsWithReason(t, client, ReasonDRAManaged)) != 1 {
		t.Fatal("the plugin served again, or repeated its event, while DRA still manages the GPUs")
	}

	// The driver goes: the plugin advertises again and says so.
	if err := rs.Delete(ctx, "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the plugin to serve again", func() bool { return serving.Load() == 1 && starts.Load() == 2 })
	waitFor("a Normal event", func() bool { return len(eventsWithReason(t, client, ReasonDRAGone)) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestServeUnlessDRAAtStart(t *testing.T) {
	// DRA manages the GPUs before the plugin starts: it never serves.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	client := fake.NewClientset(nodeSlice("nv", "n1", "gpu.nvidia.com", "GPU-zzz"))
	names, _ := contract.NewNames(contract.DefaultDomain)
	cfg := config.Default()
	cfg.NodeName = "n1"
	var starts atomic.Int32
	err := serveUnlessDRA(ctx, newDRACheck(cfg, client, names, []string{"GPU-aaa"}), 20*time.Millisecond,
		func(ctx context.Context) error { starts.Add(1); <-ctx.Done(); return nil })
	if err != nil || starts.Load() != 0 {
		t.Fatalf("serveUnlessDRA = %v after %d starts; want no start on a DRA-managed node", err, starts.Load())
	}
	if n := len(eventsWithReason(t, client, ReasonDRAManaged)); n != 1 {
		t.Errorf("%d %s events, want 1", n, ReasonDRAManaged)
	}
}
