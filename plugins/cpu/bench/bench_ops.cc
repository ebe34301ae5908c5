// deepx-bench-ops: the CPU plugin's ops, called through the host API, against ceilings measured
// in the same run and against PyTorch on the CPU at the same shapes, dtypes and thread count
// (docs/performance-method.md). Prints one row per op and size: median time, GB/s or GFLOP/s,
// the ratio to the ceiling (a STREAM-style loop of the same byte traffic for memory-bound ops,
// OpenBLAS sgemm/dgemm of the same products for matmul-like ops), whether the row meets its
// target, and the ratio to PyTorch; then the geometric mean of the PyTorch ratios. The same
// table goes to a markdown file (--markdown=FILE) for docs/performance.md.
//
// Method. Every case gets prebuilt tensors (allocated by the plugin's memory space, first
// touched by the threads that use them) and one dx_invoke() per call, exactly what a client
// pays. After a warm-up call, each case runs R rounds; a round times deepx calls back to back
// for about --round-ms, then the ceiling loop for as long, so slow drift on a
// shared machine hits both alike. Reported: median seconds per call over the rounds, and the
// median over rounds of ceiling time / deepx time. PyTorch runs afterwards in a child process
// (bench_torch.py, Debian's /usr/bin/python3 with python3-torch) that times the same cases,
// read from a JSON-lines file this program writes, the same way.
//
// Ops the plugin does not have (yet) print as "not available"; nothing fails because of them.
#include <cblas.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "deepx/host.h"
#include "peak.h"

#ifndef DEEPX_CPU_PLUGIN_PATH
#define DEEPX_CPU_PLUGIN_PATH "cpu"
#endif
#ifndef DEEPX_BENCH_TORCH_SCRIPT
#define DEEPX_BENCH_TORCH_SCRIPT "bench_torch.py"
#endif

namespace deepx::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// ---- what a case is ------------------------------------------------------------------------------

enum class Init { kUniform, kIndex };

/// One tensor of a case; dtype 0 is an absent optional input (a null tensor).
struct TensorSpec {
  dx_dtype_t dtype = 0;
  std::vector<int64_t> shape;
  Init init = Init::kUniform;
  int64_t index_range = 0;  // kIndex: values in [0, index_range)

  bool present() const { return dtype != 0; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t element_bytes() const { return static_cast<int64_t>((dtype >> 8) & 0xff) / 8; }
};

TensorSpec f32(std::vector<int64_t> shape) { return {DX_DTYPE_F32, std::move(shape)}; }
TensorSpec f64(std::vector<int64_t> shape) { return {DX_DTYPE_F64, std::move(shape)}; }
TensorSpec f16(std::vector<int64_t> shape) { return {DX_DTYPE_F16, std::move(shape)}; }
TensorSpec indices(std::vector<int64_t> shape, int64_t range) {
  return {DX_DTYPE_I64, std::move(shape), Init::kIndex, range};
}

struct AttrSpec {
  enum Kind { kI64, kF64, kI64Array } kind;
  std::string name;
  std::vector<int64_t> ints;  // kI64: one value
  double real = 0;
};
AttrSpec attr_i64(std::string name, int64_t v) { return {AttrSpec::kI64, std::move(name), {v}}; }
AttrSpec attr_f64(std::string name, double v) { return {AttrSpec::kF64, std::move(name), {}, v}; }
AttrSpec attr_ints(std::string name, std::vector<int64_t> v) {
  return {AttrSpec::kI64Array, std::move(name), std::move(v)};
}

/// Which target of docs/performance-method.md a row is held to.
enum class Target {
  kMemory,     // elementwise, cast, copy and other data movement: >= 0.95 x STREAM-style loop
  kReduction,  // reductions, softmax, norms: >= 0.8 x STREAM-style loop
  kGemm,       // f32 matmul-like, n >= 512: >= 1.0 x OpenBLAS
  kNone,       // reported for information (small sizes, no target in docs/performance-method.md)
};

/// The ceiling loop: a STREAM-style kernel moving the op's minimal byte traffic, or BLAS.
enum class CeilingKind {
  kScale,   // b[i] = s * a[i]          4 B read + 4 B written per element (f32)
  kAdd,     // c[i] = a[i] + b[i]       8 B read + 4 B written
  kNarrow,  // h[i] = top half of a[i]  4 B read + 2 B written (the traffic of f32 -> f16)
  kRead,    // s += a[i]                4 B read
  kReduce4, // o[i] = sum of a[4i..4i+3] 16 B read + 4 B written per output element
  kGemm,    // cblas_sgemm / cblas_dgemm of the same products
};

struct GemmSpec {
  int64_t batch, m, n, k;
  bool trans_a = false, trans_b = false, double_precision = false;
  double flops() const { return 2.0 * batch * m * n * k; }
};

struct Case {
  std::string op;     // "dx.add"
  std::string shape;  // human label: "16M", "4096x4096 axes=-1"
  std::string dtype = "f32";
  std::vector<TensorSpec> inputs, outputs;  // the forward op's
  std::vector<AttrSpec> attrs;
  bool backward = false;
  std::vector<bool> want_grad;  // backward: input gradients requested (others passed as null)
  Target target = Target::kNone;
  CeilingKind ceiling = CeilingKind::kScale;
  int64_t ceiling_n = 0;  // elements the STREAM loop runs over (output elements for kReduce4)
  std::vector<GemmSpec> gemms;

