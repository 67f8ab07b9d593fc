# The lock service: `make run` serves it locally, `make test` proves it.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ADDR      ?= 127.0.0.1:8080
# Extra locald flags for `make run`, e.g. RUN_ARGS=-reserve or RUN_ARGS="-capacity off".
RUN_ARGS ?=
FUNCTIONS := $(notdir $(wildcard functions/*))
# Lambda builds: provided.al2023 on arm64, no RPC shim, reproducible, stripped.
LAMBDA_ENV   := GOOS=linux GOARCH=arm64 CGO_ENABLED=0
LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags="-s -w"
CDK := node_modules/.bin/cdk
# Go modules: the service (.) and the Go client's two, client/ and
# client/awsauth/ (see client/README.md). Each is built, vetted and tested
# against its own go.mod, as its users get it; go.work joins them for
# editors and ad-hoc commands only.
export GOWORK := off
# Extra CDK CLI arguments, e.g. CDK_ARGS="-c auth=none -c destroy=true -c stackName=LockService-dev".
CDK_ARGS ?=
# The jsii runtime prints an end-of-life banner on Node 20; it is harmless.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# Fuzz targets as package:Name. Plain `go test` runs each one's seed corpus
# (testdata/fuzz/<Name>/ and its f.Add calls); `make fuzz` mutates it for
# FUZZTIME per target, and `make test` for FUZZSMOKE (empty skips that step):
# a count of executions, not a duration, so it cannot meet the Go fuzzing
# race the fuzz target explains.
FUZZ_TARGETS := ./api:FuzzHandlers ./api:FuzzSemaphoreHandlers ./api:FuzzParseBody ./api:FuzzAppendJSONString ./api:FuzzInvoke \
	./locklogic:FuzzValidateResource ./locklogic:FuzzNormalizeOwner ./local:FuzzRunner
FUZZTIME     ?= 30s
FUZZSMOKE    ?= 10000x
FUZZPARALLEL ?= 2

.PHONY: help deps run test lint build lockctl install synth deploy destroy clean screenshot

# The integration suites `make test` runs a second time in the store mode
# that returns the old item on a failed condition (TESTENV_STORE=old-item):
# leases (late writes, fencing, lock-delay, force release, SDK retries,
# watches and their expiry record), waiting and the fair queue, semaphores
# and their queue, the engine's histories, and the seeded chaos run.
OLDITEM_TESTS := ^(TestLateWrite|TestRenewalsOutOfOrder|TestWaitCannotReplace|TestFenc|TestConcurrentAcquireOneWinner|TestChurn|TestReleasedStaysReleased|TestLockDelay|TestForceRelease|TestAcquireSDKRetry|TestReleaseSDKRetry|TestWait|TestWatch|TestFairWaiting|TestSemaphore|TestAdminListLeavesOutRecordedLease|TestEngine_|TestRWLock|TestLockSet|TestLeaseKinds|TestChaos$$)

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

deps: node_modules/.installed ## install Node tooling (dynalite, CDK CLI) and Go modules
	go mod download
	cd client && go mod download
	cd client/awsauth && go mod download

run: deps ## serve the API on http://ADDR (default 127.0.0.1:8080) over in-memory dynalite, or DYNAMODB_ENDPOINT
	go build -o bin/locald ./local/cmd/locald
	exec bin/locald -addr $(ADDR) $(RUN_ARGS)

test: deps lint ## vet, format check, unit + integration + CDK template tests, the documents' checks (starts its own dynalite)
	go test -race -count=1 -parallel 4 -timeout 15m $$(go list ./... | grep -v -e '/infra$$' -e '/internal/integration$$' -e '/internal/integration/goclient$$')
	@# The Go client against the runner, with the race detector but alone:
	@# its leases are kept alive in real time, and beside the packages
	@# above (race builds, Chromium) a 2-core machine stalled its renewals'
	@# answers past a 6 s lease's local deadline (~30 s alone).
	go test -race -count=1 -parallel 4 -timeout 10m ./internal/integration/goclient/
	@# The integration package alone, after the rest and without the race
	@# detector: its chaos runs and waits measure what the service does in
	@# seconds of real time against one dynalite, which -race (2-10x the
	@# CPU) and the other packages' tests on 2 cores starve into 503s. Its
	@# concurrency is the service's, which the race-enabled packages above
	@# (locklogic, api, local, the clients, the runner's tests) cover. Two
	@# tests at a time: four starved the time-bound ones (store budgets,
	@# SDK retry counts, handoff rates) into failures on 2 cores.
	go test -count=1 -parallel 2 -timeout 15m ./internal/integration/
	@# The lease, queue, semaphore, FIFO and chaos suites again, on the path
	@# AWS takes: the fault proxy returns the old item with a refused write,
	@# as DynamoDB does (testenv's TESTENV_STORE=old-item; docs/testing.md).
	TESTENV_STORE=old-item go test -count=1 -parallel 2 -timeout 15m -run '$(OLDITEM_TESTS)' ./internal/integration/
	@# The Go client's modules: fakes, httptest and synctest only (~5 s).
	cd client && go test -race -count=1 ./...
	cd client/awsauth && go test -race -count=1 ./...
	@# infra/ runs without -race: it has no concurrency of its own, and a race
	@# build of the generated CDK bindings alone costs ~50 s on 2 cores.
	go test -count=1 -timeout 10m ./infra/
	@# The TypeScript and Python clients, each against the real local runner.
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test
	python3 -m unittest discover -s clients/python/tests -t clients/python
	@# The first go test ran every fuzz target's seed corpus; this mutates
	@# each for FUZZSMOKE (~9 s for all with a warm build cache).
	$(if $(FUZZSMOKE),@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSMOKE))

# The documents' checks run in `make test` with every other package's tests;
# `make docs` runs them alone, in seconds.
.PHONY: docs
docs: ## check the documents alone: links and anchors, tables of contents, LICENSE, the expression listing
	go test -count=1 -run '^(TestLinks|TestContents|TestLicense|TestExpressionListing)$$' ./internal/doccheck/ ./locklogic/

.PHONY: fuzz
fuzz: deps ## run each fuzz target for FUZZTIME (default 30s) on FUZZPARALLEL workers, one after another
	@# Go 1.26's coordinator can fail a run at the end of a -fuzztime duration
	@# with a bare "context deadline exceeded" and no failing input
	@# (go.dev/issue/75804, fixed in Go 1.27); that alone is not a finding.
	@# Minimizing each new input for up to 60 s (the default) would stall the
	@# workers for most of a short run; 3 s keeps them fuzzing.
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; log=$$(mktemp); \
	  echo "fuzz $$name in $$pkg for $(FUZZTIME)"; \
	  go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 3s -parallel $(FUZZPARALLEL) $$pkg 2>&1 | tee $$log; \
	  rc=$${PIPESTATUS[0]}; \
	  if [ $$rc -ne 0 ] && grep -qx '    context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
	    echo "fuzz $$name: no failing input; the FAIL above is go.dev/issue/75804"; rc=0; \
	  fi; \
	  rm -f $$log; [ $$rc -eq 0 ] || exit $$rc; \
	done

# make chaos: clients under every store fault for CHAOS_DURATION, seeded by
# CHAOS_SEED (empty: a new seed each run, printed in the summary line);
# CHAOS_ARGS adds flags of cmd/chaos (-skew 80ms, -rates all,late=0.1).
CHAOS_DURATION ?= 60s
CHAOS_SEED     ?=
CHAOS_ARGS     ?=

.PHONY: chaos
chaos: deps ## run clients under every store fault for CHAOS_DURATION (60s) with CHAOS_SEED; one summary line, exit 1 on a violation
	go run ./cmd/chaos -duration $(CHAOS_DURATION) $(if $(CHAOS_SEED),-seed $(CHAOS_SEED)) $(CHAOS_ARGS)

.PHONY: bench
bench: deps ## measure handoff latency (polling, random watch, fair queue), FIFO order, waiter cost, hot lock, handler CPU, requests per op, try throughput, lock sets, read/write locks, watchers, cold starts (loopback, ~5 min)
	go run ./cmd/bench $(BENCH_ARGS)

lint: ## go vet and gofmt check; the Go client vetted and lockctl built for macOS and Windows; the client's go.mod tidy
	go vet ./...
	@# The Go client's modules, for Linux, macOS and Windows; their go.mod
	@# lists only what they need.
	cd client && go vet ./... && GOOS=darwin go vet ./... && GOOS=windows go vet ./... && go mod tidy -diff
	cd client/awsauth && go vet ./... && GOOS=darwin go vet ./... && GOOS=windows go vet ./... && go mod tidy -diff
	GOOS=darwin go vet ./cmd/lockctl/...
	@# Windows: lockctl builds (lockctl run says it is unsupported there); its
	@# tests need local/, which is Unix-only, so build rather than vet.
	GOOS=windows go build -o /dev/null ./cmd/lockctl/...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

build: ## build every Lambda function to build/lambda/<name>/bootstrap (linux/arm64)
	@for f in $(FUNCTIONS); do \
	  echo "build $$f"; \
	  $(LAMBDA_ENV) go build $(LAMBDA_FLAGS) -o build/lambda/$$f/bootstrap ./functions/$$f || exit 1; \
	done

# The commit `lockctl version` names (+dirty: with uncommitted changes), for
# the builds Go does not stamp itself: GOFLAGS=-buildvcs=false, or a
# checkout that is a git worktree. Empty outside a git checkout.
LOCKCTL_LDFLAGS = -X github.com/ft288/locks/cmd/lockctl/internal/cli.revision=$(shell git rev-parse HEAD 2>/dev/null)$(if $(shell git status --porcelain 2>/dev/null | head -1),+dirty)

lockctl: ## build the CLI to bin/lockctl
	go build -trimpath -ldflags '$(LOCKCTL_LDFLAGS)' -o bin/lockctl ./cmd/lockctl

# make screenshot: the console's picture in docs/ (README, docs/console.md),
# taken by the browser test in headless Chromium (LOCKS_CHROMIUM, default
# /usr/bin/chromium) against the local runner.
screenshot: deps ## regenerate docs/console.png, the screenshot of `lockctl ui` (needs Chromium)
	LOCKS_REQUIRE_BROWSER=1 LOCKS_SCREENSHOT=$(CURDIR)/docs/console.png go test -count=1 -run '^TestScreenshot$$' ./cmd/lockctl/internal/console/

# make install: lockctl into BINDIR, /usr/local/bin unless PREFIX or BINDIR
# say otherwise (PREFIX=$HOME/.local: ~/.local/bin). The README's cron line
# calls it there by its full path, since cron's PATH is /usr/bin:/bin.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin

install: ## install lockctl into BINDIR (default /usr/local/bin; PREFIX=$HOME/.local for ~/.local/bin)
	@bindir='$(abspath $(BINDIR))'; \
	mkdir -p "$$bindir" 2>/dev/null; \
	if [ ! -d "$$bindir" ] || [ ! -w "$$bindir" ]; then \
	  echo "make install: cannot write to $$bindir; either" >&2; \
	  echo "  make lockctl && sudo install -m 0755 bin/lockctl $$bindir/lockctl" >&2; \
	  echo "or, for your user only:" >&2; \
	  echo '  make install PREFIX=$$HOME/.local' >&2; \
	  exit 1; \
	fi; \
	GOBIN="$$bindir" go install -trimpath -ldflags '$(LOCKCTL_LDFLAGS)' ./cmd/lockctl || exit 1; \
	echo "installed $$bindir/lockctl"; \
	case ":$$PATH:" in *":$$bindir:"*) ;; *) echo "note: $$bindir is not on your PATH: call lockctl by its full path";; esac

synth: deps build ## synthesize the CloudFormation template offline (cdk.out/), with the cdk-nag report
	$(CDK) synth $(CDK_ARGS)

deploy: deps build ## deploy to the AWS account of your current credentials
	$(CDK) deploy $(CDK_ARGS)

destroy: deps ## delete the stack (the table is retained unless deployed with -c destroy=true)
	$(CDK) destroy $(CDK_ARGS)

clean: ## remove build output
	rm -rf bin build cdk.out
