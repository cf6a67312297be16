package podreq

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
)

// Parsed is everything Rota reads from one version of a pod about what it
// asks for: the request (FromPod, with Job set to the workload key), its
// gang, the GPU models it names, and the admission record Rota believes.
// Treat it as read-only: a Parsed is shared by every reader of that pod
// version.
type Parsed struct {
	// Request is FromPod's answer with Request.Job set (WorkloadKey); Err
	// is why it does not parse. Models and Ends are left as FromPod leaves
	// them: the readers narrow them (Models, Admission) and date them.
	Request placement.Request
	Err     error
	// Gang is the pod's gang (GangOf); GangErr why its gang labels do not
	// parse (Gang is then nil).
	Gang    *GangRef
	GangErr error
	// Models are the GPU models the pod names (GPUModels); ModelsErr why
	// they do not parse.
	Models    []string
	ModelsErr error
	// Admission is the admission record Rota believes (Records.Admission);
	// Unsigned one the pod carries that Rota did not sign.
	Admission, Unsigned *contract.Admission
}

// Key is the workload key: the gang's, else the pod's own.
func (p *Parsed) Key() string { return p.Request.Job }

// Parse reads one version of a pod. Readers that see a pod more than once
// share a Parser instead.
func Parse(pod *corev1.Pod, o Options, records Records) *Parsed {
	p := &Parsed{}
	p.Request, p.Err = FromPod(pod, o)
	p.Gang, p.GangErr = GangOf(pod, o.Names)
	p.Request.Job = WorkloadKey(pod, p.Gang)
	p.Models, p.ModelsErr = GPUModels(pod, o.Names)
	p.Admission, p.Unsigned = records.Admission(pod, o.Names)
	return p
}

// Parser parses each pod once per UID and resourceVersion, for every part
// of a process that reads the same pods (filter, bind, the queue's pass,
// preemption's guard, the status page). Its owner calls Forget when a pod
// is gone. It is safe for concurrent use.
type Parser struct {
	o       Options
	records Records
	max     int

	mu sync.Mutex
	m  map[types.UID]*parsedAt
}

type parsedAt struct {
	rv string
	p  *Parsed
}

// DefaultParserEntries bounds a Parser that its owner does not size: past
// it the Parser starts afresh (pods it never heard deleted cannot pile up).
const DefaultParserEntries = 1 << 18

// NewParser makes a Parser for a cluster's names and memory unit and the
// records it believes. max bounds the pods it remembers (0: the default).
func NewParser(o Options, records Records, max int) *Parser {
	if max <= 0 {
		max = DefaultParserEntries
	}
	return &Parser{o: o, records: records, max: max, m: map[types.UID]*parsedAt{}}
}

// MemoryUnit is the cluster's gpu-memory unit the Parser reads requests in.
func (p *Parser) MemoryUnit() contract.MiB { return p.o.unit() }

// Records are the records the Parser believes.
func (p *Parser) Records() Records { return p.records }

// Of returns the pod's Parsed, parsing it only when this UID was not seen
// at this resourceVersion. A pod without a UID or resourceVersion (not
// from the API server) is parsed every time.
func (p *Parser) Of(pod *corev1.Pod) *Parsed {
	if pod.UID == "" || pod.ResourceVersion == "" {
		return Parse(pod, p.o, p.records)
	}
	p.mu.Lock()
	if e, ok := p.m[pod.UID]; ok && e.rv == pod.ResourceVersion {
		p.mu.Unlock()
		return e.p
	}
	p.mu.Unlock()
	parsed := Parse(pod, p.o, p.records) // outside the lock: readers of other pods go on
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) >= p.max {
		clear(p.m)
	}
	p.m[pod.UID] = &parsedAt{rv: pod.ResourceVersion, p: parsed}
	return parsed
}

// Forget drops what the Parser keeps for a pod that is gone.
func (p *Parser) Forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, uid)
}

// Len is the number of pods the Parser remembers.
func (p *Parser) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
