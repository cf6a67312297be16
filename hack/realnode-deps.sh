#!/usr/bin/env bash
# Installs what the real-node scenario tests (test/realnode, build tag e2e)
# need on the host besides the kubelet that hack/k8s-tools.sh builds:
# containerd, runc, the CNI plugins and iptables, from the distribution's
# packages (Debian/Ubuntu, apt-get).
#
# Idempotent: when every command is already there it does nothing, so CI can
# run it before every test run. It never starts or enables a service: the
# tests start containerd themselves, with a configuration and state of their
# own in a temporary folder.
#
# Usage: hack/realnode-deps.sh            (as root, or with sudo available)
#        hack/realnode-deps.sh --check    print the missing packages, one a line,
#                                         and exit 1 if any (installs nothing)
set -euo pipefail
check_only=0
[[ ${1:-} == --check ]] && check_only=1

log() { echo "realnode-deps: $*" >&2; }

# command -> Debian package
declare -A PKG=(
  [containerd]=containerd
  [ctr]=containerd
  [runc]=runc
  [iptables]=iptables
)
# The CNI plugins are not on PATH; the loopback plugin is the marker.
CNI_MARKERS=(/usr/lib/cni/loopback /opt/cni/bin/loopback)

missing=()
for cmd in "${!PKG[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing+=("${PKG[$cmd]}")
  fi
done
have_cni=0
for f in "${CNI_MARKERS[@]}"; do
  [[ -x "$f" ]] && have_cni=1
done
[[ $have_cni == 1 ]] || missing+=(containernetworking-plugins)

if [[ ${#missing[@]} -eq 0 ]]; then
  [[ $check_only == 1 ]] || log "containerd, runc, iptables and CNI plugins already installed"
  exit 0
fi
# Unique package names, stable order.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $check_only == 1 ]]; then
  printf '%s\n' "${missing[@]}"
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  log "error: missing ${missing[*]} and no apt-get; install them with the system's package manager"
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { log "error: not root and no sudo; install ${missing[*]} as root"; exit 1; }
  SUDO=(sudo)
fi

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps Debian's maintainer scripts from starting containerd as a
# service (harmless without an init system, but a service would hold
# /run/containerd and the tests would then share it).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
  "${SUDO[@]}" chmod 755 "$policy"
  made_policy=1
fi
cleanup() { if [[ $made_policy == 1 ]]; then "${SUDO[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed: $(containerd --version 2>/dev/null | head -1); $(runc --version 2>/dev/null | head -1)"
