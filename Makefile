# nomad-statefulset
#
#   make tools      build the real nomad and consul (tools/nomad, tools/consul modules) into .cache/bin, once
#   make build      build ./bin/nomad-statefulset, stamped with the version
#   make release    dist/nomad-statefulset_<version>_linux_{amd64,arm64}.tar.gz
#                   and dist/SHA256SUMS (version: git describe)
#   make test-unit  unit tests (everything but e2e/), with -race; the quick loop:
#                   needs no nomad or consul binary
#   make test-integration  the backend tests against real Nomad and Consul
#                   agents (build tag realagents): the Consul store (and the
#                   cache in front of it), elector and ACLs, the Nomad client
#   make test-e2e   end-to-end scenarios against real Nomad and Consul agents
#                   (installs Debian's PostgreSQL 15 first if it is missing:
#                   make postgres; builds the previous release to upgrade
#                   from: make previous-release)
#   make lint       gofmt, go vet, staticcheck
#   make test       lint + test-unit + test-integration + test-e2e (what CI runs)
#   make bench      benchmarks, -cpu 1, written to .cache/bench.txt
#   make bench-cluster  set vs native Nomad on real agents (e2e), written to .cache/bench-cluster.txt
#                   (with the 1,000-children scale comparison; see the target)
#   make demo       local Consul + Nomad + daemon on loopback, running examples/web.nomad.hcl
#                   (EXAMPLE=nats: examples/nats, with Debian's nats-server;
#                   EXAMPLE=postgres: examples/postgres, with postgresql-15)
#   make demo-down  stop everything `make demo` started
#
# Real Nomad and Consul: nomad is built with cgo (gcc) and without build tags
# (so Nomad's mock_driver is compiled in); consul with plain `go build`. See
# scripts/build-tools.sh. A cold build takes several minutes on 2 cores;
# afterwards a stamp file (.cache/bin/tools.stamp) makes `make tools` a no-op
# until tools/*/go.mod, tools/*/go.sum or the Go version change.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
CACHE := $(CURDIR)/.cache
BIN_DIR := $(CACHE)/bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN_DIR)/staticcheck-$(STATICCHECK_VERSION)
UNIT_TIMEOUT ?= 20m
E2E_TIMEOUT ?= 45m
E2E_JOBS ?= 2
E2E_RUN ?= .
RACE ?= -race

export NOMAD_BIN ?= $(BIN_DIR)/nomad
export CONSUL_BIN ?= $(BIN_DIR)/consul
# Nomad's AWS fingerprinter aborts the client when this is set.
unexport AWS_CA_BUNDLE

.PHONY: all tools postgres previous-release build release test-unit test-integration test-e2e lint test bench bench-cluster demo demo-down clean

# The version comes from git (a tag, else the commit, "-dirty" for local
# changes) and is stamped into the binary with -ldflags.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
VERSION_PKG := github.com/nomad-statefulset/nomad-statefulset/command
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).GitCommit=$(COMMIT)
RELEASE_ARCHES ?= amd64 arm64

all: build

tools:
	@bash scripts/build-tools.sh

build:
	@if [ ! -d cmd/nomad-statefulset ]; then \
		echo "build: ./cmd/nomad-statefulset does not exist yet: nothing to build" >&2; exit 1; fi
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/nomad-statefulset ./cmd/nomad-statefulset

