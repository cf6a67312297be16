package dra

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var rules = Rules{GPUDrivers: []string{"gpu.nvidia.com"}, Resources: []string{"example.com/gpu", "example.com/gpu-memory"},
	ModeDriver: "gpu.example.com"}

func TestWhy(t *testing.T) {
	nv := Slice{Name: "n1-gpu.nvidia.com-x", Driver: "gpu.nvidia.com", Node: "n1", Strings: []string{"GPU-aaa"}}
	other := Slice{Name: "n1-acme-y", Driver: "gpu.acme.example", Node: "n1", Strings: []string{"GPU-bbb", "h100"}}
	nic := Slice{Name: "n1-nic-z", Driver: "nic.example.com", Node: "n1", Strings: []string{"eth0"}}
	mapped := Class{Name: "rota-gpus", ExtendedResource: "example.com/gpu"}
	unrelated := Class{Name: "nics", ExtendedResource: "example.com/nic"}
	for _, tc := range []struct {
		name    string
		uuids   []string
		slices  []Slice
		classes []Class
		want    []string // substrings; none: not managed
	}{
		{name: "no slices", uuids: []string{"GPU-aaa"}, classes: []Class{mapped}},
		{name: "a listed GPU driver", slices: []Slice{nic, nv}, want: []string{"DRA driver gpu.nvidia.com", "n1-gpu.nvidia.com-x"}},
		{name: "an unlisted driver naming one of Rota's GPUs", uuids: []string{"GPU-bbb"}, slices: []Slice{nic, other},
			want: []string{"gpu.acme.example publishes GPU GPU-bbb", "n1-acme-y"}},
		{name: "an unlisted driver naming other devices", uuids: []string{"GPU-ccc"}, slices: []Slice{nic, other}, classes: []Class{unrelated}},
		{name: "any driver while a class maps Rota's resource", slices: []Slice{nic}, classes: []Class{unrelated, mapped},
			want: []string{"DeviceClass rota-gpus maps example.com/gpu", "nic.example.com"}},
		{name: "a class mapping another resource", slices: []Slice{nic}, classes: []Class{unrelated}},
		{name: "Rota's own DRA mode", uuids: []string{"GPU-ddd"}, slices: []Slice{nic,
			{Name: "n1-gpu.example.com-w", Driver: "gpu.example.com", Node: "n1", Strings: []string{"GPU-ddd"}}},
			want: []string{"served by Rota's DRA mode (driver gpu.example.com, ResourceSlice n1-gpu.example.com-w)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rules.Why(tc.uuids, tc.slices, tc.classes)
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("Why = %q, want not managed", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Why = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

func TestWhyDoesNotDependOnListOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	drivers := []string{"gpu.nvidia.com", "gpu.acme.example", "nic.example.com"}
	values := []string{"GPU-a", "GPU-b", "eth0", ""}
	for range 500 {
		var ss []Slice
		for i := range r.IntN(5) {
			s := Slice{Name: string(rune('a' + i)), Driver: drivers[r.IntN(len(drivers))], Node: "n"}
			for range r.IntN(3) {
				s.Strings = append(s.Strings, values[r.IntN(len(values))])
			}
			ss = append(ss, s)
		}
		var cs []Class
		if r.IntN(2) == 0 {
			cs = append(cs, Class{Name: "m", ExtendedResource: "example.com/gpu-memory"})
		}
		uuids := []string{"GPU-a"}
		want := rules.Why(uuids, ss, cs)
		shuffled := slices.Clone(ss)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := rules.Why(uuids, shuffled, cs); got != want {
			t.Fatalf("Why changed with the slices' order: %q, then %q", want, got)
		}
		// Managed exactly when one of the three rules holds.
		holds := len(cs) > 0 && len(ss) > 0
		for _, s := range ss {
			holds = holds || s.Driver == "gpu.nvidia.com" || slices.Contains(s.Strings, "GPU-a")
		}
		if holds != (want != "") {
			t.Fatalf("slices %+v classes %+v: Why = %q, want managed %v", ss, cs, want, holds)
		}
	}
}

func TestFromSlice(t *testing.T) {
	node, uuid, n := "n1", "GPU-aaa", int64(4)
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", NodeName: &node,
		Devices: []resourcev1.Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: &uuid}, "index": {IntValue: &n}}}}}}
	got, ok := FromSlice(s)
	if !ok || got.Node != "n1" || got.Driver != "gpu.nvidia.com" || !slices.Equal(got.Strings, []string{"GPU-aaa"}) {
		t.Fatalf("FromSlice = %+v, %v", got, ok)
	}
	all := true
	s.Spec.NodeName, s.Spec.AllNodes = nil, &all
	if _, ok := FromSlice(s); ok {
		t.Error("a slice for all nodes read as one node's")
	}
	res := "example.com/gpu"
	c := FromClass(&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: resourcev1.DeviceClassSpec{ExtendedResourceName: &res}})
	if c != (Class{Name: "c", ExtendedResource: res}) {
		t.Errorf("FromClass = %+v", c)
	}
}

func TestParseDrivers(t *testing.T) {
	got, err := ParseDrivers(" gpu.nvidia.com, ,gpu.nvidia.com,gpu.amd.com")
	if err != nil || !slices.Equal(got, []string{"gpu.nvidia.com", "gpu.amd.com"}) {
		t.Fatalf("ParseDrivers = %v, %v", got, err)
	}
	if got, err := ParseDrivers(""); err != nil || got != nil {
		t.Fatalf("ParseDrivers(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"GPU.nvidia.com", "gpu_nvidia", "-gpu.com", "a..b"} {
		if _, err := ParseDrivers(bad); err == nil {
			t.Errorf("ParseDrivers(%q) took a name the API would refuse", bad)
		}
	}
}

func FuzzWhy(f *testing.F) {
	f.Add("gpu.nvidia.com", "GPU-a", "GPU-a", "example.com/gpu")
	f.Add("x", "y", "z", "")
	f.Fuzz(func(t *testing.T, driver, attr, uuid, ext string) {
		s := []Slice{{Name: "s", Driver: driver, Node: "n", Strings: []string{attr}}}
		got := rules.Why([]string{uuid}, s, []Class{{Name: "c", ExtendedResource: ext}})
		managed := driver == "gpu.nvidia.com" || attr == uuid || slices.Contains(rules.Resources, ext)
		if managed != (got != "") {
			t.Fatalf("Why(%q, %q, %q, %q) = %q", driver, attr, uuid, ext, got)
		}
		if ds, err := ParseDrivers(driver); err == nil {
			for _, d := range ds {
				if d == "" || strings.ContainsAny(d, " ,") || strings.ToLower(d) != d {
					t.Fatalf("ParseDrivers(%q) gave %q", driver, d)
				}
			}
		}
	})
}

func sliceOf(spec resourcev1.ResourceSliceSpec) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: *spec.NodeName + "-" + spec.Driver}, Spec: spec}
}
