// Package contract is Rota's wire contract: the resource names, labels,
// annotation keys and the versioned JSON documents that the extender, the
// device plugin and the admission webhook exchange through the API server.
// Nothing else in Rota spells these strings.
//
// The package is pure: it imports only the standard library.
package contract

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultDomain is the resource and label domain used when none is configured.
const DefaultDomain = "example.com"

// DefaultMemoryUnitMiB is the size of one example.com/gpu-memory unit: 1 GiB.
const DefaultMemoryUnitMiB MiB = 1024

// MaxGangSize bounds the member count of one gang.
const MaxGangSize = 10000

// MiB is an amount of memory in mebibytes. Memory is never passed as a bare int.
type MiB int64

// GiB returns m in gibibytes, rounded down.
func (m MiB) GiB() int64 { return int64(m) / 1024 }

// String formats m for people: "18 GiB" when it is a whole number of GiB, else "1536 MiB".
func (m MiB) String() string {
	if m%1024 == 0 {
		return fmt.Sprintf("%d GiB", int64(m)/1024)
	}
	return fmt.Sprintf("%d MiB", int64(m))
}

// Names holds every resource name, label and annotation key for one domain.
// Build it with NewNames; the zero value is not usable.
type Names struct {
	Domain string

	// Extended resources advertised by the device plugin.
	GPU       string // whole GPUs, exclusive
	GPUMemory string // memory units on ONE shared GPU

	// Node annotation with the GPU topology (JSON Topology document).
	TopologyAnnotation string
	// Pod annotation with the extender's choice (JSON Assignment document).
	AssignmentAnnotation string

	// Gang membership: a label naming the gang and an annotation with its size.
	GangLabel          string
	GangSizeAnnotation string
	// PodGroupLabel is scheduler-plugins' pod group label, accepted as a gang.
	PodGroupLabel string
	// NoGangAnnotation "true" on a workload (a Job or its pod template)
	// says its pods are not a gang, though its shape would make them one
	// (an Indexed Job with completions equal to parallelism).
	NoGangAnnotation string

	// TeamLabel on a Namespace (or on a Pod where the admin allows overrides).
	TeamLabel string
	// PreemptibleLabel marks pods that may be evicted for higher priority work.
	PreemptibleLabel string

	// GPUHealthAnnotation on a Node lets an admin force a GPU back to healthy
	// ("<uuid>=healthy,...").
	GPUHealthAnnotation string

	// Remediation (extender/remediation). GPUFailureCondition is the pod
	// condition type set on pods hit by a GPU or node fault.
	GPUFailureCondition string
	// RemediationLabel on a Pod: "mark-only" asks to be marked, never deleted.
	RemediationLabel string
	// CheckpointSignalAnnotation and CheckpointGraceAnnotation on a Pod ask
	// for time to checkpoint before a remediation deletes it (the grace
	// period becomes the deletion's; the signal is documentation for the
	// pod's preStop hook, Kubernetes only sends SIGTERM).
	CheckpointSignalAnnotation string
	CheckpointGraceAnnotation  string
	// QuarantineAnnotation on a Node lists what the extender quarantined
	// ("node", GPU UUIDs); an admin writes "release" to return it all.
	QuarantineAnnotation string
	// QuarantineTaint (NoSchedule) keeps new pods off a quarantined node.
	QuarantineTaint string

	// Queueing (the queue controller in rota-extender, the mutating webhook
	// in rota-admission).
	//
	// QueueGate is the scheduling gate the webhook adds at creation to every
	// pod that asks for Rota's resources; only the queue controller removes
	// it, in the one update that admits the pod (see AdmissionAnnotation).
	QueueGate string
	// QueuedCondition is the pod condition type that says where a queued pod
	// stands (position, what it waits for, expected start).
	QueuedCondition string
	// AdmissionAnnotation on a Pod is the queue controller's admission record
	// (JSON Admission document), written in the same update that removes
	// QueueGate; a restarted controller rebuilds its holds from it.
	AdmissionAnnotation string
	// QueueingLabel on a Namespace: "off" turns queueing off for the
	// namespace (over-quota pods are then refused at creation as before);
	// "kueue" hands the namespace's queueing and quota to Kueue (Rota's
	// queue and quota stand aside there; Rota still places the pods).
	QueueingLabel string
	// GPUModelsAnnotation on a Pod lists the GPU models it may run on,
	// comma-separated, as the device plugin names them ("NVIDIA H100 80GB
	// HBM3"); empty means any model.
	GPUModelsAnnotation string
	// MaxRuntimeAnnotation on a Pod declares its longest run (a Go duration,
	// "90m"); Rota writes it into activeDeadlineSeconds at admission and uses
	// it to plan reservations and backfill.
	MaxRuntimeAnnotation string
	// CheckpointIntervalAnnotation on a Pod declares how often it
	// checkpoints (a Go duration, "20m"); LastCheckpointAnnotation is the
	// time of its last checkpoint (RFC 3339), which the job updates on its
	// own pods. Rota stops the work that loses least first (pkg/stopcost).
	CheckpointIntervalAnnotation string
	LastCheckpointAnnotation     string
	// MinRuntimeAnnotation on a Pod asks that it run at least this long (a
	// Go duration) before any reclaim or preemption, up to the cluster's
	// maximum; its team's minimum runtime applies anyway.
	MinRuntimeAnnotation string
	// MovableAnnotation on a Pod, "true", lets the queue move it (evict it
	// for its controller to recreate) to make room for a team's waiting
	// work when free GPUs are fragmented.
	MovableAnnotation string
	// DeadlineAnnotation on a Pod is the time it must end by (RFC 3339):
	// with its declared runtime, the latest it may start. Inside its team
	// and priority, the queue moves it ahead when that comes near.
	DeadlineAnnotation string
	// ShareWithoutMPSAnnotation on a Pod ("true") lets its memory share be
	// placed on a node whose device plugin cannot run CUDA MPS (the
	// topology's mps.available false), where the share's memory limit is
	// not enforced.
	ShareWithoutMPSAnnotation string
	// ReservationAnnotation on the pods of a queued job is the queue
	// controller's reservation record (JSON Reservation document).
	ReservationAnnotation string
	// QueuedJobAnnotation "true" on a Job marks it queued suspended: the
	// mutating webhook set spec.suspend at creation, and only the queue
	// controller unsuspends it, writing AdmissionAnnotation on the Job in
	// the same update (see QueueingSuspend).
	QueuedJobAnnotation string
	// LeaderLabel on an extender Pod marks the replica that holds the lease;
	// the chart's Service selects it.
	LeaderLabel string
	// IdleSinceAnnotation on a Pod (RFC 3339) is when the device plugin
	// last saw its GPUs' utilization rise above the idle threshold, set once
	// the pod stayed idle long enough; GPUIdleCondition says the same as a
	// pod condition. Preemption takes idle pods first (ledger.Allocation.Idle).
	IdleSinceAnnotation string
	GPUIdleCondition    string
	// GPUUtilizationAnnotation on a Pod is the device plugin's rounded SM
	// utilization of the pod's GPUs and its memory used (PodUtilization), for kubectl.
	GPUUtilizationAnnotation string
}