  std::string id() const { return op + (backward ? ".backward" : "") + "/" + dtype + "/" + shape; }
  bool is_gemm() const { return ceiling == CeilingKind::kGemm; }
  /// Bytes the ceiling (and so, by construction, the op at its minimal traffic) moves, or FLOPs.
  double work() const {
    const double n = static_cast<double>(ceiling_n);
    switch (ceiling) {
      case CeilingKind::kScale: return 8 * n;
      case CeilingKind::kAdd: return 12 * n;
      case CeilingKind::kNarrow: return 6 * n;
      case CeilingKind::kRead: return 4 * n;
      case CeilingKind::kReduce4: return 20 * n;
      case CeilingKind::kGemm: {
        double f = 0;
        for (const GemmSpec& g : gemms) f += g.flops();
        return f;
      }
    }
    return 0;
  }
  double target_ratio() const {
    switch (target) {
      case Target::kMemory: return 0.95;
      case Target::kReduction: return 0.8;
      case Target::kGemm: return 1.0;
      case Target::kNone: return 0;
    }
    return 0;
  }
};

std::string human_count(int64_t n) {
  if (n % (int64_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % (int64_t{1} << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

// ---- the case list -------------------------------------------------------------------------------

constexpr int64_t kLarge = int64_t{1} << 24;  // 16M f32 = 64 MiB per array: past every cache
constexpr int64_t kSmall = int64_t{1} << 20;  // 1M f32 = 4 MiB: cache-resident, dispatch shows

/// docs/performance-method.md sets the bandwidth targets on large tensors: >= 64 MiB per array.
Target if_large(int64_t elements, Target t) { return elements >= kLarge ? t : Target::kNone; }

std::vector<Case> make_cases() {
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(std::move(c)); };

  for (int64_t n : {kSmall, kLarge}) {
    for (const char* op : {"dx.add", "dx.mul"}) {
      add({.op = op, .shape = human_count(n), .inputs = {f32({n}), f32({n})},
           .outputs = {f32({n})}, .target = if_large(n, Target::kMemory),
           .ceiling = CeilingKind::kAdd, .ceiling_n = n});
    }
    for (const char* op : {"dx.exp", "dx.relu", "dx.gelu", "dx.sigmoid"}) {
      add({.op = op, .shape = human_count(n), .inputs = {f32({n})}, .outputs = {f32({n})},
           .target = if_large(n, Target::kMemory), .ceiling = CeilingKind::kScale,
           .ceiling_n = n});
    }
    add({.op = "dx.cast", .shape = human_count(n), .dtype = "f32->f16", .inputs = {f32({n})},
         .outputs = {f16({n})}, .target = if_large(n, Target::kMemory),
         .ceiling = CeilingKind::kNarrow, .ceiling_n = n});
  }

  // Reductions over all axes and over the last axis.
  for (int64_t side : {int64_t{1024}, int64_t{4096}}) {
    const int64_t n = side * side;
    for (const char* op : {"dx.sum", "dx.max"}) {
      add({.op = op, .shape = dims({side, side}) + " all", .inputs = {f32({side, side})},
           .outputs = {f32({})}, .target = if_large(n, Target::kReduction),
           .ceiling = CeilingKind::kRead, .ceiling_n = n});
      add({.op = op, .shape = dims({side, side}) + " axis -1", .inputs = {f32({side, side})},
           .outputs = {f32({side})}, .attrs = {attr_ints("axes", {-1})},
           .target = if_large(n, Target::kReduction), .ceiling = CeilingKind::kRead,
           .ceiling_n = n});
    }
  }

  // Softmax-like rows: 16M elements as rows of 1024 and of 32768.
  for (int64_t cols : {int64_t{1024}, int64_t{32768}}) {
    const int64_t rows = kLarge / cols;
    for (const char* op : {"dx.softmax", "dx.log_softmax"}) {
      add({.op = op, .shape = dims({rows, cols}), .inputs = {f32({rows, cols})},
           .outputs = {f32({rows, cols})}, .target = Target::kReduction,
           .ceiling = CeilingKind::kScale, .ceiling_n = kLarge});
    }
  }
  {
    const int64_t rows = 16384, cols = 1024;
    add({.op = "dx.layer_norm", .shape = dims({rows, cols}),
         .inputs = {f32({rows, cols}), f32({cols}), f32({cols})},
         .outputs = {f32({rows, cols}), f32({rows, 1}), f32({rows, 1})},
         .attrs = {attr_f64("eps", 1e-5)}, .target = Target::kReduction,
         .ceiling = CeilingKind::kScale, .ceiling_n = rows * cols});
    add({.op = "dx.rms_norm", .shape = dims({rows, cols}), .inputs = {f32({rows, cols}), f32({cols})},
         .outputs = {f32({rows, cols})}, .attrs = {attr_f64("eps", 1e-5)}, .target = Target::kReduction,
         .ceiling = CeilingKind::kScale, .ceiling_n = rows * cols});
  }

  // Matrix products against OpenBLAS on the same shapes.
  for (int64_t n : {int64_t{256}, int64_t{512}, int64_t{1024}, int64_t{2048}}) {
    add({.op = "dx.matmul", .shape = dims({n, n, n}), .inputs = {f32({n, n}), f32({n, n})},
         .outputs = {f32({n, n})}, .target = n >= 512 ? Target::kGemm : Target::kNone,
         .ceiling = CeilingKind::kGemm, .gemms = {{1, n, n, n}}});
  }
  for (auto [b, n] : {std::pair<int64_t, int64_t>{32, 256}, std::pair<int64_t, int64_t>{8, 512}}) {
    add({.op = "dx.matmul", .shape = std::to_string(b) + " x " + dims({n, n, n}),
         .inputs = {f32({b, n, n}), f32({b, n, n})}, .outputs = {f32({b, n, n})},
         .target = n >= 512 ? Target::kGemm : Target::kNone, .ceiling = CeilingKind::kGemm,
         .gemms = {{b, n, n, n}}});
  }
  add({.op = "dx.matmul", .shape = dims({1024, 1024, 1024}), .dtype = "f64",
       .inputs = {f64({1024, 1024}), f64({1024, 1024})}, .outputs = {f64({1024, 1024})},
       .target = Target::kNone, .ceiling = CeilingKind::kGemm,
       .gemms = {{1, 1024, 1024, 1024, false, false, true}}});
  {
    const int64_t m = 4096, k = 1024, n = 1024;  // y = x W^T + b
    add({.op = "dx.linear", .shape = dims({m, k}) + " -> " + std::to_string(n),
         .inputs = {f32({m, k}), f32({n, k}), f32({n})}, .outputs = {f32({m, n})},
         .target = Target::kGemm, .ceiling = CeilingKind::kGemm,
         .gemms = {{1, m, n, k, false, true}}});
  }
  {
    // A ResNet stage-1 layer: 3x3, 64 -> 64 channels, 56x56, padding 1, batch 8. Ceiling: the
    // im2col GEMM of the same FLOPs (without the im2col itself).
    const int64_t b = 8, c = 64, hw = 56;
    add({.op = "dx.conv2d", .shape = dims({b, c, hw, hw}) + " k3 p1",
         .inputs = {f32({b, c, hw, hw}), f32({c, c, 3, 3}), f32({c})},
         .outputs = {f32({b, c, hw, hw})}, .attrs = {attr_ints("padding", {1, 1})},
         .target = Target::kNone, .ceiling = CeilingKind::kGemm,
         .gemms = {{b, c, hw * hw, c * 9}}});
    // ResNet's stem pool: 3x3, stride 2, padding 1 over 112x112.
    add({.op = "dx.max_pool2d", .shape = dims({b, c, 112, 112}) + " k3 s2 p1",
         .inputs = {f32({b, c, 112, 112})}, .outputs = {f32({b, c, hw, hw})},
         .attrs = {attr_ints("kernel", {3, 3}), attr_ints("stride", {2, 2}),
                   attr_ints("padding", {1, 1})},
         .target = Target::kReduction, .ceiling = CeilingKind::kReduce4,
         .ceiling_n = b * c * hw * hw});
  }
  {
    // Attention, 4 x 8 heads, 512 tokens, head dim 64. Ceiling: the two GEMMs (q k^T, p v).
    const int64_t b = 4, h = 8, l = 512, e = 64;
    add({.op = "dx.scaled_dot_product_attention", .shape = dims({b, h, l, e}),
         .inputs = {f32({b, h, l, e}), f32({b, h, l, e}), f32({b, h, l, e}), TensorSpec{}},
         .outputs = {f32({b, h, l, e})}, .target = Target::kNone, .ceiling = CeilingKind::kGemm,
         .gemms = {{b * h, l, l, e, false, true}, {b * h, l, e, l}}});
  }
  {
    const int64_t vocab = 32768, dim = 512, tokens = 16384;
    add({.op = "dx.embedding", .shape = dims({vocab, dim}) + " [" + std::to_string(tokens) + "]",
         .inputs = {f32({vocab, dim}), indices({tokens}, vocab)}, .outputs = {f32({tokens, dim})},
         .target = Target::kMemory, .ceiling = CeilingKind::kScale, .ceiling_n = tokens * dim});
    const int64_t rows = 2048, classes = 8192;
    add({.op = "dx.cross_entropy", .shape = dims({rows, classes}),
         .inputs = {f32({rows, classes}), indices({rows}, classes)}, .outputs = {f32({})},
         .target = Target::kReduction, .ceiling = CeilingKind::kRead, .ceiling_n = rows * classes});
  }

  // Data movement.
  add({.op = "dx.transpose", .shape = dims({4096, 4096}), .inputs = {f32({4096, 4096})},
       .outputs = {f32({4096, 4096})}, .attrs = {attr_ints("perm", {1, 0})},
       .target = Target::kMemory, .ceiling = CeilingKind::kScale, .ceiling_n = kLarge});
  add({.op = "dx.copy", .shape = dims({4096, 4096}), .inputs = {f32({4096, 4096})},
       .outputs = {f32({4096, 4096})}, .target = Target::kMemory,
       .ceiling = CeilingKind::kScale, .ceiling_n = kLarge});
  add({.op = "dx.concat", .shape = "2 x 4096x2048 axis 1",
       .inputs = {f32({4096, 2048}), f32({4096, 2048})}, .outputs = {f32({4096, 4096})},
       .attrs = {attr_i64("axis", 1)}, .target = Target::kMemory,
       .ceiling = CeilingKind::kScale, .ceiling_n = kLarge});

  // Backward passes.
  {
    const int64_t n = 1024;  // dA = dC B^T, dB = A^T dC
    add({.op = "dx.matmul", .shape = dims({n, n, n}), .inputs = {f32({n, n}), f32({n, n})},
         .outputs = {f32({n, n})}, .backward = true, .want_grad = {true, true},
         .target = Target::kGemm, .ceiling = CeilingKind::kGemm,
         .gemms = {{1, n, n, n, false, true}, {1, n, n, n, true, false}}});
    const int64_t rows = 16384, cols = 1024;  // read dy and y, write dx
    add({.op = "dx.softmax", .shape = dims({rows, cols}), .inputs = {f32({rows, cols})},
         .outputs = {f32({rows, cols})}, .backward = true, .want_grad = {true},
         .target = Target::kReduction, .ceiling = CeilingKind::kAdd, .ceiling_n = rows * cols});
    add({.op = "dx.layer_norm", .shape = dims({rows, cols}),
         .inputs = {f32({rows, cols}), f32({cols}), f32({cols})},
         .outputs = {f32({rows, cols}), f32({rows, 1}), f32({rows, 1})}, .backward = true,
         .want_grad = {true, true, true}, .target = Target::kReduction,
         .ceiling = CeilingKind::kAdd, .ceiling_n = rows * cols});
  }
  return cases;
}

// ---- buffers, fills, the ceiling loops -----------------------------------------------------------

/// Deterministic pseudo-random bits of element i (a splitmix64 step), so fills can run in
/// parallel and every run sees the same data.
inline uint64_t mix(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E5F5ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// Uniform in [-2, 2): exp stays finite, gelu/sigmoid see both tails.
inline double uniform(uint64_t i) { return static_cast<double>(mix(i) >> 11) * 0x1p-53 * 4.0 - 2.0; }

void fill(void* data, const TensorSpec& spec, uint64_t seed) {
  const int64_t n = spec.numel();
  const uint64_t base = seed << 40;
  switch (spec.dtype) {
    case DX_DTYPE_F32: {
      auto* p = static_cast<float*>(data);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(uniform(base + i));
      break;
    }
    case DX_DTYPE_F64: {
      auto* p = static_cast<double*>(data);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = uniform(base + i);
      break;
    }
    case DX_DTYPE_I64: {
      auto* p = static_cast<int64_t*>(data);
      const uint64_t range = static_cast<uint64_t>(std::max<int64_t>(spec.index_range, 1));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(mix(base + i) % range);
      break;
    }
    default: {
      auto* p = static_cast<unsigned char*>(data);
      const int64_t bytes = n * spec.element_bytes();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < bytes; ++i) p[i] = 0;
    }
  }
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

/// A 64-byte-aligned buffer first touched in parallel, like the loops that use it.
template <typename T>
std::unique_ptr<T[], FreeDeleter> buffer(int64_t n, uint64_t seed) {
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T) + 63) / 64 * 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(uniform((seed << 40) + i));
  return std::unique_ptr<T[], FreeDeleter>(p);
}

/// The ceiling of one case: STREAM-style loops (compiled with the plugin's flags, split over
/// the same OpenMP threads) or OpenBLAS calls on buffers of the same shapes.
class Ceiling {
 public:
  explicit Ceiling(const Case& c) : c_(c) {
    const int64_t n = c.ceiling_n;
    switch (c.ceiling) {
      case CeilingKind::kScale: a_ = buffer<float>(n, 101); c_out_ = buffer<float>(n, 102); break;
      case CeilingKind::kAdd:
        a_ = buffer<float>(n, 101);
        b_ = buffer<float>(n, 102);
        c_out_ = buffer<float>(n, 103);
        break;
      case CeilingKind::kNarrow: a_ = buffer<float>(n, 101); half_ = buffer<uint16_t>(n, 0); break;
      case CeilingKind::kRead: a_ = buffer<float>(n, 101); break;
      case CeilingKind::kReduce4: a_ = buffer<float>(4 * n, 101); c_out_ = buffer<float>(n, 102); break;
      case CeilingKind::kGemm:
        for (const GemmSpec& g : c.gemms) {
          Gemm m{g};
          if (g.double_precision) {
            m.da = buffer<double>(g.batch * g.m * g.k, 111);
            m.db = buffer<double>(g.batch * g.k * g.n, 112);
            m.dc = buffer<double>(g.batch * g.m * g.n, 113);
          } else {
            m.sa = buffer<float>(g.batch * g.m * g.k, 111);
            m.sb = buffer<float>(g.batch * g.k * g.n, 112);
            m.sc = buffer<float>(g.batch * g.m * g.n, 113);
          }
          gemms_.push_back(std::move(m));
        }
        break;
    }
  }

  void run() {
    const int64_t n = c_.ceiling_n;
    switch (c_.ceiling) {
      case CeilingKind::kScale: scale(a_.get(), c_out_.get(), n); break;
      case CeilingKind::kAdd: add(a_.get(), b_.get(), c_out_.get(), n); break;
      case CeilingKind::kNarrow: narrow(a_.get(), half_.get(), n); break;
      case CeilingKind::kRead: sink_ = read(a_.get(), n); break;
      case CeilingKind::kReduce4: reduce4(a_.get(), c_out_.get(), n); break;
      case CeilingKind::kGemm:
        for (Gemm& g : gemms_) g.run();
        break;
    }
  }

 private:
  static void scale(const float* a, float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = 1.0001f * a[i];
  }
  static void add(const float* a, const float* b, float* c, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  }
  static void narrow(const float* a, uint16_t* h, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(a[i]) >> 16);
  }
  static float read(const float* a, int64_t n) {
    float s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  static void reduce4(const float* a, float* o, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = (a[4 * i] + a[4 * i + 1]) + (a[4 * i + 2] + a[4 * i + 3]);
  }

  struct Gemm {
    GemmSpec g;
    std::unique_ptr<float[], FreeDeleter> sa, sb, sc;
    std::unique_ptr<double[], FreeDeleter> da, db, dc;
    void run() {
      const auto ta = g.trans_a ? CblasTrans : CblasNoTrans;
      const auto tb = g.trans_b ? CblasTrans : CblasNoTrans;
      const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
      const int lda = g.trans_a ? m : k, ldb = g.trans_b ? k : n;
      for (int64_t b = 0; b < g.batch; ++b) {
        if (g.double_precision) {
          cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, da.get() + b * m * k, lda,
                      db.get() + b * k * n, ldb, 0.0, dc.get() + b * m * n, n);
        } else {
          cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, sa.get() + b * m * k, lda,
                      sb.get() + b * k * n, ldb, 0.0f, sc.get() + b * m * n, n);
        }
      }
    }
  };

  const Case& c_;
  std::unique_ptr<float[], FreeDeleter> a_, b_, c_out_;
  std::unique_ptr<uint16_t[], FreeDeleter> half_;
  std::vector<Gemm> gemms_;
  volatile float sink_ = 0;
};

// ---- the deepx side: one case's tensors and its dx_invoke ----------------------------------------

// A host call's outcome: the code and message of its error (freed here), DX_OK and "" for none.
struct Outcome {
  dx_status_t status = DX_OK;
  std::string message;
  bool ok() const { return status == DX_OK; }
};

Outcome outcome(dx_error_t* error) {
  Outcome o;
  if (error == nullptr) return o;
  o.status = dx_error_code(error);
  size_t length = 0;
  const char* message = dx_error_message(error, &length);
  try {
    o.message.assign(message, length);
  } catch (...) {
    dx_error_destroy(error);
    throw;
  }
  dx_error_destroy(error);
  return o;
}

std::string status_text(const Outcome& o) {
  std::string msg = o.message;
  if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);  // first line
  if (auto list = msg.find("; available:"); list != std::string::npos) msg = msg.substr(0, list);
  return std::string(dx_status_string(o.status)) + (msg.empty() ? "" : ": " + msg);
}

