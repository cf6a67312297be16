package main

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	_ "github.com/julienschmidt/httprouter"
	_ "github.com/patrickmn/go-cache"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/admission/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/klog/v2"
	_ "k8s.io/kube-scheduler/extender/v1"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/podresources/v1"
	_ "sigs.k8s.io/yaml"
)

func main() {}
