#!/usr/bin/env bash
# Installs the Debian 12 packages deepx needs, only those missing. Runs apt-get update once
# per machine (when a package is missing). Safe to run repeatedly; used by `make run/test`.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libdlpack-dev doxygen libopenblas-dev
  libssl-dev                        # SHA-256 (libcrypto) for certificates and reports
  nlohmann-json3-dev                # JSON: safetensors headers, reports, manifests
  libflatbuffers-dev flatbuffers-compiler  # the wire protocol (daemon/wire, flatc at build time)
  libcli11-dev                      # command-line parsing of deepx and deepx-certify
  libuv1-dev libtomlplusplus-dev    # deepxd: the event loop, its TOML configuration
  libmicrohttpd-dev libsystemd-dev systemd  # deepxd: metrics/health HTTP, sd_notify, systemd-analyze verify
  prometheus                        # promtool check metrics on deepxd's /metrics (daemon tests)
  python3-pytest python3-numpy python3-torch  # the Python binding and its tests (DLPack with numpy, torch)
  golang-go                         # the Go binding (cgo), go test -race
  default-jdk-headless libjna-java junit5  # the Java binding (JNA) and its JUnit 5 tests
  dpkg-dev file                     # cpack -G DEB and its test packaging_deb (dpkg-shlibdeps)
  valgrind                          # host_abi_contract_no_leaks
  abigail-tools                     # abi_baseline (abidw, abidiff)
  clang-15 libclang-common-15-dev   # the libFuzzer targets (host/fuzz), label `fuzz`
  hipcc libamdhip64-dev rocm-device-libs
)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deepx: installing missing Debian packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