class DxCall {
 public:
  DxCall(dx_runtime_t* rt, int32_t device, const Case& c) : rt_(rt) {
    if (!outcome(dx_runtime_op_lookup(rt, c.op.c_str(), &op_)).ok()) {
      problem_ = "not available (no kernel for " + c.op + ")";
      unavailable_ = true;
      return;
    }
    if (const Outcome r = outcome(dx_attrs_create(&attrs_)); !r.ok()) {
      problem_ = "error: " + status_text(r);
      return;
    }
    for (const AttrSpec& a : c.attrs) {
      Outcome r;
      switch (a.kind) {
        case AttrSpec::kI64: r = outcome(dx_attrs_set_i64(attrs_, a.name.c_str(), a.ints.at(0))); break;
        case AttrSpec::kF64: r = outcome(dx_attrs_set_f64(attrs_, a.name.c_str(), a.real)); break;
        case AttrSpec::kI64Array:
          r = outcome(dx_attrs_set_i64_array(attrs_, a.name.c_str(), a.ints.data(),
                                             static_cast<int64_t>(a.ints.size())));
          break;
      }
      if (!r.ok()) {
        problem_ = "error: attribute " + a.name + ": " + status_text(r);
        return;
      }
    }
    uint64_t seed = 1;
    auto make = [&](const TensorSpec& spec) -> dx_tensor_t* {
      if (!spec.present() || !problem_.empty()) return nullptr;
      dx_tensor_t* t = nullptr;
      const DLTensor* dl = nullptr;
      Outcome r = outcome(dx_tensor_create(rt, device, spec.dtype, spec.shape.data(),
                                           static_cast<int32_t>(spec.shape.size()), &t));
      if (r.ok()) {
        owned_.push_back(t);
        r = outcome(dx_tensor_dltensor(t, &dl));
      }
      if (!r.ok()) {
        problem_ = "error: cannot allocate " + dims(spec.shape) + ": " + r.message;
        return nullptr;
      }
      fill(static_cast<char*>(dl->data) + dl->byte_offset, spec, seed++);
      return t;
    };
    std::vector<dx_tensor_t*> fwd_in, fwd_out;
    for (const TensorSpec& s : c.inputs) fwd_in.push_back(make(s));
    for (const TensorSpec& s : c.outputs) fwd_out.push_back(make(s));
    if (!problem_.empty()) return;
    if (!c.backward) {
      inputs_ = fwd_in;
      outputs_ = fwd_out;
      return;
    }
    // Backward: run the forward once so the saved outputs are real, then build the call
    // (output gradients, forward inputs, forward outputs) -> input gradients.
    if (const Outcome r = outcome(dx_invoke(rt, op_, fwd_in.data(), static_cast<int32_t>(fwd_in.size()),
                                            fwd_out.data(), static_cast<int32_t>(fwd_out.size()), attrs_));
        !r.ok()) {
      unavailable_ = r.status == DX_UNSUPPORTED || r.status == DX_NOT_FOUND;
      problem_ = (unavailable_ ? "not available (forward: " : "error (forward): ") + status_text(r) +
                 (unavailable_ ? ")" : "");
      return;
    }
    for (const TensorSpec& s : c.outputs) inputs_.push_back(make(s));
    inputs_.insert(inputs_.end(), fwd_in.begin(), fwd_in.end());
    inputs_.insert(inputs_.end(), fwd_out.begin(), fwd_out.end());
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const bool wanted = i < c.want_grad.size() && c.want_grad[i];
      outputs_.push_back(wanted ? make(c.inputs[i]) : nullptr);
    }
    options_.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    options_.flags = DX_INVOKE_FLAG_BACKWARD;
    backward_ = true;
  }
  ~DxCall() {
    for (dx_tensor_t* t : owned_) dx_error_destroy(dx_tensor_destroy(t));
    dx_error_destroy(dx_attrs_destroy(attrs_));
  }
  DxCall(const DxCall&) = delete;
  DxCall& operator=(const DxCall&) = delete;

  /// Empty when the call is ready; else why not ("not available (...)" or "error: ...").
  const std::string& problem() const { return problem_; }

  /// One call, as a client makes it: null on success, else an error the caller frees.
  dx_error_t* invoke() {
    return dx_invoke_ex(rt_, op_, inputs_.data(), static_cast<int32_t>(inputs_.size()),
                        outputs_.data(), static_cast<int32_t>(outputs_.size()), attrs_,
                        backward_ ? &options_ : nullptr);
  }
  /// The first call: records "not available" for a missing signature or backward.
  bool check() {
    const Outcome r = outcome(invoke());
    if (r.ok()) return true;
    unavailable_ = r.status == DX_UNSUPPORTED || r.status == DX_NOT_FOUND;
    problem_ = unavailable_ ? "not available (" + status_text(r) + ")" : "error: " + status_text(r);
    return false;
  }

 private:
  dx_runtime_t* rt_;
  dx_op_id_t op_ = 0;
  dx_attrs_t* attrs_ = nullptr;
  std::vector<dx_tensor_t*> owned_, inputs_, outputs_;
  dx_invoke_options_t options_{};
  bool backward_ = false;
  bool unavailable_ = false;
  std::string problem_;
};

