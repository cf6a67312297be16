#!/usr/bin/env bash
# Builds JobSet's controller manager at the version test/tools/jobset/go.mod
# pins from the Go module proxy into .cache/jobset/bin (ignored by git), as
# hack/kueue.sh builds Kueue's. The module stays in the Go module cache:
# test/jobset applies JobSet's CRD and webhook manifests from it, at the
# binary's version. A binary built from the pinned version is not rebuilt.
# The first build takes about 3 minutes on 2 cores.
#
# Environment: FORCE=1 rebuilds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../test/tools/versions.env
source "${ROOT}/test/tools/versions.env"
BIN="${ROOT}/.cache/jobset/bin"
log() { echo "jobset: $*" >&2; }

pinned=$(grep -Eo 'sigs.k8s.io/jobset v[0-9][^ ]*' "${ROOT}/test/tools/jobset/go.mod" | awk '{print $2}')
if [[ "${pinned}" != "${JOBSET_VERSION}" ]]; then
  log "test/tools/jobset/go.mod pins ${pinned}, test/tools/versions.env says ${JOBSET_VERSION}"
  exit 1
fi
if [[ -z "${FORCE:-}" && -x "${BIN}/jobset" && -f "${BIN}/jobset.version" && "$(cat "${BIN}/jobset.version")" == "${JOBSET_VERSION}" ]]; then
  log "jobset ${JOBSET_VERSION} is up to date"
  exit 0
fi
mkdir -p "${BIN}"
log "building sigs.k8s.io/jobset@${JOBSET_VERSION} (a few minutes)"
# Built inside its tools module: the proxy serves this version but lists
# none, so go install pkg@version (which asks for the list) is refused.
(cd "${ROOT}/test/tools/jobset" && GOFLAGS=-buildvcs=false go build -trimpath -o "${BIN}/jobset" sigs.k8s.io/jobset)
echo "${JOBSET_VERSION}" > "${BIN}/jobset.version"
log "built ${BIN}/jobset"
