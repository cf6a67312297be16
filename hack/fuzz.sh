#!/usr/bin/env bash
# Runs every Go fuzz target for FUZZTIME each and prints, per target, how
# many inputs it executed and at what rate, then a summary table.
#
#   FUZZTIME=10s hack/fuzz.sh            # every package
#   FUZZTIME=2s hack/fuzz.sh ./deviceplugin/...
#
# Per package, the coverage-instrumented test binary is built once
# (go test -c -fuzz), then each target runs from the package's folder (so a
# failing input lands in its testdata/fuzz/FuzzX/):
#
#   - FUZZINSTRUMENT names the packages that get the engine's coverage
#     instrumentation (hack/fuzz-instrument.sh, as -toolexec): Rota's own
#     and the decoders of its wire inputs (JSON, quantities, label and
#     node-affinity matching, YAML, protobuf's decoding). The engine clears,
#     snapshots and compares the whole coverage map per input, and a test
#     binary that links client-go carries every API group's generated
#     code: 285 KiB of counters in extender/server, which held its verb
#     targets under 1,000 inputs/s (30 KiB and ~3,000/s with this set on
#     a loaded 2-core machine). The inputs run the same code either way.
#     FUZZINSTRUMENT=all instruments everything, as plain `go test -fuzz`
#     does. The first build per set compiles the dependency tree once;
#     later runs reuse the build cache.
#   - FUZZMINIMIZETIME (default 200x) bounds the minimization of each input
#     that widens coverage. The engine's default (60s each) spends a short
#     run minimizing the first few interesting inputs instead of fuzzing:
#     FuzzReview ran 9 inputs in 5 s that way, 7,000 with 200x.
#   - FUZZCACHE is the engine's corpus cache (interesting inputs found
#     before, replayed first). Default: a fresh folder per run under
#     FUZZLOGS, so every run replays the same seed corpus and testdata and
#     its rate does not drift as the cache grows; set it to a folder to
#     keep and replay what earlier runs found.
#   - The rate is executions per second while fuzzing: from the engine's
#     "now fuzzing" line (after the baseline replay of the corpus) to its
#     last status line. A target below FUZZMINRATE (default 1000/s) fails.
#   - A failure that wrote a new file under testdata/fuzz/FuzzX/, or that
#     names a seed corpus entry, is a finding: it fails, naming the input and
#     the command that replays it. A failure without one (the engine's
#     coordinator timing out, "context deadline exceeded", a worker that
#     hung or died) is the harness's: the target is run once more, and if it
#     fails the same way it is reported as a harness problem, not a finding.
#
# Each target's full output, each line prefixed with its arrival time, is
# kept in $FUZZLOGS (default bin/fuzz/). "baseline" is the corpus the engine
# replayed before fuzzing ("gathering baseline coverage: N/M"). Exits 1 if
# any target failed, found something, ran too slowly or hit a harness
# problem twice.
set -uo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
FUZZLOGS=${FUZZLOGS:-bin/fuzz}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-200x}
FUZZMINRATE=${FUZZMINRATE:-1000}
FUZZINSTRUMENT=${FUZZINSTRUMENT:-github.com/rota-sched/rota/... encoding/json sigs.k8s.io/json/... sigs.k8s.io/yaml/... \
k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/labels \
k8s.io/apimachinery/pkg/util/validation/... k8s.io/component-helpers/... k8s.io/kube-scheduler/extender/v1 \
google.golang.org/protobuf/proto google.golang.org/protobuf/internal/impl google.golang.org/protobuf/encoding/protowire}
toolexec=()
if [ "$FUZZINSTRUMENT" != all ]; then
	export FUZZINSTRUMENT
	toolexec=(-toolexec "$(cd "$(dirname "$0")" && pwd)/fuzz-instrument.sh")
fi
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
mkdir -p "$FUZZLOGS"
FUZZLOGS=$(cd "$FUZZLOGS" && pwd)
cache=${FUZZCACHE:-}
if [ -z "$cache" ]; then
	rm -rf "$FUZZLOGS/cache"
	cache=$FUZZLOGS/cache
