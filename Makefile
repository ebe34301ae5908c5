# The two commands of the README. Everything else is CMake (see CMakePresets.json).
PRESET ?= default
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: run test build deps configure bench install clean

deps:
	@bash .ci/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# Certify the bundled CPU plugin, run the MLP and the training examples through the host, run
# the C client and the MLP example again through a deepxd started on a temporary socket (same
# numbers required; SIGTERM must drain it), and end with a short summary (.ci/make-run.sh);
# fails when any step fails.
run: build
	@bash .ci/make-run.sh $(BUILD_DIR)

# Every test: unit tests, fixture tests, the CPU plugin's certification, the docs warning check.
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# Host dispatch overhead, then every op of the performance table against its ceiling and
# PyTorch, then the Python, Go and Java bindings against C (host/bindings/bench/), then deepxd
# against raw socket baselines and its load test, 1,000,000 tasks from 64 clients (daemon/bench/);
# see docs/performance.md. The tables are also written as markdown to build/<preset>/bench/.
# OPENBLAS_THREAD_TIMEOUT=20 (2^20 cycles, about 0.4 ms) makes OpenBLAS's workers sleep soon after
# each ceiling call instead of spinning for about 0.1 s on the cores deepx's next round needs
# (OpenBLAS reads it when its threads start, so it is set for the process).
bench: build
	@bash .ci/install-bench-deps.sh
	@$(BUILD_DIR)/bin/deepx-bench-dispatch
	@mkdir -p $(BUILD_DIR)/bench
	@OPENBLAS_THREAD_TIMEOUT=$${OPENBLAS_THREAD_TIMEOUT:-20} $(BUILD_DIR)/bin/deepx-bench-ops --markdown=$(BUILD_DIR)/bench/performance.md
	@/usr/bin/python3 host/bindings/bench/run_bench.py --build-dir=$(BUILD_DIR) --markdown=$(BUILD_DIR)/bench/bindings.md
	@$(BUILD_DIR)/bin/deepx-bench-daemon --markdown=$(BUILD_DIR)/bench/daemon.md && $(BUILD_DIR)/bin/deepx-load-daemon --tasks=1000000 --clients=64

# Install what `make build` built into PREFIX: headers, libraries, the CLI, plugins (stripped,
# their debug info in .debug/ beside them), the CMake package and deepx.pc. Never runs apt,
# never builds; the file list goes to $(BUILD_DIR)/install.log.
PREFIX ?= /opt/deepx
install:
	@if [ ! -f $(BUILD_DIR)/cmake_install.cmake ] || [ ! -x $(BUILD_DIR)/bin/deepx ]; then \
	  echo "make install: nothing is built in $(BUILD_DIR); run 'make build' first" >&2; exit 1; fi
	@cmake --install $(BUILD_DIR) --prefix "$(PREFIX)" >$(BUILD_DIR)/install.log 2>&1 || { \
	  tail -n 5 $(BUILD_DIR)/install.log >&2; \
	  echo "make install: installing from $(BUILD_DIR) into $(PREFIX) failed (above; full log:" \
	       "$(BUILD_DIR)/install.log); if a file is missing, run 'make build' first" >&2; exit 1; }
	@echo "deepx installed into $(PREFIX) (files: $(BUILD_DIR)/install.log);" \
	      "use it with -DCMAKE_PREFIX_PATH=$(PREFIX), PKG_CONFIG_PATH=$(PREFIX)/lib/pkgconfig," \
	      "$(PREFIX)/bin/deepx"

clean:
	@rm -rf build
