# Rota — make targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := bin
# The version every binary reports (--version, the Starting log line,
# rota_build_info): the chart's appVersion unless VERSION is given.
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/rota/Chart.yaml)
REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -X github.com/rota-sched/rota/pkg/version.Version=$(VERSION) -X github.com/rota-sched/rota/pkg/version.revision=$(REVISION)
PKGS := ./...
FUZZTIME ?= 10s
BENCHTIME ?= 1s
BENCHCOUNT ?= 5
# go-nvml's cgo preamble includes NVIDIA's nvml.h, which marks a few hundred
# functions deprecated; every compile of that package printed a warning per
# function. Go has no per-package cgo flags, and go-nvml is the only package with
# C code in the build besides the standard library's, so the flag below silences
# only those warnings. A CGO_CFLAGS of your own wins.
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

.PHONY: help host-deps build build-next test unit verify release-check e2e lint bench bench-sim replay load fuzz demo evaluate soak kueue jobset containerd k8s-tools helm promtool manifests clean device-bundle device-rehearsal

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build the binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./extender/cmd/... ./deviceplugin/cmd/... ./admission/cmd/... ./cmd/...

unit: ## unit, property and fuzz-seed tests with -race
	$(GO) test -race -count=1 $(PKGS)

verify: helm ## the contributors' inner loop (minutes): lint, deploy/ in sync with the chart, docs links and wire contract, unit tests without -race
	@GO=$(GO) bash hack/lint.sh
	$(GO) test -count=1 -tags e2e -run 'TestManifestsInSync' ./test/chart/
	$(GO) test -count=1 $(PKGS)

release-check: helm ## is the tree ready to tag as the chart's version? (CONTRIBUTING.md, Releasing)
	@GO=$(GO) bash hack/release-check.sh

test: host-deps lint unit e2e device-rehearsal ## everything CI runs: lint, unit tests, scenario tests on a real control plane, the GPU machine's check rehearsed

host-deps: ## install (as root) or name (otherwise) the host packages the suites need: containerd, runc, CNI, iptables, chromium
	@bash hack/host-deps.sh

e2e: k8s-tools kueue jobset containerd helm promtool build build-next ## scenario tests against a real etcd + kube-apiserver + kube-scheduler
	@mkdir -p $(BIN)
	$(GO) test -tags e2e -count=1 -timeout 30m -v ./test/... 2>&1 | tee $(BIN)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|SUMMARY|panic|  passed:|  FAILED)' ; \
	  rc=$${PIPESTATUS[0]}; if [[ $$rc != 0 ]]; then bash hack/failed-tests.sh $(BIN)/e2e.log; fi; exit $$rc

lint: ## golangci-lint (.golangci.yml: vet, staticcheck, depguard for pkg/ purity, errorlint, contextcheck, gosec, revive, logcheck, gofmt) and go.mod drift
	@GO=$(GO) bash hack/lint.sh

bench: ## Go benchmarks (medians over BENCHCOUNT runs)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./pkg/... ./extender/... ./admission/... ./deviceplugin/... | tee $(BIN)/bench.txt

fuzz: ## run every fuzz target for FUZZTIME each; prints the executions per target and a summary table
	@GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZLOGS=$(BIN)/fuzz bash hack/fuzz.sh

k8s-tools: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet once into .cache/k8s/bin
	@bash hack/k8s-tools.sh

bench-sim: ## replay the openb trace: 7 policies x 10 seeds on the default list (about 3 minutes)
	$(GO) run ./cmd/rota-sim --out $(BIN)/sim

replay: k8s-tools build ## openb default list, seed 42, through the real kube-scheduler + rota-extender vs pkg/sim (about 10 minutes)
	@mkdir -p out/replay
	$(GO) test -tags replay -count=1 -timeout 45m -v -run 'TestReplay$$' ./test/replay -args -policies=fragmentation-aware,binpack -seed=42 -out=$(CURDIR)/out/replay 2>&1 | tee $(BIN)/replay.log | grep -E '^(--- |PASS|FAIL|ok|panic)|replay_test.go:'; exit $${PIPESTATUS[0]}

