package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"

	"github.com/rota-sched/rota/pkg/topology"
)

func TestMockServers(t *testing.T) {
	tests := []struct {
		name        string
		giveServer  string
		giveIsland  int
		wantModel   string
		wantMiB     int64
		wantIslands []int
	}{
		{"dgxh200 NVSwitch", "dgxh200", 0, "NVIDIA H200 141GB HBM3e", 144384, []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"dgxh200 islands of 4", "dgxh200", 4, "NVIDIA H200 141GB HBM3e", 144384, []int{0, 0, 0, 0, 1, 1, 1, 1}},
		{"dgxh100 no NVLink", "dgxh100", 1, "NVIDIA H100 80GB HBM3", 81920, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"dgxa100", "dgxa100", 0, "Mock NVIDIA A100-SXM4-40GB", 40960, []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"dgxb200", "dgxb200", 2, "NVIDIA B200 180GB HBM3e", 184320, []int{0, 0, 1, 1, 2, 2, 3, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _, err := OpenMock(tc.giveServer, MockOptions{IslandSize: tc.giveIsland})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			gpus := b.GPUs()
			if len(gpus) != 8 {
				t.Fatalf("%d GPUs, want 8", len(gpus))
			}
			var islands []int
			for _, g := range gpus {
				islands = append(islands, g.Island)
				if g.Model != tc.wantModel || int64(g.MemoryMiB) != tc.wantMiB || !g.Healthy || !strings.HasPrefix(g.UUID, "GPU-") {
					t.Errorf("gpu %d = %+v", g.Index, g)
				}
			}
			if !equalInts(islands, tc.wantIslands) {
				t.Errorf("islands = %v, want %v", islands, tc.wantIslands)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMockEventsAndProbe(t *testing.T) {
	b, ev, err := OpenMock("dgxh200", MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Event, 4)
	done := make(chan error)
	go func() { done <- b.Watch(ctx, func(e Event) { got <- e }) }()
	ev.InjectXID(3, 79)
	ev.InjectECC(4)
	for _, want := range []Event{{UUID: b.GPUs()[3].UUID, Kind: KindXID, XID: 79}, {UUID: b.GPUs()[4].UUID, Kind: KindECC}} {
		select {
		case e := <-got:
			if e != want {
				t.Errorf("event = %+v, want %+v", e, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("no event")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ev.SetLost(2, true)
	if err := b.Probe(b.GPUs()[2].UUID); err == nil {
		t.Error("probe of a lost GPU passed")
	}
	if err := b.Probe(b.GPUs()[1].UUID); err != nil {
		t.Errorf("probe of a good GPU: %v", err)
	}
}

func TestNVMLErrorPaths(t *testing.T) {
	s := dgxh200.New()
	PrepareMock(s, MockOptions{})
	dev := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 2 {
			return dev, nvml.SUCCESS
		}
		return s.Devices[i], nvml.SUCCESS
	}
	if _, err := NewNVML(s); err == nil || !strings.Contains(err.Error(), "nvml device 2 uuid") {
		t.Errorf("NewNVML() error = %v, want one naming device 2", err)
	}
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := NewNVML(s); !errors.Is(err, ErrNoDriver) {
		t.Errorf("NewNVML() error = %v, want ErrNoDriver", err)
	}
}

func TestOpenNVMLWithoutDriver(t *testing.T) {
	b, err := OpenNVML()
	if err == nil {
		b.Close()
		t.Skip("this machine has an NVIDIA driver")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenNVML() error = %v, want ErrNoDriver", err)
	}
}

func TestFakeBackend(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(spec, []byte("model: NVIDIA H200 141GB HBM3e\ncount: 8\nmemoryMiB: 144384\nislandSize: 4\nnuma: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFake(spec, "node-7")
	if err != nil {
		t.Fatal(err)
	}
	want := topology.FromSpec(topology.Spec{Name: "node-7", Model: "NVIDIA H200 141GB HBM3e", Count: 8, MemoryMiB: 144384, IslandSize: 4, NUMANodes: 2})
	for i, g := range f.GPUs() {
		w := want.GPUs[i]
		if g.UUID != w.UUID || g.Island != w.Island || g.NUMA != w.NUMA || len(g.Peers) != 3 {
			t.Errorf("gpu %d = %+v, want %+v", i, g, w)
		}
	}
	f.poll = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 8)
	go func() { _ = f.Watch(ctx, func(e Event) { got <- e }) }()
	uuid := f.GPUs()[5].UUID
	if err := os.WriteFile(f.HealthPath(), []byte("# injected\n"+uuid+"=xid:79\n2=ecc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seen := map[string]Event{}
	for len(seen) < 2 {
		select {
		case e := <-got:
			seen[e.UUID] = e
		case <-time.After(2 * time.Second):
			t.Fatalf("events = %+v", seen)
		}
	}
	if seen[uuid].Reason() != "XID 79" || seen[f.GPUs()[2].UUID].Kind != KindECC {
		t.Errorf("events = %+v", seen)
	}
	if err := f.Probe(uuid); err == nil {
		t.Error("probe passed while the health file lists a fault")
	}
	if err := os.WriteFile(f.HealthPath(), []byte(uuid+"=healthy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Probe(uuid); err != nil {
		t.Errorf("probe after clearing: %v", err)
	}
}

func TestParseFakeSpec(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{"yaml", "model: A\ncount: 2\nmemoryMiB: 1024\n", ""},
		{"json", `{"model":"A","count":8,"memoryMiB":81920,"islandSize":8,"numa":2,"uuidSeed":"x","healthFile":"h"}`, ""},
		{"unknown field", "model: A\ncount: 2\nmemoryMiB: 1024\nmemory: 3\n", "unknown field"},
		{"everything wrong", "model: ''\ncount: 0\nmemoryMiB: -1\nislandSize: -2\nnuma: -1\n", "count: 0 is out of range"},
		{"too many GPUs", "model: A\ncount: 65\nmemoryMiB: 1\n", "count: 65"},
		{"escaping health file", "model: A\ncount: 1\nmemoryMiB: 1\nhealthFile: ../etc/x\n", "healthFile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFakeSpec([]byte(tc.give))
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ParseFakeSpec() error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseHealthFile(t *testing.T) {
	got, err := ParseHealthFile([]byte("# c\n\nGPU-a=xid:79\n3 = ecc\nGPU-b=lost\nGPU-b=healthy\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["GPU-a"] != (Fault{Kind: KindXID, XID: 79}) || got["3"] != (Fault{Kind: KindECC}) {
		t.Errorf("ParseHealthFile() = %+v", got)
	}
	for _, bad := range []string{"GPU-a", "=xid:1", "GPU-a=xid:", "GPU-a=xid:0", "GPU-a=on fire"} {
		if _, err := ParseHealthFile([]byte(bad)); err == nil {
			t.Errorf("ParseHealthFile(%q) accepted", bad)
		}
	}
}

func FuzzParseFakeSpec(f *testing.F) {
	f.Add([]byte("model: NVIDIA H200 141GB HBM3e\ncount: 8\nmemoryMiB: 144384\nislandSize: 4\nnuma: 2\n"))
	f.Add([]byte(`{"model":"A","count":1,"memoryMiB":1}`))
	f.Add([]byte("count: [1, 2]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseFakeSpec(data)
		if err != nil {
			return
		}
		// Whatever parses builds a valid topology document.
		n := topology.FromSpec(topology.Spec{Name: "n", Model: s.Model, Count: s.Count, MemoryMiB: s.MemoryMiB,
			IslandSize: s.IslandSize, NUMANodes: s.NUMA, UnitMiB: 1})
		if err := n.Document().Validate(); err != nil {
			t.Fatalf("spec %+v gives an invalid topology: %v", s, err)
		}
	})
}

func FuzzParseHealthFile(f *testing.F) {
	f.Add([]byte("GPU-a=xid:79\n3=ecc\n# x\nGPU-b=lost\n"))
	f.Add([]byte("a=healthy"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseHealthFile(data)
		if err != nil {
			return
		}
		for k, v := range got {
			if k == "" || (v.Kind == KindXID && v.XID == 0) {
				t.Fatalf("entry %q = %+v", k, v)
			}
		}
	})
}
