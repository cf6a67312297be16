#!/usr/bin/env bash
# Builds the Helm CLI pinned in test/tools/helm/go.mod into .cache/k8s/bin
# (once; later runs reuse it). Used by `make chart-check`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ROTA_K8S_BIN:-$root/.cache/k8s/bin}
want=$(grep -Eo 'helm.sh/helm/v3 v[0-9][^ ]*' "$root/test/tools/helm/go.mod" | awk '{print $2}')
if [[ -x $bin/helm ]] && "$bin/helm" version --short 2>/dev/null | grep -q "^${want}"; then
  exit 0
fi
mkdir -p "$bin"
echo "building helm $want (first run takes a few minutes)..." >&2
cd "$root/test/tools/helm"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${want}" \
  -o "$bin/helm.tmp" helm.sh/helm/v3/cmd/helm
mv "$bin/helm.tmp" "$bin/helm"
"$bin/helm" version --short
