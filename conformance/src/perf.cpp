#include "perf.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "data_gen.hpp"
#include "dtype.hpp"
#include "shape_rules.hpp"

#ifdef DEEPX_CERTIFY_HAVE_CBLAS
#include <cblas.h>
#endif

namespace deepx::conformance {

namespace {

using Clock = std::chrono::steady_clock;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

int thread_count() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Each thread repeats its part this often per timed run, so starting the threads (which the
// kernels' persistent OpenMP pools do not pay) is amortised; rates divide by it.
constexpr int kPasses = 4;

// Runs body(begin, end) kPasses times over [0, n) split across `threads` threads.
template <class Body>
void parallel_for(int threads, size_t n, const Body& body) {
  std::vector<std::thread> pool;
  const size_t chunk = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  for (int t = 0; t < threads; ++t) {
    const size_t b = std::min(n, static_cast<size_t>(t) * chunk), e = std::min(n, b + chunk);
    if (b < e)
      pool.emplace_back([&body, b, e] {
        for (int pass = 0; pass < kPasses; ++pass) body(b, e);
      });
  }
  for (auto& th : pool) th.join();
}

// Default perf cases of ops that need attributes or operands of different shapes.
struct PerfRecipe {
  std::vector<Shape> shapes;
  const char* attrs;
};
const std::map<std::string, PerfRecipe>& perf_recipes() {
  static const std::map<std::string, PerfRecipe> recipes = {
      {"dx.conv2d", {{{8, 64, 56, 56}, {64, 64, 3, 3}, {64}}, "padding:1"}},
      {"dx.max_pool2d", {{{8, 64, 64, 64}}, "kernel:2"}},
      {"dx.avg_pool2d", {{{8, 64, 64, 64}}, "kernel:2"}},
      {"dx.linear", {{{1024, 1024}, {1024, 1024}, {1024}}, "none"}},
      {"dx.rms_norm", {{{1024, 1024}, {1024}}, "none"}},
      {"dx.batch_norm", {{{32, 64, 32, 32}, {64}, {64}, {64}, {64}}, "training:true"}},
      {"dx.scaled_dot_product_attention", {{{4, 512, 64}, {4, 512, 64}, {4, 512, 64}, kAbsentShape}, "causal:true"}},
      {"dx.pad", {{{1024, 1024}}, "pads:[1,1,1,1]"}},
      {"dx.tile", {{{512, 1024}}, "repeats:[2,1]"}},
      {"dx.slice", {{{1024, 1024}}, "starts:[0,1];steps:[1,2]"}},
      {"dx.clamp", {{{int64_t{1} << 20}}, "min:-1.5;max:2.5"}},
      {"dx.gelu", {{{int64_t{1} << 20}}, "approximate:str:tanh"}},
      {"dx.log_softmax", {{{1024, 1024}}, "axis:-1"}},
      {"dx.arange", {{{int64_t{1} << 20}}, "start:f64:0.5;step:f64:0.25"}},
      {"dx.uniform", {{{int64_t{1} << 20}}, "seed:1"}},
      {"dx.normal", {{{int64_t{1} << 20}}, "seed:1"}},
  };
  return recipes;
}

dx_attrs_t* make_perf_attrs(const std::vector<Attr>& attrs) {
  if (attrs.empty()) return nullptr;
  dx_attrs_t* a = nullptr;
  if (take_status(dx_attrs_create(&a)) != DX_OK) return nullptr;
  // A value the host refuses is left unset: the invoke then reports what is missing.
  for (const auto& at : attrs) {
    const auto& v = at.value;
    const char* n = at.name.c_str();
    switch (v.kind) {
      case AttrValue::Kind::I64: take_status(dx_attrs_set_i64(a, n, v.i64)); break;
      case AttrValue::Kind::F64: take_status(dx_attrs_set_f64(a, n, v.f64)); break;
      case AttrValue::Kind::Bool: take_status(dx_attrs_set_bool(a, n, static_cast<int32_t>(v.i64))); break;
      case AttrValue::Kind::I64Array:
        take_status(dx_attrs_set_i64_array(a, n, v.i64s.data(), static_cast<int64_t>(v.i64s.size())));
        break;
      case AttrValue::Kind::F64Array:
        take_status(dx_attrs_set_f64_array(a, n, v.f64s.data(), static_cast<int64_t>(v.f64s.size())));
        break;
      case AttrValue::Kind::String:
        take_status(dx_attrs_set_string(a, n, v.str.data(), static_cast<int64_t>(v.str.size())));
        break;
    }
  }
  return a;
}

// Kernels report the median (typical) run; ceilings the best run (what the machine can do).
enum class Pick { Median, Best };

// Slow kernels (a warm-up over 0.2 s: f16 convolutions, big backward products) get one warm-up
// and 3 timed runs, those over 10 ms 5 runs, so that timing every claimed kernel stays within a
// few minutes.
template <class Fn>
double timed_seconds(int repeats, const Fn& fn, Pick pick = Pick::Median) {
  const auto warm = Clock::now();
  fn();  // warm-up (page faults, caches, thread pools)
  const double first = std::chrono::duration<double>(Clock::now() - warm).count();
  if (first > 0.2) repeats = std::min(repeats, 3);
  else if (first > 0.01) repeats = std::min(repeats, 5), fn();
  else fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return pick == Pick::Best ? t.front() : t[t.size() / 2];
}

struct Ceiling {
  std::string what;  // "copy", "add", "read", "write", "sgemm", "n/a"
  double rate = 0;   // GB/s or GFLOP/s
};

// A STREAM-style loop over the op's byte traffic: its ceiling in GB/s.
Ceiling memory_ceiling(int threads, int inputs, size_t in_bytes, size_t out_bytes, int repeats) {
  Ceiling c;
  const size_t out_words = std::max<size_t>(1, out_bytes / 8), in_words = std::max<size_t>(1, in_bytes / 8);
  std::vector<uint64_t> a(in_words, 1), b(in_words, 2), out(std::max(out_words, in_words), 0);
  double bytes = 0, seconds = 0;
  if (inputs == 0) {
    c.what = "write";
    bytes = static_cast<double>(out_words) * 8;
    seconds = timed_seconds(repeats, [&] {
      parallel_for(threads, out_words, [&](size_t s, size_t e) { std::memset(out.data() + s, 0x5a, (e - s) * 8); });
    }, Pick::Best);
  } else if (out_bytes * 8 < in_bytes) {
    c.what = "read";
    bytes = static_cast<double>(in_words) * 8;
    std::vector<uint64_t> partial(static_cast<size_t>(threads) * 8, 0);
    seconds = timed_seconds(repeats, [&] {
      parallel_for(threads, in_words, [&](size_t s, size_t e) {
        uint64_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;  // independent chains: loads, not adds, limit
        size_t i = s;
        for (; i + 4 <= e; i += 4) {
          acc0 += a[i];
          acc1 += a[i + 1];
          acc2 += a[i + 2];
          acc3 += a[i + 3];
        }
        for (; i < e; ++i) acc0 += a[i];
        const uint64_t acc = acc0 + acc1 + acc2 + acc3;
        partial[(s / std::max<size_t>(1, (in_words + threads - 1) / threads)) * 8] = acc;
      });
    }, Pick::Best);
  } else if (inputs == 1) {
    c.what = "copy";
    const size_t words = std::min(in_words, out_words);
    bytes = static_cast<double>(words) * 16;
    seconds = timed_seconds(repeats, [&] {
      parallel_for(threads, words, [&](size_t s, size_t e) { std::memcpy(out.data() + s, a.data() + s, (e - s) * 8); });
    }, Pick::Best);
  } else {
    c.what = "add";
    const size_t words = std::min(in_words / static_cast<size_t>(inputs), out_words);
    bytes = static_cast<double>(words) * 24;
    seconds = timed_seconds(repeats, [&] {
      parallel_for(threads, words, [&](size_t s, size_t e) {
        for (size_t i = s; i < e; ++i) out[i] = a[i] + b[i];
      });
    }, Pick::Best);
  }
  c.rate = seconds > 0 ? kPasses * bytes / seconds / 1e9 : 0;
  return c;
}

Ceiling gemm_ceiling([[maybe_unused]] DType dtype, [[maybe_unused]] int64_t n, [[maybe_unused]] int repeats) {
  Ceiling c;
#ifdef DEEPX_CERTIFY_HAVE_CBLAS
  const auto sz = static_cast<size_t>(n * n);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const int ni = static_cast<int>(n);
  double seconds = 0;
  if (dtype == DType::F64) {
    std::vector<double> a(sz, 0.5), b(sz, 0.25), out(sz, 0);
    c.what = "dgemm";
    seconds = timed_seconds(repeats, [&] {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0, a.data(), ni, b.data(), ni, 0.0,
                  out.data(), ni);
    }, Pick::Best);
  } else {
    // f16/bf16/i8 have no standard BLAS: sgemm on the same sizes is the yardstick.
    std::vector<float> a(sz, 0.5f), b(sz, 0.25f), out(sz, 0);
    c.what = "sgemm";
    seconds = timed_seconds(repeats, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni, b.data(), ni, 0.0f,
                  out.data(), ni);
    }, Pick::Best);
  }
  c.rate = seconds > 0 ? flops / seconds / 1e9 : 0;
#else
  c.what = "n/a";
#endif
  return c;
}

