# mocker — make run | make test | make deep | make e2e | make bench | make lint
GO            ?= go
BIN           := $(CURDIR)/bin
GOLANGCI_VER  := v2.15.0
GOLANGCI      := $(BIN)/golangci-lint
SCRIPT        ?= scripts/quickstart.js
# The main job runs on virtual time: the same summary on every run, on any
# host. `make run RUN_FLAGS=` runs it live (16 s, paced by the wall clock):
# the same summary again.
RUN_FLAGS     ?= --clock virtual
BENCH         ?= .
BENCHTIME     ?= 1s

.PHONY: image-serve run serve test test-short deep e2e images vet bench lint build fuzz golden clean

## run: build mocker and run the main job (the quickstart scenario on the embedded cluster, on virtual time)
run: build
	$(BIN)/mocker run $(RUN_FLAGS) $(SCRIPT)

## serve: build mocker and serve a mock cluster over OpenAI's HTTP API on 127.0.0.1:8000 (SERVE_FLAGS, e.g. --config cluster.yaml)
SERVE_FLAGS   ?=
serve: build
	$(BIN)/mocker serve $(SERVE_FLAGS)

## build: build the mocker binary into ./bin; -buildvcs=auto over a GOFLAGS
## that turns it off, so that `mocker version` names the commit
build:
	$(GO) build -buildvcs=auto -o $(BIN)/mocker ./cmd/mocker

## test: vet, then every test with the race detector (container tests need Docker).
## e2e runs alone, after the rest: the fault tests run their workers on
## the wall clock, so the CPU the other packages' tests would take from
## them would show in their modeled figures (the matrix and Dynamo's
## scenarios are coupled and would not care).
## The engine's shortcut properties then run deep: each compares a
## worker that takes the scheduler's shortcuts with one that does not, and
## the cases they guard (a preemption in a pass whose budget runs out, say)
## come up once in thousands of random schedules.
test: vet
	$(GO) test -race -count=1 -timeout 45m $$($(GO) list ./... | grep -v '/e2e$$')
	$(GO) test -race -count=1 -timeout 30m ./e2e
	$(MAKE) deep

## deep: the engine's shortcut properties at CHECKS random schedules each
CHECKS        ?= 20000
deep:
	$(GO) test -count=1 -timeout 20m -run '^(TestVLLM_CoastingChangesNothing|TestVLLM_ShortcutsChangeNothing)$$' ./engine -rapid.checks=$(CHECKS)

## e2e: the router-mode matrix and the fault tests, over etcd, NATS and worker
## containers (needs Docker; `make test` runs them too, as part of ./...)
e2e: images
	$(GO) test -race -count=1 -timeout 15m -v ./e2e

## images: the etcd, NATS and mocker worker images, built locally when no
## registry answers, so no test timeout pays for a cold build
images:
	$(GO) run ./containers/images/prepare -worker

## image-serve: the `mocker serve` image (mocker-local/mocker-serve:<hash>),
## built from this tree on scratch; `docker run -p 8000:8000` it
image-serve:
	$(GO) run ./containers/images/prepare -serve

## test-short: the tests without the race detector, for a quick loop
test-short:
	$(GO) test -count=1 ./...

vet:
	$(GO) vet ./...

## bench: the speed targets, measured (not asserted)
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem ./...

## lint: golangci-lint v2, installed into ./bin on first use
lint: $(GOLANGCI)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VER)

## golden: write this tree's modeled output to OUT, to diff against another version's
OUT           ?= golden-out
golden:
	$(GO) run ./internal/tools/golden -out $(OUT)

## fuzz: short runs of the transfer-header fuzzer and the server connection-loop fuzzer
FUZZTIME      ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeHeader$$' -fuzztime $(FUZZTIME) ./bootstrap
	$(GO) test -run '^$$' -fuzz '^FuzzServerConnections$$' -fuzztime $(FUZZTIME) ./bootstrap

clean:
	rm -rf $(BIN) golden-out
