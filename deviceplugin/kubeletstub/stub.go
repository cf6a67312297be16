// Package kubeletstub is a stand-in for the kubelet's device manager, for
// tests and for the e2e harness's simulated nodes. It serves the v1beta1
// Registration service on a real unix socket (kubelet.sock in a given
// folder), dials each plugin that registers, consumes its ListAndWatch
// stream, and allocates devices the way the kubelet does: the available
// healthy devices not in use go to GetPreferredAllocation, the preference is
// taken (topped up from the remaining available devices if it falls short),
// and Allocate is called with the chosen IDs.
//
// Restart simulates a kubelet restart: the registration socket and every
// other socket in the folder are removed and kubelet.sock is created anew,
// as the kubelet's device manager does when it starts.
//
// A Stub is safe for concurrent use.
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// SocketName is the registration socket's name in the folder.
const SocketName = "kubelet.sock"

// Device is one device as the plugin last reported it.
type Device struct {
	ID     string
	Health string // pluginapi.Healthy or pluginapi.Unhealthy
}

// Registration is one Register call received.
type Registration struct {
	Resource string
	Endpoint string
	Options  *pluginapi.DevicePluginOptions
	At       time.Time
}

// Allocation is the result of one Allocate.
type Allocation struct {
	Resource  string
	DeviceIDs []string // the devices handed to the container, in choice order
	// Preferred is what GetPreferredAllocation returned (nil if not called).
	Preferred []string
	Response  *pluginapi.ContainerAllocateResponse
}

// UpdateFunc is called after every ListAndWatch message with the resource's
// healthy and total device counts (for patching Node capacity/allocatable).
// It runs on the stream's goroutine; it must not call back into the Stub's
// Allocate.
type UpdateFunc func(resource string, healthy, total int)

// Option configures a Stub.
type Option func(*Stub)

// WithUpdateFunc sets the ListAndWatch callback.
func WithUpdateFunc(f UpdateFunc) Option { return func(s *Stub) { s.onUpdate = f } }

// Stub is a kubelet device manager stand-in for one simulated node.
type Stub struct {
	pluginapi.UnimplementedRegistrationServer

	dir      string
	onUpdate UpdateFunc

	mu            sync.Mutex
	srv           *grpc.Server
	plugins       map[string]*plugin // by resource
	registrations []Registration
	inUse         map[string]map[string]bool // resource -> device ID -> allocated
	changed       chan struct{}              // closed and replaced on every change
	closed        bool
}

// plugin is one registered plugin connection.
type plugin struct {
	resource string
	opts     *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
	devices  []Device
}

var _ pluginapi.RegistrationServer = (*Stub)(nil)

// Start serves the Registration service on dir/kubelet.sock.
func Start(dir string, opts ...Option) (*Stub, error) {
	s := &Stub{dir: dir, plugins: map[string]*plugin{}, inUse: map[string]map[string]bool{}, changed: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// SocketPath is the registration socket's path.
func (s *Stub) SocketPath() string { return filepath.Join(s.dir, SocketName) }

func (s *Stub) listen() error {
	path := s.SocketPath()
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("kubeletstub listen %s: %w", path, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, s)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

func (s *Stub) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Register implements pluginapi.RegistrationServer: it records the call and
// connects to the plugin's endpoint in the background, as the kubelet does.
func (s *Stub) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("kubeletstub: unsupported device plugin API version %q", r.Version)
	}
	if r.ResourceName == "" || r.Endpoint == "" || filepath.Base(r.Endpoint) != r.Endpoint {
		return nil, fmt.Errorf("kubeletstub: bad registration: resource %q endpoint %q", r.ResourceName, r.Endpoint)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: dial %s: %w", r.Endpoint, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &plugin{resource: r.ResourceName, opts: r.Options, conn: conn, client: pluginapi.NewDevicePluginClient(conn), cancel: cancel}
	if p.opts == nil {
		p.opts = &pluginapi.DevicePluginOptions{}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		conn.Close()
		return nil, errors.New("kubeletstub: closed")
	}
	if old := s.plugins[r.ResourceName]; old != nil {
		old.cancel()
		old.conn.Close()
	}
	s.plugins[r.ResourceName] = p
	s.registrations = append(s.registrations, Registration{Resource: r.ResourceName, Endpoint: r.Endpoint, Options: p.opts, At: time.Now()})
	s.notifyLocked()
	s.mu.Unlock()
	go s.watch(ctx, p) //nolint:contextcheck // the plugin connection outlives this RPC, as the kubelet's does
	return &pluginapi.Empty{}, nil
}

// watch consumes one plugin's ListAndWatch stream until it ends.
func (s *Stub) watch(ctx context.Context, p *plugin) {
	stream, err := p.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		devs := make([]Device, 0, len(resp.Devices))
		healthy := 0
		for _, d := range resp.Devices {
			devs = append(devs, Device{ID: d.ID, Health: d.Health})
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		s.mu.Lock()
		if s.plugins[p.resource] != p {
			s.mu.Unlock()
			return
		}
		p.devices = devs
		s.notifyLocked()
		s.mu.Unlock()
		if s.onUpdate != nil {
			s.onUpdate(p.resource, healthy, len(devs))
		}
	}
}

// Registrations returns every Register call received so far.
func (s *Stub) Registrations() []Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.registrations)
}

