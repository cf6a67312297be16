#!/usr/bin/env bash
# Builds Kueue's controller manager at the version pinned in
# test/tools/versions.env from the Go module proxy into .cache/kueue/bin
# (ignored by git), as hack/k8s-tools.sh builds the control plane. The module
# stays in the Go module cache: test/kueue applies Kueue's CRDs and webhook
# manifests from it, at the binary's version. A binary that exists and reports
# the pinned version is not rebuilt. The first build takes about 3 minutes on
# 2 cores.
#
# Environment: FORCE=1 rebuilds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../test/tools/versions.env
source "${ROOT}/test/tools/versions.env"
BIN="${ROOT}/.cache/kueue/bin"
log() { echo "kueue: $*" >&2; }

if [[ -z "${FORCE:-}" && -x "${BIN}/kueue" && -f "${BIN}/kueue.version" && "$(cat "${BIN}/kueue.version")" == "${KUEUE_VERSION}" ]]; then
  log "kueue ${KUEUE_VERSION} is up to date"
  exit 0
fi
mkdir -p "${BIN}"
log "building sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION} (a few minutes)"
GOBIN="${BIN}" GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}"
# Fetch the module's files (CRDs, webhook manifests) if the build did not.
go mod download "sigs.k8s.io/kueue@${KUEUE_VERSION}"
echo "${KUEUE_VERSION}" > "${BIN}/kueue.version"
log "built ${BIN}/kueue"