// ---- measuring -----------------------------------------------------------------------------------

struct Options {
  int rounds = 9;
  double round_seconds = 0.03;
  std::string plugin = DEEPX_CPU_PLUGIN_PATH;
  std::string python = "/usr/bin/python3";
  std::string torch_script = DEEPX_BENCH_TORCH_SCRIPT;
  bool torch = true;
  std::string markdown;
  std::string filter;
  bool list = false;  // print the cases as the JSON lines bench_torch.py reads, and exit
  bool peaks = false;  // measure and print the compute ceilings only, and exit
};

struct Timing {
  double median = 0, min = 0, max = 0;
  bool valid = false;
};

struct Row {
  const Case* c = nullptr;
  std::string problem;  // "not available (...)" / "error: ..."; empty when measured
  Timing dx, ceiling;
  double ratio = 0;  // median over rounds of ceiling time / deepx time
  double ratio_min = 0, ratio_max = 0;  // the spread of that ratio over the rounds
  double peak_fraction = 0;  // compute-bound rows: rate / the compute peak of the row's dtype
  Timing torch;
  std::string torch_problem = "n/a";
};

Timing summarize(const std::vector<double>& v) {
  Timing t;
  if (v.empty()) return t;
  t.median = median(v);
  t.min = *std::min_element(v.begin(), v.end());
  t.max = *std::max_element(v.begin(), v.end());
  t.valid = true;
  return t;
}

