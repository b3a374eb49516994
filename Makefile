# vixen — the two promised commands, and a few helpers. CMake does the real work.
#   make run    installs what is missing, builds, and runs the main job on the bundled data
#   make test   installs (with the test-only tools), checks the sources' format, builds with
#               -Werror, runs every test, then the CPU tests under ASan+UBSan (all but the learning
#               test, which trains for a minute and would take ten there)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN_DIR ?= run

.PHONY: all deps test-deps build run test test-asan format-check bench clean

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

test: test-deps format-check build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-asan

test-asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DVX_SANITIZE=ON -DVX_CUDA=OFF >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS) -- --no-print-directory
	@cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -L cpu -LE learn

format-check: test-deps
	@scripts/format-check

bench: build
	@$(BUILD)/vixen bench

clean:
	rm -rf $(BUILD) $(BUILD)-asan
