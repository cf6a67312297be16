package contract

import (
	"strings"
	"testing"
)

func TestNewNames(t *testing.T) {
	tests := []struct {
		name       string
		giveDomain string
		wantDomain string
		wantErr    string // part of the message; "" for success
	}{
		{"empty means default", "", DefaultDomain, ""},
		{"default", "example.com", "example.com", ""},
		{"subdomain with dashes", "gpu.rota-sched.io", "gpu.rota-sched.io", ""},
		{"digits", "a1.b2", "a1.b2", ""},
		{"no dot", "localhost", "", "with at least one dot"},
		{"upper case", "Example.com", "", "is not a lowercase DNS domain"},
		{"leading dash", "-a.com", "", "is not a lowercase DNS domain"},
		{"trailing dash", "a-.com", "", "is not a lowercase DNS domain"},
		{"trailing dot", "example.com.", "", "is not a lowercase DNS domain"},
		{"double dot", "a..com", "", "is not a lowercase DNS domain"},
		{"slash", "example.com/gpu", "", "is not a lowercase DNS domain"},
		{"underscore", "my_co.com", "", "is not a lowercase DNS domain"},
		{"space", "example .com", "", "is not a lowercase DNS domain"},
		{"too long", strings.Repeat("a.", 100) + "com", "", "is not a lowercase DNS domain"},
		{"label over 63", strings.Repeat("a", 64) + ".com", "", "longer than 63 characters"},
		{"label of 63", strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com", ""},
		{"kubernetes.io", "kubernetes.io", "", "is reserved by Kubernetes"},
		{"under kubernetes.io", "gpu.kubernetes.io", "", "is reserved by Kubernetes"},
		{"requests prefix", "requests.example.com", "", "is reserved by Kubernetes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNames(tc.giveDomain)
			if tc.wantErr != "" {
				wantFieldError(t, err, "domain", tc.wantErr, "for example example.com")
				if n != (Names{}) {
					t.Errorf("NewNames() = %+v with an error, want the zero value", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewNames(%q) error = %v", tc.giveDomain, err)
			}
			d := tc.wantDomain
			want := Names{Domain: d, GPU: d + "/gpu", GPUMemory: d + "/gpu-memory",
				TopologyAnnotation: d + "/gpu-topology", AssignmentAnnotation: d + "/gpu-assignment",
				GangLabel: d + "/gang", GangSizeAnnotation: d + "/gang-size", PodGroupLabel: PodGroupLabel, NoGangAnnotation: d + "/no-gang",
				TeamLabel: d + "/team", PreemptibleLabel: d + "/preemptible", GPUHealthAnnotation: d + "/gpu-health-override",
				GPUFailureCondition: d + "/GPUFailure", RemediationLabel: d + "/remediation",
				CheckpointSignalAnnotation: d + "/checkpoint-signal", CheckpointGraceAnnotation: d + "/checkpoint-grace",
				QuarantineAnnotation: d + "/quarantine", QuarantineTaint: d + "/quarantined",
				QueueGate: d + "/queue", QueuedCondition: d + "/Queued", AdmissionAnnotation: d + "/admission",
				QueueingLabel: d + "/queueing", GPUModelsAnnotation: d + "/gpu-models", MaxRuntimeAnnotation: d + "/max-runtime", CheckpointIntervalAnnotation: d + "/checkpoint-interval", LastCheckpointAnnotation: d + "/last-checkpoint", MinRuntimeAnnotation: d + "/min-runtime", MovableAnnotation: d + "/movable", DeadlineAnnotation: d + "/deadline", ReservationAnnotation: d + "/reservation", QueuedJobAnnotation: d + "/queued", ShareWithoutMPSAnnotation: d + "/share-without-mps",
				IdleSinceAnnotation: d + "/idle-since", GPUIdleCondition: d + "/GPUIdle", GPUUtilizationAnnotation: d + "/gpu-utilization",
				LeaderLabel: d + "/extender-leader"}
			if n != want {
				t.Errorf("NewNames(%q) = %+v, want %+v", tc.giveDomain, n, want)
			}
		})
	}
}

func TestMustNamesPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("MustNames(bad) did not panic")
		}
	}()
	MustNames("Bad Domain")
}

func TestDefaultNames(t *testing.T) {
	if Default.GPU != "example.com/gpu" || Default.GPUMemory != "example.com/gpu-memory" {
		t.Errorf("Default = %+v", Default)
	}
	if Default.PodGroupLabel != "scheduling.x-k8s.io/pod-group" {
		t.Errorf("PodGroupLabel = %q", Default.PodGroupLabel)
	}
}

func TestParseGangSize(t *testing.T) {
	const field = "annotation example.com/gang-size"
	tests := []struct {
		name    string
		give    string
		want    int
		wantErr string
	}{
		{"one", "1", 1, ""},
		{"sixteen", "16", 16, ""},
		{"leading zeros", "007", 7, ""},
		{"max", "10000", MaxGangSize, ""},
		{"missing", "", 0, "is missing"},
		{"zero", "0", 0, `"0" is out of range`},
		{"over max", "10001", 0, "is out of range"},
		{"huge", "99999999999999999999999999", 0, "is out of range"},
		{"negative", "-1", 0, "is not a whole number"},
		{"plus sign", "+4", 0, "is not a whole number"},
		{"letters", "sixteen", 0, "is not a whole number"},
		{"decimal", "1.5", 0, "is not a whole number"},
		{"space", " 4", 0, "is not a whole number"},
		{"unit", "4k", 0, "is not a whole number"},
		{"fullwidth digit", "４", 0, "is not a whole number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGangSize(field, tc.give)
			if tc.wantErr != "" {
				wantFieldError(t, err, field, tc.wantErr)
				if !strings.Contains(err.Error(), "1..10000") && !strings.Contains(err.Error(), `e.g. "16"`) {
					t.Errorf("message %q does not say what to write", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseGangSize(%q) = %d, %v; want %d", tc.give, got, err, tc.want)
			}
		})
	}
}

func TestMiB(t *testing.T) {
	tests := []struct {
		give    MiB
		want    string
		wantGiB int64
	}{
		{0, "0 GiB", 0},
		{1024, "1 GiB", 1},
		{18432, "18 GiB", 18},
		{1536, "1536 MiB", 1},
		{-2048, "-2 GiB", -2},
	}
	for _, tc := range tests {
		if got := tc.give.String(); got != tc.want {
			t.Errorf("MiB(%d).String() = %q, want %q", int64(tc.give), got, tc.want)
		}
		if got := tc.give.GiB(); got != tc.wantGiB {
			t.Errorf("MiB(%d).GiB() = %d, want %d", int64(tc.give), got, tc.wantGiB)
		}
	}
}
