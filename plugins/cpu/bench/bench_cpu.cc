// deepx-bench-cpu: the CPU plugin's kernels against ceilings measured in the same run
// (docs/performance-method.md): dx.add f32 against a STREAM-style `omp parallel for simd` add
// of the same byte traffic, dx.sum f32 against a read-only vectorised sum, dx.matmul f32 against
// a direct cblas_sgemm on the same data. Each benchmark
// repeats (default 5 repetitions, randomly interleaved); the summary prints medians, min/max
// and the ratios, plus the machine line.
//
// The plugin is dlopen'ed and driven through the C ABI with the shared test host
// (deepx::testing::TestHost), exactly as the host runtime would call it (cached function
// pointer, no lookup per call).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "deepx/plugin.h"
#include "deepx/testing/test_host.h"

namespace {

// ---- the test host ------------------------------------------------------------------------------

// What the plugin registered, through the shared test host (testing/).
deepx::testing::TestHost g_host;

constexpr DLDataType kF32{kDLFloat, 32, 1};

dx_kernel_fn find(const char* op, std::vector<DLDataType> sig) {
  const deepx::testing::RegisteredKernel* k = g_host.find(op, sig, kDLCPU);
  return k == nullptr ? nullptr : k->desc.forward;
}

bool load_plugin() {
  // Never shut down: the benchmarks use the plugin until the process exits.
  const auto* load = new deepx::testing::PluginLoad(DEEPX_CPU_PLUGIN_PATH, g_host);
  if (!load->ok()) {
    std::fprintf(stderr, "cannot load %s: %s\n", DEEPX_CPU_PLUGIN_PATH, load->error().c_str());
    return false;
  }
  return true;
}

// ---- buffers and calls ---------------------------------------------------------------------------

struct FloatBuffer {
  explicit FloatBuffer(int64_t n)
      : data(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64)))),
        size(n) {
    // Parallel first touch, like the loops that use it.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000) * 0.001f;
  }
  ~FloatBuffer() { std::free(data); }
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  float* data;
  int64_t size;
};

struct TensorArg {
  std::vector<int64_t> shape;
  DLTensor dl{};
  TensorArg(float* data, std::vector<int64_t> s) : shape(std::move(s)) {
    dl.data = data;
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = kF32;
    dl.shape = shape.data();
  }
};

void call_kernel(dx_kernel_fn fn, std::vector<const DLTensor*> in, std::vector<const DLTensor*> out,
                 benchmark::State& state) {
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.inputs = in.data();
  call.outputs = out.data();
  call.num_inputs = static_cast<int32_t>(in.size());
  call.num_outputs = static_cast<int32_t>(out.size());
  call.host = g_host.host();
  for (auto _ : state) {
    dx_error_t* e = fn(&call);
    if (e != nullptr) {
      const std::string message = deepx::testing::TestHost::take(e).message;
      state.SkipWithError(message.c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
}

// ---- benchmarks ----------------------------------------------------------------------------------

/// The ceiling: the plain loop a compiler makes of c = a + b, split like the plugin splits it.
void stream_add(const float* a, const float* b, float* c, int64_t n) {
  if (n >= (int64_t{1} << 16)) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  }
}

void BM_StreamAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  FloatBuffer a(n), b(n), c(n);
  for (auto _ : state) {
    stream_add(a.data, b.data, c.data, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}

void BM_DxAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  FloatBuffer a(n), b(n), c(n);
  TensorArg ta(a.data, {n}), tb(b.data, {n}), tc(c.data, {n});
  call_kernel(find("dx.add", {kF32, kF32, kF32}), {&ta.dl, &tb.dl}, {&tc.dl}, state);
  state.SetBytesProcessed(state.iterations() * n * 12);
}

void BM_Sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  FloatBuffer a(int64_t{n} * n), b(int64_t{n} * n), c(int64_t{n} * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data, n, b.data, n,
                0.0f, c.data, n);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_DxMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  FloatBuffer a(n * n), b(n * n), c(n * n);
  TensorArg ta(a.data, {n, n}), tb(b.data, {n, n}), tc(c.data, {n, n});
  call_kernel(find("dx.matmul", {kF32, kF32, kF32}), {&ta.dl, &tb.dl}, {&tc.dl}, state);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}

/// Ceiling for reductions: a one-pass read with a vectorised f32 sum (no accuracy care).
float stream_sum(const float* a, int64_t n) {
  float s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < n; ++i) s += a[i];
  return s;
}

void BM_StreamSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  FloatBuffer a(n);
  for (auto _ : state) benchmark::DoNotOptimize(stream_sum(a.data, n));
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void BM_DxSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  FloatBuffer a(n), s(1);
  TensorArg ta(a.data, {n}), ts(s.data, {});
  call_kernel(find("dx.sum", {kF32, kF32}), {&ta.dl}, {&ts.dl}, state);
  state.SetBytesProcessed(state.iterations() * n * 4);
}