// Devices returns the resource's devices as last reported.
func (s *Stub) Devices(resource string) []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.plugins[resource]; p != nil {
		return slices.Clone(p.devices)
	}
	return nil
}

// Count returns the resource's healthy and total device counts.
func (s *Stub) Count(resource string) (healthy, total int) {
	for _, d := range s.Devices(resource) {
		total++
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	return healthy, total
}

// WaitFor blocks until cond (called without the Stub's lock) holds or ctx
// ends; it re-checks after every registration and ListAndWatch message.
func (s *Stub) WaitFor(ctx context.Context, cond func(*Stub) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("kubeletstub: condition not met: %w", ctx.Err())
		}
	}
}

// WaitRegistered waits until the resource has registered more than after
// times in total (pass 0 for the first registration) and its first device
// list arrived.
func (s *Stub) WaitRegistered(ctx context.Context, resource string, after int) error {
	return s.WaitFor(ctx, func(s *Stub) bool {
		n := 0
		for _, r := range s.Registrations() {
			if r.Resource == resource {
				n++
			}
		}
		return n > after && len(s.Devices(resource)) > 0
	})
}

// Allocate does what the kubelet's device manager does for one container
// asking for n devices of resource: available = healthy devices not in use;
// mustInclude (devices reused from init containers) come first; the
// plugin's GetPreferredAllocation picks the rest when it offers it, and any
// shortfall is filled from the remaining available devices in ID order;
// then Allocate is called with the chosen IDs, which are marked in use.
func (s *Stub) Allocate(ctx context.Context, resource string, n int, mustInclude []string) (*Allocation, error) {
	s.mu.Lock()
	p := s.plugins[resource]
	if p == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("kubeletstub: no plugin registered for %s", resource)
	}
	var available []string
	for _, d := range p.devices {
		if d.Health == pluginapi.Healthy && !s.inUse[resource][d.ID] && !slices.Contains(mustInclude, d.ID) {
			available = append(available, d.ID)
		}
	}
	client, opts := p.client, p.opts
	s.mu.Unlock()

	needed := n - len(mustInclude)
	if needed < 0 || len(available) < needed {
		return nil, fmt.Errorf("kubeletstub: requested number of devices unavailable for %s. Requested: %d, Available: %d",
			resource, n, len(available)+len(mustInclude))
	}
	a := &Allocation{Resource: resource, DeviceIDs: slices.Clone(mustInclude)}
	if needed > 0 && opts.GetPreferredAllocationAvailable {
		resp, err := client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs:   append(slices.Clone(mustInclude), available...),
				MustIncludeDeviceIDs: mustInclude,
				AllocationSize:       int32(n),
			}},
		})
		if err != nil {
			return nil, fmt.Errorf("kubeletstub: GetPreferredAllocation for %s: %w", resource, err)
		}
		if len(resp.ContainerResponses) > 0 {
			a.Preferred = resp.ContainerResponses[0].DeviceIDs
			for _, id := range a.Preferred {
				if len(a.DeviceIDs) < n && slices.Contains(available, id) && !slices.Contains(a.DeviceIDs, id) {
					a.DeviceIDs = append(a.DeviceIDs, id)
				}
			}
		}
	}
	rest := slices.Clone(available)
	slices.Sort(rest)
	for _, id := range rest {
		if len(a.DeviceIDs) >= n {
			break
		}
		if !slices.Contains(a.DeviceIDs, id) {
			a.DeviceIDs = append(a.DeviceIDs, id)
		}
	}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: a.DeviceIDs}},
	})
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: Allocate %s %v: %w", resource, a.DeviceIDs, err)
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("kubeletstub: Allocate %s returned %d container responses, want 1", resource, len(resp.ContainerResponses))
	}
	a.Response = resp.ContainerResponses[0]
	s.mu.Lock()
	if s.inUse[resource] == nil {
		s.inUse[resource] = map[string]bool{}
	}
	for _, id := range a.DeviceIDs {
		s.inUse[resource][id] = true
	}
	s.mu.Unlock()
	return a, nil
}

// Release marks devices free again (the pod ended).
func (s *Stub) Release(resource string, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.inUse[resource], id)
	}
}

// Restart simulates a kubelet restart: connections to plugins are dropped,
// the registration socket and every other socket in the folder are removed,
// and a new kubelet.sock is served. Devices in use stay in use (the real
// kubelet keeps them in its checkpoint).
func (s *Stub) Restart() error {
	s.mu.Lock()
	srv := s.srv
	for _, p := range s.plugins {
		p.cancel()
		p.conn.Close()
	}
	s.plugins = map[string]*plugin{}
	s.srv = nil
	s.notifyLocked()
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("kubeletstub restart: %w", err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
	return s.listen()
}

// Close stops the stub and removes its socket.
func (s *Stub) Close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.srv
	for _, p := range s.plugins {
		p.cancel()
		p.conn.Close()
	}
	s.plugins = map[string]*plugin{}
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(s.SocketPath())
	return nil
}