/// Runs `fn` back to back until `round_seconds` have passed (at least once); returns seconds
/// per call. Time-bounded rather than a precomputed count, so a call that turns slow under load
/// (an OpenMP barrier waiting for a descheduled thread) cannot stretch a round to many seconds.
template <typename Fn>
double timed_round(Fn&& fn, double round_seconds) {
  const auto t0 = Clock::now();
  int64_t calls = 0;
  double elapsed = 0;
  do {
    if (!fn()) return -1;
    ++calls;
    elapsed = seconds_since(t0);
  } while (elapsed < round_seconds);
  return elapsed / static_cast<double>(calls);
}

void measure(DxCall& call, Ceiling& ceiling, const Options& o, Row& row) {
  // Warm-up: one call each (first touches, OpenBLAS buffers), then one timed call each.
  if (!call.check()) {
    row.problem = call.problem();
    return;
  }
  ceiling.run();
  Outcome failed;
  auto dx_call = [&] {
    dx_error_t* e = call.invoke();
    if (e == nullptr) return true;
    failed = outcome(e);
    return false;
  };
  auto ceiling_call = [&] {
    ceiling.run();
    return true;
  };
  const double dx_one = timed_round(dx_call, 0);
  if (dx_one < 0) {
    row.problem = "error: " + status_text(failed);
    return;
  }
  // Slow cases (a naive kernel taking seconds) get fewer rounds so the whole run stays bounded.
  const int rounds = std::max(3, std::min(o.rounds, static_cast<int>(std::ceil(2.0 / dx_one))));
  std::vector<double> dx_times, ceiling_times, ratios;
  for (int r = 0; r < rounds; ++r) {
    const double d = timed_round(dx_call, o.round_seconds);
    if (d < 0) {
      row.problem = "error: " + status_text(failed);
      return;
    }
    const double k = timed_round(ceiling_call, o.round_seconds);
    dx_times.push_back(d);
    ceiling_times.push_back(k);
    ratios.push_back(k / d);
  }
  row.dx = summarize(dx_times);
  row.ceiling = summarize(ceiling_times);
  const Timing spread = summarize(ratios);
  row.ratio = spread.median;
  row.ratio_min = spread.min;
  row.ratio_max = spread.max;
}

// ---- PyTorch, in a child process -----------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

/// "[a,b,c]" of the items, each rendered by `item`.
template <typename T, typename Fn>
std::string json_list(const std::vector<T>& items, Fn&& item) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += ',';
    s += item(items[i]);
  }
  s += ']';
  return s;
}

std::string json_int(int64_t v) { return std::to_string(v); }