fi
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# Targets come from the test files' source (no test binary is built just
# to list them): "import/path dir FuzzName" lines.
targets=$("$GO" list -f '{{$d := .Dir}}{{$p := .ImportPath}}{{range .TestGoFiles}}{{$p}} {{$d}} {{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$p}} {{$d}} {{$d}}/{{.}}{{"\n"}}{{end}}' "${pkgs[@]}" |
	while read -r pkg dir file; do
		[ -n "$pkg" ] || continue
		sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$file" | sed "s|^|$pkg $dir |"
	done | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets in ${pkgs[*]}"
	exit 0
fi

# corpus lists the files under a target's testdata/fuzz folder.
corpus() { [ -d "$1" ] && (cd "$1" && ls -1) | sort; }

# timestamp prefixes each line with the time it arrived (seconds).
timestamp() { while IFS= read -r line || [ -n "$line" ]; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }

# fuzz_once runs one target once into log; it sets rc, execs, rate,
# baseline, finding (the failing input, if any) and why (the failure line).
fuzz_once() {
	local bin=$1 dir=$2 fn=$3 log=$4
	local td="$dir/testdata/fuzz/$fn" before after
	before=$(corpus "$td")
	(cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^$fn\$" -test.fuzztime "$FUZZTIME" \
		-test.fuzzminimizetime "$FUZZMINIMIZETIME" -test.fuzzcachedir "$cache/$fn" 2>&1) | timestamp >"$log"
	rc=${PIPESTATUS[0]}
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	execs=${execs:-0}
	baseline=$(grep -o 'gathering baseline coverage: [0-9]*/[0-9]*' "$log" | tail -1 | awk '{print $4}')
	baseline=${baseline:--}
	local t0 t1
	t0=$(grep -m1 'now fuzzing with' "$log" | awk '{print $1}')
	t1=$(grep 'fuzz: elapsed: .*execs: ' "$log" | tail -1 | awk '{print $1}')
	rate=0
	if [ -n "$t0" ] && [ -n "$t1" ]; then
		rate=$(awk -v n="$execs" -v a="$t0" -v b="$t1" 'BEGIN { d = b - a; if (d < 0.5) d = 0.5; printf "%d", n / d }')
	fi
	after=$(corpus "$td")
	finding=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d' | sed "s|^|$td/|" | head -3 | tr '\n' ' ')
	if [ -z "$finding" ]; then
		finding=$(grep -o 'failure while testing seed corpus entry: [^ ]*' "$log" | head -1 | sed 's/.*: //')
	fi
	why=$(sed 's/^[0-9.]* //' "$log" | grep -m1 -E 'context deadline exceeded|fuzzing process hung|terminated unexpectedly' || true)
	if [ -z "$why" ]; then
		why=$(sed 's/^[0-9.]* //' "$log" | grep -A1 -m1 -- '--- FAIL' | tail -1 | sed 's/^ *//' || true)
	fi
}

# Build every package's instrumented test binary once.
declare -A bins
while read -r pkg dir fn; do
	[ -n "${bins[$pkg]:-}" ] && continue
	bin="$FUZZLOGS/$(echo "$pkg" | tr '/' '_').fuzz.test"
	if ! "$GO" test -c -fuzz "^$fn\$" "${toolexec[@]}" -o "$bin" "$pkg" >"$bin.build.log" 2>&1; then
		echo "fuzz $pkg: building the test binary failed:"
		tail -20 "$bin.build.log" | sed 's/^/    /'
		bins[$pkg]=FAILED
		continue
	fi
	bins[$pkg]=$bin
done <<<"$targets"

rows=()
failures=()
failed=0
total=0
while read -r pkg dir fn; do
	log="$FUZZLOGS/$(echo "$pkg" | tr '/' '_').$fn.log"
	short=${pkg#github.com/rota-sched/rota/}
	printf 'fuzz %-30s %-32s ' "$short" "$fn"
	bin=${bins[$pkg]}
	if [ "$bin" = FAILED ]; then
		printf '%s\n' "build FAIL"
		rows+=("$(printf '| %-28s | %-32s | %10s | %8s | %-9s | %-8s |' "$short" "$fn" 0 0 - build)")
		failures+=("$short $fn: the test binary did not build (see $FUZZLOGS)")
		failed=1
		continue
	fi
	fuzz_once "$bin" "$dir" "$fn" "$log"
	result=ok
	note=
	if [ "$rc" -ne 0 ] && [ -z "$finding" ]; then
		# No failing input was written: the engine's own trouble. Once more.
		first=$why
		mv "$log" "$log.first"
		fuzz_once "$bin" "$dir" "$fn" "$log"
		note="retried after a harness failure ($first)"
		if [ "$rc" -ne 0 ] && [ -z "$finding" ]; then
			result=harness
			failures+=("$short $fn: harness problem, not a finding: twice without a failing input (${why:-exit $rc}; logs $log.first, $log)")
		fi
	fi
	if [ "$rc" -ne 0 ] && [ -n "$finding" ]; then
		result=FINDING
		replay=$fn
		case $finding in
		/*) replay="$fn/$(basename ${finding%% *})" ;;
		*) replay=$finding ;;
		esac
		failures+=("$short $fn: FINDING: failing input ${finding% } (replay: go test -run '$replay' $pkg; log $log)")
	elif [ "$result" = ok ] && [ "$rate" -lt "$FUZZMINRATE" ]; then
		result=SLOW
		failures+=("$short $fn: too slow: $rate execs/s while fuzzing, below the $FUZZMINRATE/s floor ($execs execs, baseline $baseline; log $log)")
	fi
	[ "$result" = ok ] || failed=1
	total=$((total + execs))
	printf '%10s execs %8s/s  baseline %-9s %s\n' "$execs" "$rate" "$baseline" "$result"
	if [ -n "$note" ]; then
		echo "    $note"
	fi
	if [ "$result" != ok ] && [ "$result" != SLOW ]; then
		sed 's/^[0-9.]* //' "$log" | tail -30 | sed 's/^/    /'
	fi
	rows+=("$(printf '| %-28s | %-32s | %10s | %8s | %-9s | %-8s |' "$short" "$fn" "$execs" "$rate" "$baseline" "$result")")
done <<<"$targets"

echo
echo "Fuzz summary (FUZZTIME=$FUZZTIME each, minimization $FUZZMINIMIZETIME per input, floor $FUZZMINRATE execs/s; logs in $FUZZLOGS)"
if [ "$FUZZINSTRUMENT" = all ]; then
	echo "Coverage instrumentation: every linked package"
else
	echo "Coverage instrumentation: $FUZZINSTRUMENT"
fi
printf '| %-28s | %-32s | %10s | %8s | %-9s | %-8s |\n' package target execs execs/s baseline result
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..30})" "$(printf -- '-%.0s' {1..34})" "$(printf -- '-%.0s' {1..11}):" "$(printf -- '-%.0s' {1..9}):" "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..10})"
printf '%s\n' "${rows[@]}"
printf '| %-28s | %-32s | %10s | %8s | %-9s | %-8s |\n' "total: ${#rows[@]} targets" "" "$total" "" "" "$([ $failed -eq 0 ] && echo ok || echo FAIL)"
for f in "${failures[@]}"; do
	echo "FAIL $f"
done
exit $failed
