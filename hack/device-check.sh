#!/usr/bin/env bash
# device-check.sh: proves on a machine with an NVIDIA GPU, in one command of
# at most 6 minutes, what Rota does on real hardware (docs/device-check.md):
#
#   hack/device-check.sh OUT               # on the GPU machine, as root
#   hack/device-check.sh --rehearse OUT    # here, without a GPU (CI)
#
# It runs from .device-bundle/bundle.tar.xz (make device-bundle): nothing is
# built or downloaded there but a small C helper (hack/gpu-check/alloc.c),
# compiled with the machine's cc. It writes OUT/report.md and the raw logs beside it:
#   1. the GPU checks (deviceplugin/app TestDeviceCheck): discovery against
#      nvidia-smi, NVML's event set, MPS daemons and limits, a killed daemon,
#      leaked memory, per-pod utilization;
#   2. throughput: the load test's plain kube-scheduler vs Rota, queueing
#      off and on, at 1,000 nodes (50 when rehearsing), with etcd, the API
#      server, kube-scheduler, Rota and the test on cores of their own.
# A GPU setting is read, never changed; the GPU is never reset. A call the
# machine refuses is reported as unproven, not as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
mode=real
if [ "${1:-}" = "--rehearse" ]; then
	mode=rehearse
	shift