std::string json_tensor(const TensorSpec& t) {
  if (!t.present()) return "null";
  std::string s = "{\"dtype\":\"";
  s += dx_dtype_string(t.dtype);
  s += "\",\"shape\":";
  s += json_list(t.shape, json_int);
  s += t.init == Init::kIndex ? ",\"init\":\"index\",\"range\":" + std::to_string(t.index_range)
                              : std::string(",\"init\":\"uniform\"");
  s += '}';
  return s;
}

std::string json_case(const Case& c) {
  std::string s = "{\"id\":\"" + json_escape(c.id()) + "\",\"op\":\"" + c.op + "\",\"backward\":";
  s += c.backward ? "true" : "false";
  s += ",\"inputs\":" + json_list(c.inputs, json_tensor);
  s += ",\"outputs\":" + json_list(c.outputs, json_tensor);
  s += ",\"want_grad\":" + json_list(c.want_grad, [](bool b) { return std::string(b ? "true" : "false"); });
  s += ",\"attrs\":{";
  for (size_t i = 0; i < c.attrs.size(); ++i) {
    const AttrSpec& a = c.attrs[i];
    if (i > 0) s += ',';
    s += "\"" + a.name + "\":";
    if (a.kind == AttrSpec::kF64) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", a.real);
      s += buf;
    } else if (a.kind == AttrSpec::kI64) {
      s += std::to_string(a.ints.at(0));
    } else {
      s += json_list(a.ints, json_int);
    }
  }
  s += "}}";
  return s;
}

/// Runs bench_torch.py over the cases; fills each row's torch timing or says why not.
/// Returns a line describing PyTorch (version, threads) or why it could not run.
std::string run_torch(const Options& o, int threads, std::vector<Row>& rows) {
  if (!o.torch) {
    for (Row& r : rows) r.torch_problem = "n/a (--no-torch)";
    return "PyTorch: not run (--no-torch)";
  }
  // Every row's cell says n/a with a short reason; the header line gives the whole story.
  auto fail_all = [&](const std::string& short_reason, const std::string& why) {
    for (Row& r : rows) r.torch_problem = "n/a (" + short_reason + ")";
    return "PyTorch: n/a (" + why + ")";
  };
  if (access(o.python.c_str(), X_OK) != 0) return fail_all("no " + o.python, o.python + " not found; run .ci/install-bench-deps.sh");
  if (access(o.torch_script.c_str(), R_OK) != 0) return fail_all("no script", o.torch_script + " not found");
  char path[] = "/tmp/deepx-bench-cases-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return fail_all("no temp file", "cannot create a temporary file");
  close(fd);
  {
    std::ofstream cases(path);
    for (const Row& r : rows) {
      if (r.problem.empty()) cases << json_case(*r.c) << "\n";  // only what deepx measured
    }
  }
  const std::string cmd = "'" + o.python + "' '" + o.torch_script + "' --threads " +
                          std::to_string(threads) + " --rounds " + std::to_string(o.rounds) +
                          " --round-ms " + std::to_string(static_cast<int>(o.round_seconds * 1000)) +
                          " --cases '" + path + "'";
  std::fprintf(stderr, "running %s\n", cmd.c_str());
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::remove(path);
    return fail_all("python failed", "cannot start " + o.python);
  }
  std::map<std::string, Row*> by_id;
  for (Row& r : rows) by_id[r.c->id()] = &r;
  std::string about = "PyTorch: no output", unavailable;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    // "torch <version> threads <n> ..." | "unavailable <reason>" |
    // "ok\t<id>\t<median>\t<min>\t<max>\t<note>" | "na\t<id>\t<reason>"
    std::vector<std::string> f;
    std::stringstream ss(l);
    for (std::string part; std::getline(ss, part, '\t');) f.push_back(part);
    if (f.empty()) continue;
    if (f[0].rfind("torch ", 0) == 0) {
      about = "PyTorch " + f[0].substr(6);
    } else if (f[0].rfind("unavailable", 0) == 0) {
      unavailable = l.size() > 12 ? l.substr(12) : "torch cannot be imported";
    } else if (f[0] == "ok" && f.size() >= 5 && by_id.count(f[1])) {
      Row& r = *by_id[f[1]];
      r.torch.median = std::atof(f[2].c_str());
      r.torch.min = std::atof(f[3].c_str());
      r.torch.max = std::atof(f[4].c_str());
      r.torch.valid = r.torch.median > 0;
      r.torch_problem = f.size() >= 6 ? f[5] : "";
    } else if (f[0] == "na" && f.size() >= 3 && by_id.count(f[1])) {
      by_id[f[1]]->torch_problem = "n/a (" + f[2] + ")";
    }
  }
  const int status = pclose(pipe);
  std::remove(path);
  if (!unavailable.empty()) return fail_all("torch not installed", unavailable);
  if (status != 0) {
    for (Row& r : rows) {
      if (!r.torch.valid && r.torch_problem == "n/a") r.torch_problem = "n/a (script failed)";
    }
    about += " (script exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
  }
  return about;
}

// ---- printing ------------------------------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string human_time(double s) {
  if (s < 1e-6) return fmt("%.0f ns", s * 1e9);
  if (s < 1e-3) return fmt("%.1f us", s * 1e6);
  if (s < 1) return fmt("%.2f ms", s * 1e3);
  return fmt("%.2f s", s);
}

std::string rate(const Case& c, double seconds) {
  if (seconds <= 0) return "";
  return c.is_gemm() ? fmt("%.1f GFLOP/s", c.work() / seconds / 1e9)
                     : fmt("%.1f GB/s", c.work() / seconds / 1e9);
}

std::string machine_line(int threads) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  int cpus = 0;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("processor", 0) == 0) ++cpus;
    if (model == "unknown CPU" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line + " ";
  }
  std::string features;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"}) {
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) features += std::string(" ") + f;
  }
  const char* bind = std::getenv("OMP_PROC_BIND");
  return model + " (" + std::to_string(cpus) + " CPUs;" + features + "); OpenMP threads " +
         std::to_string(threads) + ", OpenBLAS threads " + std::to_string(openblas_get_num_threads()) +
         // The kernel set OpenBLAS's DYNAMIC_ARCH picked: it names an older core ("Haswell": AVX2)
         // for CPUs it does not know, which makes the BLAS ceiling that much lower.
         ", OpenBLAS core " + openblas_get_corename() + ", OMP_PROC_BIND=" + (bind ? bind : "unset");
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string utc_now() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

struct Cells {
  std::string op, shape, dtype, time, rate, ceiling, ratio, spread, target, verdict, torch_time,
      vs_torch, peak;
};

