#!/usr/bin/env bash
# gpu-check.sh: everything about the CUDA (and, on AMD machines, HIP) plugin that needs a real
# GPU, in one command, for a session that has one. Run from the repository root:
#
#   plugins/cuda/tools/gpu-check.sh [--prebuilt] [BUILD_DIR]   # default build/gpu-check
#
# It configures a Release build for this GPU's architecture (plus the preset's 80;90), builds
# the plugins, their tests, the conformance runner and the benchmark (with --prebuilt it skips
# both and uses the binaries already in BUILD_DIR: for a GPU machine that lacks the build
# dependencies, build on another machine with the GPU's architecture in
# CMAKE_CUDA_ARCHITECTURES and bring BUILD_DIR along), then
#   1. runs the GPU plugin tests (memory spaces, streams, events, two-process IPC, ops against
#      the reference, both GEMM engines); a test that prints "skipped: no GPU" here is a failure
#      of this check, since a GPU is expected;
#   2. certifies the plugin: deepx-certify cuda (then again with DEEPX_CUDA_GEMM=portable, for
#      dx.matmul only), reports under BUILD_DIR/certify-*;
#   3. runs deepx-bench-cuda: memory-bound kernels vs device-to-device copy bandwidth and
#      matmul (cuBLAS path, portable GEMM) vs cuBLAS called directly, in the same run;
#   4. exchanges CUDA tensors with PyTorch through DLPack (torch_dlpack_check.py), when the
#      python3 on PATH has torch with CUDA.
# Everything is logged to BUILD_DIR/gpu-check.log; the exit status is non-zero when any step
# fails.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
prebuilt=0
if [ "${1:-}" = "--prebuilt" ]; then prebuilt=1; shift; fi
build="${1:-$root/build/gpu-check}"
mkdir -p "$build"
log="$build/gpu-check.log"
exec > >(tee "$log") 2>&1
status=0
step() { echo; echo "==== $* ===="; }

step "machine"
nvidia-smi || echo "nvidia-smi not found"
have_amd=0
if command -v rocminfo >/dev/null 2>&1 && rocminfo 2>/dev/null | grep -q gfx; then have_amd=1; fi

arch=""
if command -v nvidia-smi >/dev/null 2>&1; then
  cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  [ -n "$cc" ] && arch="$cc"
fi
archs="80;90"
if [ -n "$arch" ] && [[ ";$archs;" != *";$arch;"* ]]; then archs="$archs;$arch"; fi

if [ $prebuilt = 1 ]; then
  step "prebuilt tree $build (not rebuilt here)"
  for f in bin/deepx_plugin_cuda_test bin/deepx-certify bin/deepx-bench-cuda \
           lib/deepx/plugins/libdeepx-plugin-cuda.so lib/libdeepx_host.so; do
    [ -e "$build/$f" ] || { echo "missing $build/$f"; exit 2; }
  done
  grep -E '^CMAKE_CUDA_ARCHITECTURES' "$build/CMakeCache.txt" 2>/dev/null || true
else
  step "configure ($build, CUDA architectures $archs)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" -DDEEPX_BUILD_CUDA=ON -DDEEPX_BUILD_HIP="$([ $have_amd = 1 ] && echo ON || echo OFF)" \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache || exit 2

  step "build"
  targets=(deepx_plugin_cuda deepx_plugin_cuda_test deepx_plugin_reference deepx-certify deepx-bench-cuda
           deepx_plugin_gpuemu deepx_gpuemu_plugin_test deepx_gpu_kernels_test)
  [ $have_amd = 1 ] && targets+=(deepx_plugin_hip deepx_plugin_hip_test)
  cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" || exit 2
fi

step "1. GPU plugin tests"
for t in deepx_plugin_cuda_test $([ $have_amd = 1 ] && echo deepx_plugin_hip_test) deepx_gpuemu_plugin_test deepx_gpu_kernels_test; do
  out="$("$build/bin/$t" 2>&1)"; rc=$?
  echo "$out" | tail -40
  if [ $rc -ne 0 ]; then echo "FAILED: $t"; status=1; fi
  if [[ "$t" != *gpuemu* && "$t" != *kernels* ]] && echo "$out" | grep -q "skipped: no GPU"; then
    echo "FAILED: $t skipped tests although this machine should have a GPU"; status=1
  fi
done

step "2. certification: deepx-certify cuda"
"$build/bin/deepx-certify" "$build/lib/deepx/plugins/libdeepx-plugin-cuda.so" --out "$build/certify-cuda" || status=1
step "2b. certification of dx.matmul with the portable GEMM (DEEPX_CUDA_GEMM=portable)"
DEEPX_CUDA_GEMM=portable "$build/bin/deepx-certify" "$build/lib/deepx/plugins/libdeepx-plugin-cuda.so" \
  --ops dx.matmul --out "$build/certify-cuda-portable-gemm" || status=1
if [ $have_amd = 1 ]; then
  step "2c. certification: deepx-certify hip"
  "$build/bin/deepx-certify" "$build/lib/deepx/plugins/libdeepx-plugin-hip.so" --out "$build/certify-hip" || status=1
fi

step "3. benchmark"
"$build/bin/deepx-bench-cuda" --repeats 10 || status=1

step "4. DLPack exchange with PyTorch (CUDA tensors, both directions)"
python3 "$root/plugins/cuda/tools/torch_dlpack_check.py" "$build/lib/libdeepx_host.so" \
  "$build/lib/deepx/plugins/libdeepx-plugin-cuda.so" cuda
rc=$?
if [ $rc = 77 ]; then echo "not run: the python3 on PATH has no torch with CUDA"
elif [ $rc != 0 ]; then echo "FAILED: torch_dlpack_check.py"; status=1; fi

step "done (status $status); log: $log"
exit $status