struct TensorDeleter {
  void operator()(dx_tensor_t* t) const { dx_error_destroy(dx_tensor_destroy(t)); }
};
using TensorPtr = std::unique_ptr<dx_tensor_t, TensorDeleter>;

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ";" : "") + format_shape(shapes[i]);
  return s;
}

// The default large case of `op` with signature `sig`: input shapes (the output shape for
// 0-input ops), requested output shapes (reshape, broadcast_to) and attributes.
struct PerfCase {
  std::vector<Shape> shapes, outshapes;
  std::vector<Attr> attrs;
};

PerfCase perf_case(const std::string& op, const OpRule& rule, const Signature& sig, const PerfOptions& o,
                   bool secondary) {
  PerfCase c;
  const int64_t n = secondary ? o.elements / 4 : o.elements, rows = 1024, cols = std::max<int64_t>(1, n / rows);
  if (auto it = perf_recipes().find(op); it != perf_recipes().end()) {
    c.shapes = it->second.shapes;
    c.attrs = parse_attrs(it->second.attrs);
    // Attention's boolean-mask kernel needs the mask: one L x S mask broadcast over the batch.
    if (op == "dx.scaled_dot_product_attention" && sig.inputs.size() >= 4 && sig.inputs[3] == DType::Bool)
      c.shapes[3] = Shape{c.shapes[0][1], c.shapes[1][1]};
  } else if (op == "dx.matmul") {
    c.shapes = {{o.matmul_n, o.matmul_n}, {o.matmul_n, o.matmul_n}};
  } else if (op == "dx.fill") {
    c.shapes = {{n}};
  } else if (op == "dx.reshape") {
    c.shapes = {{rows, cols}};
    c.outshapes = {{n}};
  } else if (op == "dx.broadcast_to") {
    c.shapes = {{rows, 1}};
    c.outshapes = {{rows, cols}};
  } else if (op == "dx.concat") {  // two halves along the last axis
    c.shapes = {{rows, cols / 2}, {rows, cols - cols / 2}};
    c.attrs = parse_attrs("axis:1");
  } else if (op == "dx.split") {  // as many near-equal parts along axis 0 as the signature has outputs
    const int64_t parts = static_cast<int64_t>(std::max<size_t>(1, sig.outputs.size()));
    std::string sizes = "sizes:[";
    for (int64_t p = 0; p < parts; ++p)
      sizes += (p ? "," : "") + std::to_string(p + 1 < parts ? rows / parts : rows - (parts - 1) * (rows / parts));
    c.shapes = {{rows, cols}};
    c.attrs = parse_attrs(sizes + "]");
  } else if (op == "dx.layer_norm") {
    c.shapes = {{rows, cols}, {cols}, {cols}};
  } else if (op == "dx.dropout") {
    c.shapes = {{n}};
    c.attrs = parse_attrs("p:0.5;seed:1;training:true");
  } else if (op == "dx.cross_entropy") {  // rows of logits over `cols` classes, one label per row
    c.shapes = {{rows, cols}, {rows}};
  } else if (op == "dx.embedding") {  // a table of n/128 rows of 128, n/128 lookups
    c.shapes = {{n / 128, 128}, {n / 128}};
  } else if (op == "dx.index_select") {
    c.shapes = {{rows, cols}, {rows}};
    c.attrs = parse_attrs("axis:0");
  } else if (op == "dx.gather") {
    c.shapes = {{rows, cols}, {rows, cols}};
    c.attrs = parse_attrs("axis:1");
  } else if (op == "dx.scatter_add") {
    c.shapes = {{rows, cols}, {rows, cols}, {rows, cols}};
    c.attrs = parse_attrs("axis:1");
  } else if (rule.op_class == OpClass::Accumulating || rule.op_class == OpClass::Normalising || op == "dx.transpose") {
    c.shapes.assign(static_cast<size_t>(std::max(rule.inputs, 1)), Shape{rows, cols});
  } else {
    c.shapes.assign(static_cast<size_t>(std::max(rule.inputs, 1)), Shape{n});
  }
  return c;
}