// The compute peak a compute-bound row of this dtype compares with (0: none measured).
double peak_for(const ComputePeaks& p, const std::string& dtype) {
  if (dtype == "f32") return p.f32.gflops;
  if (dtype == "f64") return p.f64.gflops;
  if (dtype == "bf16") return p.bf16.gflops;
  return 0;
}

// Verdicts against a target. The median ratio decides; a median below the target but within
// kNoiseBand of it, whose rounds reached it (max >= target), is reported apart, as "noise", never
// counted as met: it is what an op that calls the ceiling itself (matmul through OpenBLAS) shows
// when the rounds scatter. kNoiseBand is the run-to-run movement of a ratio measured side by side
// on the project's 2-core build box (docs/performance.md).
constexpr double kNoiseBand = 0.05;
constexpr const char* kMet = "MET";
constexpr const char* kNoise = "noise";
constexpr const char* kMissed = "missed";

Cells cells(const Row& r) {
  const Case& c = *r.c;
  Cells x;
  x.op = c.op + (c.backward ? " (backward)" : "");
  x.shape = c.shape;
  x.dtype = c.dtype;
  const bool has_target = c.target != Target::kNone && !(c.is_gemm() && c.dtype != "f32");
  x.target = has_target ? fmt(">= %.2f", c.target_ratio()) : "-";
  if (!r.problem.empty()) {
    x.time = r.problem;
    return x;
  }
  x.time = human_time(r.dx.median);
  x.rate = rate(c, r.dx.median);
  x.ceiling = rate(c, r.ceiling.median) + (c.is_gemm() ? " BLAS" : " STREAM");
  x.ratio = fmt("%.3f", r.ratio);
  x.spread = fmt("%.2f-", r.ratio_min) + fmt("%.2f", r.ratio_max);
  x.peak = r.peak_fraction > 0 ? fmt("%.2f", r.peak_fraction) : "-";
  if (!has_target) x.verdict = "-";
  else if (r.ratio >= c.target_ratio()) x.verdict = kMet;
  else if (r.ratio_max >= c.target_ratio() && r.ratio >= c.target_ratio() - kNoiseBand)
    x.verdict = kNoise;
  else x.verdict = kMissed;
  if (r.torch.valid) {
    x.torch_time = human_time(r.torch.median);
    x.vs_torch = fmt("%.2f", r.torch.median / r.dx.median);
    if (!r.torch_problem.empty()) x.torch_time += " *";
  } else {
    x.torch_time = r.torch_problem;
  }
  return x;
}

void print_console(const std::vector<Row>& rows) {
  std::printf("\n%-40s %-26s %-8s %10s %14s %20s %6s %9s %7s %6s %6s %10s %7s\n", "op", "shape",
              "dtype", "time", "rate", "ceiling", "xceil", "spread", "target", "", "xpeak", "torch",
              "xtorch");
  for (const Row& r : rows) {
    const Cells x = cells(r);
    if (!r.problem.empty()) {
      std::printf("%-40s %-26s %-8s %s\n", x.op.c_str(), x.shape.c_str(), x.dtype.c_str(), x.time.c_str());
      continue;
    }
    std::printf("%-40s %-26s %-8s %10s %14s %20s %6s %9s %7s %6s %6s %10s %7s\n", x.op.c_str(),
                x.shape.c_str(), x.dtype.c_str(), x.time.c_str(), x.rate.c_str(),
                x.ceiling.c_str(), x.ratio.c_str(), x.spread.c_str(), x.target.c_str(),
                x.verdict.c_str(), x.peak.c_str(), x.torch_time.c_str(), x.vs_torch.c_str());
  }
}

struct Summary {
  int measured = 0, unavailable = 0, errors = 0, with_target = 0, met = 0, noise = 0, torch_rows = 0;
  double torch_geomean = 0;
  int plain_rows = 0;        // rows where torch runs the same single op into a preallocated output
  double plain_geomean = 0;  // the geometric mean over those rows only
  std::vector<std::string> missed;  // "noise" verdicts included, marked as such
};

Summary summarize_rows(const std::vector<Row>& rows) {
  Summary s;
  double log_sum = 0, plain_log_sum = 0;
  for (const Row& r : rows) {
    if (!r.problem.empty()) {
      (r.problem.rfind("not available", 0) == 0 ? s.unavailable : s.errors)++;
      continue;
    }
    ++s.measured;
    const Cells x = cells(r);
    if (x.verdict != "-") {
      ++s.with_target;
      if (x.verdict == kMet) {
        ++s.met;
      } else {
        if (x.verdict == kNoise) ++s.noise;
        s.missed.push_back(r.c->id() + fmt(" (%.3f, rounds ", r.ratio) + x.spread +
                           (x.verdict == kNoise ? ": noise)" : ")"));
      }
    }
    if (r.torch.valid) {
      ++s.torch_rows;
      log_sum += std::log(r.torch.median / r.dx.median);
      if (r.torch_problem.empty()) {
        ++s.plain_rows;
        plain_log_sum += std::log(r.torch.median / r.dx.median);
      }
    }
  }
  if (s.torch_rows > 0) s.torch_geomean = std::exp(log_sum / s.torch_rows);
  if (s.plain_rows > 0) s.plain_geomean = std::exp(plain_log_sum / s.plain_rows);
  return s;
}

std::string summary_text(const Summary& s) {
  std::string t = std::to_string(s.measured) + " rows measured, " + std::to_string(s.unavailable) +
                  " not available, " + std::to_string(s.errors) + " errors; ceiling targets met: " +
                  std::to_string(s.met) + " of " + std::to_string(s.with_target) + "; of the others, " +
                  std::to_string(s.noise) +
                  " within 0.05 below the target in the median and reaching it in some round (noise).\n";
  if (s.torch_rows > 0) {
    t += "PyTorch: geometric mean of (PyTorch time / deepx time) over " +
         std::to_string(s.torch_rows) + " rows: " + fmt("%.2f", s.torch_geomean) + " (target > 1: " +
         (s.torch_geomean > 1 ? "MET" : "missed") + "); over the " + std::to_string(s.plain_rows) +
         " rows without * (the same single op, preallocated output on both sides): " +
         fmt("%.2f", s.plain_geomean) + ".\n";
  } else {
    t += "PyTorch: no rows compared.\n";
  }
  return t;
}

