#!/usr/bin/env bash
# A `go build -toolexec` wrapper for fuzzing builds (hack/fuzz.sh): keeps the
# fuzzing engine's coverage instrumentation (-d=libfuzzer, which `go test
# -fuzz` gives every package of the test binary) only on the packages that
# FUZZINSTRUMENT names, space-separated import paths, "path/..." for a tree.
#
# Why: for every input the engine clears, snapshots and compares the whole
# coverage counter map, whose size is set by all the code linked into the
# test binary. A binary that links client-go carries every API group's
# generated protobuf code (285 KiB of counters for extender/server, ~1 ms
# per input on a 2-core machine, 20 times the verb itself), none of which a
# fuzz input reaches. Instrumenting Rota's own packages and the decoders its
# inputs go through keeps the guidance on the code under test and the map
# at ~30 KiB. What is executed is unchanged: only the coverage feedback is.
#
# Every compile reports a tool ID to the build cache (`compile -V=full`);
# this wrapper appends a checksum of FUZZINSTRUMENT to it, so that objects
# built for one set are never reused for another, nor for a plain
# `go test -fuzz` build (which instruments everything).
tool=$1
shift
if [ "${tool##*/}" != compile ]; then
	exec "$tool" "$@"
fi
case " $* " in
*" -V=full "*)
	out=$("$tool" "$@") || exit
	echo "$out fuzzinstrument=$(printf '%s' "${FUZZINSTRUMENT:-}" | cksum | cut -d' ' -f1)"
	exit 0
	;;
esac
pkg=
prev=
for a in "$@"; do
	if [ "$prev" = -p ]; then
		pkg=$a
		break
	fi
	prev=$a
done
keep=0
[ -n "$pkg" ] || keep=1
for pat in ${FUZZINSTRUMENT:-}; do
	case $pat in
	*/...) if [[ $pkg == "${pat%/...}" || $pkg == "${pat%/...}"/* ]]; then keep=1; fi ;;
	*) if [[ $pkg == "$pat" ]]; then keep=1; fi ;;
	esac
done
if [ $keep = 1 ]; then
	exec "$tool" "$@"
fi
args=()
for a in "$@"; do
	[ "$a" = -d=libfuzzer ] || args+=("$a")
done
exec "$tool" "${args[@]}"