// Floating-point work of compute-bound ops (matmul, linear, conv2d, attention); 0 for the rest,
// which are judged by bytes. A backward does about twice its forward's (one product per operand).
double perf_flops(const std::string& op, const std::vector<Shape>& shapes, const Shape& out, bool backward) {
  double flops = 0;
  if (op == "dx.matmul") {
    flops = 2.0 * static_cast<double>(numel(shapes[0])) * static_cast<double>(shapes[1].back());
  } else if (op == "dx.linear") {
    flops = 2.0 * static_cast<double>(numel(shapes[0])) * static_cast<double>(shapes[1][0]);
  } else if (op == "dx.conv2d") {
    flops = 2.0 * static_cast<double>(numel(out)) * static_cast<double>(shapes[1][1] * shapes[1][2] * shapes[1][3]);
  } else if (op == "dx.scaled_dot_product_attention") {
    flops = 4.0 * static_cast<double>(numel(shapes[0])) * static_cast<double>(shapes[1][shapes[1].size() - 2]);
  }
  return backward ? 2 * flops : flops;
}

// The STREAM loop memory_ceiling() runs for this traffic pattern.
const char* memory_pattern(int inputs, size_t in_bytes, size_t out_bytes) {
  if (inputs == 0) return "write";
  if (out_bytes * 8 < in_bytes) return "read";
  return inputs == 1 ? "copy" : "add";
}

