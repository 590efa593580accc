# leasehold: build, run and test.
#
#   make run     build and start `leasehold serve` on the defaults below
#   make test    vet, unit, integration and end-to-end tests (what CI runs)
#   make build | bench | fuzz | clean
#
# Variables (override on the command line, e.g. `make run LISTEN=127.0.0.1:7443`):
GO           ?= go
DATA_DIR     ?= ./leasehold-data
LISTEN       ?= 127.0.0.1:6443
TEST_TIMEOUT ?= 30m
TEST_FLAGS   ?= -count=1
FUZZ_TIME    ?= 10s

BIN     := $(CURDIR)/bin
VERSION := $(shell git describe --always --dirty 2>/dev/null)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X github.com/leasehold/leasehold/internal/version.Version=$(VERSION)) \
           $(if $(COMMIT),-X github.com/leasehold/leasehold/internal/version.Commit=$(COMMIT))

# When asked to build kubectl even though the PATH has one, the tests use
# the built one.
ifeq ($(LEASEHOLD_BUILD_KUBECTL),1)
export LEASEHOLD_KUBECTL ?= $(BIN)/kubectl
endif

.PHONY: all build run test test-tools vet bench fuzz clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/leasehold ./cmd/leasehold

run: build
	bin/leasehold serve --data-dir $(DATA_DIR) --listen $(LISTEN)

test-tools:
	bash hack/install-test-tools.sh

vet:
	$(GO) vet ./...

# bin/ goes last on the PATH: a kubectl already on the PATH wins, and the
# one hack/install-test-tools.sh built is found when there is none.
test: test-tools build vet
	PATH="$$PATH:$(BIN)" $(GO) test -race -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

# The Go microbenchmarks of the hot path (allocs/op), then hack/bench.sh:
# the `leasehold bench` scenarios (throughput, ceiling, fleet, list, restart,
# watch), each on a server of its own (ceiling: on `leasehold bench
# echo-server`), and the scaling curve drawn from the fleet runs. Knobs,
# from the environment or the command line
# (`make bench BENCH_NODES="1000 10000 50000 100000"` for the full curve):
#   BENCH_NODES     fleet sizes                   (default "1000 10000")
#   BENCH_DURATION  measurement per fleet size    (default 60s)
#   BENCH_RATE      renewals/s of every fleet     (default unset: each
#                   node every 10 s; set, N alone changes between sizes)
#   BENCH_WATCHERS  watchers of the watch run     (default 1000)
#   BENCH_OUT       JSON results and server logs  (default bench-results)
#   BENCH_PLOT      the scaling curve, SVG        (default docs/scaling.svg)
#   BENCH_TITLE     its title                     (default: CPU and cores)
# and more in hack/bench.sh.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	bash hack/bench.sh

fuzz:
	FUZZ_TIME=$(FUZZ_TIME) GO=$(GO) bash hack/fuzz.sh

# Removes build output only; $(DATA_DIR) holds the CA and data and is kept.
clean:
	rm -rf bin/
