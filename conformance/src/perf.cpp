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
      {"dx.linear", {{{2048, 1024}, {1024, 1024}, {1024}}, "none"}},
      {"dx.rms_norm", {{{2048, 2048}, {2048}}, "none"}},
      {"dx.batch_norm", {{{32, 64, 32, 32}, {64}, {64}, {64}, {64}}, "training:true"}},
      {"dx.scaled_dot_product_attention", {{{8, 1024, 64}, {8, 1024, 64}, {8, 1024, 64}, kAbsentShape}, "causal:true"}},
      {"dx.pad", {{{2048, 2048}}, "pads:[1,1,1,1]"}},
      {"dx.tile", {{{1024, 2048}}, "repeats:[2,1]"}},
      {"dx.slice", {{{2048, 2048}}, "starts:[0,1];steps:[1,2]"}},
      {"dx.clamp", {{{int64_t{1} << 22}}, "min:-1.5;max:2.5"}},
      {"dx.gelu", {{{int64_t{1} << 22}}, "approximate:str:tanh"}},
      {"dx.log_softmax", {{{2048, 2048}}, "axis:-1"}},
      {"dx.arange", {{{int64_t{1} << 22}}, "start:f64:0.5;step:f64:0.25"}},
      {"dx.uniform", {{{int64_t{1} << 22}}, "seed:1"}},
      {"dx.normal", {{{int64_t{1} << 22}}, "seed:1"}},
  };
  return recipes;
}

dx_attrs_t* make_perf_attrs(const std::vector<Attr>& attrs) {
  if (attrs.empty()) return nullptr;
  dx_attrs_t* a = nullptr;
  if (dx_attrs_create(&a) != DX_OK) return nullptr;
  for (const auto& at : attrs) {
    const auto& v = at.value;
    const char* n = at.name.c_str();
    switch (v.kind) {
      case AttrValue::Kind::I64: dx_attrs_set_i64(a, n, v.i64); break;
      case AttrValue::Kind::F64: dx_attrs_set_f64(a, n, v.f64); break;
      case AttrValue::Kind::Bool: dx_attrs_set_bool(a, n, static_cast<int32_t>(v.i64)); break;
      case AttrValue::Kind::I64Array: dx_attrs_set_i64_array(a, n, v.i64s.data(), static_cast<int64_t>(v.i64s.size())); break;
      case AttrValue::Kind::F64Array: dx_attrs_set_f64_array(a, n, v.f64s.data(), static_cast<int64_t>(v.f64s.size())); break;
      case AttrValue::Kind::String: dx_attrs_set_string(a, n, v.str.c_str()); break;
    }
  }
  return a;
}

// Kernels report the median (typical) run; ceilings the best run (what the machine can do).
enum class Pick { Median, Best };

template <class Fn>
double timed_seconds(int repeats, const Fn& fn, Pick pick = Pick::Median) {
  fn();  // warm-up (page faults, caches, thread pools)
  fn();
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
  void operator()(dx_tensor_t* t) const { dx_tensor_destroy(t); }
};
using TensorPtr = std::unique_ptr<dx_tensor_t, TensorDeleter>;

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ";" : "") + format_shape(shapes[i]);
  return s;
}