// ReasonForgedRecord is the reason of the Warning event Rota puts on a pod
// whose record (assignment, admission) was written by someone other than
// Rota and is not believed.
const ReasonForgedRecord = "ForgedRecord"

// QueueingOff is the value of QueueingLabel that turns queueing off.
const QueueingOff = "off"

// QueueingSuspend is the value of QueueingLabel that queues the
// namespace's top-level batch/v1 Jobs suspended (no pods exist while they
// wait) instead of as gated pods; bare pods are gated as with queueing on.
const QueueingSuspend = "suspend"

// QueueingGate is the value of QueueingLabel that keeps a namespace's
// Jobs queued as gated pods where rota-admission queues Jobs suspended in
// every namespace (--suspend-jobs=all).
const QueueingGate = "gate"

// QueueingKueue is the value of QueueingLabel that hands a namespace's
// queueing and quota to Kueue.
const QueueingKueue = "kueue"

// Values of the remediation label and quarantine annotation.
const (
	RemediationMarkOnly = "mark-only"
	QuarantineRelease   = "release"
	QuarantineNode      = "node"
)

// PodGroupLabel is the label scheduler-plugins' coscheduling uses; it does not
// depend on Rota's domain.
const PodGroupLabel = "scheduling.x-k8s.io/pod-group"

var domainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)

