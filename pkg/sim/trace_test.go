package sim

import (
	"github.com/google/go-cmp/cmp"

	"errors"
	"strings"
	"testing"
)

func TestReadPods(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []Pod
		wantErr error
	}{
		{
			name: "openb columns",
			give: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
				"openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n" +
				"openb-pod-0002,88000,327680,8,1000,V100M16|V100M32,LS,Running,5,9,5\n" +
				"openb-pod-0003,12500,57344,0,0,,BE,Running,7,8,7\n",
			want: []Pod{
				{Name: "openb-pod-0001", CPUMilli: 6000, HostMemoryMiB: 12288, GPUs: 1, GPUMilli: 460, Created: 427061, Deleted: 12902960},
				{Name: "openb-pod-0002", CPUMilli: 88000, HostMemoryMiB: 327680, GPUs: 8, GPUMilli: 1000, Models: []string{"V100M16", "V100M32"}, Created: 5, Deleted: 9},
				{Name: "openb-pod-0003", CPUMilli: 12500, HostMemoryMiB: 57344, Created: 7, Deleted: 8},
			},
		},
		{
			name: "generic minimal, reordered",
			give: "gpu_milli,num_gpu,cpu_milli\n500,1,1000\n1000.0,2,2000\n",
			want: []Pod{
				{Name: "pod-0", CPUMilli: 1000, GPUs: 1, GPUMilli: 500, Created: -1, Deleted: -1},
				{Name: "pod-1", CPUMilli: 2000, GPUs: 2, GPUMilli: 1000, Created: -1, Deleted: -1},
			},
		},
		{name: "missing column", give: "name,cpu_milli,num_gpu\np,1,1\n", wantErr: ErrMissingColumn},
		{name: "empty", give: "", wantErr: ErrMissingColumn},
		{name: "share of several GPUs", give: "cpu_milli,num_gpu,gpu_milli\n1,2,500\n", wantErr: ErrBadValue},
		{name: "share without GPU", give: "cpu_milli,num_gpu,gpu_milli\n1,0,500\n", wantErr: ErrBadValue},
		{name: "too large share", give: "cpu_milli,num_gpu,gpu_milli\n1,1,1500\n", wantErr: ErrBadValue},
		{name: "negative CPU", give: "cpu_milli,num_gpu,gpu_milli\n-1,1,1000\n", wantErr: ErrBadValue},
		{name: "not a number", give: "cpu_milli,num_gpu,gpu_milli\nx,1,1000\n", wantErr: ErrBadValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadPods(strings.NewReader(tc.give))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReadPods() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadPods() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadNodes(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []Node
		wantErr error
	}{
		{
			name: "openb",
			give: "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\nopenb-node-0001,96000,393216,8,G2\n",
			want: []Node{
				{Name: "openb-node-0000", CPUMilli: 64000, HostMemoryMiB: 262144, GPUs: 2, Model: "P100"},
				{Name: "openb-node-0001", CPUMilli: 96000, HostMemoryMiB: 393216, GPUs: 8, Model: "G2"},
			},
		},
		{name: "generic name column", give: "name,gpu,cpu_milli\nx,4,0\n", want: []Node{{Name: "x", GPUs: 4}}},
		{name: "duplicate", give: "sn,gpu,cpu_milli\nx,1,1\nx,1,1\n", wantErr: ErrBadValue},
		{name: "no name", give: "sn,gpu,cpu_milli\n,1,1\n", wantErr: ErrBadValue},
		{name: "missing gpu", give: "sn,cpu_milli\nx,1\n", wantErr: ErrMissingColumn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadNodes(strings.NewReader(tc.give))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReadNodes() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadNodes() (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzReadPods: any input either fails with an error or yields pods whose
// requests the placement engine accepts (one of whole GPUs or a share, never
// both, shares of one GPU in 1..999 units).
func FuzzReadPods(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,6000,12288,1,460,\nq,8,9,8,1000,A|B\n")
	f.Add("gpu_milli,num_gpu,cpu_milli\n0,0,1\n")
	f.Add("cpu_milli,num_gpu,gpu_milli\n\"1\",1,1e3\n")
	f.Fuzz(func(t *testing.T, in string) {
		pods, err := ReadPods(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, p := range pods {
			r := p.Request("u")
			if r.GPUs > 0 && r.MemoryUnits > 0 {
				t.Fatalf("pod %+v: request %+v asks for whole GPUs and a share", p, r)
			}
			if r.MemoryUnits < 0 || r.MemoryUnits >= MilliPerGPU || r.GPUs < 0 || r.CPUMilli < 0 || r.HostMemoryMiB < 0 {
				t.Fatalf("pod %+v: request %+v out of range", p, r)
			}
			if p.GPUMilliTotal() < 0 || p.GPUMilliTotal() > int64(maxGPUs)*MilliPerGPU {
				t.Fatalf("pod %+v: GPU total %d out of range", p, p.GPUMilliTotal())
			}
		}
	})
}

// FuzzReadNodes: any input either fails or yields uniquely named nodes with
// non-negative capacities.
func FuzzReadNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\n")
	f.Add("name,gpu,cpu_milli\nx,4,0\ny,0,5\n")
	f.Fuzz(func(t *testing.T, in string) {
		nodes, err := ReadNodes(strings.NewReader(in))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range nodes {
			if n.Name == "" || seen[n.Name] || n.GPUs < 0 || n.CPUMilli < 0 || n.HostMemoryMiB < 0 {
				t.Fatalf("bad node %+v", n)
			}
			seen[n.Name] = true
		}
	})
}
