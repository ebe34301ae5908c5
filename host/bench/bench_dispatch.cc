// Dispatch overhead: host dx_invoke of a 1-element f32 dx.add against calling the same kernel
// directly through its function pointer, in one run (target in docs/performance-method.md:
// <= 50 ns above direct).
//
// The direct path dlopens the same plugin file, calls its entry and init with the shared test
// host (deepx::testing::TestHost), and calls its dx.add f32 kernel with a prebuilt
// dx_kernel_call_t.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "deepx/host.h"
#include "deepx/plugin.h"
#include "deepx/testing/test_host.h"

namespace {

std::string g_plugin = "cpu";

struct DirectKernel {
  dx_kernel_fn forward = nullptr;
  void* data = nullptr;
};
DirectKernel g_direct;

// The direct path's host: the shared test host (testing/), which records what the plugin
// registers.
deepx::testing::TestHost g_bench_host;
constexpr DLDataType kF32{kDLFloat, 32, 1};

// True when a host call succeeded; otherwise prints what failed with the error's code and
// message, and frees the error.
bool Ok(dx_error_t* error, const std::string& what) {
  if (error == nullptr) return true;
  std::fprintf(stderr, "%s: %s: %s\n", what.c_str(), dx_status_string(dx_error_code(error)),
               dx_error_message(error, nullptr));
  dx_error_destroy(error);
  return false;
}

struct Fixture {
  dx_runtime_t* rt = nullptr;
  dx_tensor_t* a = nullptr;
  dx_tensor_t* b = nullptr;
  dx_tensor_t* y = nullptr;
  dx_op_id_t add = 0;
  std::string path;
  bool ok = false;

  Fixture() {
    if (!Ok(dx_runtime_create(nullptr, &rt), "dx_runtime_create")) return;
    int32_t index = -1;
    if (!Ok(dx_runtime_load_plugin(rt, g_plugin.c_str(), &index),
            "cannot load plugin '" + g_plugin + "'")) {
      return;
    }
    dx_plugin_info_t info{};
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    if (!Ok(dx_runtime_plugin_info(rt, index, &info), "dx_runtime_plugin_info")) return;
    path = info.path;
    int32_t devices = 0, device = -1;
    if (!Ok(dx_runtime_device_count(rt, &devices), "dx_runtime_device_count")) return;
    for (int32_t i = 0; i < devices && device < 0; ++i) {
      dx_device_info_t d{};
      d.struct_size = DX_DEVICE_INFO_SIZE_1_0;
      if (Ok(dx_runtime_device_info(rt, i, &d), "dx_runtime_device_info") &&
          d.device_type == kDLCPU) {
        device = i;
      }
    }
    if (device < 0) {
      std::fprintf(stderr, "setup failed: no CPU memory space\n");
      return;
    }
    int64_t shape[1] = {1};
    float one = 1.0f;
    if (!Ok(dx_tensor_create(rt, device, DX_DTYPE_F32, shape, 1, &a), "setup: dx_tensor_create") ||
        !Ok(dx_tensor_create(rt, device, DX_DTYPE_F32, shape, 1, &b), "setup: dx_tensor_create") ||
        !Ok(dx_tensor_create(rt, device, DX_DTYPE_F32, shape, 1, &y), "setup: dx_tensor_create") ||
        !Ok(dx_tensor_write(a, &one, 4), "setup: dx_tensor_write") ||
        !Ok(dx_tensor_write(b, &one, 4), "setup: dx_tensor_write") ||
        !Ok(dx_runtime_op_lookup(rt, "dx.add", &add), "setup: dx_runtime_op_lookup")) {
      return;
    }
    // The direct path: same file, its own init with the bench host.
    // Never shut down: the benchmarks call its kernel until the process exits.
    const auto* load = new deepx::testing::PluginLoad(path.c_str(), g_bench_host);
    const deepx::testing::RegisteredKernel* k =
        load->ok() ? g_bench_host.find("dx.add", {kF32, kF32}, {kF32}, kDLCPU) : nullptr;
    if (k == nullptr) {
      std::fprintf(stderr, "cannot find the dx.add f32 kernel of %s directly%s%s\n", path.c_str(),
                   load->ok() ? "" : ": ", load->error().c_str());
      return;
    }
    g_direct.forward = k->desc.forward;
    g_direct.data = k->desc.kernel_data;
    ok = true;
  }
  ~Fixture() {
    dx_error_destroy(dx_tensor_destroy(a));
    dx_error_destroy(dx_tensor_destroy(b));
    dx_error_destroy(dx_tensor_destroy(y));
    dx_error_destroy(dx_runtime_destroy(rt));
  }
};

Fixture& F() {
  static Fixture f;
  return f;
}

// The kernel call the host would build for dx.add(a, b) -> y, made once, outside the loop.
struct DirectCall {
  const DLTensor* in[2];
  const DLTensor* out[1];
  dx_kernel_call_t call;
  explicit DirectCall(const Fixture& f) {
    // The fixture is set up (f.ok): these cannot fail.
    dx_error_destroy(dx_tensor_dltensor(f.a, &in[0]));
    dx_error_destroy(dx_tensor_dltensor(f.b, &in[1]));
    dx_error_destroy(dx_tensor_dltensor(f.y, &out[0]));
    std::memset(&call, 0, sizeof call);
    call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
    call.kernel_data = g_direct.data;
    call.inputs = in;
    call.outputs = out;
    call.num_inputs = 2;
    call.num_outputs = 1;
    call.host = g_bench_host.host();
  }
};

void BM_DirectKernel(benchmark::State& state) {
  Fixture& f = F();
  if (!f.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  DirectCall direct(f);
  const dx_kernel_call_t& call = direct.call;
  dx_kernel_fn fn = g_direct.forward;
  benchmark::DoNotOptimize(fn);
  for (auto _ : state) {
    dx_error_t* e = fn(&call);
    benchmark::DoNotOptimize(e);
  }
}

void BM_HostInvoke(benchmark::State& state) {
  Fixture& f = F();
  if (!f.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  dx_tensor_t* in[2] = {f.a, f.b};
  for (auto _ : state) {
    // What a client does per call: check the result, free an error (null on success).
    dx_error_t* e = dx_invoke(f.rt, f.add, in, 2, &f.y, 1, nullptr);
    benchmark::DoNotOptimize(e);
    if (e != nullptr) dx_error_destroy(e);
  }
}

void BM_HostInvokeByName(benchmark::State& state) {
  Fixture& f = F();
  if (!f.ok) {
    state.SkipWithError("setup failed");
    return;
  }
  dx_tensor_t* in[2] = {f.a, f.b};
  for (auto _ : state) {
    dx_error_t* e = dx_invoke_by_name(f.rt, "dx.add", in, 2, &f.y, 1, nullptr);
    benchmark::DoNotOptimize(e);
    if (e != nullptr) dx_error_destroy(e);
  }
}

BENCHMARK(BM_DirectKernel)->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_HostInvoke)->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_HostInvokeByName)->Repetitions(7)->ReportAggregatesOnly(true);

// Collects the medians so the program can print the overhead and ratio at the end.
class Collector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> medians;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.aggregate_name == "median") medians[r.run_name.function_name] = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Interleaved rounds: direct and invoke timed back to back in each round, so drifting load on a
// shared machine hits both alike; the headline is the median over rounds of (invoke - direct).
struct Interleaved {
  double direct_ns, invoke_ns, overhead_ns;
};