void perf_main(const Environment& env, const PerfOptions& o) {
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
  std::map<std::string, Ceiling> ceilings;
  for (const auto& [op, claims] : env.plugin_claims) {
    if (!o.ops.empty() && !o.ops.count(op)) continue;
    const OpRule* rule = find_op_rule(op);
    if (!rule) continue;
    for (const Claim& claim : claims) {
      auto dtype = dtype_from_name(claim.dtype);
      if (!dtype) continue;
      // One large case per kernel of the usual single-dtype signature (dx.cast: its first pair).
      const bool plain = rule->inputs >= 0 && rule->outputs == 1 &&
                         claim.sig == format_signature(default_signature(op, *dtype));
      if (!plain) continue;
      if (o.skip.count(op + " " + claim.dtype + " " + claim.device)) {
        std::printf("perf: %-14s %-5s %-6s skipped: it crashed or hung during certification\n", op.c_str(),
                    claim.dtype.c_str(), claim.device.c_str());
        continue;
      }
      std::vector<Shape> shapes;
      const int64_t n = o.elements;
      if (op == "dx.matmul") shapes = {{o.matmul_n, o.matmul_n}, {o.matmul_n, o.matmul_n}};
      else if (op == "dx.fill") shapes = {{n}};
      else if (rule->op_class == OpClass::Accumulating || rule->op_class == OpClass::Normalising ||
               op == "dx.transpose")
        shapes.assign(static_cast<size_t>(rule->inputs), Shape{2048, n / 2048});
      else shapes.assign(static_cast<size_t>(rule->inputs), Shape{n});
      // Ops whose default case needs attributes or operands of different shapes.
      std::vector<Attr> attrs;
      if (auto it = perf_recipes().find(op); it != perf_recipes().end()) {
        shapes = it->second.shapes;
        attrs = parse_attrs(it->second.attrs);
      }
      const OutputsResult specs = output_specs(op, shapes, default_signature(op, *dtype), attrs);
      if (specs.outputs.size() != 1 || !specs.error.empty()) {
        std::printf("perf: %-14s %-5s %-6s skipped: no default case (%s)\n", op.c_str(), claim.dtype.c_str(),
                    claim.device.c_str(), specs.error.empty() ? "needs an output shape" : specs.error.c_str());
        continue;
      }
      const std::optional<OutputSpec> output = specs.outputs[0];
      struct { const std::optional<OutputSpec>& output; } spec{output};
      const int32_t device = env.device_for(env.plugin_index, claim.device_type);
      dx_op_id_t op_id = 0;
      if (device < 0 || dx_runtime_op_lookup(env.runtime, op.c_str(), &op_id) != DX_OK) continue;
      std::vector<TensorPtr> inputs;
      std::vector<dx_tensor_t*> in_ptrs;
      size_t in_bytes = 0;
      bool ok = true;
      const uint64_t key = splitmix64(0x9e3779b97f4a7c15ull ^ fnv1a64(op + claim.dtype));
      const int inputs_count = op == "dx.fill" ? 0 : rule->inputs;
      for (int i = 0; i < inputs_count && ok; ++i) {
        const Shape& s = shapes[static_cast<size_t>(i)];
        if (is_absent(s)) {  // an absent optional input
          in_ptrs.push_back(nullptr);
          continue;
        }
        dx_tensor_t* t = nullptr;
        ok = dx_tensor_create(env.runtime, device, info(*dtype).packed, s.data(), static_cast<int32_t>(s.size()), &t) ==
             DX_OK;
        if (!ok) break;
        inputs.emplace_back(t);
        in_ptrs.push_back(t);
        const auto bytes = generate(GenRequest{op, *dtype, "real", i, key, numel(s), op == "dx.matmul" ? o.matmul_n : 1});
        ok = dx_tensor_write(t, bytes.data(), bytes.size()) == DX_OK;
        in_bytes += bytes.size();
      }
      dx_tensor_t* out_raw = nullptr;
      const Shape& os = spec.output->shape;
      if (ok)
        ok = dx_tensor_create(env.runtime, device, info(spec.output->dtype).packed, os.empty() ? nullptr : os.data(),
                              static_cast<int32_t>(os.size()), &out_raw) == DX_OK;
      TensorPtr out(out_raw);
      if (!ok) {
        std::printf("perf: %-14s %-5s %-6s skipped: cannot allocate (%s)\n", op.c_str(), claim.dtype.c_str(),
                    claim.device.c_str(), dx_last_error_message());
        continue;
      }
      const size_t out_bytes = static_cast<size_t>(numel(os)) * static_cast<size_t>(byte_size(spec.output->dtype));
      std::unique_ptr<dx_attrs_t, void (*)(dx_attrs_t*)> attrs_handle(make_perf_attrs(attrs), [](dx_attrs_t* a) {
        if (a) dx_attrs_destroy(a);
      });
      dx_invoke_options_t opts{};
      opts.struct_size = DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index);
      opts.flags = DX_INVOKE_FLAG_PLUGIN;
      opts.plugin_index = env.plugin_index;
      dx_status_t status = DX_OK;
      const double seconds = timed_seconds(o.repeats, [&] {
        dx_tensor_t* op_out = out.get();
        const dx_status_t s = dx_invoke_ex(env.runtime, op_id, in_ptrs.empty() ? nullptr : in_ptrs.data(),
                                           static_cast<int32_t>(in_ptrs.size()), &op_out, 1, attrs_handle.get(), &opts);
        if (s != DX_OK) status = s;
      });
      if (status != DX_OK) {
        std::printf("perf: %-14s %-5s %-6s skipped: the kernel returned %s\n", op.c_str(), claim.dtype.c_str(),
                    claim.device.c_str(), dx_status_string(status));
        continue;
      }
      const double gbs = static_cast<double>(in_bytes + out_bytes) / seconds / 1e9;
      char rate[32] = "-", flops_text[32] = "-", ceiling_text[48], ratio[16] = "-";
      std::snprintf(rate, sizeof rate, "%.2f", gbs);
      // Compute-bound ops: GFLOP/s against a BLAS gemm (matmul, linear, conv2d, attention).
      double flops = 0;
      if (op == "dx.matmul") {
        const double m = static_cast<double>(o.matmul_n);
        flops = 2 * m * m * m;
      } else if (op == "dx.linear") {
        flops = 2.0 * static_cast<double>(numel(shapes[0])) * static_cast<double>(shapes[1][0]);
      } else if (op == "dx.conv2d") {
        flops = 2.0 * static_cast<double>(numel(spec.output->shape)) * static_cast<double>(shapes[1][1] * shapes[1][2] * shapes[1][3]);
      } else if (op == "dx.scaled_dot_product_attention") {
        const Shape& q = shapes[0];
        flops = 4.0 * static_cast<double>(numel(q)) * static_cast<double>(shapes[1][shapes[1].size() - 2]);
      }
      if (flops > 0) {
        const double gflops = flops / seconds / 1e9;
        std::snprintf(flops_text, sizeof flops_text, "%.2f", gflops);
        const std::string ck = std::string("gemm ") + (*dtype == DType::F64 ? "f64" : "f32");
        if (!ceilings.count(ck)) ceilings[ck] = gemm_ceiling(*dtype, o.matmul_n, o.repeats);
        const Ceiling c = ceilings[ck];
        if (c.rate > 0) {
          std::snprintf(ceiling_text, sizeof ceiling_text, "%.2f GFLOP/s (%s)", c.rate, c.what.c_str());
          std::snprintf(ratio, sizeof ratio, "%.2f", gflops / c.rate);
        } else {
          std::snprintf(ceiling_text, sizeof ceiling_text, "ceiling n/a");
        }
      } else {
        // Measured once per traffic pattern and size, so every op of that shape shares one yardstick.
        const std::string ck = std::to_string(inputs_count) + " " + std::to_string(in_bytes) + " " + std::to_string(out_bytes);
        if (!ceilings.count(ck)) ceilings[ck] = memory_ceiling(threads, inputs_count, in_bytes, out_bytes, o.repeats);
        const Ceiling c = ceilings[ck];
        std::snprintf(ceiling_text, sizeof ceiling_text, "%.2f GB/s (%s)", c.rate, c.what.c_str());
        if (c.rate > 0) std::snprintf(ratio, sizeof ratio, "%.2f", gbs / c.rate);
      }
      std::printf("perf: %-14s %-5s %-6s %-22s %10.3f %9s %9s  %-22s %6s\n", op.c_str(), claim.dtype.c_str(),
                  claim.device.c_str(), shapes_text(op == "dx.fill" ? std::vector<Shape>{os} : shapes).c_str(),
                  seconds * 1e3, rate, flops_text, ceiling_text, ratio);
      std::fflush(stdout);
    }
  }
  std::printf("perf: GB/s counts the bytes read and written once; the ceiling is the best of %d runs of a\n"
              "perf: STREAM-style loop over the same bytes (or BLAS gemm); ratio = the kernel's rate / the ceiling's\n",
              o.repeats);
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
