package server

import (
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// MessageSize is the protobuf-encoded size of a ListAndWatch response
// carrying devs.
func MessageSize(devs []*pluginapi.Device) int {
	return proto.Size(&pluginapi.ListAndWatchResponse{Devices: devs})
}