int bucket(size_t bytes) {  // log2: ceilings are shared by traffic within a factor of 2
  int b = 0;
  while (bytes > 1) bytes >>= 1, ++b;
  return b;
}

struct PerfCounts {
  int forward = 0, backward = 0, skipped = 0;
};

class PerfRun {
 public:
  PerfRun(const Environment& env, const PerfOptions& o) : env_(env), o_(o), threads_(thread_count()) {}

  void skip(const std::string& op, const std::string& dtype, const std::string& device, const std::string& why) {
    std::printf("perf: %-14s %-5s %-6s skipped: %s\n", op.c_str(), dtype.c_str(), device.c_str(), why.c_str());
    std::fflush(stdout);
    ++counts_.skipped;
  }

  // Times the forward kernel of `claim` and, when both the plugin and the reference register
  // its backward, the backward on the forward's own outputs.
  // A secondary signature (a key dtype's other dx.cast pairs, split output counts, index dtypes)
  // is timed on a quarter of the elements, to bound the run time.
  void time_claim(const std::string& op, const OpRule& rule, const Claim& claim, const std::string& shown_dtype,
                  bool secondary) {
    const std::string bw_op = op + "/backward";
    const bool want_backward = claim.has_backward;  // the reference must define it too (below)
    auto skip_both = [&](const std::string& why) {
      skip(op, shown_dtype, claim.device, why);
      if (want_backward) skip(bw_op, shown_dtype, claim.device, why);
    };
    const auto sig = parse_signature(claim.sig);
    if (claim.sig.empty() || !sig) return skip_both("a dtype of its signature is unknown to the suite");
    const Claim* ref = env_.find_claim(true, op, claim.sig, "cpu");
    if (!ref) return skip_both("the reference registers no " + claim.sig + " kernel to define it");
    if (o_.skip.count(op + " " + claim.dtype + " " + claim.device))
      return skip_both("it crashed or hung during certification");
    const PerfCase pc = perf_case(op, rule, *sig, o_, secondary);
    const OutputsResult specs = output_specs(op, pc.shapes, *sig, pc.attrs, pc.outshapes);
    if (specs.outputs.empty() || !specs.error.empty())
      return skip_both("no default case (" + (specs.error.empty() ? std::string("needs an output shape") : specs.error) + ")");
    dx_op_id_t op_id = 0;
    if (device_ < 0) return skip_both("no memory space for device " + claim.device);
    if (take_status(dx_runtime_op_lookup(env_.runtime, op.c_str(), &op_id)) != DX_OK)
      return skip_both("the runtime does not know the op");

    // Forward inputs: in-range indices for index inputs, positive variances for batch_norm.
    std::vector<TensorPtr> owned;
    std::vector<dx_tensor_t*> fwd_in;
    std::vector<std::pair<Shape, DType>> fwd_in_specs;  // absent inputs: empty shape, unused
    size_t in_bytes = 0;
    const uint64_t key = splitmix64(0x9e3779b97f4a7c15ull ^ fnv1a64(op + claim.sig));
    const int inputs_count = rule.inputs == 0 ? 0 : static_cast<int>(pc.shapes.size());
    const int64_t k_hint = accumulation_length(op, pc.shapes, pc.attrs);
    for (int i = 0; i < inputs_count; ++i) {
      const Shape& s = pc.shapes[static_cast<size_t>(i)];
      const DType dt = sig->input(static_cast<size_t>(i));
      fwd_in_specs.emplace_back(s, dt);
      if (is_absent(s)) {
        fwd_in.push_back(nullptr);
        continue;
      }
      GenRequest g{op, dt, "real", i, key, numel(s), k_hint};
      if (is_integer(dt)) g.index_limit = index_limit(op, i, pc.shapes, pc.attrs);
      g.positive = op == "dx.batch_norm" && i == 4;
      dx_tensor_t* t = create(s, dt, generate(g));
      if (!t) return skip_both("cannot allocate (" + create_error_ + ")");
      owned.emplace_back(t);
      fwd_in.push_back(t);
      in_bytes += static_cast<size_t>(numel(s)) * static_cast<size_t>(byte_size(dt));
    }
    std::vector<dx_tensor_t*> fwd_out;
    size_t out_bytes = 0;
    for (const auto& spec : specs.outputs) {
      dx_tensor_t* t = create(spec.shape, spec.dtype, {});
      if (!t) return skip_both("cannot allocate (" + create_error_ + ")");
      owned.emplace_back(t);
      fwd_out.push_back(t);
      out_bytes += static_cast<size_t>(numel(spec.shape)) * static_cast<size_t>(byte_size(spec.dtype));
    }
    AttrsPtr attrs(make_perf_attrs(pc.attrs));
    const std::string shapes_shown = shapes_text(rule.inputs == 0 ? std::vector<Shape>{specs.outputs[0].shape} : pc.shapes);
    const double fwd_flops = perf_flops(op, pc.shapes, specs.outputs[0].shape, false);
    dx_status_t status = DX_OK;
    const double seconds = time_invoke(op_id, fwd_in, fwd_out, attrs.get(), false, status);
    if (status != DX_OK) return skip_both(std::string("the kernel returned ") + dx_status_string(status));
    report(op, shown_dtype, claim.device, shapes_shown, seconds, inputs_count, in_bytes, out_bytes, fwd_flops,
           sig->inputs.empty() ? sig->outputs[0] : sig->inputs[0]);
    ++counts_.forward;
    if (!want_backward) return;
    if (!ref->has_backward) return skip(bw_op, shown_dtype, claim.device, "the reference registers no backward for " + claim.sig);

    // Backward: output gradients, the forward inputs, the forward outputs -> input gradients.
    std::vector<dx_tensor_t*> bw_in, bw_out;
    size_t bw_in_bytes = 0, bw_out_bytes = 0;
    for (size_t k = 0; k < specs.outputs.size(); ++k) {
      const OutputSpec& spec = specs.outputs[k];
      GenRequest g{"dx.grad", spec.dtype, "real", static_cast<int>(200 + k), key, numel(spec.shape), 1};
      dx_tensor_t* t = create(spec.shape, spec.dtype, generate(g));
      if (!t) return skip(bw_op, shown_dtype, claim.device, "cannot allocate (" + create_error_ + ")");
      owned.emplace_back(t);
      bw_in.push_back(t);
    }
    bw_in.insert(bw_in.end(), fwd_in.begin(), fwd_in.end());
    bw_in.insert(bw_in.end(), fwd_out.begin(), fwd_out.end());
    bw_in_bytes = 2 * out_bytes + in_bytes;
    for (const auto& [shape, dt] : fwd_in_specs) {
      if (is_absent(shape)) {
        bw_out.push_back(nullptr);
        continue;
      }
      dx_tensor_t* t = create(shape, dt, {});
      if (!t) return skip(bw_op, shown_dtype, claim.device, "cannot allocate (" + create_error_ + ")");
      owned.emplace_back(t);
      bw_out.push_back(t);
      bw_out_bytes += static_cast<size_t>(numel(shape)) * static_cast<size_t>(byte_size(dt));
    }
    if (bw_out.empty()) return skip(bw_op, shown_dtype, claim.device, "the op has no inputs to differentiate");
    status = DX_OK;
    const double bw_seconds = time_invoke(op_id, bw_in, bw_out, attrs.get(), true, status);
    if (status != DX_OK)
      return skip(bw_op, shown_dtype, claim.device, std::string("the kernel returned ") + dx_status_string(status));
    report(bw_op, shown_dtype, claim.device, shapes_shown, bw_seconds, static_cast<int>(bw_in.size()), bw_in_bytes,
           bw_out_bytes, perf_flops(op, pc.shapes, specs.outputs[0].shape, true),
           sig->inputs.empty() ? sig->outputs[0] : sig->inputs[0]);
    ++counts_.backward;
  }

