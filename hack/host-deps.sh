#!/usr/bin/env bash
# Makes sure the host has the packages `make test` needs besides Go:
#   - containerd, runc, the CNI plugins and iptables for the real-node suite
#     (test/realnode: a real kubelet starts real containers), and
#   - headless Chromium for the status-page scenario (test/e2e TestUI).
# `make test` runs it first, before anything is built.
#
# As root it installs what is missing from the distribution's packages
# (hack/realnode-deps.sh, hack/chromium-deps.sh) and says what it installed.
# Without root it installs nothing: it names the missing packages and the one
# command to run, and fails, so that no suite is skipped silently.
#
# Usage: hack/host-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "host-deps: $*" >&2; }

missing=()
mapfile -t -O "${#missing[@]}" missing < <(bash "$here/realnode-deps.sh" --check || true)
mapfile -t -O "${#missing[@]}" missing < <(bash "$here/chromium-deps.sh" --check || true)
if [[ ${#missing[@]} -eq 0 ]]; then
  log "containerd, runc, CNI plugins, iptables and chromium are installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  log "error: the test suites need these host packages, which are missing: ${missing[*]}"
  log "  (containerd, runc, CNI plugins, iptables: the real-node suite runs a real kubelet and containerd;"
  log "   chromium: the status-page test renders /ui headless)"
  log "install them once as root, then run make test again:"
  log "  sudo hack/host-deps.sh"
  exit 1
fi
log "installing ${missing[*]} from the distribution's packages (needed by test/realnode and the status-page test)"
bash "$here/realnode-deps.sh"
bash "$here/chromium-deps.sh"
log "installed ${missing[*]}"
