#!/usr/bin/env bash
# Runs every Go fuzz target for FUZZTIME each and prints, per target, how
# many inputs it executed, then a summary table.
#
#   FUZZTIME=10s hack/fuzz.sh            # every package
#   FUZZTIME=2s hack/fuzz.sh ./deviceplugin/...
#
# Each target's full output is kept in $FUZZLOGS (default bin/fuzz/). The
# execution count is the last "execs: N" that `go test -fuzz` printed (its
# periodic and final status lines; 0 when FUZZTIME ran out while it was
# still replaying the corpus); "baseline" is how much of the seed corpus and
# the cached corpus it replayed first ("gathering baseline coverage: N/M").
# Exits 1 if any target failed.
set -uo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
FUZZLOGS=${FUZZLOGS:-bin/fuzz}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
mkdir -p "$FUZZLOGS"

# Targets come from the test files' source (no test binary is built just
# to list them): "import/path FuzzName" lines.
targets=$("$GO" list -f '{{$d := .Dir}}{{$p := .ImportPath}}{{range .TestGoFiles}}{{$p}} {{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$p}} {{$d}}/{{.}}{{"\n"}}{{end}}' "${pkgs[@]}" |
	while read -r pkg file; do
		[ -n "$pkg" ] || continue
		sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$file" | sed "s|^|$pkg |"
	done | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets in ${pkgs[*]}"
	exit 0
fi

rows=()
failed=0
total=0
while read -r pkg fn; do
	log="$FUZZLOGS/$(echo "$pkg" | tr '/' '_').$fn.log"
	printf 'fuzz %-50s %-32s ' "$pkg" "$fn"
	"$GO" test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1
	rc=$?
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	execs=${execs:-0}
	baseline=$(grep -o 'gathering baseline coverage: [0-9]*/[0-9]*' "$log" | tail -1 | awk '{print $4}')
	baseline=${baseline:--}
	result=ok
	if [ $rc -ne 0 ]; then
		result=FAIL
		failed=1
	fi
	total=$((total + execs))
	printf '%12s execs  baseline %-9s %s\n' "$execs" "$baseline" "$result"
	if [ $rc -ne 0 ]; then
		tail -30 "$log" | sed 's/^/    /'
	fi
	rows+=("$(printf '| %-28s | %-32s | %10s | %-9s | %-6s |' "${pkg#github.com/rota-sched/rota/}" "$fn" "$execs" "$baseline" "$result")")
done <<<"$targets"

echo
echo "Fuzz summary (FUZZTIME=$FUZZTIME each; logs in $FUZZLOGS)"
printf '| %-28s | %-32s | %10s | %-9s | %-6s |\n' package target execs baseline result
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..30})" "$(printf -- '-%.0s' {1..34})" "$(printf -- '-%.0s' {1..11}):" "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..8})"
printf '%s\n' "${rows[@]}"
printf '| %-28s | %-32s | %10s | %-9s | %-6s |\n' "total: ${#rows[@]} targets" "" "$total" "" "$([ $failed -eq 0 ] && echo ok || echo FAIL)"
exit $failed
