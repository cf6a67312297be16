#!/usr/bin/env bash
# Prints what each failed test wrote, from a `go test -v` log: per test, the
# lines it logged itself (file:line, the first 80) and the last 80 lines from
# its `=== RUN` to its `--- FAIL` (process log tails land there), then any
# panic. `make e2e` filters its console output to one line per test; this
# runs after it when the suite failed, so that a red CI run says why.
#
# Usage: hack/failed-tests.sh <go test -v log>
set -uo pipefail
log="${1:?usage: hack/failed-tests.sh <go test -v log>}"
[[ -r "$log" ]] || { echo "failed-tests: cannot read $log" >&2; exit 1; }
mapfile -t failed < <(sed -n 's/^ *--- FAIL: \([^ ]*\) .*/\1/p' "$log" | sort -u)
for name in "${failed[@]}"; do
  section="$(awk -v name="$name" '
    $0 == "=== RUN   " name { on = 1 }
    on { print }
    on && index($0, "--- FAIL: " name " ") { on = 0 }
  ' "$log")"
  echo "==================== ${name}: what the test said (first 80 lines) ===================="
  grep -E '^ +[A-Za-z0-9_]+\.go:[0-9]+: ' <<<"$section" | head -80
  echo "==================== ${name}: the last 80 lines of its output ===================="
  tail -80 <<<"$section"
done
if grep -q '^panic: ' "$log"; then
  echo "==================== panic ===================="
  grep -A60 '^panic: ' "$log" | head -120
fi
