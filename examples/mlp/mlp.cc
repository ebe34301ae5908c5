// deepx-example-mlp: a two-layer perceptron's forward pass, run entirely through the host API.
//
//   probs = softmax(relu(x @ W1 + b1) @ W2 + b2)      x[64,128] W1[128,256] W2[256,10]
//
// The same pass runs twice: on the bundled "cpu" plugin (OpenMP + SIMD) and on the "reference"
// plugin (plain f64-accumulating loops), each pinned with DX_INVOKE_FLAG_PLUGIN. The program
// prints the timings, how far apart the two answers are, and the first row's prediction, then
// PASS (exit 0) when they agree within tolerance, FAIL (exit 1) otherwise.
//
// With `--connect ADDRESS` (e.g. unix:/tmp/deepxd.sock) the same pass runs in a deepx daemon:
// dx_runtime_connect() replaces dx_runtime_create() and the plugins are the daemon's (its
// configuration loads them; a client never names a plugin path), found by name. Everything
// else, tensors, dx_invoke_ex and reads, is the same code.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepx/host.h"

namespace deepx::examples {
namespace {

constexpr int64_t kBatch = 64;
constexpr int64_t kInputs = 128;
constexpr int64_t kHidden = 256;
constexpr int64_t kClasses = 10;
// The CPU plugin accumulates in f32, the reference in f64; both round to f32 at the end.
constexpr double kAbsTolerance = 1e-5;
constexpr double kRelTolerance = 1e-3;

// A host call's error (null on success), owned: freed with dx_error_destroy() at scope exit.
struct ErrorDeleter {
  void operator()(dx_error_t* error) const { dx_error_destroy(error); }
};
using Error = std::unique_ptr<dx_error_t, ErrorDeleter>;

// Inside this program errors travel as exceptions; they never cross the C ABI (the host API
// returns error objects), and main() turns them into a message and exit code 1. Check() takes
// the call's error, frees it, and throws its code and message on.
void Check(dx_error_t* result, const char* what) {
  const Error error(result);
  if (error == nullptr) return;
  throw std::runtime_error(std::string(what) + ": " + dx_status_string(dx_error_code(error.get())) +
                           ": " + dx_error_message(error.get(), nullptr));
}

// Destroying a handle can fail only for a handle already destroyed, which these never are:
// the deleters free whatever error comes back.
struct RuntimeDeleter {
  void operator()(dx_runtime_t* runtime) const { dx_error_destroy(dx_runtime_destroy(runtime)); }
};
struct TensorDeleter {
  void operator()(dx_tensor_t* tensor) const { dx_error_destroy(dx_tensor_destroy(tensor)); }
};
struct AttrsDeleter {
  void operator()(dx_attrs_t* attrs) const { dx_error_destroy(dx_attrs_destroy(attrs)); }
};
using Runtime = std::unique_ptr<dx_runtime_t, RuntimeDeleter>;
using Tensor = std::unique_ptr<dx_tensor_t, TensorDeleter>;
using Attrs = std::unique_ptr<dx_attrs_t, AttrsDeleter>;

Tensor MakeTensor(dx_runtime_t* runtime, int32_t device, std::vector<int64_t> shape) {
  dx_tensor_t* tensor = nullptr;
  Check(dx_tensor_create(runtime, device, DX_DTYPE_F32, shape.data(),
                         static_cast<int32_t>(shape.size()), &tensor),
        "dx_tensor_create");
  return Tensor(tensor);
}

void Write(dx_tensor_t* tensor, const std::vector<float>& values) {
  Check(dx_tensor_write(tensor, values.data(), values.size() * sizeof(float)), "dx_tensor_write");
}

std::vector<float> Read(const dx_tensor_t* tensor) {
  int64_t numel = 0;
  Check(dx_tensor_numel(tensor, &numel), "dx_tensor_numel");
  std::vector<float> values(static_cast<size_t>(numel));
  Check(dx_tensor_read(tensor, values.data(), values.size() * sizeof(float)), "dx_tensor_read");
  return values;
}

// Deterministic weights: SplitMix64, mapped to uniform floats in [-scale, scale).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  float Uniform(float scale) {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double unit = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
    return static_cast<float>((2.0 * unit - 1.0) * scale);
  }
  std::vector<float> Fill(int64_t count, float scale) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = Uniform(scale);
    return values;
  }

 private:
  uint64_t state_;
};

