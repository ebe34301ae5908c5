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

# Certify the bundled CPU plugin, then run the end-to-end example through the host.
run: build
	@$(BUILD_DIR)/bin/deepx certify cpu --out $(BUILD_DIR)/certification
	@$(BUILD_DIR)/bin/deepx-example-mlp
	@$(BUILD_DIR)/bin/deepx-example-train

# Every test: unit tests, fixture tests, the CPU plugin's certification, the docs warning check.
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# Host dispatch overhead, then every op of the performance table against its ceiling and
# PyTorch (docs/performance.md); the table is also written as markdown to build/<preset>/bench/.
bench: build
	@bash .ci/install-bench-deps.sh
	@$(BUILD_DIR)/bin/deepx-bench-dispatch
	@mkdir -p $(BUILD_DIR)/bench
	@$(BUILD_DIR)/bin/deepx-bench-ops --markdown=$(BUILD_DIR)/bench/performance.md

install: build
	@cmake --install $(BUILD_DIR) --prefix $(or $(PREFIX),/usr/local)

clean:
	@rm -rf build
