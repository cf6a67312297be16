#!/usr/bin/env bash
# Checks that the tree is ready to be tagged as the version it says it is
# (CONTRIBUTING.md, "Releasing"): the chart's version and appVersion agree,
# CHANGELOG.md has the version's entry, deploy/ is in sync with the chart,
# the docs' links and wire contract hold, and a built binary reports the
# version. RELEASE=1 also requires the entry to be dated (## X.Y.Z (YYYY-MM-DD)),
# not "not released", and a clean tree.
#
# Usage: hack/release-check.sh        (make release-check)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fail=0
say() { echo "release-check: $*"; }
bad() { say "FAIL: $*"; fail=1; }

version=$(sed -n 's/^version: *"*\([^"]*\)"*$/\1/p' charts/rota/Chart.yaml)
app=$(sed -n 's/^appVersion: *"*\([^"]*\)"*$/\1/p' charts/rota/Chart.yaml)
[[ -n "$version" && "$version" == "$app" ]] || bad "charts/rota/Chart.yaml: version ${version:-?} and appVersion ${app:-?} differ"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || bad "chart version '$version' is not semantic (X.Y.Z)"

if grep -q "^## ${version} (" CHANGELOG.md; then
  say "CHANGELOG.md has an entry for ${version}"
  if [[ "${RELEASE:-0}" == 1 ]] && ! grep -Eq "^## ${version} \([0-9]{4}-[0-9]{2}-[0-9]{2}\)" CHANGELOG.md; then
    bad "CHANGELOG.md: the ${version} entry has no release date (## ${version} (YYYY-MM-DD))"
  fi
else
  bad "CHANGELOG.md has no '## ${version} (...)' entry"
fi
if [[ "${RELEASE:-0}" == 1 ]] && ! git diff --quiet HEAD; then
  bad "the tree has uncommitted changes"
fi

$GO test -count=1 -tags e2e -run 'TestManifestsInSync' ./test/chart/ >/dev/null || bad "deploy/rota.yaml differs from the chart (make manifests)"
$GO test -count=1 ./test/docs/ >/dev/null || bad "docs: a broken link, or a wire-contract name missing from docs/design.md (go test ./test/docs/)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$GO build -ldflags "-X github.com/rota-sched/rota/pkg/version.Version=${version}" -o "$tmp/" ./extender/cmd/rota-extender
got=$("$tmp/rota-extender" --version)
[[ "$got" == "rota-extender ${version} "* ]] || bad "rota-extender --version says '$got', want ${version}"

if [[ $fail != 0 ]]; then
  say "not ready to release ${version}"
  exit 1
fi
say "ready: ${version} (chart, changelog, manifests, docs, binaries agree)"