struct Ops {
  dx_op_id_t matmul, add, relu, softmax;
};

Ops LookupOps(dx_runtime_t* runtime) {
  Ops ops{};
  Check(dx_runtime_op_lookup(runtime, "dx.matmul", &ops.matmul), "lookup dx.matmul");
  Check(dx_runtime_op_lookup(runtime, "dx.add", &ops.add), "lookup dx.add");
  Check(dx_runtime_op_lookup(runtime, "dx.relu", &ops.relu), "lookup dx.relu");
  Check(dx_runtime_op_lookup(runtime, "dx.softmax", &ops.softmax), "lookup dx.softmax");
  return ops;
}

// The model's parameters and input, shared by both passes.
struct Model {
  Tensor x, w1, b1, w2, b2;
};

// One executor's forward pass: its activations, allocated once and reused by every run.
class ForwardPass {
 public:
  ForwardPass(dx_runtime_t* runtime, int32_t device, int32_t plugin_index, const Ops& ops,
              const dx_attrs_t* softmax_attrs)
      : runtime_(runtime),
        ops_(ops),
        softmax_attrs_(softmax_attrs),
        hidden_(MakeTensor(runtime, device, {kBatch, kHidden})),
        hidden_biased_(MakeTensor(runtime, device, {kBatch, kHidden})),
        hidden_relu_(MakeTensor(runtime, device, {kBatch, kHidden})),
        logits_(MakeTensor(runtime, device, {kBatch, kClasses})),
        logits_biased_(MakeTensor(runtime, device, {kBatch, kClasses})),
        probs_(MakeTensor(runtime, device, {kBatch, kClasses})) {
    options_.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    options_.flags = DX_INVOKE_FLAG_PLUGIN;
    options_.plugin_index = plugin_index;
  }

  void Run(const Model& m) {
    Invoke(ops_.matmul, {m.x.get(), m.w1.get()}, hidden_.get(), nullptr, "dx.matmul (layer 1)");
    // b1 has shape [256]: broadcast over the batch, as NumPy would.
    Invoke(ops_.add, {hidden_.get(), m.b1.get()}, hidden_biased_.get(), nullptr, "dx.add (b1)");
    Invoke(ops_.relu, {hidden_biased_.get()}, hidden_relu_.get(), nullptr, "dx.relu");
    Invoke(ops_.matmul, {hidden_relu_.get(), m.w2.get()}, logits_.get(), nullptr,
           "dx.matmul (layer 2)");
    Invoke(ops_.add, {logits_.get(), m.b2.get()}, logits_biased_.get(), nullptr, "dx.add (b2)");
    Invoke(ops_.softmax, {logits_biased_.get()}, probs_.get(), softmax_attrs_, "dx.softmax");
  }

  // Mean wall time of one forward pass over `runs` runs, after one warm-up run.
  double MillisecondsPerForward(const Model& m, int runs) {
    Run(m);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) Run(m);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    return elapsed.count() / runs;
  }

  const dx_tensor_t* probs() const { return probs_.get(); }

 private:
  void Invoke(dx_op_id_t op, std::initializer_list<dx_tensor_t*> inputs, dx_tensor_t* output,
              const dx_attrs_t* attrs, const char* what) {
    Check(dx_invoke_ex(runtime_, op, inputs.begin(), static_cast<int32_t>(inputs.size()),
                       &output, 1, attrs, &options_),
          what);
  }

  dx_runtime_t* runtime_;
  Ops ops_;
  const dx_attrs_t* softmax_attrs_;
  dx_invoke_options_t options_{};
  Tensor hidden_, hidden_biased_, hidden_relu_, logits_, logits_biased_, probs_;
};