  const PerfCounts& counts() const { return counts_; }
  void set_device(int32_t device) { device_ = device; }

 private:
  struct AttrsDeleter {
    void operator()(dx_attrs_t* a) const {
      if (a) dx_error_destroy(dx_attrs_destroy(a));
    }
  };
  using AttrsPtr = std::unique_ptr<dx_attrs_t, AttrsDeleter>;

  // A tensor of `shape` and `dtype` on the plugin's device holding `bytes` (left as allocated
  // when empty); null on failure, with the host's message in create_error_.
  dx_tensor_t* create(const Shape& shape, DType dtype, const std::vector<uint8_t>& bytes) {
    dx_tensor_t* t = nullptr;
    if (take_status(dx_tensor_create(env_.runtime, device_, info(dtype).packed, shape.empty() ? nullptr : shape.data(),
                                     static_cast<int32_t>(shape.size()), &t),
                    &create_error_) != DX_OK)
      return nullptr;
    if (!bytes.empty() && take_status(dx_tensor_write(t, bytes.data(), bytes.size()), &create_error_) != DX_OK) {
      dx_error_destroy(dx_tensor_destroy(t));
      return nullptr;
    }
    return t;
  }

  double time_invoke(dx_op_id_t op_id, const std::vector<dx_tensor_t*>& in, std::vector<dx_tensor_t*>& out,
                     const dx_attrs_t* attrs, bool backward, dx_status_t& status) {
    dx_invoke_options_t opts{};
    opts.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    opts.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
    opts.plugin_index = env_.plugin_index;
    std::vector<dx_tensor_t*> args = in;
    return timed_seconds(o_.repeats, [&] {
      const dx_status_t s = take_status(dx_invoke_ex(env_.runtime, op_id, args.empty() ? nullptr : args.data(),
                                                     static_cast<int32_t>(args.size()), out.data(),
                                                     static_cast<int32_t>(out.size()), attrs, &opts));
      if (s != DX_OK) status = s;
    });
  }

