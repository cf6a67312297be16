#!/usr/bin/env bash
# device-bundle.sh (make device-bundle): builds here, into .device-bundle/
# (ignored by git), everything hack/device-check.sh needs on a GPU machine
# that has no Go, no network and at most 64 MiB sent with the working tree
# (whose tracked files take about 6 MiB): rota-extender and rota-admission, the device
# check's compiled test (deviceplugin/app, tag gpu), the load test (test/load,
# tag load) and etcd, kube-apiserver and kube-scheduler from .cache/k8s/bin,
# all stripped and packed into one xz archive. It prints each part's size and
# fails when the archive is over the limit (56 MiB; DEVICE_BUNDLE_LIMIT_MIB).
# Pass the folder to the device machine with: run(carry=[".device-bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
LDFLAGS=${LDFLAGS:-}
limit_mib=${DEVICE_BUNDLE_LIMIT_MIB:-56}
out=.device-bundle
k8s=${ROTA_K8S_BIN:-.cache/k8s/bin}

for b in etcd kube-apiserver kube-scheduler; do
	[ -x "$k8s/$b" ] || { echo "device-bundle: $k8s/$b missing: run make k8s-tools" >&2; exit 2; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/rota" "$stage/k8s" "$stage/tests"

echo "device-bundle: building Rota's binaries and the two test binaries (stripped)"
# -s -w drop the symbol table and DWARF at link time; the compile cache of
# make build and make test is reused (no -trimpath, which would rebuild all).
# No rota-device-plugin: the device check runs the plugin inside its test
# binary, and the load test's nodes publish their topology directly.
$GO build -ldflags "$LDFLAGS -s -w" -o "$stage/rota/" ./extender/cmd/rota-extender ./admission/cmd/rota-admission
$GO test -c -tags gpu -ldflags "-s -w" -o "$stage/tests/device-check.test" ./deviceplugin/app
$GO test -c -tags load -ldflags "-s -w" -o "$stage/tests/load.test" ./test/load
for b in etcd kube-apiserver kube-scheduler; do
	if command -v strip >/dev/null; then
		strip -o "$stage/k8s/$b" "$k8s/$b"
	else
		cp "$k8s/$b" "$stage/k8s/$b"
	fi
done
if [ -f test/tools/versions.env ]; then
	cp test/tools/versions.env "$stage/versions.env"
fi
git rev-parse HEAD > "$stage/revision" 2>/dev/null || echo unknown > "$stage/revision"

mkdir -p "$out"
rm -f "$out/bundle.tar.xz"
# One xz stream with a dictionary larger than the whole: the binaries share
# most of their code (client-go, apimachinery), which a small dictionary
# would not see twice. Single-threaded, about 4 minutes on 2 cores; the
# machine unpacking it needs 768 MiB of memory.
preset=${DEVICE_BUNDLE_XZ_PRESET:-6}
echo "device-bundle: packing (xz preset $preset, 768 MiB dictionary)"
tar -C "$stage" -cf - . | xz --lzma2=preset="$preset",dict=768MiB -T1 > "$out/bundle.tar.xz"

printf '%-34s %10s\n' "part" "bytes"
(cd "$stage" && find . -type f | sort | while read -r f; do printf '%-34s %10d\n' "${f#./}" "$(stat -c %s "$f")"; done)
unpacked=$(du -sb "$stage" | cut -f1)
size=$(stat -c %s "$out/bundle.tar.xz")
printf '%-34s %10d\n' "unpacked" "$unpacked"
printf '%-34s %10d  (%s MiB; limit %d MiB)\n' "$out/bundle.tar.xz" "$size" "$(awk -v s="$size" 'BEGIN{printf "%.1f", s/1048576}')" "$limit_mib"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
	echo "device-bundle: $out/bundle.tar.xz is over the limit of $limit_mib MiB" >&2
	exit 1
fi
