#!/usr/bin/env bash
# gpu-check.sh: checks on a machine with an NVIDIA GPU what Rota's device
# plugin enforces for memory shares. NOT RUN YET: no GPU machine has been
# available; run it whenever one is, as root, from the repository root:
#
#   sudo hack/gpu-check.sh            # compute mode left DEFAULT
#   sudo ROTA_GPU_EXCLUSIVE=1 hack/gpu-check.sh   # EXCLUSIVE_PROCESS while MPS runs
#
# It builds hack/gpu-check/alloc.c (a CUDA driver API allocator, libcuda.so.1
# loaded at run time: no CUDA toolkit needed) and runs TestGPUCheck
# (deviceplugin/app/gpu_check_test.go, build tag gpu): the device plugin on
# real NVML with --mps, a kubelet stand-in and a fake API server; it prints
# the topology, allocates two shares on GPU 0 and runs, with their MPS
# environment: an allocation inside and one past the share's limit, two
# processes of one share, a share that rewrites its limit upwards, a process
# without the MPS variables, a share's process as another user (uid 65534),
# and a process outside any pod that holds 1 GiB (a deliberate leak), which
# must show up as leakedMiB and go away when it exits. Every finding is a
# "CHECK" line in the log ($OUT/gpu-check.log when $OUT is set).
#
# GPU 0 must be idle: the check starts and stops an MPS daemon on it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rota-gpu-check}
mkdir -p "$out"

need() { command -v "$1" >/dev/null || { echo "gpu-check: $1 not found: $2" >&2; exit 2; }; }
[ "$(id -u)" = 0 ] || { echo "gpu-check: run as root (MPS control daemon, compute mode, other users)" >&2; exit 2; }
need nvidia-smi "install the NVIDIA driver"
need nvidia-cuda-mps-control "it ships with the driver's compute utilities (nvidia-compute-utils-*)"
need cc "install a C compiler (build-essential)"
need go "install Go (see go.mod)"

nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_mode --format=csv | tee "$out/nvidia-smi-before.csv"
if [ -n "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader -i 0)" ]; then
	echo "gpu-check: GPU 0 runs processes; stop them first" >&2
	exit 2
fi

cc -O2 -o "$out/gpu-alloc" hack/gpu-check/alloc.c -ldl
chmod 755 "$out/gpu-alloc"
status=0
ROTA_GPU_ALLOC="$out/gpu-alloc" go test -tags gpu -count=1 -v -timeout 10m -run '^TestGPUCheck$' ./deviceplugin/app/ \
	2>&1 | tee "$out/gpu-check.log" || status=$?
grep -h 'CHECK ' "$out/gpu-check.log" | sed 's/^.*CHECK /CHECK /' > "$out/checks.txt" || true
nvidia-smi --query-gpu=index,compute_mode --format=csv | tee "$out/nvidia-smi-after.csv"
echo "gpu-check: findings in $out/checks.txt; full log $out/gpu-check.log (exit $status)"
exit "$status"
