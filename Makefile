# braid: durable workflows and DAGs on PostgreSQL, built on River.
# `make help` lists the targets.

DURATION ?= 60s
GO       ?= go
TESTFLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Install the PostgreSQL server binaries if missing (apt-get, as root), else say what to install
	@./scripts/setup-postgres.sh $(firstword $(MAKECMDGOALS))

.PHONY: setup-browser
setup-browser: ## Install Chromium for the dashboard's browser test if missing (apt-get, as root), else say what to install
	@./scripts/setup-chromium.sh

.PHONY: test
test: setup setup-browser verify ## go vet, then every test under the race detector (the dashboard's in headless Chromium)
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m $(TESTFLAGS) ./...
	$(MAKE) --no-print-directory fuzz

# FUZZTIME is a count of inputs (Nx), not a duration: Go 1.26's fuzz
# coordinator can report its own -fuzztime deadline as a failure
# ("context deadline exceeded" with no failing input), which a count
# never arms. FUZZMINIMIZE bounds, as a count too, the shrinking of each
# new input: shrinking an expensive condition at the default 60 s would
# stall the run for that long.
FUZZTIME ?= 20000x
FUZZMINIMIZE ?= 100x

.PHONY: fuzz
fuzz: ## Fuzz DAG When conditions and event filters in expr's sandbox, and the check of JSON that jsonb refuses, FUZZTIME inputs each (default 20000x; make test runs it)
	$(GO) test -run '^$$' -fuzz '^FuzzCondition$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./workflow
	$(GO) test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./workflow
	$(GO) test -run '^$$' -fuzz '^FuzzCheckJSONB$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./queue
	$(GO) test -run '^$$' -fuzz '^FuzzCheckJSONBOfMarshalledText$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./queue

.PHONY: verify
verify: ## Fail if go.mod is not tidy or the rendered River migrations drift from the pinned River version
	@$(GO) mod tidy -diff || { echo "go.mod is not tidy: run 'go mod tidy'" >&2; exit 1; }
	$(GO) run ./internal/rivergen -check

.PHONY: generate
generate: ## Render River's migrations into migrations/sql again
	$(GO) run ./internal/rivergen

.PHONY: demo
demo: ## Run the feed-fetcher example end to end, with the dashboard on 127.0.0.1:8080 (DURATION=60s; DATABASE_URL optional)
	@$(if $(DATABASE_URL),,./scripts/setup-postgres.sh demo)
	$(GO) run ./examples/feedfetcher/cmd/feedfetcher -duration $(DURATION)

.PHONY: bench
bench: setup ## Benchmarks beside raw River, as JSON on stdout (QUICK=1 for a short run)
	@$(GO) run ./cmd/braid bench -run $(if $(QUICK),-quick)

.PHONY: chaos
chaos: setup ## Fault suite: kill workers and PostgreSQL under load, as JSON on stdout (QUICK=1 for the smoke size)
	@$(GO) run ./cmd/braid chaos -run $(if $(QUICK),-quick)

.PHONY: screenshots
screenshots: setup setup-browser ## Drive the dashboard in headless Chromium and write its screenshots to docs/screenshots
	BRAID_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -run TestDashboardInABrowser ./internal/admin

.PHONY: build
build: ## Build the braid CLI into bin/braid
	$(GO) build -o bin/braid ./cmd/braid
