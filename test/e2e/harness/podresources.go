package harness

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
)

// PodResourcesSocketName is the kubelet PodResources socket's name in a
// plugin node's folder (GPUNode.PodResourcesSocket).
const PodResourcesSocketName = "podres.sock"

// podResources serves the kubelet's PodResources API (v1) for one simulated
// node, as the kubelet stand-in sees the node: List reports the active pods,
// i.e. every pod the stand-in admitted there and has not released, and,
// while it admits a pod, that pod too (with the devices its containers got
// so far), but not the pods it has not reached yet. That is what lets the
// device plugin tell which of several same-shape pending pods an
// Allocate is for (deviceplugin/README.md, "The Allocate handoff").
//
// As the kubelet, it lists the app containers and the restartable
// (sidecar) init containers of a pod, not its regular init containers, and
// one ContainerDevices per device (the plugin's fake backend reports no
// topology, so none is listed).
//
// It has a lock of its own: the plugin lists from inside
// GetPreferredAllocation and Allocate, which the stand-in calls holding the
// node's admission lock.
type podResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer

	path      string
	stub      *kubeletstub.Stub
	resources []string // the Rota resources, in the order listed
	srv       *grpc.Server

	mu    sync.Mutex
	seq   uint64
	pods  map[types.UID]*activePod
	ended map[types.UID]bool // released: never listed again (UIDs are unique)
}

// activePod is one pod the kubelet counts as active on the node.
type activePod struct {
	seq             uint64 // the order in which the stand-in reached it
	namespace, name string
	containers      []*activeContainer
}

type activeContainer struct {
	name    string
	devices map[string][]string // resource → device IDs
}

var _ podresourcesapi.PodResourcesListerServer = (*podResources)(nil)

// startPodResources serves the API on path (removed first if present).
func startPodResources(path string, stub *kubeletstub.Stub, resources ...string) (*podResources, error) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("pod resources listen %s: %w", path, err)
	}
	p := &podResources{path: path, stub: stub, resources: resources, srv: grpc.NewServer(),
		pods: map[types.UID]*activePod{}, ended: map[types.UID]bool{}}
	podresourcesapi.RegisterPodResourcesListerServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// Close stops serving and removes the socket.
func (p *podResources) Close() error {
	p.srv.Stop()
	if err := os.Remove(p.path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// add makes the pod active, with no devices yet, unless it is already
// active or was released. It reports whether the pod is active now.
func (p *podResources) add(pod *corev1.Pod) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended[pod.UID] {
		return false
	}
	if _, ok := p.pods[pod.UID]; ok {
		return true
	}
	p.seq++
	a := &activePod{seq: p.seq, namespace: pod.Namespace, name: pod.Name}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			a.containers = append(a.containers, &activeContainer{name: c.Name, devices: map[string][]string{}})
		}
	}
	for _, c := range pod.Spec.Containers {
		a.containers = append(a.containers, &activeContainer{name: c.Name, devices: map[string][]string{}})
	}
	p.pods[pod.UID] = a
	return true
}

// allocated records devices a container of an active pod got. Regular init
// containers are not listed, so their devices are not either.
func (p *podResources) allocated(uid types.UID, container, resource string, ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.pods[uid]
	if a == nil {
		return
	}
	for _, c := range a.containers {
		if c.name == container {
			c.devices[resource] = append(c.devices[resource], ids...)
			return
		}
	}
}

// remove makes the pod inactive for good (it ended, was deleted, or failed
// admission).
func (p *podResources) remove(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, uid)
	p.ended[uid] = true
}

// listed returns the active pods as List reports them, in the order the
// stand-in reached them.
func (p *podResources) listed() []*podresourcesapi.PodResources {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := make([]*activePod, 0, len(p.pods))
	for _, a := range p.pods {
		pods = append(pods, a)
	}
	slices.SortFunc(pods, func(a, b *activePod) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]*podresourcesapi.PodResources, 0, len(pods))
	for _, a := range pods {
		out = append(out, p.resourcesLocked(a))
	}
	return out
}

func (p *podResources) resourcesLocked(a *activePod) *podresourcesapi.PodResources {
	pr := &podresourcesapi.PodResources{Name: a.name, Namespace: a.namespace,
		Containers: make([]*podresourcesapi.ContainerResources, 0, len(a.containers))}
	for _, c := range a.containers {
		cr := &podresourcesapi.ContainerResources{Name: c.name}
		for _, res := range p.resources {
			for _, id := range c.devices[res] {
				cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
			}
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

// List implements PodResourcesListerServer: the node's active pods.
func (p *podResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: p.listed()}, nil
}

// Get implements PodResourcesListerServer: one active pod.
func (p *podResources) Get(_ context.Context, r *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.pods {
		if a.namespace == r.PodNamespace && a.name == r.PodName {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: p.resourcesLocked(a)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", r.PodName, r.PodNamespace)
}

// GetAllocatableResources implements PodResourcesListerServer: the healthy
// devices the device plugins last reported, one ContainerDevices per device.
func (p *podResources) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	resp := &podresourcesapi.AllocatableResourcesResponse{}
	for _, res := range p.resources {
		for _, d := range p.stub.Devices(res) {
			if d.Health == pluginapi.Healthy {
				resp.Devices = append(resp.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{d.ID}})
			}
		}
	}
	return resp, nil
}