// NewNames builds the names for a DNS domain such as "example.com".
func NewNames(domain string) (Names, error) {
	if domain == "" {
		domain = DefaultDomain
	}
	if len(domain) > 200 || !domainRE.MatchString(domain) {
		return Names{}, &FieldError{Field: "domain", Value: domain,
			Problem: "is not a lowercase DNS domain with at least one dot",
			Fix:     "use a domain you own, for example " + DefaultDomain}
	}
	for label := range strings.SplitSeq(domain, ".") {
		if len(label) > 63 {
			return Names{}, &FieldError{Field: "domain", Value: domain,
				Problem: "has a DNS label longer than 63 characters",
				Fix:     "use a domain you own, for example " + DefaultDomain}
		}
	}
	// The API server treats names under kubernetes.io as native resources and
	// names starting with "requests." as quota keys, never as extended
	// resources, so the device plugin could not advertise them.
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || strings.HasPrefix(domain, "requests.") {
		return Names{}, &FieldError{Field: "domain", Value: domain,
			Problem: "is reserved by Kubernetes and cannot name extended resources",
			Fix:     "use a domain you own, for example " + DefaultDomain}
	}
	return Names{
		Domain:               domain,
		GPU:                  domain + "/gpu",
		GPUMemory:            domain + "/gpu-memory",
		TopologyAnnotation:   domain + "/gpu-topology",
		AssignmentAnnotation: domain + "/gpu-assignment",
		GangLabel:            domain + "/gang",
		GangSizeAnnotation:   domain + "/gang-size",
		PodGroupLabel:        PodGroupLabel,
		NoGangAnnotation:     domain + "/no-gang",
		TeamLabel:            domain + "/team",
		PreemptibleLabel:     domain + "/preemptible",
		GPUHealthAnnotation:  domain + "/gpu-health-override",

		GPUFailureCondition:        domain + "/GPUFailure",
		RemediationLabel:           domain + "/remediation",
		CheckpointSignalAnnotation: domain + "/checkpoint-signal",
		CheckpointGraceAnnotation:  domain + "/checkpoint-grace",
		QuarantineAnnotation:       domain + "/quarantine",
		QuarantineTaint:            domain + "/quarantined",

		QueueGate:                    domain + "/queue",
		QueuedCondition:              domain + "/Queued",
		AdmissionAnnotation:          domain + "/admission",
		QueueingLabel:                domain + "/queueing",
		GPUModelsAnnotation:          domain + "/gpu-models",
		MaxRuntimeAnnotation:         domain + "/max-runtime",
		CheckpointIntervalAnnotation: domain + "/checkpoint-interval",
		LastCheckpointAnnotation:     domain + "/last-checkpoint",
		MinRuntimeAnnotation:         domain + "/min-runtime",
		MovableAnnotation:            domain + "/movable",
		DeadlineAnnotation:           domain + "/deadline",
		LeaderLabel:                  domain + "/extender-leader",
		ReservationAnnotation:        domain + "/reservation",
		QueuedJobAnnotation:          domain + "/queued",
		ShareWithoutMPSAnnotation:    domain + "/share-without-mps",
		IdleSinceAnnotation:          domain + "/idle-since",
		GPUIdleCondition:             domain + "/GPUIdle",
		GPUUtilizationAnnotation:     domain + "/gpu-utilization",
	}, nil
}

// MustNames is NewNames for compile-time constants in tests and defaults.
// It panics on a bad domain, so only use it with literals.
func MustNames(domain string) Names {
	n, err := NewNames(domain)
	if err != nil {
		panic(err)
	}
	return n
}

// Default holds the names for DefaultDomain.
var Default = MustNames(DefaultDomain)

// ParseGangSize reads the gang-size annotation value.
func ParseGangSize(field, s string) (int, error) {
	if s == "" {
		return 0, fieldErr(field, nil, "is missing", "write the number of pods in the gang, e.g. \"16\"")
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fieldErr(field, s, "is not a whole number", "write the number of pods in the gang, e.g. \"16\"")
		}
		n = n*10 + int(c-'0')
		if n > MaxGangSize {
			break
		}
	}
	if n < 1 || n > MaxGangSize {
		return 0, fieldErr(field, s, "is out of range", fmt.Sprintf("a gang has 1..%d pods", MaxGangSize))
	}
	return n, nil
}
