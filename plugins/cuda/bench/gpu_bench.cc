// deepx-bench-cuda: the CUDA plugin's kernels against ceilings measured in the same run, on the
// same device (docs/performance-method.md): memory-bound ops against device-to-device copy bandwidth, and
// matmul (cuBLAS path and the portable tiled GEMM) against cuBLAS called directly. Every
// figure is the median of repeated, synchronised runs after a warm-up; each line prints the
// ratio and the absolute numbers behind it.
//
//   deepx-bench-cuda [--repeats N] [--elements N]
// Exit status 0 (figures are reported, not judged), 2 without a GPU or on a harness error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepx/host.h"

namespace {

/// Takes a host call's result (an error the caller owns, null on success): frees it, and throws
/// its code and message when there was one.
void check(dx_error_t* e, const std::string& what) {
  if (e == nullptr) return;
  std::string message = what + ": " + dx_status_string(dx_error_code(e)) + ": " + dx_error_message(e, nullptr);
  dx_error_destroy(e);
  throw std::runtime_error(message);
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

int g_repeats = 10;

/// Median wall time in seconds of `fn` followed by a device synchronisation.
double time_median(const std::function<void()>& fn) {
  fn();
  check_cuda(cudaDeviceSynchronize(), "warm-up sync");
  std::vector<double> t;
  for (int i = 0; i < g_repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    check_cuda(cudaDeviceSynchronize(), "sync");
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Tensor {
  dx_tensor_t* t = nullptr;
  void* data() const {
    const DLTensor* dl = nullptr;
    check(dx_tensor_dltensor(t, &dl), "dltensor");
    return static_cast<char*>(dl->data) + dl->byte_offset;
  }
};

class Bench {
 public:
  explicit Bench(bool portable_gemm) {
    if (portable_gemm) setenv("DEEPX_CUDA_GEMM", "portable", 1);
    check(dx_runtime_create(nullptr, &rt_), "runtime");
    int32_t plugin = -1;
    check(dx_runtime_load_plugin(rt_, "cuda", &plugin), "load cuda plugin");
    unsetenv("DEEPX_CUDA_GEMM");
    if (dx_error_t* e = dx_runtime_find_device(rt_, "cuda:0", &dev_); e != nullptr) {
      dx_error_destroy(e);
      throw std::runtime_error("no GPU");
    }
  }
  ~Bench() {
    for (auto* t : owned_) dx_error_destroy(dx_tensor_destroy(t));
    dx_error_destroy(dx_runtime_destroy(rt_));
  }
  Tensor make(dx_dtype_t dtype, std::vector<int64_t> shape, double value) {
    Tensor x;
    check(dx_tensor_create(rt_, dev_, dtype, shape.data(), static_cast<int32_t>(shape.size()), &x.t), "create");
    owned_.push_back(x.t);
    dx_attrs_t* a = nullptr;
    check(dx_attrs_create(&a), "attrs");
    check(dx_attrs_set_f64(a, "value", value), "value");
    check(dx_invoke_by_name(rt_, "dx.fill", nullptr, 0, &x.t, 1, a), "fill");
    dx_error_destroy(dx_attrs_destroy(a));
    return x;
  }
  void invoke(const char* op, std::vector<Tensor> in, std::vector<Tensor> out, const dx_attrs_t* attrs = nullptr) {
    std::vector<dx_tensor_t*> i, o;
    for (auto& t : in) i.push_back(t.t);
    for (auto& t : out) o.push_back(t.t);
    dx_op_id_t id;
    check(dx_runtime_op_lookup(rt_, op, &id), op);
    check(dx_invoke(rt_, id, i.data(), static_cast<int32_t>(i.size()), o.data(), static_cast<int32_t>(o.size()), attrs), op);
  }

 private:
  dx_runtime_t* rt_ = nullptr;
  int32_t dev_ = -1;
  std::vector<dx_tensor_t*> owned_;
};

void memory_bound(int64_t n) {
  Bench b(false);
  Tensor x = b.make(DX_DTYPE_F32, {n}, 1.5), y = b.make(DX_DTYPE_F32, {n}, 2.5), z = b.make(DX_DTYPE_F32, {n}, 0);
  Tensor h = b.make(DX_DTYPE_F16, {n}, 0), s = b.make(DX_DTYPE_F32, {}, 0);
  const double copy_s = time_median([&] {
    check_cuda(cudaMemcpyAsync(z.data(), x.data(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, nullptr), "memcpy");
  });
  const double ceiling = 2.0 * n * 4 / copy_s / 1e9;
  std::printf("ceiling: cudaMemcpy device-to-device, %lld f32: %.1f GB/s (read + write)\n", static_cast<long long>(n), ceiling);
  struct Case {
    const char* name;
    double bytes;
    std::function<void()> run;
  };
  const int64_t rows = 4096, cols = n / rows;
  Tensor sm_in = b.make(DX_DTYPE_F32, {rows, cols}, 0.25), sm_out = b.make(DX_DTYPE_F32, {rows, cols}, 0);
  const Case cases[] = {
      {"dx.add f32", 12.0 * n, [&] { b.invoke("dx.add", {x, y}, {z}); }},
      {"dx.relu f32", 8.0 * n, [&] { b.invoke("dx.relu", {x}, {z}); }},
      {"dx.copy f32", 8.0 * n, [&] { b.invoke("dx.copy", {x}, {z}); }},
      {"dx.cast f32->f16", 6.0 * n, [&] { b.invoke("dx.cast", {x}, {h}); }},
      {"dx.sum f32 (all)", 4.0 * n, [&] { b.invoke("dx.sum", {x}, {s}); }},
      {"dx.softmax f32 (rows of 4096)", 8.0 * n, [&] { b.invoke("dx.softmax", {sm_in}, {sm_out}); }},
  };
  for (const Case& c : cases) {
    const double t = time_median(c.run);
    const double gbs = c.bytes / t / 1e9;
    std::printf("%-32s %8.3f ms  %7.1f GB/s  ratio %.2f of copy (target >= 0.9)\n", c.name, t * 1e3, gbs, gbs / ceiling);
  }
}

void matmul(int64_t n, bool portable) {
  Bench b(portable);
  Tensor a = b.make(DX_DTYPE_F32, {n, n}, 0.5), w = b.make(DX_DTYPE_F32, {n, n}, 0.25), c = b.make(DX_DTYPE_F32, {n, n}, 0);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
  const float one = 1, zero = 0;
  const int ni = static_cast<int>(n);
  const double ref = time_median([&] {
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, static_cast<const float*>(w.data()), ni,
                static_cast<const float*>(a.data()), ni, &zero, static_cast<float*>(c.data()), ni);
  });
  cublasDestroy(handle);
  const double t = time_median([&] { b.invoke("dx.matmul", {a, w}, {c}); });
  const double flops = 2.0 * n * n * n;
  std::printf("dx.matmul f32 %5lld (%s) %8.3f ms %8.1f GFLOP/s; cublasSgemm %8.3f ms %8.1f GFLOP/s; ratio %.2f (target >= 0.95)\n",
              static_cast<long long>(n), portable ? "portable GEMM" : "cuBLAS path ", t * 1e3, flops / t / 1e9,
              ref * 1e3, flops / ref / 1e9, ref / t);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t elements = int64_t{1} << 26;  // 256 MiB per f32 array: far past every cache
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repeats") == 0) g_repeats = std::max(3, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--elements") == 0) elements = std::atoll(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, %.1f GiB; median of %d runs after a warm-up\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, g_repeats);
  try {
    memory_bound(elements);
    for (int64_t n : {512, 1024, 2048, 4096}) {
      matmul(n, false);
      matmul(n, true);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepx-bench-cuda: %s\n", e.what());
    return 2;
  }
  return 0;
}
