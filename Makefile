# Rota — make targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := bin
PKGS := ./...
FUZZTIME ?= 10s
BENCHTIME ?= 1s
BENCHCOUNT ?= 5

.PHONY: help build test unit e2e lint verify-imports bench fuzz fuzz-seeds demo k8s-tools clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build the binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./extender/cmd/... ./deviceplugin/cmd/... ./admission/cmd/... ./cmd/...

unit: ## unit, property and fuzz-seed tests with -race
	$(GO) test -race -count=1 $(PKGS)

test: lint unit e2e ## everything CI runs: lint, unit tests, scenario tests on a real control plane

e2e: k8s-tools build ## scenario tests against a real etcd + kube-apiserver + kube-scheduler
	$(GO) test -tags e2e -count=1 -timeout 30m -v ./test/... 2>&1 | tee $(BIN)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|SUMMARY|panic)' ; exit $${PIPESTATUS[0]}

lint: verify-imports ## go vet, gofmt, import rules
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

verify-imports: ## pkg/ stays pure: no client-go, HTTP, gRPC, NVML, go-cache, klog
	@bad=$$($(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' ./pkg/... | tr ' ' '\n' | grep -E '^(k8s.io/client-go|k8s.io/klog|k8s.io/kube-scheduler|k8s.io/kubelet|net/http|github.com/julienschmidt|google.golang.org/grpc|github.com/NVIDIA|github.com/patrickmn)' || true); \
	if [ -n "$$bad" ]; then echo "pkg/ imports forbidden packages:"; echo "$$bad"; exit 1; fi
	@k8s=$$($(GO) list -f '{{.ImportPath}} {{join .Imports " "}}' ./pkg/... | grep -v '^github.com/rota-sched/rota/pkg/podreq ' | grep -E ' k8s.io/' || true); \
	if [ -n "$$k8s" ]; then echo "only pkg/podreq may import k8s.io types:"; echo "$$k8s"; exit 1; fi
	@if git grep -n 'time\.Now()' -- 'pkg/*.go' ':!*_test.go' | grep -q .; then echo "pkg/ must take time from its caller:"; git grep -n 'time\.Now()' -- 'pkg/*.go' ':!*_test.go'; exit 1; fi

bench: ## Go benchmarks (medians over BENCHCOUNT runs)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./pkg/... ./extender/... ./admission/... ./deviceplugin/... | tee $(BIN)/bench.txt

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; done

k8s-tools: ## build etcd, kube-apiserver, kube-scheduler, kubectl once into .cache/k8s/bin
	@bash hack/k8s-tools.sh

demo: build k8s-tools ## the main job: a local control plane with Rota and simulated GPU nodes, replaying a trace
	$(GO) run ./test/demo $(if $(KEEP),-keep)

clean:
	rm -rf $(BIN)
