package discovery

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// FakeSpec is the fake backend's file (YAML or JSON):
//
//	model: NVIDIA H200 141GB HBM3e
//	count: 8
//	memoryMiB: 144384
//	islandSize: 4     # NVLink islands of 4 consecutive GPUs; 0 or 1: none
//	numa: 2           # NUMA nodes the GPUs are spread over
//	uuidSeed: node-7  # optional; default: the node name
//	healthFile: health  # optional; relative to this file's folder
//
// UUIDs are derived from the seed exactly as topology.FromSpec derives them,
// so the simulator and the fake plugin agree on them.
type FakeSpec struct {
	Model      string       `json:"model"`
	Count      int          `json:"count"`
	MemoryMiB  contract.MiB `json:"memoryMiB"`
	IslandSize int          `json:"islandSize,omitempty"`
	NUMA       int          `json:"numa,omitempty"`
	UUIDSeed   string       `json:"uuidSeed,omitempty"`
	HealthFile string       `json:"healthFile,omitempty"`
}

// DefaultHealthFile is the health file name next to the fake spec.
const DefaultHealthFile = "health"

// maxFakeFile bounds the fake spec and health files.
const maxFakeFile = 64 << 10

// ParseFakeSpec decodes and validates a fake backend file.
func ParseFakeSpec(data []byte) (FakeSpec, error) {
	var s FakeSpec
	if len(data) > maxFakeFile {
		return FakeSpec{}, fmt.Errorf("fake GPU file is %d bytes; keep it under %d", len(data), maxFakeFile)
	}
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return FakeSpec{}, fmt.Errorf("fake GPU file: %w", err)
	}
	var errs []error
	if strings.TrimSpace(s.Model) == "" {
		errs = append(errs, errors.New("model: is empty; write the GPU model, e.g. NVIDIA H200 141GB HBM3e"))
	}
	if s.Count < 1 || s.Count > contract.MaxGPUsPerNode {
		errs = append(errs, fmt.Errorf("count: %d is out of range 1..%d", s.Count, contract.MaxGPUsPerNode))
	}
	if s.MemoryMiB <= 0 || s.MemoryMiB > 1<<24 {
		errs = append(errs, fmt.Errorf("memoryMiB: %d is out of range 1..%d", s.MemoryMiB, 1<<24))
	}
	if s.IslandSize < 0 || s.IslandSize > max(s.Count, 1) {
		errs = append(errs, fmt.Errorf("islandSize: %d is out of range 0..count", s.IslandSize))
	}
	if s.NUMA < 0 || s.NUMA > max(s.Count, 1) {
		errs = append(errs, fmt.Errorf("numa: %d is out of range 0..count", s.NUMA))
	}
	if s.HealthFile != "" && (filepath.IsAbs(s.HealthFile) || strings.Contains(s.HealthFile, "..")) {
		errs = append(errs, fmt.Errorf("healthFile: %q must be a plain name relative to the fake GPU file", s.HealthFile))
	}
	if err := errors.Join(errs...); err != nil {
		return FakeSpec{}, err
	}
	return s, nil
}

// Fault is one entry of the fake health file.
type Fault struct {
	Kind EventKind
	XID  uint64
}