int32_t LoadPlugin(dx_runtime_t* runtime, const char* name) {
  int32_t index = -1;
  Check(dx_runtime_load_plugin(runtime, name, &index),
        (std::string("loading the '") + name + "' plugin").c_str());
  return index;
}

// A plugin the runtime already has (a daemon's), by name.
int32_t FindPlugin(dx_runtime_t* runtime, const char* name) {
  int32_t count = 0;
  Check(dx_runtime_plugin_count(runtime, &count), "dx_runtime_plugin_count");
  for (int32_t i = 0; i < count; ++i) {
    dx_plugin_info_t info{};
    info.struct_size = sizeof info;
    Check(dx_runtime_plugin_info(runtime, i, &info), "dx_runtime_plugin_info");
    if (info.name != nullptr && std::strcmp(info.name, name) == 0) return i;
  }
  throw std::runtime_error(std::string("the daemon has no '") + name +
                           "' plugin (its configuration lists the plugins it loads)");
}

// The device the tensors live in: the "cpu" memory space when there is one, else the first.
int32_t HostDevice(dx_runtime_t* runtime, std::string* out_name) {
  int32_t index = -1;
  const Error no_cpu(dx_runtime_find_device(runtime, "cpu", &index));
  if (no_cpu != nullptr) {
    int32_t count = 0;
    Check(dx_runtime_device_count(runtime, &count), "dx_runtime_device_count");
    if (count == 0) throw std::runtime_error("no loaded plugin serves any memory space");
    index = 0;
  }
  dx_device_info_t info{};
  info.struct_size = DX_DEVICE_INFO_SIZE_1_0;
  Check(dx_runtime_device_info(runtime, index, &info), "dx_runtime_device_info");
  *out_name = info.name;
  return index;
}