# Static, cross-compiled archives with a checksum file. CGO is off: the
# daemon needs none, so one archive runs on any linux of its architecture.
release:
	rm -rf dist && mkdir -p dist/stage
	for arch in $(RELEASE_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o dist/stage/nomad-statefulset ./cmd/nomad-statefulset; \
		cp README.md dist/stage/ && cp -R docs dist/stage/; \
		tar -C dist/stage -czf dist/nomad-statefulset_$(VERSION)_linux_$$arch.tar.gz nomad-statefulset README.md docs; \
	done
	rm -rf dist/stage
	cd dist && sha256sum *.tar.gz > SHA256SUMS
	@cat dist/SHA256SUMS

test-unit:
	$(GO) test $(RACE) -count=1 -timeout $(UNIT_TIMEOUT) $$($(GO) list ./... | grep -v '/e2e')

test-integration: tools
	$(GO) test $(RACE) -tags realagents -count=1 -timeout $(UNIT_TIMEOUT) ./backend/consul/ ./backend/storecache/ ./backend/nomad/ ./internal/testagent/

# PostgreSQL 15 for e2e/postgres_test.go (examples/postgres): Debian's
# postgresql-15 (or the postgresql metapackage where that is 15), installed
# non-interactively when its server binary is missing; a no-op when present.
PG_SERVER := /usr/lib/postgresql/15/bin/postgres
postgres:
	@if [ ! -x $(PG_SERVER) ]; then \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
		echo "installing PostgreSQL 15 (apt-get install postgresql-15)"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 || \
			$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql; \
		[ -x $(PG_SERVER) ] || { echo "$(PG_SERVER) is still missing after apt-get" >&2; exit 1; }; \
	fi

# Every e2e test in a process of its own, E2E_JOBS at a time, each running
# bin/nomad-statefulset (scripts/e2e.sh says why). E2E_RUN=regexp runs some.
# E2E_TIMEOUT bounds each test, not the whole run (the longest, TestPostgres,
# takes about 5.5 minutes two at a time).
test-e2e: tools build postgres previous-release
	E2E_JOBS=$(E2E_JOBS) E2E_TIMEOUT=$(E2E_TIMEOUT) E2E_RUN='$(E2E_RUN)' NSS_E2E_DAEMON=$(CURDIR)/bin/nomad-statefulset \
		NSS_E2E_PREVIOUS_DAEMON=$(PREVIOUS_DAEMON) bash scripts/e2e.sh

# The release an upgrade is tested from (e2e
# TestUpgradeFromThePreviousReleaseRestartsNothing: sets made by it, then
# this build started on the same state, must see no child touched). It is
# built once from git into .cache/previous/<commit>/; a new release moves
# PREVIOUS_RELEASE to the commit of the one before it.
PREVIOUS_RELEASE ?= f70fa2eff312a89a23d519ef3b6a4e7d3cb47655
PREVIOUS_DAEMON := $(CACHE)/previous/$(PREVIOUS_RELEASE)/nomad-statefulset
previous-release: $(PREVIOUS_DAEMON)
$(PREVIOUS_DAEMON):
	@git cat-file -e '$(PREVIOUS_RELEASE)^{commit}' 2>/dev/null || { \
		echo "previous-release: commit $(PREVIOUS_RELEASE) is not in this clone (a shallow clone? git fetch --unshallow)" >&2; exit 1; }
	rm -rf $(CACHE)/previous/src && mkdir -p $(CACHE)/previous/src $(dir $@)
	git archive $(PREVIOUS_RELEASE) | tar -x -C $(CACHE)/previous/src
	cd $(CACHE)/previous/src && $(GO) build -o $@ ./cmd/nomad-statefulset
	rm -rf $(CACHE)/previous/src

$(STATICCHECK):
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN_DIR)/staticcheck $@

lint: $(STATICCHECK)
	@out="$$(gofmt -l $$(find . -name '*.go' -not -path './.cache/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags realagents ./...
	$(STATICCHECK) -tags realagents ./...

test: lint test-unit release test-integration test-e2e

bench:
	@mkdir -p $(CACHE)
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1 $$($(GO) list ./... | grep -v '/e2e') | tee $(CACHE)/bench.txt
	@echo "benchmarks written to $(CACHE)/bench.txt"

