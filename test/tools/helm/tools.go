//go:build tools

// Package tools pins the Helm CLI that CI uses for helm lint and helm
// template; hack/helm.sh builds it into .cache/k8s/bin.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