  void report(const std::string& op, const std::string& dtype, const std::string& device, const std::string& shapes,
              double seconds, int inputs, size_t in_bytes, size_t out_bytes, double flops, DType key) {
    const double gbs = static_cast<double>(in_bytes + out_bytes) / seconds / 1e9;
    char rate[32], flops_text[32] = "-", ceiling_text[48], ratio[16] = "-";
    std::snprintf(rate, sizeof rate, "%.2f", gbs);
    if (flops > 0) {  // compute-bound: GFLOP/s against a BLAS gemm
      const double gflops = flops / seconds / 1e9;
      std::snprintf(flops_text, sizeof flops_text, "%.2f", gflops);
      const std::string ck = std::string("gemm ") + (key == DType::F64 ? "f64" : "f32");
      if (!ceilings_.count(ck)) ceilings_[ck] = gemm_ceiling(key, o_.matmul_n, o_.repeats);
      const Ceiling c = ceilings_[ck];
      if (c.rate > 0) {
        std::snprintf(ceiling_text, sizeof ceiling_text, "%.2f GFLOP/s (%s)", c.rate, c.what.c_str());
        std::snprintf(ratio, sizeof ratio, "%.2f", gflops / c.rate);
      } else {
        std::snprintf(ceiling_text, sizeof ceiling_text, "ceiling n/a");
      }
    } else {
      // Measured once per traffic pattern and size (within a factor of 2), so ops of the same
      // shape share one yardstick and the ceilings do not dominate the run time.
      const std::string ck = std::string(memory_pattern(inputs, in_bytes, out_bytes)) + " " +
                             std::to_string(bucket(in_bytes)) + " " + std::to_string(bucket(out_bytes));
      if (!ceilings_.count(ck)) ceilings_[ck] = memory_ceiling(threads_, inputs, in_bytes, out_bytes, o_.repeats);
      const Ceiling c = ceilings_[ck];
      std::snprintf(ceiling_text, sizeof ceiling_text, "%.2f GB/s (%s)", c.rate, c.what.c_str());
      if (c.rate > 0) std::snprintf(ratio, sizeof ratio, "%.2f", gbs / c.rate);
    }
    std::printf("perf: %-14s %-5s %-6s %-22s %10.3f %9s %9s  %-22s %6s\n", op.c_str(), dtype.c_str(), device.c_str(),
                shapes.c_str(), seconds * 1e3, rate, flops_text, ceiling_text, ratio);
    std::fflush(stdout);
  }

