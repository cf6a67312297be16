package publish

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

func TestPublishOnlyOnChangeWithRetry(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	var mu sync.Mutex
	patches, failures := 0, 2
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patches++
		if failures > 0 {
			failures--
			return true, nil, errors.New("etcd is having a bad day")
		}
		return false, nil, nil
	})
	doc := topology.FromSpec(topology.Spec{Name: "n", Model: "H200", Count: 2, MemoryMiB: 144384}).Document()
	changed := make(chan struct{})
	var smu sync.Mutex
	src := func() (contract.Topology, <-chan struct{}) {
		smu.Lock()
		defer smu.Unlock()
		return doc, changed
	}
	p := New(client, "n", contract.Default.TopologyAnnotation, nil)
	p.MinBackoff = 10 * time.Millisecond
	go p.Run(ctx, src)
	read := func() contract.Topology {
		n, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		d, _ := contract.ParseTopology([]byte(n.Annotations[contract.Default.TopologyAnnotation]))
		return d
	}
	deadline := time.Now().Add(3 * time.Second)
	for read().Generation != 1 {
		if time.Now().After(deadline) {
			t.Fatal("never published")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A wake-up without a change patches nothing.
	smu.Lock()
	old := changed
	changed = make(chan struct{})
	smu.Unlock()
	close(old)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if patches != 3 {
		t.Errorf("%d patches, want 3 (2 failures + 1)", patches)
	}
	mu.Unlock()
	// A real change is published with the next generation.
	smu.Lock()
	doc = topology.FromSpec(topology.Spec{Name: "n", Model: "H200", Count: 2, MemoryMiB: 144384}).Document()
	doc.GPUs[1].Health, doc.GPUs[1].Reason = contract.Unhealthy, "XID 79"
	old = changed
	changed = make(chan struct{})
	smu.Unlock()
	close(old)
	for read().Generation != 2 {
		if time.Now().After(deadline) {
			t.Fatal("change never published")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g := read().GPUs[1]; g.Health != contract.Unhealthy {
		t.Errorf("gpu 1 = %+v", g)
	}
}

func TestParseOverride(t *testing.T) {
	got, err := ParseOverride("GPU-a=healthy, GPU-b=healthy")
	if err != nil || len(got) != 2 || got[1] != "GPU-b" {
		t.Errorf("ParseOverride = %v %v", got, err)
	}
	for _, bad := range []string{"GPU-a", "GPU-a=sick", "=healthy"} {
		if _, err := ParseOverride(bad); err == nil {
			t.Errorf("ParseOverride(%q) accepted", bad)
		}
	}
}