void write_markdown(const std::string& path, const std::vector<Row>& rows, const std::string& header,
                    const Summary& s) {
  std::ofstream md(path);
  md << header << "\n";
  md << "| op | shape | dtype | time | rate | ceiling | x ceiling | rounds | target | met | x peak "
        "| PyTorch | x PyTorch |\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|\n";
  auto cell = [](std::string v) {
    std::string out;
    for (char ch : v) {
      if (ch == '|') out += "\\|";
      else out += ch;
    }
    return out;
  };
  for (const Row& r : rows) {
    const Cells x = cells(r);
    md << "| " << cell(x.op) << " | " << cell(x.shape) << " | " << cell(x.dtype) << " | "
       << cell(x.time) << " | " << cell(x.rate) << " | " << cell(x.ceiling) << " | " << x.ratio
       << " | " << x.spread << " | " << x.target << " | " << x.verdict << " | " << x.peak << " | "
       << cell(x.torch_time) << " | "
       << x.vs_torch << " |\n";
  }
  md << "\n" << summary_text(s);
  if (!s.missed.empty()) {
    md << "\nMissed ceiling targets:";
    for (const std::string& m : s.missed) md << " " << m << ";";
    md << "\n";
  }
}

int usage() {
  std::fprintf(stderr,
               "usage: deepx-bench-ops [--rounds=N] [--round-ms=MS] [--plugin=PATH|NAME]\n"
               "       [--python=PATH] [--torch-script=PATH] [--no-torch] [--markdown=FILE]\n"
               "       [--filter=SUBSTRING] [--list] [--peaks]\n");
  return 2;
}

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* prefix) { return a.substr(std::strlen(prefix)); };
    if (a.rfind("--rounds=", 0) == 0) o.rounds = std::max(3, std::atoi(value("--rounds=").c_str()));
    else if (a.rfind("--round-ms=", 0) == 0) o.round_seconds = std::max(1, std::atoi(value("--round-ms=").c_str())) / 1000.0;
    else if (a.rfind("--plugin=", 0) == 0) o.plugin = value("--plugin=");
    else if (a.rfind("--python=", 0) == 0) o.python = value("--python=");
    else if (a.rfind("--torch-script=", 0) == 0) o.torch_script = value("--torch-script=");
    else if (a == "--no-torch") o.torch = false;
    else if (a.rfind("--markdown=", 0) == 0) o.markdown = value("--markdown=");
    else if (a.rfind("--filter=", 0) == 0) o.filter = value("--filter=");
    else if (a == "--list") o.list = true;
    else if (a == "--peaks") o.peaks = true;
    else return usage();
  }

  if (o.list) {
    for (const Case& c : make_cases()) {
      if (o.filter.empty() || c.id().find(o.filter) != std::string::npos) std::printf("%s\n", json_case(c).c_str());
    }
    return 0;
  }
  // The compute ceilings, on one thread and on the bench's thread count, before anything else
  // warms or loads the machine.
  const int threads = omp_get_max_threads();
  const ComputePeaks peaks_one = measure_compute_peaks(1);
  const ComputePeaks peaks = threads == 1 ? peaks_one : measure_compute_peaks(threads);
  if (o.peaks) {
    std::printf("machine: %s\n%s", machine_line(threads).c_str(), describe_peaks(peaks_one, peaks).c_str());
    return peaks.f32.gflops > 0 ? 0 : 1;
  }
  dx_runtime_t* rt = nullptr;
  int32_t plugin = -1, device = -1;
  Outcome setup = outcome(dx_runtime_create(nullptr, &rt));
  if (setup.ok()) setup = outcome(dx_runtime_load_plugin(rt, o.plugin.c_str(), &plugin));
  if (setup.ok()) setup = outcome(dx_runtime_find_device(rt, "cpu", &device));
  if (!setup.ok()) {
    std::fprintf(stderr, "deepx-bench-ops: cannot load the CPU plugin '%s': %s\n", o.plugin.c_str(),
                 status_text(setup).c_str());
    dx_error_destroy(dx_runtime_destroy(rt));
    return 1;
  }
  const std::string started = utc_now(), load_before = load_average();

  const std::vector<Case> cases = make_cases();
  std::vector<Row> rows;
  for (const Case& c : cases) {
    if (!o.filter.empty() && c.id().find(o.filter) == std::string::npos) continue;
    Row row;
    row.c = &c;
    std::fprintf(stderr, "deepx: %-60s", c.id().c_str());
    std::fflush(stderr);
    try {
      DxCall call(rt, device, c);
      if (!call.problem().empty()) {
        row.problem = call.problem();
      } else {
        Ceiling ceiling(c);
        measure(call, ceiling, o, row);
        const double peak = c.is_gemm() ? peak_for(peaks, c.dtype) : 0;
        if (peak > 0 && row.dx.median > 0) row.peak_fraction = c.work() / row.dx.median / 1e9 / peak;
      }
    } catch (const std::exception& e) {
      row.problem = std::string("error: ") + e.what();
    }
    std::fprintf(stderr, " %s\n", row.problem.empty() ? human_time(row.dx.median).c_str() : row.problem.c_str());
    rows.push_back(std::move(row));
  }
  const std::string torch_line = run_torch(o, threads, rows);
  const std::string load_after = load_average();

  const std::string header =
      "deepx-bench-ops, " + started + "\n\nmachine: " + machine_line(threads) +
      "\n\ncompute ceilings measured in this run:\n\n" + describe_peaks(peaks_one, peaks) +
      "\nload average before/after: " + load_before + " / " + load_after + "; " + torch_line +
      "\n\nMedians of " + std::to_string(o.rounds) + " rounds (about " +
      std::to_string(static_cast<int>(o.round_seconds * 1000)) +
      " ms of calls each); x ceiling = ceiling time / deepx time, median over rounds interleaved "
      "with the ceiling (rounds = its min-max); x PyTorch = PyTorch time / deepx time (> 1: deepx is faster); "
      "rate = the op's minimal byte traffic (read + written) or FLOPs per second; "
      "x peak = a compute-bound row's rate / the compute peak of its dtype at this thread count. "
      "* = the PyTorch side composes the op, allocates its result per call or runs autograd (see "
      "docs/performance.md).\n";
  std::printf("\n%s", header.c_str());
  print_console(rows);
  const Summary s = summarize_rows(rows);
  std::printf("\n%s", summary_text(s).c_str());
  for (const std::string& m : s.missed) std::printf("  missed: %s\n", m.c_str());
  if (!o.markdown.empty()) {
    write_markdown(o.markdown, rows, header, s);
    std::printf("markdown table written to %s\n", o.markdown.c_str());
  }
  dx_error_destroy(dx_runtime_destroy(rt));
  return 0;
}

}  // namespace
}  // namespace deepx::bench

int main(int argc, char** argv) {
  try {
    return deepx::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepx-bench-ops: %s\n", e.what());
    return 1;
  }
}
