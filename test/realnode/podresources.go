package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources lists what the kubelet's PodResources API reports: every
// pod, container and the device IDs it holds, per resource.
func (e *Env) PodResources(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	conn, err := grpc.NewClient("unix://"+e.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing the kubelet's PodResources socket %s: %w", e.PodResourcesSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources List: %w", err)
	}
	return resp, nil
}

// AllocatableDevices returns the kubelet's allocatable device IDs (healthy
// devices of registered plugins) per resource, from PodResources.
func (e *Env) AllocatableDevices(ctx context.Context) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix://"+e.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).GetAllocatableResources(ctx,
		&podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources GetAllocatableResources: %w", err)
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
	}
	return out, nil
}

func jsonMergePatchAnnotations(annotations map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
}