fi
out=${1:?usage: hack/device-check.sh [--rehearse] OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bundle=.device-bundle/bundle.tar.xz
[ -f "$bundle" ] || { echo "device-check: $bundle missing: run make device-bundle first" >&2; exit 2; }
began=$(date +%s)
log() { echo "device-check: $(( $(date +%s) - began ))s: $*" | tee -a "$out/progress.log"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "unpacking $bundle ($(stat -c %s "$bundle") bytes)"
xz -dc "$bundle" | tar -C "$work" -xf - || { echo "device-check: cannot unpack $bundle" >&2; exit 2; }

# The machine.
{
	echo "mode: $mode"
	echo "date: $(date -u +%FT%TZ)"
	echo "bundle revision: $(cat "$work/revision")"
	echo "kernel: $(uname -srm)"
	echo "cores: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	grep MemTotal /proc/meminfo || true
	echo "user: $(id -u)"
} > "$out/machine.txt"
if [ "$mode" = real ]; then
	nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || echo "nvidia-smi -q failed" >> "$out/machine.txt"
	nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1 || true
	nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_mode,mig.mode.current --format=csv \
		> "$out/nvidia-smi-before.csv" 2>&1 || true
fi

# 1. The GPU checks.
gpu_env=(ROTA_DEVICE_CHECK="$mode" ROTA_DEVICE_CHECK_OUT="$out")
if [ "$mode" = real ]; then
	if cc -O2 -o "$work/gpu-alloc" hack/gpu-check/alloc.c -ldl 2> "$out/cc-alloc.log"; then
		chmod 755 "$work/gpu-alloc"
		gpu_env+=(ROTA_GPU_ALLOC="$work/gpu-alloc")
	else
		log "cannot compile hack/gpu-check/alloc.c (cc-alloc.log): the allocation checks are unproven"
	fi
fi
log "GPU checks ($mode), at most 150 s"
(cd deviceplugin/app && env "${gpu_env[@]}" timeout -k 5 150 "$work/tests/device-check.test" \
	-test.run '^TestDeviceCheck$' -test.v -test.timeout 145s) > "$out/device-check.log" 2>&1
gpu_rc=$?
log "GPU checks exited $gpu_rc"
if [ "$mode" = real ]; then
	nvidia-smi --query-gpu=index,compute_mode,mig.mode.current --format=csv > "$out/nvidia-smi-after.csv" 2>&1 || true
fi

# 2. Throughput, each process on cores of its own when there are enough.
cores=$(nproc)
mkdir -p "$work/pinned/rota" "$work/pinned/k8s"
pin() { # pin NAME CORES SRC DST: a wrapper that runs SRC on CORES
	if [ "$cores" -ge 16 ] && command -v taskset >/dev/null; then
		printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$2" "$3" > "$4"
		echo "$1 $2" >> "$out/cores.txt"
	else
		printf '#!/bin/sh\nexec %s "$@"\n' "$3" > "$4"
	fi
	chmod 755 "$4"
}
: > "$out/cores.txt"
pin etcd 0-1 "$work/k8s/etcd" "$work/pinned/k8s/etcd"
pin kube-apiserver 2-7 "$work/k8s/kube-apiserver" "$work/pinned/k8s/kube-apiserver"
pin kube-scheduler 8-9 "$work/k8s/kube-scheduler" "$work/pinned/k8s/kube-scheduler"
pin rota-extender 10-11 "$work/rota/rota-extender" "$work/pinned/rota/rota-extender"
pin rota-admission 12 "$work/rota/rota-admission" "$work/pinned/rota/rota-admission"
# The bundle has no rota-device-plugin (the load test's nodes publish their
# topology directly); the harness only asks that the file exists.
printf '#!/bin/sh\necho "rota-device-plugin is not in the device bundle" >&2\nexit 1\n' > "$work/pinned/rota/rota-device-plugin"
chmod 755 "$work/pinned/rota/rota-device-plugin"
load_cmd=("$work/tests/load.test")
if [ "$cores" -ge 16 ] && command -v taskset >/dev/null; then
	load_cmd=(taskset -c 13-15 "$work/tests/load.test")
	echo "load-test 13-15" >> "$out/cores.txt"
else
	echo "(fewer than 16 cores or no taskset: nothing pinned)" >> "$out/cores.txt"
fi
if [ "$mode" = real ]; then
	nodes=${DEVICE_CHECK_NODES:-1000} pods=${DEVICE_CHECK_PODS:-3000} limit=150
else
	nodes=${DEVICE_CHECK_NODES:-50} pods=${DEVICE_CHECK_PODS:-200} limit=150
fi
left=$(( 330 - ($(date +%s) - began) ))
limit=$(( left < limit ? left : limit ))
log "throughput: $nodes nodes, $pods pods a phase, queueing off and on, at most ${limit}s"
(cd test/load && env ROTA_BIN="$work/pinned/rota" ROTA_K8S_BIN="$work/pinned/k8s" \
	ROTA_LOAD_NODES="$nodes" ROTA_LOAD_PODS="$pods" ROTA_LOAD_QUEUEING=1 \
	ROTA_LOAD_EXTENDER_ARGS=--filter-best-only ROTA_LOAD_PHASE_LIMIT=40s ROTA_LOAD_BUDGET=$((limit - 20))s \
	timeout -k 5 "$limit" "${load_cmd[@]}" -test.run '^TestSchedulingThroughput$' -test.v -test.timeout "$((limit - 5))s") \
	> "$out/load.log" 2>&1
load_rc=$?
log "throughput exited $load_rc"

# The report.
{
	echo "# Rota device check ($mode)"
	echo
	echo '```'
	cat "$out/machine.txt"
	echo '```'
	echo
	if [ -f "$out/nvidia-smi-before.csv" ]; then
		echo "GPUs (nvidia-smi, before):"
		echo
		echo '```'
		cat "$out/nvidia-smi-before.csv"
		echo '```'
		echo
	fi
	echo "## GPU checks (exit $gpu_rc)"
	echo
	echo "| verdict | check | observed |"
	echo "|---|---|---|"
	grep -h 'CHECK ' "$out/device-check.log" | sed -E 's/^.*CHECK ([a-z]+): ([^:]+): (.*)$/| \1 | \2 | \3 |/' || true
	echo
	echo "## Throughput (exit $load_rc): $nodes nodes, $pods pods a phase"
	echo
	echo "Cores: $(tr '\n' ';' < "$out/cores.txt")"
	echo
	echo '```'
	grep -h '^LOAD SUMMARY' "$out/load.log" || echo "(no LOAD SUMMARY: see load.log)"
	echo '```'
	echo
	echo "Raw logs: device-check.log, load.log, machine.txt, nvidia-smi-*.txt/csv, checks.json, topology.json."
} > "$out/report.md"
failed=$(grep -c 'CHECK fail:' "$out/device-check.log" || true)
log "done in $(( $(date +%s) - began ))s: $failed failed checks; report $out/report.md"
if [ "$gpu_rc" -ne 0 ] || [ "$load_rc" -ne 0 ]; then
	exit 1
fi
