#!/usr/bin/env bash
# Installs headless Chromium for the status-page scenario (test/e2e
# TestUI, build tag e2e), from the distribution's package (Debian's
# "chromium", apt-get) together with a font, so that screenshots show text.
#
# Idempotent: when /usr/bin/chromium (or $ROTA_CHROMIUM) is already there it
# does nothing, so CI can run it before every test run.
#
# Usage: hack/chromium-deps.sh            (as root, or with sudo available)
#        hack/chromium-deps.sh --check    print the missing packages, one a line,
#                                         and exit 1 if any (installs nothing)
set -euo pipefail
check_only=0
[[ ${1:-} == --check ]] && check_only=1

log() { echo "chromium-deps: $*" >&2; }

bin=${ROTA_CHROMIUM:-/usr/bin/chromium}
if [[ -x $bin ]]; then
  [[ $check_only == 1 ]] || log "$("$bin" --version 2>/dev/null || echo "$bin") already installed"
  exit 0
fi
if [[ $check_only == 1 ]]; then
  printf '%s\n' chromium fonts-dejavu-core
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "error: $bin missing and no apt-get; install Chromium with the system's package manager"
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { log "error: not root and no sudo; install chromium as root"; exit 1; }
  SUDO=(sudo)
fi

log "installing chromium"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
log "installed: $(chromium --version 2>/dev/null | head -1)"
