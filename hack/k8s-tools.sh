#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries that the real-control-plane tests
# (test/cluster, test/e2e) run: etcd, kube-apiserver, kube-controller-manager
# (the e2e scenarios with Job and garbage-collector controllers), kube-scheduler,
# kubectl and kubelet, from the Go module proxy, into .cache/k8s/bin (ignored by git).
#
# Versions are pinned in test/tools/versions.env. A binary that already exists
# and reports the pinned version is not rebuilt, so the script is cheap to run
# before every test. The first run compiles most of Kubernetes: about 10 minutes
# and 3 GB of memory on 2 cores.
#
# Usage: hack/k8s-tools.sh [binary ...]      (default: all of them)
# Environment:
#   ROTA_K8S_BIN   output folder (default <repo>/.cache/k8s/bin)
#   BUILD_JOBS     go build -p (default 2: more jobs mostly add memory, not speed)
#   FORCE=1        rebuild even when the binaries are up to date
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/test/tools"
# shellcheck source=../test/tools/versions.env
source "${TOOLS}/versions.env"

BIN="${ROTA_K8S_BIN:-${ROOT}/.cache/k8s/bin}"
JOBS="${BUILD_JOBS:-2}"
ALL=(etcd kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubectl kubelet)
WANT=("$@")
if [[ ${#WANT[@]} -eq 0 ]]; then
  WANT=("${ALL[@]}")
fi

log() { echo "k8s-tools: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The go.mod files must agree with versions.env, or the version stamp would lie.
check_pins() {
  grep -q "^require k8s.io/kubernetes ${KUBE_VERSION}\$" "${TOOLS}/go.mod" ||
    die "test/tools/go.mod does not require k8s.io/kubernetes ${KUBE_VERSION} (versions.env)"
  if grep -E '=> k8s.io/[a-z-]+ v' "${TOOLS}/go.mod" | grep -vq " ${KUBE_STAGING_VERSION}\$"; then
    die "test/tools/go.mod replaces a staging module with a version other than ${KUBE_STAGING_VERSION}"
  fi
  grep -q "^require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}\$" "${TOOLS}/etcd/go.mod" ||
    die "test/tools/etcd/go.mod does not require go.etcd.io/etcd/server/v3 ${ETCD_VERSION} (versions.env)"
}

# version_of prints the version a built binary reports, or nothing.
version_of() {
  local name="$1" path="${BIN}/$1"
  [[ -x "${path}" ]] || return 0
  case "${name}" in
    etcd) "${path}" --version 2>/dev/null | sed -n 's/^etcd Version: /v/p' ;;
    kubectl) "${path}" version --client 2>/dev/null | sed -n 's/^Client Version: //p' ;;
    *) "${path}" --version 2>/dev/null | sed -n 's/^Kubernetes //p' ;;
  esac
}

want_version() {
  case "$1" in
    etcd) echo "${ETCD_VERSION}" ;;
    *) echo "${KUBE_VERSION}" ;;
  esac
}

build() {
  local name="$1" dir pkg ldflags
  if [[ "${name}" == etcd ]]; then
    dir="${TOOLS}/etcd"
    pkg="./cmd/etcd"
    ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-${ETCD_VERSION}"
  else
    dir="${TOOLS}"
    pkg="k8s.io/kubernetes/cmd/${name}"
    local major minor x
    major="${KUBE_VERSION#v}"; major="${major%%.*}"
    minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
    ldflags="-s -w"
    # Without these, binaries built from the module proxy report v0.0.0-master,
    # and version-gated behaviour (and our Version() checks) see the wrong release.
    for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${x}.gitVersion=${KUBE_VERSION} -X ${x}.gitMajor=${major} -X ${x}.gitMinor=${minor}"
      ldflags+=" -X ${x}.gitTreeState=clean -X ${x}.buildDate=1970-01-01T00:00:00Z"
    done
  fi
  (
    cd "${dir}"
    # -mod=mod: the pinned go.sum may lack a hash that a new Go release wants;
    # let go fill it rather than fail. CGO off: static binaries, no C toolchain.
    GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
      go build -p "${JOBS}" -trimpath -ldflags "${ldflags}" -o "${BIN}/.${name}.tmp" "${pkg}"
  )
  mv -f "${BIN}/.${name}.tmp" "${BIN}/${name}"
}

check_pins
mkdir -p "${BIN}"
for name in "${WANT[@]}"; do
  case " ${ALL[*]} " in *" ${name} "*) ;; *) die "unknown binary ${name} (want one of: ${ALL[*]})" ;; esac
  want="$(want_version "${name}")"
  have="$(version_of "${name}")"
  if [[ "${FORCE:-0}" != 1 && "${have}" == "${want}" ]]; then
    log "${name} ${want} is up to date"
    continue
  fi
  case "${name}" in
    kube-apiserver) hint=" (first run takes ~10 minutes)" ;;
    kubelet | kube-scheduler | kubectl | kube-controller-manager | kube-proxy) hint=" (a few minutes unless kube-apiserver was just built)" ;;
    etcd) hint=" (~2 minutes the first time)" ;;
  esac
  log "building ${name} ${want}${hint}..."
  start=${SECONDS}
  build "${name}"
  have="$(version_of "${name}")"
  [[ "${have}" == "${want}" ]] || die "${name} reports version '${have}', want ${want}"
  log "built ${BIN}/${name} ${have} in $((SECONDS - start))s"
done
