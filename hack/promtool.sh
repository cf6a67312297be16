#!/usr/bin/env bash
# Builds Prometheus' promtool, pinned in test/tools/versions.env and
# test/tools/promtool/go.mod, from the Go module proxy into .cache/k8s/bin (once;
# later runs reuse it). The chart tests (test/chart) run it: `promtool test rules`
# on the chart's alerts, `promtool check rules` on its rules and dashboard queries.
#
# Built with -tags remove_all_sd: the cloud service-discovery plugins (AWS, Azure,
# GCE, ...) are for `promtool check config` on real Prometheus configs, which Rota
# never runs; leaving them out saves about a fifth of the build.
#
# Environment:
#   ROTA_K8S_BIN   output folder (default <repo>/.cache/k8s/bin)
#   BUILD_JOBS     go build -p (default 2)
#   FORCE=1        rebuild even when the binary reports the pinned version
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/test/tools"
# shellcheck source=../test/tools/versions.env
source "${TOOLS}/versions.env"

BIN="${ROTA_K8S_BIN:-${ROOT}/.cache/k8s/bin}"
JOBS="${BUILD_JOBS:-2}"

log() { echo "promtool: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -n "${PROMETHEUS_VERSION:-}" ]] || die "test/tools/versions.env does not set PROMETHEUS_VERSION"
# The go.mod must agree with versions.env, or the version stamp would lie.
grep -q "^require github.com/prometheus/prometheus ${PROMETHEUS_VERSION}\$" "${TOOLS}/promtool/go.mod" ||
  die "test/tools/promtool/go.mod does not require github.com/prometheus/prometheus ${PROMETHEUS_VERSION} (versions.env)"

# have prints the version the built binary reports ("promtool, version v0.316.0 (...)"), or nothing.
have() {
  [[ -x "${BIN}/promtool" ]] || return 0
  "${BIN}/promtool" --version 2>/dev/null | sed -n 's/^promtool, version \([^ ]*\).*/\1/p'
}

if [[ "${FORCE:-0}" != 1 && "$(have)" == "${PROMETHEUS_VERSION}" ]]; then
  log "promtool ${PROMETHEUS_VERSION} is up to date"
  exit 0
fi

mkdir -p "${BIN}"
log "building promtool from github.com/prometheus/prometheus ${PROMETHEUS_VERSION} (first run takes a few minutes)..."
start=${SECONDS}
v=github.com/prometheus/common/version
(
  cd "${TOOLS}/promtool"
  # -mod=mod: the pinned go.sum may lack a hash that a new Go release wants.
  GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
    go build -p "${JOBS}" -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X ${v}.Version=${PROMETHEUS_VERSION} -X ${v}.Revision=module -X ${v}.Branch=module -X ${v}.BuildUser=rota -X ${v}.BuildDate=19700101-00:00:00" \
    -o "${BIN}/.promtool.tmp" github.com/prometheus/prometheus/cmd/promtool
)
mv -f "${BIN}/.promtool.tmp" "${BIN}/promtool"
got="$(have)"
[[ "${got}" == "${PROMETHEUS_VERSION}" ]] || die "promtool reports version '${got}', want ${PROMETHEUS_VERSION}"
log "built ${BIN}/promtool ${got} in $((SECONDS - start))s"
