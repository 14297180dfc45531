# Every module in the repository: the library and CLI at the root, and the
# nested modules kept out of the library's dependency graph.
MODULE_DIRS := $(patsubst %/go.mod,%,$(shell git ls-files --cached --others --exclude-standard -- '*go.mod' 2>/dev/null | sort))
ifeq ($(strip $(MODULE_DIRS)),)
MODULE_DIRS := .
endif
MODULE_DIRS := $(patsubst go.mod,.,$(MODULE_DIRS))

GO        ?= go
TESTFLAGS ?= -race -count=1 -timeout 25m

# staticcheck, pinned: `make tools` installs it with go install into GOBIN
# (default GOPATH/bin); lint installs it first when that version is missing.
STATICCHECK_VERSION := v0.8.2
GOBIN_DIR   := $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
STATICCHECK := $(GOBIN_DIR)/staticcheck

.PHONY: all test short lint tools generate generate-check bench fuzz tidy chaos mutation

all: lint test

## test: every test of every module, with the race detector, against real
## servers that the tests start themselves (see tools/ci-deps.sh). The root
## module and the other nested modules run at the same time, chaos last
## (tools/test-modules.sh; TEST_STREAMS=1 runs them one after the other).
test: generate-check
	@bash tools/test-modules.sh "$(GO)" "$(TESTFLAGS)" $(MODULE_DIRS)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=10s

## short: the fast loop, go test -short of the root module: unit and
## miniredis tests only; every test that would start a server (Redis,
## PostgreSQL, etcd, the CLI binary) skips (internal/testserver.SkipShort).
short:
	$(GO) test -short -count=1 ./...

## lint: gofmt, go vet, staticcheck, go mod tidy -diff and go mod verify in
## every module.
lint: tools
	@bin="$$(git ls-files -z | xargs -0 grep -IL '' -- | while read -r f; do [ -s "$$f" ] && echo "$$f"; done)"; \
		test -z "$$bin" || { echo "binary files are tracked (build outputs do not belong in git):"; echo "$$bin"; exit 1; }
	@set -e; test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	@set -e; for d in $(MODULE_DIRS); do \
		echo "== lint $$d"; \
		(cd $$d && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) mod tidy -diff && $(GO) mod verify >/dev/null); \
	done

## tools: install the pinned linters (staticcheck $(STATICCHECK_VERSION)) unless
## that version is there already.
tools:
	@if ! $(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))'; then \
		echo "== go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; \
		GOBIN="$(GOBIN_DIR)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi

## generate: regenerate the Lua scripts (and anything else with go:generate).
generate:
	$(GO) generate ./...

## generate-check: fail when committed generated files are stale.
generate-check:
	@if [ -d internal/luagen ]; then $(GO) test -count=1 ./internal/luagen; fi

## fuzz: run each fuzz target briefly (FUZZTIME, default 10s each).
## Without minimization (-fuzzminimizetime 0): when the fuzz time ran out
## while the engine minimized a new interesting input, go test failed the
## target with a bare "context deadline exceeded" and no failing input
## (FuzzRedisKeys in CI, go1.26.8). A crasher is still written, unminimized.
FUZZTIME ?= 10s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
			echo "== fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 0 $$pkg; \
		done; \
	done

## bench: the comparison benchmarks and their report (bench/ module).
bench:
	@if [ -d bench ]; then cd bench && $(GO) run ./cmd/report; else $(GO) test -run '^$$' -bench . ./...; fi

## chaos: randomized fault schedules checked for linearizability (chaos/
## module, docs/chaos.md): CHAOS_SEEDS seeds per backend (default 100),
## each CHAOS_LENGTH long; SEED=n replays seed n of every backend. Run in
## the directory (no package argument) so the FIGURES lines are shown.
CHAOS_SEEDS  ?= 100
CHAOS_LENGTH ?= 5s
chaos:
	cd chaos && $(GO) test -race -count=1 -timeout 6h -run '^TestChaos' -args \
		-chaos.length=$(CHAOS_LENGTH) $(if $(SEED),-chaos.seed=$(SEED) -chaos.seeds=1,-chaos.seeds=$(CHAOS_SEEDS))

## mutation: mutation testing of backend/memory (gremlins) and of the Redis
## scripts (tools/luamutate) with the conformance suite as the test; takes
## about half an hour. Results and survivors: docs/mutation.md.
mutation:
	bash tools/mutation-memory.sh
	$(GO) run ./tools/luamutate

tidy:
	@set -e; for d in $(MODULE_DIRS); do (cd $$d && $(GO) mod tidy); done