int Main(const char* address) {
  dx_runtime_t* raw_runtime = nullptr;
  if (address != nullptr) {
    Check(dx_runtime_connect(address, nullptr, &raw_runtime), "dx_runtime_connect");
  } else {
    Check(dx_runtime_create(nullptr, &raw_runtime), "dx_runtime_create");
  }
  Runtime runtime(raw_runtime);
  const int32_t cpu_plugin =
      address != nullptr ? FindPlugin(runtime.get(), "cpu") : LoadPlugin(runtime.get(), "cpu");
  const int32_t reference_plugin = address != nullptr ? FindPlugin(runtime.get(), "reference")
                                                      : LoadPlugin(runtime.get(), "reference");
  std::string device_name;
  const int32_t device = HostDevice(runtime.get(), &device_name);
  const Ops ops = LookupOps(runtime.get());

  dx_attrs_t* raw_attrs = nullptr;
  Check(dx_attrs_create(&raw_attrs), "dx_attrs_create");
  Attrs softmax_attrs(raw_attrs);
  Check(dx_attrs_set_i64(softmax_attrs.get(), "axis", -1), "dx_attrs_set_i64(axis)");

  Random random(20240601);
  Model model{MakeTensor(runtime.get(), device, {kBatch, kInputs}),
              MakeTensor(runtime.get(), device, {kInputs, kHidden}),
              MakeTensor(runtime.get(), device, {kHidden}),
              MakeTensor(runtime.get(), device, {kHidden, kClasses}),
              MakeTensor(runtime.get(), device, {kClasses})};
  // He-uniform weights (variance 2 / fan_in) keep the activations O(1) through the relu; the
  // output layer is scaled up so the softmax makes a visible choice.
  Write(model.x.get(), random.Fill(kBatch * kInputs, 1.0f));
  Write(model.w1.get(), random.Fill(kInputs * kHidden, std::sqrt(6.0f / float(kInputs))));
  Write(model.b1.get(), random.Fill(kHidden, 0.1f));
  Write(model.w2.get(), random.Fill(kHidden * kClasses, 2.0f * std::sqrt(6.0f / float(kHidden))));
  Write(model.b2.get(), random.Fill(kClasses, 0.1f));

  ForwardPass on_cpu(runtime.get(), device, cpu_plugin, ops, softmax_attrs.get());
  ForwardPass on_reference(runtime.get(), device, reference_plugin, ops, softmax_attrs.get());
  constexpr int kCpuRuns = 50;
  constexpr int kReferenceRuns = 5;
  const double cpu_ms = on_cpu.MillisecondsPerForward(model, kCpuRuns);
  const double reference_ms = on_reference.MillisecondsPerForward(model, kReferenceRuns);
  const std::vector<float> cpu = Read(on_cpu.probs());
  const std::vector<float> reference = Read(on_reference.probs());

  double max_abs = 0.0, max_rel = 0.0;
  bool within = true;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double got = cpu[i], want = reference[i];
    const double diff = std::fabs(got - want);
    if (!std::isfinite(got) || !(diff <= kAbsTolerance + kRelTolerance * std::fabs(want))) {
      within = false;
    }
    max_abs = std::max(max_abs, diff);
    if (want != 0.0) max_rel = std::max(max_rel, diff / std::fabs(want));
  }
  double row_sum_error = 0.0;
  for (int64_t r = 0; r < kBatch; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < kClasses; ++c) sum += cpu[static_cast<size_t>(r * kClasses + c)];
    row_sum_error = std::max(row_sum_error, std::fabs(sum - 1.0));
  }
  if (row_sum_error > 1e-5) within = false;

  std::printf("deepx MLP example: softmax(relu(x @ W1 + b1) @ W2 + b2)\n");
  std::printf("  runtime: %s%s\n", address != nullptr ? "deepxd at " : "in-process",
              address != nullptr ? address : "");
  std::printf("  x [%lld, %lld]  W1 [%lld, %lld]  b1 [%lld]  W2 [%lld, %lld]  b2 [%lld]"
              "  ->  probs [%lld, %lld]\n",
              (long long)kBatch, (long long)kInputs, (long long)kInputs, (long long)kHidden,
              (long long)kHidden, (long long)kHidden, (long long)kClasses, (long long)kClasses,
              (long long)kBatch, (long long)kClasses);
  std::printf("  tensors in memory space '%s'; ops: dx.matmul, dx.add (broadcast bias), "
              "dx.relu, dx.softmax\n\n",
              device_name.c_str());
  std::printf("  %-10s %12s\n", "executor", "per forward");
  std::printf("  %-10s %9.3f ms   (mean of %d runs)\n", "cpu", cpu_ms, kCpuRuns);
  std::printf("  %-10s %9.3f ms   (mean of %d runs)\n", "reference", reference_ms,
              kReferenceRuns);
  std::printf("  speed-up of cpu over reference: %.1fx\n\n", reference_ms / cpu_ms);
  std::printf("  max |cpu - reference|              = %.3e\n", max_abs);
  std::printf("  max |cpu - reference| / |reference| = %.3e\n", max_rel);
  std::printf("  max |row sum - 1| (cpu)            = %.3e\n\n", row_sum_error);

  const auto first_row = cpu.begin();
  const auto top = std::max_element(first_row, first_row + kClasses);
  std::printf("  row 0: top class %lld (p = %.4f)\n  probabilities:",
              (long long)(top - first_row), *top);
  for (int64_t c = 0; c < kClasses; ++c) std::printf(" %.4f", cpu[static_cast<size_t>(c)]);
  std::printf("\n\n");

  if (!within) {
    std::printf("FAIL: cpu and reference differ beyond atol %.0e + rtol %.0e (or rows do not "
                "sum to 1)\n",
                kAbsTolerance, kRelTolerance);
    return 1;
  }
  std::printf("PASS: cpu matches the reference within atol %.0e + rtol %.0e\n", kAbsTolerance,
              kRelTolerance);
  return 0;
}

}  // namespace
}  // namespace deepx::examples

int main(int argc, char** argv) {
  const char* address = nullptr;
  if (argc == 3 && std::strcmp(argv[1], "--connect") == 0) {
    address = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--connect ADDRESS]\n", argv[0]);
    return 2;
  }
  try {
    return deepx::examples::Main(address);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepx-example-mlp: %s\n", e.what());
    return 1;
  }
}
