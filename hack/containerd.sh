#!/usr/bin/env bash
# Builds containerd 2.x and its runc shim, pinned in test/tools/containerd/go.mod,
# from the Go module proxy into .cache/containerd/bin (ignored by git), as
# hack/k8s-tools.sh builds the control plane. test/realnode's DRA scenario runs
# it: CDI, which a DRA driver uses to put environment, mounts and device nodes
# into containers, is on by default in containerd 2 and absent from the host's
# containerd 1.6. Built without cgo and without the btrfs, devmapper and zfs
# snapshotters (the suite uses overlayfs). A binary that exists and reports the
# pinned version is not rebuilt. The first build takes about 8 minutes on 2 cores.
#
# Environment: FORCE=1 rebuilds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ROTA_CONTAINERD_BIN:-$root/.cache/containerd/bin}
want=$(grep -Eo 'github.com/containerd/containerd/v2 v[0-9][^ ]*' "$root/test/tools/containerd/go.mod" | awk '{print $2}')
if [[ -z "${FORCE:-}" && -x $bin/containerd && -x $bin/containerd-shim-runc-v2 ]] &&
  "$bin/containerd" --version 2>/dev/null | grep -qE " v?${want#v}[+ ]"; then
  exit 0
fi
mkdir -p "$bin.tmp"
echo "building containerd $want (first run takes about 8 minutes)..." >&2
cd "$root/test/tools/containerd"
CGO_ENABLED=0 go build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${want}" \
  -o "$bin.tmp/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
rm -rf "$bin"
mv "$bin.tmp" "$bin"
"$bin/containerd" --version