# Real Nomad and Consul, one fresh cluster per run; about a minute a run.
# Then BenchmarkScaleVsNative (issue 28): 200 Parallel sets of 5 mock_driver
# pods (1,000 children) created and rolled at once against Nomad alone on
# two fresh agents (native, set, native), with the daemon's lost event
# streams; three Nomad agents at once, each polling its tasks' stats once a
# minute, and each phase started once the side before it is quiet: about
# 12 minutes a run on a quiet machine. NSS_BENCH_SCALE_SETS (default 200)
# and NSS_BENCH_SCALE_REPLICAS (default 5) change its size;
# BENCH_SCALE_COUNT its runs (60 minutes allowed each: up to 3 minutes of
# quiet wait per phase). On stderr, each phase also says where the time
# went (Nomad's evaluation and allocation times), the CPU every agent and the machine used, and the daemon's
# passes, Nomad calls and Consul writes; NSS_BENCH_SCALE_WORKERS=N runs
# the daemon with workers = N, NSS_BENCH_SCALE_LOGS=dir keeps its logs,
# NSS_BENCH_SCALE_PROFILE=dir keeps a CPU profile (25 s, or
# NSS_BENCH_SCALE_PROFILE_SECONDS) of each side's Nomad
# (and of the daemon, in the set's phases) from the start of each phase;
# NSS_BENCH_SCALE_NATIVE_PARENTS=1, a diagnostic, has the native sides
# register the set's parent jobs too, and NSS_BENCH_SCALE_NATIVE_STREAM=1,
# another, has them serve the daemon's event stream to a reader, and
# NSS_BENCH_SCALE_CONSUL_DIR=dir, a third, keeps the set's Consul's data in
# dir (/dev/shm: no fsyncs on the disk the Nomads share), and
# NSS_BENCH_SCALE_PARENT_EVAL_PRIORITY=N, a fourth, registers every side's
# parents with evaluation priority N (below the children's 50: their
# evaluations, which place nothing, go after every child's), and
# NSS_BENCH_SCALE_NATIVE_A_WORKERS=N, a fifth, has native A register N jobs
# at a time (B keeps 4);
# NSS_BENCH_SCALE_EVENT_BUFFER=N gives the set's Nomad (and the daemon)
# event_buffer_size = N, and NSS_BENCH_SCALE_SOCKETS=ms samples the
# daemon's connections to its Nomad every ms milliseconds: the bytes each
# side had not yet handed over, so a lost stream names who fell behind.
# NSS_BENCH_SCALE_CREATE_ONLY=1 stops each run after its three creates
# (4-5 minutes a run), to pool many more creates in the same time;
# scripts/bench-pool.sh pools the ratios of the runs' logs.
BENCH_CLUSTER_COUNT ?= 5
BENCH_SCALE_COUNT ?= 1
bench-cluster: tools build
	@mkdir -p $(CACHE)
	$(GO) test -run '^$$' -bench '(OrderedReady|Parallel)VsNative' -benchtime 1x -count $(BENCH_CLUSTER_COUNT) -timeout 60m ./e2e/ | tee $(CACHE)/bench-cluster.txt
	$(GO) test -run '^$$' -bench 'ScaleVsNative' -benchtime 1x -count $(BENCH_SCALE_COUNT) -timeout $$((60 * $(BENCH_SCALE_COUNT)))m ./e2e/ | tee -a $(CACHE)/bench-cluster.txt
	@echo "benchmarks written to $(CACHE)/bench-cluster.txt"
	NSS_STEADY_STATE=10m $(GO) test -count=1 -timeout 30m -run '^TestSteadyStateMakesNoWrites$$' -v ./e2e/ | tee $(CACHE)/steady-state-soak.txt

# The example's package is checked first, before anything is built.
EXAMPLE ?= web
demo: demo-check tools build
	@EXAMPLE=$(EXAMPLE) bash scripts/demo.sh up

demo-check:
	@EXAMPLE=$(EXAMPLE) bash scripts/demo.sh check

demo-down:
	@bash scripts/demo.sh down

# nats-server for e2e/nats_test.go (examples/nats): Debian's package,
# installed non-interactively when missing; a no-op when present.
NATS_SERVER := /usr/sbin/nats-server
.PHONY: nats-server demo-check
nats-server:
	@if [ ! -x $(NATS_SERVER) ]; then \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
		echo "installing nats-server (apt-get install nats-server)"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nats-server; \
		[ -x $(NATS_SERVER) ] || { echo "$(NATS_SERVER) is still missing after apt-get" >&2; exit 1; }; \
	fi
test-e2e: nats-server

# Debian's prometheus (with promtool) for e2e/monitoring_test.go
# (examples/monitoring), installed non-interactively when missing; a no-op
# when present. Debian's package would start a server on :9090 under
# systemd; the tests start their own on loopback.
PROMETHEUS := /usr/bin/prometheus
.PHONY: prometheus
prometheus:
	@if [ ! -x $(PROMETHEUS) ] || [ ! -x /usr/bin/promtool ]; then \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
		echo "installing prometheus (apt-get install prometheus)"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; \
		[ -x $(PROMETHEUS) ] || { echo "$(PROMETHEUS) is still missing after apt-get" >&2; exit 1; }; \
	fi
test-e2e: prometheus

clean:
	rm -rf bin $(CACHE)/demo