  const Environment& env_;
  const PerfOptions& o_;
  const int threads_;
  int32_t device_ = -1;
  std::map<std::string, Ceiling> ceilings_;
  PerfCounts counts_;
  std::string create_error_;  // why the last create() failed
};

void perf_main(const Environment& env, const PerfOptions& o) {
  const auto started = Clock::now();
  const int threads = thread_count();
  std::printf("\nperf: machine: %s, %u logical CPUs; threads: %d (%s); median of %d runs after 2 warm-ups\n",
              cpu_model().c_str(), std::thread::hardware_concurrency(), threads,
              std::getenv("OMP_NUM_THREADS") ? "OMP_NUM_THREADS" : "all CPUs", o.repeats);
  std::printf("perf: %-14s %-5s %-6s %-22s %10s %9s %9s  %-22s %6s\n", "op", "dtype", "device", "shapes", "median ms",
              "GB/s", "GFLOP/s", "ceiling", "ratio");
  double load = 0;
  if (std::ifstream la("/proc/loadavg"); la >> load) {
    const double cpus = std::thread::hardware_concurrency();
    if (load > 0.5 * cpus)
      std::printf("perf: warning: load average %.2f on %.0f CPUs: other processes compete, timings are unreliable\n",
                  load, cpus);
  }
  std::fflush(stdout);
  PerfRun run(env, o);
  for (const auto& [op, claims] : env.plugin_claims) {
    if (!o.ops.empty() && !o.ops.count(op)) continue;
    const OpRule* rule = find_op_rule(op);
    // A key dtype with several signatures (dx.cast's pairs) is shown by its full signature.
    std::map<std::string, int> per_key;
    for (const Claim& claim : claims) ++per_key[claim.dtype + " " + claim.device];
    for (const Claim& claim : claims) {
      const std::string shown = per_key[claim.dtype + " " + claim.device] > 1 && !claim.sig.empty() ? claim.sig : claim.dtype;
      if (!rule) {
        run.skip(op, shown, claim.device, "the suite has no rule for this op");
        continue;
      }
      run.set_device(env.device_for(env.plugin_index, claim.device_type));
      // The key's usual signature is its primary kernel; the other signatures are secondary.
      const auto key_dtype = dtype_from_name(claim.dtype);
      const bool usual = key_dtype && claim.sig == format_signature(default_signature(op, *key_dtype));
      const bool secondary = per_key[claim.dtype + " " + claim.device] > 1 && !usual;
      run.time_claim(op, *rule, claim, shown, secondary);
    }
  }
  for (const Claim& claim : env.uncovered_claims)
    if (o.ops.empty() || o.ops.count(claim.op))
      run.skip(claim.op, claim.sig.empty() ? claim.dtype : claim.sig, claim.device, "the suite has no rule for this op");
  const PerfCounts& n = run.counts();
  std::printf("perf: GB/s counts the bytes read and written once; the ceiling is the best of %d runs of a\n"
              "perf: STREAM-style loop over the same bytes (or BLAS gemm); ratio = the kernel's rate / the ceiling's\n",
              o.repeats);
  std::printf("perf: %d kernels timed (%d forward, %d backward), %d skipped, in %.1f s\n", n.forward + n.backward,
              n.forward, n.backward, n.skipped, std::chrono::duration<double>(Clock::now() - started).count());
  std::fflush(stdout);
}

}  // namespace

void run_perf(const Environment& env, const PerfOptions& o) {
  if (!o.isolate) {
    perf_main(env, o);
    return;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::printf("perf: cannot fork (%s); not timed\n", std::strerror(errno));
    return;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    perf_main(env, o);
    std::fflush(stdout);
    ::_exit(0);
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_s);
  int ws = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &ws, WNOHANG);
    if (done == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &ws, 0);
      std::printf("perf: timed out after %.0f s; the table above is incomplete\n", o.timeout_s);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFSIGNALED(ws))
    std::printf("perf: the timing process was killed by signal %d (%s); the table above is incomplete\n",
                WTERMSIG(ws), strsignal(WTERMSIG(ws)));
}

}  // namespace deepx::conformance
