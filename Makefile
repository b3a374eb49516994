# vixen — the two promised commands, and a few helpers. CMake does the real work.
#   make run    installs what is missing, builds, and runs the main job on the bundled data
#   make test   installs (with the test-only tools), checks the sources' format and the fused
#               kernels' PTX (scripts/pdl-check, scripts/ptx-check), builds with
#               -Werror, runs every test, then the CPU tests under ASan+UBSan (all but the learning
#               test, which trains for a minute and would take ten there), then each fuzz target
#               for 30 s
#   make fuzz   libFuzzer on the readers (CSV, DBN, config, checkpoint, replay), FUZZ_SECONDS each
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN_DIR ?= run

.PHONY: all deps test-deps build run test test-asan fuzz format-check pdl-check ptx-check bench clean

all: build

deps:
	@scripts/deps.sh

test-deps:
	@scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

run: build
	@scripts/run-demo.sh $(BUILD)/vixen $(RUN_DIR)

test: test-deps format-check pdl-check ptx-check build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30

# libFuzzer on every reader of untrusted bytes, FUZZ_SECONDS each (skipped without clang)
FUZZ_SECONDS ?= 60
fuzz: test-deps
	@scripts/fuzz $(FUZZ_SECONDS)

test-asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DVX_SANITIZE=ON -DVX_CUDA=OFF >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS) -- --no-print-directory
	@cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -L cpu -LE learn

format-check: test-deps
	@scripts/format-check

# every kernel launched to start early waits for the one before it (src/util/pdl.cuh)
pdl-check:
	@scripts/pdl-check

# no path of the fused kernels' PTX falls off a function's end (code the compiler dropped)
ptx-check:
	@scripts/ptx-check

bench: build
	@$(BUILD)/vixen bench

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
