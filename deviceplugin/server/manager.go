package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// KubeletSocket is the kubelet registration socket's name in the device
// plugin folder.
const KubeletSocket = "kubelet.sock"

// SocketName is the plugin's socket name for a resource:
// "example.com/gpu-memory" -> "rota-gpu-memory.sock".
func SocketName(resource string) string {
	return "rota-" + resource[strings.LastIndex(resource, "/")+1:] + ".sock"
}

// Manager serves the plugins on their sockets, registers them with the
// kubelet and does both again when the kubelet restarts (its socket
// disappears or is replaced) or a plugin socket is removed.
type Manager struct {
	dir     string
	poll    time.Duration
	plugins []*Plugin
	metrics *metrics.Metrics

	mu      sync.Mutex
	servers []*grpc.Server
}

// NewManager serves plugins in dir, checking the kubelet socket every poll.
func NewManager(dir string, poll time.Duration, m *metrics.Metrics, plugins ...*Plugin) *Manager {
	return &Manager{dir: dir, poll: poll, plugins: plugins, metrics: m}
}

// socketID identifies one incarnation of a socket file.
type socketID struct {
	info fs.FileInfo
}

func (a socketID) same(b fs.FileInfo) bool {
	return a.info != nil && b != nil && os.SameFile(a.info, b) && a.info.ModTime().Equal(b.ModTime())
}

// Run serves and registers until ctx is done, then stops the servers and
// removes the plugin sockets. It returns an error only when a socket cannot
// be served at all.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	kubelet := filepath.Join(m.dir, KubeletSocket)
	defer m.stop()
	var registeredWith socketID
	serving := false
	tick := time.NewTicker(m.poll)
	defer tick.Stop()
	for {
		if !serving {
			if err := m.start(ctx); err != nil {
				return err
			}
			serving = true
		}
		fi, err := os.Stat(kubelet)
		switch {
		case registeredWith.info == nil && err == nil:
			if err := m.register(ctx, kubelet); err != nil {
				logger.Error(err, "Registration with the kubelet failed; retrying", "socket", kubelet)
				break
			}
			registeredWith = socketID{info: fi}
			logger.Info("Registered with the kubelet", "socket", kubelet)
		case registeredWith.info != nil && err != nil:
			logger.Info("Kubelet socket gone; waiting for the kubelet to come back", "socket", kubelet)
			registeredWith = socketID{}
			m.stop()
			serving = false
		case registeredWith.info != nil && !registeredWith.same(fi):
			logger.Info("Kubelet restarted; serving and registering again", "socket", kubelet)
			registeredWith = socketID{}
			m.stop()
			serving = false
			continue
		case registeredWith.info != nil && !m.socketsPresent():
			logger.Info("A plugin socket was removed; serving and registering again")
			registeredWith = socketID{}
			m.stop()
			serving = false
			continue
		}
		select {
		case <-ctx.Done():
			logger.Info("Device plugin stopping")
			return nil
		case <-tick.C:
		}
	}
}

func (m *Manager) socketsPresent() bool {
	for _, p := range m.plugins {
		if _, err := os.Stat(filepath.Join(m.dir, SocketName(p.resource))); err != nil {
			return false
		}
	}
	return true
}

// start listens on every plugin socket (SocketMode) and serves it.
func (m *Manager) start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.plugins {
		path := filepath.Join(m.dir, SocketName(p.resource))
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale socket %s: %w", path, err)
		}
		lis, err := listen(m.dir, path)
		if err != nil {
			return err
		}
		plogger := klog.LoggerWithValues(logger, "resource", p.resource)
		srv := grpc.NewServer(
			grpc.UnaryInterceptor(func(c context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(klog.NewContext(c, plogger), req)
			}),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				return h(srv, &loggedStream{ServerStream: ss, ctx: klog.NewContext(ss.Context(), plogger)})
			}),
		)
		pluginapi.RegisterDevicePluginServer(srv, p)
		go func() {
			if err := srv.Serve(lis); err != nil {
				plogger.Error(err, "Plugin gRPC server stopped", "socket", path)
			}
		}()
		m.servers = append(m.servers, srv)
		logger.V(2).Info("Serving device plugin", "resource", p.resource, "socket", path)
	}
	return nil
}

// SocketMode is the plugin sockets' mode: only the kubelet (root) connects.
const SocketMode fs.FileMode = 0o600

// listen listens on a unix socket at path that is never reachable with a
// wider mode than SocketMode: it binds in a fresh 0700 folder inside dir,
// chmods the socket there and renames it into place (net.Listen creates the
// socket with the process umask, and connections queued before a chmod in
// place would be served).
func listen(dir, path string) (net.Listener, error) {
	tmp, err := os.MkdirTemp(dir, ".rota-")
	if err != nil {
		return nil, fmt.Errorf("socket folder in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, filepath.Base(path))
	lis, err := net.Listen("unix", bound)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The socket file moves: the listener must not remove the old name on
	// Close (stop removes the socket).
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(bound, SocketMode); err != nil {
		lis.Close()
		return nil, fmt.Errorf("chmod %s: %w", bound, err)
	}
	if err := os.Rename(bound, path); err != nil {
		lis.Close()
		return nil, fmt.Errorf("move socket to %s: %w", path, err)
	}
	return lis, nil
}

// stop stops every server and removes the plugin sockets.
func (m *Manager) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		s.Stop()
	}
	m.servers = nil
	for _, p := range m.plugins {
		_ = os.Remove(filepath.Join(m.dir, SocketName(p.resource)))
	}
}

// register registers every plugin with the kubelet.
func (m *Manager) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet %s: %w", kubelet, err)
	}
	defer conn.Close()
	client := pluginapi.NewRegistrationClient(conn)
	for _, p := range m.plugins {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.Register(rctx, &pluginapi.RegisterRequest{
			Version:      pluginapi.Version,
			Endpoint:     SocketName(p.resource),
			ResourceName: p.resource,
			Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		})
		cancel()
		m.metrics.Registration(p.resource, err == nil)
		if err != nil {
			return fmt.Errorf("register %s: %w", p.resource, err)
		}
	}
	return nil
}

// loggedStream carries the plugin's logger in the stream context.
type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loggedStream) Context() context.Context { return s.ctx }
