#!/usr/bin/env bash
# make lint: golangci-lint (.golangci.yml: vet, staticcheck, depguard for
# pkg/ purity, errorlint, contextcheck, gosec, revive's context-as-argument,
# Kubernetes' logcheck, gofmt), go.mod drift, and the one logging rule no
# linter has.
#
# golangci-lint is built from hack/tools/go.mod (golangci-lint with logcheck
# linked in, see hack/tools/golangci-lint) into .cache/tools/ once; it is
# rebuilt only when hack/tools changes (its go.sum's checksum is in the
# stamp beside the binary), so a warm machine lints without building.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
bin=$root/.cache/tools/golangci-lint
stamp=$(cat hack/tools/go.mod hack/tools/go.sum hack/tools/golangci-lint/*.go | cksum | cut -d' ' -f1)
if [[ ! -x $bin || "$(cat "$bin.stamp" 2>/dev/null)" != "$stamp" ]]; then
	echo "building golangci-lint from hack/tools (first run takes a few minutes)..." >&2
	mkdir -p "$(dirname "$bin")"
	(cd hack/tools && "$GO" build -trimpath -o "$bin.tmp" ./golangci-lint)
	mv "$bin.tmp" "$bin"
	echo "$stamp" >"$bin.stamp"
fi

failed=0

# go.mod and go.sum say what the code imports, no more, no less.
for mod in . hack/tools; do
	if ! diff=$(cd "$mod" && "$GO" mod tidy -diff 2>&1); then
		echo "$mod/go.mod is not tidy (run: (cd $mod && go mod tidy)):"
		echo "$diff" | head -40
		failed=1
	fi
done

# An error in a structured log call is an error, not a string: logger.Error
# (err, ...) for one someone must act on, or "err", err on a V(n) line, so
# that log processors keep its type. logcheck does not look at values.
if out=$(git grep -nE '\.(Info|InfoS|Error|ErrorS)\(.*"(err|error)", *[A-Za-z_][A-Za-z0-9_.]*\.Error\(\)' -- '*.go'); then
	echo "log calls pass an error as a string (use logger.Error(err, ...) or \"err\", err):"
	echo "$out"
	failed=1
fi

"$bin" run ./... || failed=1
exit $failed