constexpr int64_t kBig = int64_t{1} << 24;    // 16M f32: 64 MiB per array
constexpr int64_t kSmall = int64_t{1} << 14;  // 16K f32: cache resident, dispatch shows

BENCHMARK(BM_Sgemm)->Arg(512)->Arg(1024)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DxMatmul)->Arg(512)->Arg(1024)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamAdd)->Arg(kBig)->Arg(kSmall)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DxAdd)->Arg(kBig)->Arg(kSmall)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StreamSum)->Arg(kBig)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DxSum)->Arg(kBig)->Repetitions(5)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- summary -------------------------------------------------------------------------------------

/// Console output as usual, plus every repetition's seconds per iteration kept for the ratios.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
      const std::string name = r.run_name.function_name + "/" + r.run_name.args;
      seconds_[name].push_back(r.real_accumulated_time / static_cast<double>(r.iterations));
    }
    ConsoleReporter::ReportRuns(runs);
  }
  struct Stats {
    double median = 0, min = 0, max = 0;
    bool valid = false;
  };
  Stats stats(const std::string& name) const {
    Stats s;
    auto it = seconds_.find(name);
    if (it == seconds_.end() || it->second.empty()) return s;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    if (std::getenv("DEEPX_BENCH_DEBUG")) {
      for (double x : v) std::printf("  %s %g\n", name.c_str(), x);
    }
    s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    s.min = v.front();
    s.max = v.back();
    s.valid = true;
    return s;
  }

 private:
  std::map<std::string, std::vector<double>> seconds_;
};

std::string machine_line() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(cpuinfo, line)) {
    if (model == "unknown CPU" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  std::string features;
  for (const char* f : {"avx2", "fma", "avx512f", "amx_tile"}) {
    if (flags.find(std::string(" ") + f) != std::string::npos) features += std::string(" ") + f;
  }
  const char* bind = std::getenv("OMP_PROC_BIND");
  return model + " |" + features + " | OpenMP threads " + std::to_string(omp_get_max_threads()) +
         ", OpenBLAS threads " + std::to_string(openblas_get_num_threads()) +
         ", OMP_PROC_BIND=" + (bind ? bind : "(unset)");
}

void print_ratio(const RecordingReporter& rep, const char* what, const std::string& candidate,
                 const std::string& ceiling, double work, const char* unit, double target) {
  const auto c = rep.stats(candidate), k = rep.stats(ceiling);
  if (!c.valid || !k.valid) {
    std::printf("%-34s  (missing: run with the default filter)\n", what);
    return;
  }
  const double ratio = k.median / c.median;  // > 1: the candidate is faster than the ceiling
  std::printf("%-34s  ratio %.3f (target >= %.2f)  candidate %.1f %s [%.1f..%.1f]  ceiling %.1f %s [%.1f..%.1f]\n",
              what, ratio, target, work / c.median, unit, work / c.max, work / c.min, work / k.median,
              unit, work / k.max, work / k.min);
}

}  // namespace

int main(int argc, char** argv) {
  if (!load_plugin()) return 1;
  // Interleave the repetitions of candidate and ceiling so slow drift on a shared machine hits
  // both alike (an explicit flag on the command line wins).
  std::vector<char*> args(argv, argv + argc);
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  bool has_interleave = false;
  for (int i = 1; i < argc; ++i) has_interleave |= std::strstr(argv[i], "random_interleaving") != nullptr;
  if (!has_interleave) args.insert(args.begin() + 1, interleave);
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nmachine: %s\n", machine_line().c_str());
  std::printf("medians of the repetitions; [min..max] in brackets; ratio = ceiling time / plugin time\n");
  const double big_bytes = 12.0 * kBig / 1e9, small_bytes = 12.0 * kSmall / 1e9;
  print_ratio(reporter, "dx.add f32 16M vs STREAM add", "BM_DxAdd/" + std::to_string(kBig),
              "BM_StreamAdd/" + std::to_string(kBig), big_bytes, "GB/s", 0.95);
  print_ratio(reporter, "dx.add f32 16K vs add (in cache)", "BM_DxAdd/" + std::to_string(kSmall),
              "BM_StreamAdd/" + std::to_string(kSmall), small_bytes, "GB/s", 0.0);
  print_ratio(reporter, "dx.sum f32 16M vs read-only sum", "BM_DxSum/" + std::to_string(kBig),
              "BM_StreamSum/" + std::to_string(kBig), 4.0 * kBig / 1e9, "GB/s", 0.8);
  for (int n : {512, 1024}) {
    const double gflop = 2.0 * n * n * n / 1e9;
    print_ratio(reporter, ("dx.matmul f32 n=" + std::to_string(n) + " vs cblas_sgemm").c_str(),
                "BM_DxMatmul/" + std::to_string(n), "BM_Sgemm/" + std::to_string(n), gflop,
                "GFLOP/s", 1.0);
  }
  return 0;
}