// ParseHealthFile reads the fake health file. Each line is
//
//	<gpu>=<state>
//
// where <gpu> is a GPU UUID or index and <state> is "xid:<code>", "ecc",
// "lost" or "healthy" (the same as no line). Blank lines and lines starting
// with # are ignored. The result maps the <gpu> key to its fault.
func ParseHealthFile(data []byte) (map[string]Fault, error) {
	if len(data) > maxFakeFile {
		return nil, fmt.Errorf("health file is %d bytes; keep it under %d", len(data), maxFakeFile)
	}
	out := map[string]Fault{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, state, ok := strings.Cut(text, "=")
		key, state = strings.TrimSpace(key), strings.TrimSpace(state)
		if !ok || key == "" {
			return nil, fmt.Errorf("health file line %d: %q is not <gpu>=<state>, e.g. GPU-…=xid:79", line, text)
		}
		switch {
		case state == "healthy":
			delete(out, key)
		case state == "ecc":
			out[key] = Fault{Kind: KindECC}
		case state == "lost":
			out[key] = Fault{Kind: KindLost}
		case strings.HasPrefix(state, "xid:"):
			x, err := strconv.ParseUint(strings.TrimPrefix(state, "xid:"), 10, 32)
			if err != nil || x == 0 {
				return nil, fmt.Errorf("health file line %d: %q is not a positive XID code", line, state)
			}
			out[key] = Fault{Kind: KindXID, XID: x}
		default:
			return nil, fmt.Errorf("health file line %d: state %q is not xid:<code>, ecc, lost or healthy", line, state)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("health file: %w", err)
	}
	return out, nil
}

// Fake is the Backend over a FakeSpec file. It is safe for concurrent use.
type Fake struct {
	gpus       []topology.GPU
	healthPath string
	poll       time.Duration

	mu     sync.Mutex
	faults map[string]Fault // by UUID, as last read
}

var _ Backend = (*Fake)(nil)

// OpenFake reads the fake spec at path; nodeName seeds the UUIDs unless the
// spec sets uuidSeed.
func OpenFake(path, nodeName string) (*Fake, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fake GPU file: %w", err)
	}
	spec, err := ParseFakeSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seed := spec.UUIDSeed
	if seed == "" {
		seed = nodeName
	}
	node := topology.FromSpec(topology.Spec{Name: seed, Model: spec.Model, Count: spec.Count,
		MemoryMiB: spec.MemoryMiB, IslandSize: spec.IslandSize, NUMANodes: spec.NUMA})
	hf := spec.HealthFile
	if hf == "" {
		hf = DefaultHealthFile
	}
	f := &Fake{gpus: node.GPUs, healthPath: filepath.Join(filepath.Dir(path), hf),
		poll: 200 * time.Millisecond, faults: map[string]Fault{}}
	islands(f.gpus)
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// HealthPath is the health file this backend watches.
func (f *Fake) HealthPath() string { return f.healthPath }

// GPUs implements Backend.
func (f *Fake) GPUs() []topology.GPU { return f.gpus }

// read parses the health file (missing means no faults) keyed by UUID.
func (f *Fake) read() (map[string]Fault, error) {
	data, err := os.ReadFile(f.healthPath)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read health file: %w", err)
	}
	raw, err := ParseHealthFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.healthPath, err)
	}
	byUUID := make(map[string]Fault, len(raw))
	for key, fault := range raw {
		uuid, ok := f.resolve(key)
		if !ok {
			return nil, fmt.Errorf("%s: %q is neither a GPU UUID nor a GPU index of this node", f.healthPath, key)
		}
		byUUID[uuid] = fault
	}
	return byUUID, nil
}

// reload reads the health file into f.faults.
func (f *Fake) reload() error {
	_, err := f.diff()
	return err
}

func (f *Fake) diff() ([]Event, error) {
	byUUID, err := f.read()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var evs []Event
	for _, g := range f.gpus { // in index order, deterministic
		nf, ok := byUUID[g.UUID]
		if of, had := f.faults[g.UUID]; ok && (!had || of != nf) {
			evs = append(evs, Event{UUID: g.UUID, Kind: nf.Kind, XID: nf.XID})
		}
	}
	f.faults = byUUID
	return evs, nil
}

func (f *Fake) resolve(key string) (string, bool) {
	for _, g := range f.gpus {
		if g.UUID == key {
			return g.UUID, true
		}
	}
	if i, err := strconv.Atoi(key); err == nil {
		for _, g := range f.gpus {
			if g.Index == i {
				return g.UUID, true
			}
		}
	}
	return "", false
}

// Watch implements Backend: it polls the health file and emits each fault
// that appears or changes. Faults present at start-up are emitted too.
func (f *Fake) Watch(ctx context.Context, emit func(Event)) error {
	logger := klog.FromContext(ctx)
	f.mu.Lock()
	initial := make([]Event, 0, len(f.faults))
	for _, g := range f.gpus {
		if fl, ok := f.faults[g.UUID]; ok {
			initial = append(initial, Event{UUID: g.UUID, Kind: fl.Kind, XID: fl.XID})
		}
	}
	f.mu.Unlock()
	for _, e := range initial {
		emit(e)
	}
	t := time.NewTicker(f.poll)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		evs, err := f.diff()
		if err != nil {
			if err.Error() != lastErr {
				logger.Error(err, "Ignoring unreadable fake health file", "path", f.healthPath)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		for _, e := range evs {
			emit(e)
		}
	}
}

// Probe implements Backend: a GPU fails its probe while the health file
// lists a fault for it.
func (f *Fake) Probe(uuid string) error {
	faults, err := f.read()
	if err != nil {
		return err
	}
	if fl, ok := faults[uuid]; ok {
		return fmt.Errorf("probe %s: health file still reports %s", uuid, Event{Kind: fl.Kind, XID: fl.XID}.Reason())
	}
	for _, g := range f.gpus {
		if g.UUID == uuid {
			return nil
		}
	}
	return fmt.Errorf("probe %s: unknown GPU", uuid)
}

// Close implements Backend.
func (f *Fake) Close() error { return nil }