Interleaved RunInterleaved(int rounds, int calls) {
  Fixture& f = F();
  DirectCall direct(f);
  const dx_kernel_call_t& call = direct.call;
  dx_kernel_fn fn = g_direct.forward;
  dx_tensor_t* tin[2] = {f.a, f.b};
  std::vector<double> direct_ns, invoke_ns, diff;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 is a warm-up
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      dx_error_t* e = fn(&call);
      benchmark::DoNotOptimize(e);
    }
    auto t1 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      dx_error_t* e = dx_invoke(f.rt, f.add, tin, 2, &f.y, 1, nullptr);
      benchmark::DoNotOptimize(e);
      if (e != nullptr) dx_error_destroy(e);
    }
    auto t2 = Clock::now();
    if (r == 0) continue;
    double d = std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
    double v = std::chrono::duration<double, std::nano>(t2 - t1).count() / calls;
    direct_ns.push_back(d);
    invoke_ns.push_back(v);
    diff.push_back(v - d);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(direct_ns), median(invoke_ns), median(diff)};
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--plugin=", 9) == 0) g_plugin = argv[i] + 9;
  }
  benchmark::Initialize(&argc, argv);
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  double direct = collector.medians["BM_DirectKernel"];
  double invoke = collector.medians["BM_HostInvoke"];
  double by_name = collector.medians["BM_HostInvokeByName"];
  if (direct <= 0 || invoke <= 0) {
    std::fprintf(stderr, "dispatch benchmark: missing results\n");
    return 1;
  }
  Interleaved il = RunInterleaved(21, 200000);
  std::printf("\nmachine: %u hardware threads; plugin '%s'; 1-element f32 dx.add\n",
              std::thread::hardware_concurrency(), g_plugin.c_str());
  std::printf("Google Benchmark medians of 7:\n");
  std::printf("  direct kernel call      %8.1f ns\n", direct);
  std::printf("  dx_invoke (interned id) %8.1f ns   overhead %6.1f ns   ratio %.2fx\n", invoke,
              invoke - direct, invoke / direct);
  std::printf("  dx_invoke_by_name       %8.1f ns   overhead %6.1f ns   ratio %.2fx\n", by_name,
              by_name - direct, by_name / direct);
  std::printf("interleaved, 21 rounds x 200000 calls, medians:\n");
  std::printf("  direct %.1f ns, dx_invoke %.1f ns, ratio %.2fx, overhead %.1f ns (target <= 50 ns: %s)\n",
              il.direct_ns, il.invoke_ns, il.invoke_ns / il.direct_ns, il.overhead_ns,
              il.overhead_ns <= 50.0 ? "MET" : "MISSED");
  return 0;
}