load: k8s-tools build ## scheduling throughput on 1,000 then 5,000 simulated GPU nodes: plain kube-scheduler vs Rota's extender in one run (10-25 minutes)
	$(GO) test -tags load -count=1 -timeout 30m -v ./test/load/ 2>&1 | tee $(BIN)/load.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|LOAD SUMMARY|panic)|load_test.go' ; exit $${PIPESTATUS[0]}

device-bundle: k8s-tools ## build into .device-bundle/ what hack/device-check.sh needs on a GPU machine (at most 56 MiB; prints the size)
	@GO=$(GO) LDFLAGS="$(LDFLAGS)" bash hack/device-bundle.sh

device-rehearsal: device-bundle ## run hack/device-check.sh here without a GPU (mock NVML, MPS stand-in, 50 nodes); report in bin/device-check
	@bash hack/device-check.sh --rehearse $(BIN)/device-check && cat $(BIN)/device-check/report.md

kueue: ## build Kueue's controller manager (the version in test/tools/versions.env) once into .cache/kueue/bin
	@bash hack/kueue.sh

jobset: ## build JobSet's controller manager (the version in test/tools/jobset/go.mod) once into .cache/jobset/bin
	@bash hack/jobset.sh

EVALUATE_ARGS ?=
build-next: ## the next build (-tags rotanext: the next version of Rota's documents) into bin/next/, for the soak's rolling upgrade
	$(GO) build -tags rotanext -ldflags "$(LDFLAGS)" -o $(BIN)/next/ ./extender/cmd/... ./deviceplugin/cmd/... ./admission/cmd/...

SOAK ?= 30m
soak: k8s-tools build build-next ## chaos soak: the mixed workload while every part is killed, paused and restarted at random; SOAK=30m, SEED=n, PLAN=out/soak/plan.json reruns a fault plan
	$(GO) run ./test/soak -duration $(SOAK) -out out/soak $(if $(SEED),-seed $(SEED)) $(if $(PLAN),-plan $(PLAN))

evaluate: k8s-tools kueue build ## the same seeded job set through kube-scheduler alone, Kueue and Rota: three scenarios, report in out/evaluate (about 40 minutes)
	$(GO) run ./test/evaluate -size full $(EVALUATE_ARGS)

containerd: ## build containerd 2.x (test/tools/containerd/go.mod) once into .cache/containerd/bin, for test/realnode's DRA scenario (CDI)
	@bash hack/containerd.sh

helm: ## build the Helm CLI once into .cache/k8s/bin
	@bash hack/helm.sh

promtool: ## build Prometheus' promtool once into .cache/k8s/bin (test/chart unit-tests the chart's alerts with it)
	@bash hack/promtool.sh

.PHONY: images
images: ## image archives of rota-extender, rota-admission, rota-device-plugin and kube-scheduler in bin/images (no container engine)
	@bash hack/k8s-tools.sh kube-scheduler
	$(GO) run ./hack/images --out $(BIN)/images

manifests: helm ## render deploy/rota.yaml (plain manifests) from charts/rota
	@{ echo "# Generated by 'make manifests' from charts/rota (namespace rota-system, cert-manager issues the"; \
	   echo "# webhook's and the extender's certificates). Do not edit: change the chart and run make manifests."; \
	   echo "# Create the records key first: kubectl -n rota-system create secret generic rota-records-key"; \
	   echo "#   --from-literal=key=\"\$$(head -c 48 /dev/urandom | base64 -w0)\" --from-literal=since=\"\$$(date -u +%FT%TZ)\""; \
	   .cache/k8s/bin/helm template rota charts/rota --namespace rota-system --kube-version 1.37.2 \
	     --set admission.certManager.enabled=true --set recordsKey.generate=false; } > deploy/rota.yaml

demo: build k8s-tools ## the main job: Rota on a local control plane with simulated GPU nodes (queue, reservation, backfill, shares), then the evaluation's short mixed scenario
	$(GO) run ./test/demo $(if $(KEEP),-keep)
	$(if $(KEEP),,$(GO) run ./test/evaluate -size small -scenarios mixed -stacks rota -out out/demo/evaluation)

clean:
	rm -rf $(BIN)
