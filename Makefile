# Tests that need PostgreSQL use TEST_DATABASE_URL (see internal/testdb).

GO       ?= go
FUZZTIME ?= 20s

# The repository's modules: the library at the root, then those that keep
# what only they need out of the library's go.mod (admin/browsertest,
# bench, cmd/wmoutbox/migratetools, faults, forward/kafkaforward/interop,
# outboxotel).
# Each target runs in every one of them.
MODULES := . $(sort $(patsubst ./%/go.mod,%,$(shell find . -mindepth 2 -name go.mod -not -path './.git/*')))

# golangci-lint is pinned: `make tools` installs this version into
# TOOLS_BIN (./.bin unless set; a directory kept between clones saves the
# install), and lint uses that binary, not whichever one is on PATH.
GOLANGCI_LINT_VERSION := v2.15.0
TOOLS_BIN             ?= $(CURDIR)/.bin
GOLANGCI_LINT         := $(TOOLS_BIN)/golangci-lint

# promtool checks the alert rules of deploy/prometheus; Debian and Ubuntu
# ship it in the prometheus package (.ci/run installs it when missing).
PROMTOOL ?= promtool

SHELL       := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

.PHONY: help test test-short lint tools bench fuzz faults tidy tidy-check deps-check examples alerts-check

help: ## List the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z_-]+:.*## / { printf "  %-13s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# each runs its argument, a command, in every module (the module's
# directory as working directory), and fails after the last one if one of
# them failed.
each = status=0; for m in $(MODULES); do echo "--- module $$m"; (cd "$$m" && $(1)) || status=1; done; exit $$status

test: ## Run every test of every module with the race detector
	@$(call each,$(GO) test -race -count=1 ./...)

examples: ## Run every example program (quickstart needs no server; then on MariaDB; the others use PostgreSQL, amqp RabbitMQ)
	$(GO) run ./examples/quickstart
	$(GO) run ./examples/quickstart -database-url 'mysql://root@tcp(127.0.0.1:3306)/test?interpolateParams=true'
	$(GO) run ./examples/cqrs
	$(GO) run ./examples/kafka
	$(GO) run ./examples/kafka -delete-done
	$(GO) run ./examples/amqp
	$(GO) run ./examples/multinode

test-short: ## Run the tests in -short mode, with the race detector
	@$(call each,$(GO) test -race -short -count=1 ./...)

lint: tools ## gofmt, then in every module go vet (also -tags faults) and the pinned golangci-lint
	@unformatted="$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -not -path './vendor/*' -print0 | xargs -0 -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt -l lists files to format (run gofmt -w on them):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi
	@$(call each,$(GO) vet ./... && $(GO) vet -tags faults ./... && $(GOLANGCI_LINT) run --config "$(CURDIR)/.golangci.yml" ./...)

tools: ## Install the pinned golangci-lint into TOOLS_BIN (default ./.bin; a no-op once there)
	@if [ "$$($(GOLANGCI_LINT) version --short 2>/dev/null)" != "$(GOLANGCI_LINT_VERSION:v%=%)" ]; then \
		echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(TOOLS_BIN)"; \
		GOBIN="$(TOOLS_BIN)" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

bench: ## Run the benchmarks, with allocations (the bench program: go -C bench run .)
	@$(call each,$(GO) test -run='^$$' -bench=. -benchmem ./...)

fuzz: ## Run each Fuzz target for FUZZTIME (20s)
	@for m in $(MODULES); do \
		targets="$$(cd "$$m" && $(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { names[n++] = $$1; next } /^ok/ { for (i = 0; i < n; i++) print $$2, names[i] } { n = 0 }')"; \
		if [ -z "$$targets" ]; then echo "--- module $$m: no Fuzz targets"; continue; fi; \
		while read -r pkg name; do \
			echo "--- $$name ($$pkg), $(FUZZTIME)"; \
			(cd "$$m" && $(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) "$$pkg"); \
		done <<< "$$targets"; \
	done

# FAULTS_SUMMARY passes go test -v output through and ends it with
# "N passed, N failed" over the top-level tests. Tests a timeout stopped
# count as failed, and a run that failed with no failed test (a build
# error) counts one.
FAULTS_SUMMARY := awk '{ print } \
	/^--- PASS: / { pass++ } \
	/^--- FAIL: / { fail++ } \
	/^[[:space:]]+running tests:$$/ { running = 1; next } \
	running && /^[[:space:]]+Test/ { fail++; next } \
	{ running = 0 } \
	/^FAIL[[:space:]]/ { failedRun = 1 } \
	END { if (failedRun && !fail) fail = 1; printf "%d passed, %d failed\n", pass, fail }'

faults: ## Run the fault-injection suite (crashes, outages, bad input; a few minutes); ends with "N passed, N failed"
	cd faults && $(GO) test -tags faults -race -count=1 -v -timeout 6m ./... 2>&1 | $(FAULTS_SUMMARY)

tidy: ## go mod tidy in every module
	@$(call each,$(GO) mod tidy)

tidy-check: ## Fail when go mod tidy would change a go.mod or go.sum (it prints the diff)
	@$(call each,$(GO) mod tidy -diff)

deps-check: ## Fail when a user's build of outbox/postgres, watermilladapter or kafkaforward downloads a module it should not
	.ci/check-deps

# Not per module: the rules are the repository's, not a Go module's.
alerts-check: ## Check the Prometheus alert rules of deploy/prometheus and run their unit tests (needs promtool)
	@command -v $(PROMTOOL) >/dev/null || { \
		echo "alerts-check needs promtool ($(PROMTOOL)), which is not found: install the prometheus package (apt-get install prometheus), or set PROMTOOL" >&2; \
		exit 1; \
	}
	$(PROMTOOL) check rules deploy/prometheus/alerts.yml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yml
