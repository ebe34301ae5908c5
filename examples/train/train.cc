// deepx-example-train: trains a small MLP classifier entirely through the host API.
//
//   logits = W3 relu(W2 relu(W1 x + b1) + b2) + b3        16 -> 32 -> 32 -> 4
//   loss   = cross_entropy(logits, labels)                 (mean over the batch)
//
// Data: 512 points in 16 dimensions, drawn around 4 well-separated class centres (fixed seed).
// Every step runs the forward pass with dx.linear / dx.relu / dx.cross_entropy, the backward
// pass with the registered backward kernels (dx_invoke_ex + DX_INVOKE_FLAG_BACKWARD), and the
// optimizer update as ops too (dx.mul, dx.add, dx.sub, dx.div, dx.sqrt, dx.fill): no tensor is
// read back into a C++ loop to train. Two optimizers, SGD with momentum and Adam, each trained
// on the "cpu" plugin and on the "reference" plugin (pinned with DX_INVOKE_FLAG_PLUGIN) from the
// same initial weights. The program prints the loss curves side by side, checks that the loss
// fell by a clear factor and that the two plugins agree, saves the trained weights with
// dx_safetensors_save(), loads them back with dx_safetensors_load() and checks the reloaded
// model gives the same loss. PASS (exit 0) or FAIL with the reason (exit 1).
//
// Usage: deepx-example-train [--plugins cpu,reference] [--steps N] [--keep FILE]
//   --plugins  which plugins to train on (default both; the first is compared with the second)
//   --steps    training steps per run (default 300)
//   --keep     also leave the saved weights at FILE (default: a temporary file, removed)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "deepx/safetensors.h"  // includes deepx/host.h

namespace deepx::examples {
namespace {

constexpr int64_t kSamples = 512;
constexpr int64_t kBatch = 64;
constexpr int64_t kFeatures = 16;
constexpr int64_t kHidden = 32;
constexpr int64_t kClasses = 4;
constexpr int kLayers = 3;
constexpr int64_t kWidths[kLayers + 1] = {kFeatures, kHidden, kHidden, kClasses};
constexpr int kReportEvery = 25;

// The loss must fall at least this much, and the model must classify the training set.
constexpr double kRequiredLossDrop = 10.0;
constexpr double kRequiredAccuracy = 0.95;
// cpu (f32 accumulation, fused kernels) and reference (f64 accumulation) round differently at
// every step; training is stable, so the curves stay close. Compared at every reported step.
constexpr double kAbsTolerance = 1e-5;
constexpr double kRelTolerance = 1e-4;

// A host call's error (null on success), owned: freed with dx_error_destroy() at scope exit.
struct ErrorDeleter {
  void operator()(dx_error_t* e) const { dx_error_destroy(e); }
};
using Error = std::unique_ptr<dx_error_t, ErrorDeleter>;

// Inside this program errors travel as exceptions; they never cross the C ABI (the host API
// returns error objects), and main() turns them into a FAIL line and exit code 1.
struct DeepxError : std::runtime_error {
  DeepxError(dx_status_t s, const std::string& what) : std::runtime_error(what), status(s) {}
  dx_status_t status;
};

// Takes the call's error, frees it, and throws its code and message on.
void Check(dx_error_t* result, const std::string& what) {
  const Error error(result);
  if (error == nullptr) return;
  const dx_status_t status = dx_error_code(error.get());
  throw DeepxError(status, what + ": " + dx_status_string(status) + ": " +
                               dx_error_message(error.get(), nullptr));
}

// Destroying a handle fails only for one already destroyed, which these never are: the
// deleters free whatever error comes back.
struct RuntimeDeleter {
  void operator()(dx_runtime_t* r) const { dx_error_destroy(dx_runtime_destroy(r)); }
};
struct TensorDeleter {
  void operator()(dx_tensor_t* t) const { dx_error_destroy(dx_tensor_destroy(t)); }
};
struct AttrsDeleter {
  void operator()(dx_attrs_t* a) const { dx_error_destroy(dx_attrs_destroy(a)); }
};
struct FileDeleter {
  void operator()(dx_safetensors_t* f) const { dx_error_destroy(dx_safetensors_destroy(f)); }
};
using Runtime = std::unique_ptr<dx_runtime_t, RuntimeDeleter>;
using Tensor = std::unique_ptr<dx_tensor_t, TensorDeleter>;
using Attrs = std::unique_ptr<dx_attrs_t, AttrsDeleter>;
using SafetensorsFile = std::unique_ptr<dx_safetensors_t, FileDeleter>;

Tensor MakeTensor(dx_runtime_t* rt, int32_t device, dx_dtype_t dtype, std::vector<int64_t> shape) {
  dx_tensor_t* t = nullptr;
  Check(dx_tensor_create(rt, device, dtype, shape.data(), static_cast<int32_t>(shape.size()), &t),
        "dx_tensor_create");
  return Tensor(t);
}

Tensor MakeView(const dx_tensor_t* base, std::vector<int64_t> shape, int64_t elem_offset) {
  dx_tensor_t* t = nullptr;
  Check(dx_tensor_view(base, shape.data(), nullptr, static_cast<int32_t>(shape.size()),
                       elem_offset, &t),
        "dx_tensor_view");
  return Tensor(t);
}

Attrs MakeAttrs() {
  dx_attrs_t* a = nullptr;
  Check(dx_attrs_create(&a), "dx_attrs_create");
  return Attrs(a);
}

template <class T>
std::vector<T> Read(const dx_tensor_t* t) {
  int64_t numel = 0;
  Check(dx_tensor_numel(t, &numel), "dx_tensor_numel");
  std::vector<T> values(static_cast<size_t>(numel));
  Check(dx_tensor_read(t, values.data(), values.size() * sizeof(T)), "dx_tensor_read");
  return values;
}

// SplitMix64: deterministic uniforms, and normals by Box-Muller.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  double Unit() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  }
  double Normal() {
    const double u1 = 1.0 - Unit(), u2 = Unit();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// The data set and the initial weights: host vectors, shared by every run.
struct Problem {
  std::vector<float> x;        // [kSamples, kFeatures]
  std::vector<int64_t> labels;  // [kSamples]
  std::vector<std::vector<float>> weights, biases;  // W_l [out, in], b_l [out]
};

Problem MakeProblem() {
  Random random(20261121);
  Problem p;
  std::vector<std::vector<double>> centres(kClasses, std::vector<double>(kFeatures));
  for (auto& c : centres) {
    for (double& v : c) v = random.Normal();
  }
  for (int64_t i = 0; i < kSamples; ++i) {
    const int64_t label = i % kClasses;  // batches of 64 are balanced
    p.labels.push_back(label);
    for (int64_t f = 0; f < kFeatures; ++f) {
      p.x.push_back(static_cast<float>(centres[label][f] + random.Normal()));
    }
  }
  for (int l = 0; l < kLayers; ++l) {
    const int64_t in = kWidths[l], out = kWidths[l + 1];
    // He-uniform for the relu layers; the output layer starts 10x smaller, so the first
    // predictions are near uniform (loss near ln 4) and the curve shows the learning.
    const double bound = std::sqrt(6.0 / static_cast<double>(in)) * (l == kLayers - 1 ? 0.1 : 1.0);
    std::vector<float> w(static_cast<size_t>(out * in));
    for (float& v : w) v = static_cast<float>((2.0 * random.Unit() - 1.0) * bound);
    p.weights.push_back(std::move(w));
    p.biases.emplace_back(static_cast<size_t>(out), 0.0f);
  }
  return p;
}

struct Ops {
  dx_op_id_t linear, relu, cross_entropy, mul, add, sub, div, sqrt, fill;
};

Ops LookupOps(dx_runtime_t* rt) {
  auto lookup = [&](const char* name) {
    dx_op_id_t id = 0;
    Check(dx_runtime_op_lookup(rt, name, &id), std::string("lookup ") + name);
    return id;
  };
  return Ops{lookup("dx.linear"), lookup("dx.relu"), lookup("dx.cross_entropy"),
             lookup("dx.mul"),    lookup("dx.add"),  lookup("dx.sub"),
             lookup("dx.div"),    lookup("dx.sqrt"), lookup("dx.fill")};
}

enum class Optimizer { kSgdMomentum, kAdam };
const char* OptimizerName(Optimizer o) { return o == Optimizer::kSgdMomentum ? "sgd" : "adam"; }

// Runs ops on one plugin: every call pinned with DX_INVOKE_FLAG_PLUGIN.
class Executor {
 public:
  Executor(dx_runtime_t* rt, int32_t device, int32_t plugin, const Ops& ops)
      : rt_(rt), device_(device), ops_(ops), fill_attrs_(MakeAttrs()) {
    forward_.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    forward_.flags = DX_INVOKE_FLAG_PLUGIN;
    forward_.plugin_index = plugin;
    backward_ = forward_;
    backward_.flags |= DX_INVOKE_FLAG_BACKWARD;
  }

  void Forward(dx_op_id_t op, std::initializer_list<dx_tensor_t*> in,
               std::initializer_list<dx_tensor_t*> out, const dx_attrs_t* attrs, const char* what) {
    Check(dx_invoke_ex(rt_, op, in.begin(), static_cast<int32_t>(in.size()), out.begin(),
                       static_cast<int32_t>(out.size()), attrs, &forward_),
          what);
  }
  // inputs: output gradients, forward inputs, forward outputs; outputs: input gradients
  // (null = not wanted).
  void Backward(dx_op_id_t op, std::initializer_list<dx_tensor_t*> in,
                std::initializer_list<dx_tensor_t*> out, const dx_attrs_t* attrs,
                const char* what) {
    Check(dx_invoke_ex(rt_, op, in.begin(), static_cast<int32_t>(in.size()), out.begin(),
                       static_cast<int32_t>(out.size()), attrs, &backward_),
          what);
  }
  // out[...] = value, by dx.fill.
  void Fill(dx_tensor_t* out, double value) {
    Check(dx_attrs_set_f64(fill_attrs_.get(), "value", value), "dx_attrs_set_f64(value)");
    Forward(ops_.fill, {}, {out}, fill_attrs_.get(), "dx.fill");
  }
  Tensor Scalar(double value) {
    Tensor t = MakeTensor(rt_, device_, DX_DTYPE_F32, {});
    Fill(t.get(), value);
    return t;
  }
  Tensor New(std::vector<int64_t> shape, dx_dtype_t dtype = DX_DTYPE_F32) {
    return MakeTensor(rt_, device_, dtype, std::move(shape));
  }
  const Ops& ops() const { return ops_; }

 private:
  dx_runtime_t* rt_;
  int32_t device_;
  Ops ops_;
  Attrs fill_attrs_;
  dx_invoke_options_t forward_{}, backward_{};
};

// One trainable tensor with its gradient, optimizer state and scratch space. Updates are
// written into the `next_*` twin and swapped in, so no op ever writes a tensor it reads.
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  Tensor value, next_value, grad, state1, next_state1, state2, next_state2, tmp1, tmp2;
};

// Activations and gradients of the MLP for one batch size.
struct Pass {
  Tensor pre[kLayers];       // linear outputs; pre[kLayers - 1] are the logits
  Tensor post[kLayers - 1];  // relu outputs
  Tensor loss;               // rank 0
  Tensor dloss, dpre[kLayers], dpost[kLayers - 1];
};

class Model {
 public:
  Model(Executor& ex, const Problem& p, const dx_attrs_t* ce_attrs) : ex_(ex), ce_attrs_(ce_attrs) {
    for (int l = 0; l < kLayers; ++l) {
      const int64_t in = kWidths[l], out = kWidths[l + 1];
      AddParameter("layers." + std::to_string(l) + ".weight", {out, in}, p.weights[l]);
      AddParameter("layers." + std::to_string(l) + ".bias", {out}, p.biases[l]);
    }
  }

  Pass MakePass(int64_t batch, bool with_gradients) {
    Pass s;
    for (int l = 0; l < kLayers; ++l) {
      s.pre[l] = ex_.New({batch, kWidths[l + 1]});
      if (l < kLayers - 1) s.post[l] = ex_.New({batch, kWidths[l + 1]});
      if (with_gradients) {
        s.dpre[l] = ex_.New({batch, kWidths[l + 1]});
        if (l < kLayers - 1) s.dpost[l] = ex_.New({batch, kWidths[l + 1]});
      }
    }
    s.loss = ex_.New({});
    if (with_gradients) s.dloss = ex_.Scalar(1.0);  // d loss / d loss
    return s;
  }

  dx_tensor_t* W(int l) { return params_[2 * l].value.get(); }
  dx_tensor_t* B(int l) { return params_[2 * l + 1].value.get(); }

  void Forward(dx_tensor_t* x, dx_tensor_t* labels, Pass& s) {
    const Ops& o = ex_.ops();
    dx_tensor_t* in = x;
    for (int l = 0; l < kLayers; ++l) {
      ex_.Forward(o.linear, {in, W(l), B(l)}, {s.pre[l].get()}, nullptr, "dx.linear");
      if (l < kLayers - 1) {
        ex_.Forward(o.relu, {s.pre[l].get()}, {s.post[l].get()}, nullptr, "dx.relu");
        in = s.post[l].get();
      }
    }
    ex_.Forward(o.cross_entropy, {s.pre[kLayers - 1].get(), labels}, {s.loss.get()}, ce_attrs_,
                "dx.cross_entropy");
  }

  // Gradients of the mean loss into every parameter's `grad`.
  void Backward(dx_tensor_t* x, dx_tensor_t* labels, Pass& s) {
    const Ops& o = ex_.ops();
    ex_.Backward(o.cross_entropy, {s.dloss.get(), s.pre[kLayers - 1].get(), labels, s.loss.get()},
                 {s.dpre[kLayers - 1].get(), nullptr}, ce_attrs_, "dx.cross_entropy backward");
    for (int l = kLayers - 1; l >= 0; --l) {
      dx_tensor_t* in = l == 0 ? x : s.post[l - 1].get();
      dx_tensor_t* din = l == 0 ? nullptr : s.dpost[l - 1].get();  // no gradient for the data
      ex_.Backward(o.linear, {s.dpre[l].get(), in, W(l), B(l), s.pre[l].get()},
                   {din, params_[2 * l].grad.get(), params_[2 * l + 1].grad.get()}, nullptr,
                   "dx.linear backward");
      if (l > 0) {
        ex_.Backward(o.relu, {s.dpost[l - 1].get(), s.pre[l - 1].get(), s.post[l - 1].get()},
                     {s.dpre[l - 1].get()}, nullptr, "dx.relu backward");
      }
    }
  }

  std::vector<Parameter>& params() { return params_; }

 private:
  void AddParameter(std::string name, std::vector<int64_t> shape, const std::vector<float>& init) {
    Parameter p;
    p.name = std::move(name);
    p.shape = shape;
    p.value = ex_.New(shape);
    Check(dx_tensor_write(p.value.get(), init.data(), init.size() * sizeof(float)),
          "dx_tensor_write");
    for (Tensor* t : {&p.next_value, &p.grad, &p.state1, &p.next_state1, &p.state2,
                      &p.next_state2, &p.tmp1, &p.tmp2}) {
      *t = ex_.New(shape);
    }
    ex_.Fill(p.state1.get(), 0.0);
    ex_.Fill(p.state2.get(), 0.0);
    params_.push_back(std::move(p));
  }

  Executor& ex_;
  const dx_attrs_t* ce_attrs_;
  std::vector<Parameter> params_;
};

// The optimizers, as ops over the parameter tensors.
class Update {
 public:
  static constexpr double kSgdRate = 0.01, kMomentum = 0.9;
  static constexpr double kAdamRate = 0.001, kBeta1 = 0.9, kBeta2 = 0.999, kEpsilon = 1e-8;

  Update(Executor& ex, Optimizer optimizer)
      : ex_(ex),
        optimizer_(optimizer),
        momentum_(ex.Scalar(kMomentum)),
        sgd_rate_(ex.Scalar(kSgdRate)),
        beta1_(ex.Scalar(kBeta1)),
        one_minus_beta1_(ex.Scalar(1.0 - kBeta1)),
        beta2_(ex.Scalar(kBeta2)),
        one_minus_beta2_(ex.Scalar(1.0 - kBeta2)),
        adam_step_(ex.Scalar(0.0)),
        adam_epsilon_(ex.Scalar(0.0)) {}

  // Step `t` (1-based) over every parameter.
  void Apply(std::vector<Parameter>& params, int t) {
    const Ops& o = ex_.ops();
    if (optimizer_ == Optimizer::kAdam) {
      // Adam with the bias corrections folded into two scalars (Kingma & Ba, section 2):
      //   p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps * sqrt(1 - b2^t)).
      // They are per-step constants, computed here and written by dx.fill.
      const double c2 = std::sqrt(1.0 - std::pow(kBeta2, t));
      ex_.Fill(adam_step_.get(), kAdamRate * c2 / (1.0 - std::pow(kBeta1, t)));
      ex_.Fill(adam_epsilon_.get(), kEpsilon * c2);
    }
    for (Parameter& p : params) {
      dx_tensor_t* g = p.grad.get();
      dx_tensor_t* a = p.tmp1.get();
      dx_tensor_t* b = p.tmp2.get();
      if (optimizer_ == Optimizer::kSgdMomentum) {
        // v = momentum * v + g;  p = p - lr * v
        ex_.Forward(o.mul, {p.state1.get(), momentum_.get()}, {a}, nullptr, "dx.mul");
        ex_.Forward(o.add, {a, g}, {p.next_state1.get()}, nullptr, "dx.add");
        std::swap(p.state1, p.next_state1);
        ex_.Forward(o.mul, {p.state1.get(), sgd_rate_.get()}, {a}, nullptr, "dx.mul");
      } else {
        // m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        ex_.Forward(o.mul, {p.state1.get(), beta1_.get()}, {a}, nullptr, "dx.mul");
        ex_.Forward(o.mul, {g, one_minus_beta1_.get()}, {b}, nullptr, "dx.mul");
        ex_.Forward(o.add, {a, b}, {p.next_state1.get()}, nullptr, "dx.add");
        std::swap(p.state1, p.next_state1);
        ex_.Forward(o.mul, {g, g}, {a}, nullptr, "dx.mul");
        ex_.Forward(o.mul, {a, one_minus_beta2_.get()}, {b}, nullptr, "dx.mul");
        ex_.Forward(o.mul, {p.state2.get(), beta2_.get()}, {a}, nullptr, "dx.mul");
        ex_.Forward(o.add, {a, b}, {p.next_state2.get()}, nullptr, "dx.add");
        std::swap(p.state2, p.next_state2);
        // step = lr_t * m / (sqrt(v) + eps_t)
        ex_.Forward(o.sqrt, {p.state2.get()}, {a}, nullptr, "dx.sqrt");
        ex_.Forward(o.add, {a, adam_epsilon_.get()}, {b}, nullptr, "dx.add");
        ex_.Forward(o.div, {p.state1.get(), b}, {a}, nullptr, "dx.div");
        ex_.Forward(o.mul, {a, adam_step_.get()}, {b}, nullptr, "dx.mul");
        a = b;  // the step
      }
      ex_.Forward(o.sub, {p.value.get(), a}, {p.next_value.get()}, nullptr, "dx.sub");
      std::swap(p.value, p.next_value);
    }
  }

 private:
  Executor& ex_;
  Optimizer optimizer_;
  Tensor momentum_, sgd_rate_, beta1_, one_minus_beta1_, beta2_, one_minus_beta2_, adam_step_,
      adam_epsilon_;
};

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
};

// Loss and accuracy over the whole data set (read back for reporting only).
Evaluation Evaluate(Model& model, dx_tensor_t* x, dx_tensor_t* labels, Pass& full,
                    const std::vector<int64_t>& host_labels) {
  model.Forward(x, labels, full);
  Evaluation e;
  e.loss = Read<float>(full.loss.get())[0];
  const std::vector<float> logits = Read<float>(full.pre[kLayers - 1].get());
  int64_t correct = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const float* row = logits.data() + i * kClasses;
    correct += (std::max_element(row, row + kClasses) - row) == host_labels[i] ? 1 : 0;
  }
  e.accuracy = static_cast<double>(correct) / kSamples;
  return e;
}

struct RunResult {
  std::string plugin;
  Optimizer optimizer{};
  std::vector<int> steps;
  std::vector<Evaluation> curve;
  double seconds = 0;
  std::vector<std::vector<float>> trained;  // parameter values, for the cross-plugin check
};

// The data, on the device, with one view per mini-batch (no copies).
struct DeviceData {
  Tensor x, labels;
  std::vector<Tensor> batch_x, batch_labels;
};

DeviceData Upload(Executor& ex, const Problem& p) {
  DeviceData d;
  d.x = ex.New({kSamples, kFeatures});
  d.labels = ex.New({kSamples}, DX_DTYPE_I64);
  Check(dx_tensor_write(d.x.get(), p.x.data(), p.x.size() * sizeof(float)), "dx_tensor_write(x)");
  Check(dx_tensor_write(d.labels.get(), p.labels.data(), p.labels.size() * sizeof(int64_t)),
        "dx_tensor_write(labels)");
  for (int64_t b = 0; b < kSamples / kBatch; ++b) {
    d.batch_x.push_back(MakeView(d.x.get(), {kBatch, kFeatures}, b * kBatch * kFeatures));
    d.batch_labels.push_back(MakeView(d.labels.get(), {kBatch}, b * kBatch));
  }
  return d;
}

struct Setup {
  dx_runtime_t* rt;
  int32_t device;
  Ops ops;
  const dx_attrs_t* ce_attrs;
  const Problem* problem;
  int steps;
};

// Trains one model; when `save_path` is set, saves it there, reloads it and checks the reload.
RunResult Train(const Setup& s, const std::string& plugin_name, int32_t plugin, Optimizer opt,
                const std::string& save_path) {
  Executor ex(s.rt, s.device, plugin, s.ops);
  Model model(ex, *s.problem, s.ce_attrs);
  Update update(ex, opt);
  DeviceData data = Upload(ex, *s.problem);
  Pass batch = model.MakePass(kBatch, /*with_gradients=*/true);
  Pass full = model.MakePass(kSamples, /*with_gradients=*/false);

  RunResult r;
  r.plugin = plugin_name;
  r.optimizer = opt;
  const auto start = std::chrono::steady_clock::now();
  r.steps.push_back(0);
  r.curve.push_back(Evaluate(model, data.x.get(), data.labels.get(), full, s.problem->labels));
  const size_t batches = data.batch_x.size();
  for (int step = 1; step <= s.steps; ++step) {
    dx_tensor_t* x = data.batch_x[(step - 1) % batches].get();
    dx_tensor_t* y = data.batch_labels[(step - 1) % batches].get();
    model.Forward(x, y, batch);
    model.Backward(x, y, batch);
    update.Apply(model.params(), step);
    if (step % kReportEvery == 0 || step == s.steps) {
      r.steps.push_back(step);
      r.curve.push_back(Evaluate(model, data.x.get(), data.labels.get(), full, s.problem->labels));
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (Parameter& p : model.params()) r.trained.push_back(Read<float>(p.value.get()));

  if (!save_path.empty()) {
    std::vector<const char*> names;
    std::vector<const dx_tensor_t*> tensors;
    for (Parameter& p : model.params()) {
      names.push_back(p.name.c_str());
      tensors.push_back(p.value.get());
    }
    const std::string steps = std::to_string(s.steps);
    const char* keys[] = {"producer", "optimizer", "plugin", "steps"};
    const char* values[] = {"deepx-example-train", OptimizerName(opt), plugin_name.c_str(),
                            steps.c_str()};
    dx_safetensors_save_options_t options{};
    options.struct_size = DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0;
    options.metadata_count = 4;
    options.metadata_keys = keys;
    options.metadata_values = values;
    Check(dx_safetensors_save(s.rt, save_path.c_str(), names.data(), tensors.data(),
                              static_cast<int64_t>(names.size()), &options),
          "dx_safetensors_save");

    dx_safetensors_t* raw = nullptr;
    Check(dx_safetensors_load(s.rt, save_path.c_str(), s.device, &raw), "dx_safetensors_load");
    SafetensorsFile file(raw);
    const char* saved_optimizer = nullptr;
    Check(dx_safetensors_metadata_find(file.get(), "optimizer", &saved_optimizer),
          "dx_safetensors_metadata_find(optimizer)");
    if (std::strcmp(saved_optimizer, OptimizerName(opt)) != 0) {
      throw std::runtime_error("the reloaded file's metadata says optimizer '" +
                               std::string(saved_optimizer) + "'");
    }
    // Put the reloaded tensors in place of the trained ones and evaluate again.
    std::vector<float> trained_logits = Read<float>(full.pre[kLayers - 1].get());
    const Evaluation trained = r.curve.back();
    for (Parameter& p : model.params()) {
      int64_t index = -1;
      Check(dx_safetensors_find(file.get(), p.name.c_str(), &index), "dx_safetensors_find " + p.name);
      dx_safetensors_tensor_info_t info{};
      info.struct_size = DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0;
      Check(dx_safetensors_tensor_info(file.get(), index, &info), "dx_safetensors_tensor_info");
      if (info.dtype != DX_DTYPE_F32 || info.ndim != static_cast<int32_t>(p.shape.size()) ||
          !std::equal(p.shape.begin(), p.shape.end(), info.shape)) {
        throw std::runtime_error("the reloaded " + p.name + " has another dtype or shape");
      }
      dx_tensor_t* t = nullptr;
      Check(dx_safetensors_get_tensor(file.get(), index, &t), "dx_safetensors_get_tensor");
      p.value.reset(t);
    }
    file.reset();  // the tensors handed out outlive the file object
    const Evaluation reloaded =
        Evaluate(model, data.x.get(), data.labels.get(), full, s.problem->labels);
    const std::vector<float> reloaded_logits = Read<float>(full.pre[kLayers - 1].get());
    std::printf("  saved %s/%s to %s, reloaded: loss %.6f (trained %.6f), accuracy %.1f%%\n",
                plugin_name.c_str(), OptimizerName(opt), save_path.c_str(), reloaded.loss,
                trained.loss, 100.0 * reloaded.accuracy);
    if (reloaded.loss != trained.loss || reloaded_logits != trained_logits) {
      throw std::runtime_error("the reloaded model does not reproduce the trained model's loss");
    }
  }
  return r;
}

int32_t LoadPlugin(dx_runtime_t* rt, const std::string& name) {
  int32_t index = -1;
  Check(dx_runtime_load_plugin(rt, name.c_str(), &index), "loading the '" + name + "' plugin");
  return index;
}

int32_t HostDevice(dx_runtime_t* rt) {
  int32_t index = -1;
  if (Error(dx_runtime_find_device(rt, "cpu", &index)) == nullptr) return index;
  int32_t count = 0;
  Check(dx_runtime_device_count(rt, &count), "dx_runtime_device_count");
  if (count == 0) throw std::runtime_error("no loaded plugin serves any memory space");
  return 0;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int Main(int argc, char** argv) {
  std::vector<std::string> plugins = {"cpu", "reference"};
  int steps = 300;
  std::string keep;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--plugins" && i + 1 < argc) {
      plugins = Split(argv[++i]);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--keep" && i + 1 < argc) {
      keep = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: deepx-example-train [--plugins cpu,reference] [--steps N] [--keep FILE]\n");
      return 2;
    }
  }
  if (plugins.empty() || plugins.size() > 2 || steps < 1) {
    std::fprintf(stderr, "deepx-example-train: give one or two plugins and at least one step\n");
    return 2;
  }

  dx_runtime_t* raw_runtime = nullptr;
  Check(dx_runtime_create(nullptr, &raw_runtime), "dx_runtime_create");
  Runtime runtime(raw_runtime);
  std::vector<int32_t> plugin_indices;
  for (const auto& name : plugins) plugin_indices.push_back(LoadPlugin(runtime.get(), name));
  const int32_t device = HostDevice(runtime.get());
  Attrs ce_attrs = MakeAttrs();
  Check(dx_attrs_set_string(ce_attrs.get(), "reduction", "mean", -1), "dx_attrs_set_string(reduction)");
  const Problem problem = MakeProblem();
  const Setup setup{runtime.get(), device, LookupOps(runtime.get()), ce_attrs.get(), &problem, steps};

  std::string save_path = keep;
  std::string temp_dir;
  if (save_path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/deepx-train-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    temp_dir = templ;
    save_path = temp_dir + "/mlp.safetensors";
  }

  std::printf("deepx training example: MLP %lld -> %lld -> %lld -> %lld (relu), cross-entropy\n",
              (long long)kWidths[0], (long long)kWidths[1], (long long)kWidths[2],
              (long long)kWidths[3]);
  std::printf("  %lld samples in %lld classes, mini-batches of %lld, %d steps per run; "
              "forward, backward and optimizer all as dx_invoke_ex ops\n",
              (long long)kSamples, (long long)kClasses, (long long)kBatch, steps);
  std::printf("  sgd: lr %.3g, momentum %.2g   adam: lr %.3g, betas (%.2g, %.4g), eps %.0e\n\n",
              Update::kSgdRate, Update::kMomentum, Update::kAdamRate, Update::kBeta1,
              Update::kBeta2, Update::kEpsilon);

  std::vector<RunResult> runs;
  std::string failure;
  for (Optimizer opt : {Optimizer::kSgdMomentum, Optimizer::kAdam}) {
    for (size_t k = 0; k < plugins.size(); ++k) {
      try {
        // The first plugin's Adam model is the one saved and reloaded.
        const bool save = opt == Optimizer::kAdam && k == 0;
        runs.push_back(Train(setup, plugins[k], plugin_indices[k], opt, save ? save_path : ""));
      } catch (const std::exception& e) {
        if (failure.empty()) {
          failure = std::string(OptimizerName(opt)) + " on '" + plugins[k] + "': " + e.what();
          const auto* deepx_error = dynamic_cast<const DeepxError*>(&e);
          if (deepx_error != nullptr && deepx_error->status == DX_UNSUPPORTED) {
            failure += " (the plugin lacks a kernel this training needs)";
          }
        }
      }
    }
  }
  if (!temp_dir.empty()) {
    std::remove(save_path.c_str());
    rmdir(temp_dir.c_str());
  }

  // The loss curves side by side.
  std::printf("\n  %6s", "step");
  for (const auto& r : runs) {
    const std::string label = std::string(OptimizerName(r.optimizer)) + "/" + r.plugin;
    std::printf(" %15s", label.c_str());
  }
  std::printf("\n");
  if (!runs.empty()) {
    for (size_t i = 0; i < runs[0].steps.size(); ++i) {
      std::printf("  %6d", runs[0].steps[i]);
      for (const auto& r : runs) {
        if (i < r.curve.size()) std::printf(" %15.6f", r.curve[i].loss);
      }
      std::printf("\n");
    }
    std::printf("  %6s", "acc");
    for (const auto& r : runs) std::printf(" %14.1f%%", 100.0 * r.curve.back().accuracy);
    std::printf("\n  %6s", "time");
    for (const auto& r : runs) std::printf(" %13.2f s", r.seconds);
    std::printf("\n\n");
  }

  for (const auto& r : runs) {
    const double first = r.curve.front().loss, last = r.curve.back().loss;
    const std::string who = std::string(OptimizerName(r.optimizer)) + " on '" + r.plugin + "'";
    std::printf("  %-20s loss %.4f -> %.4f (fell %.0fx), accuracy %.1f%%\n", who.c_str(), first,
                last, first / last, 100.0 * r.curve.back().accuracy);
    if (failure.empty() && !(std::isfinite(last) && last * kRequiredLossDrop <= first)) {
      failure = who + ": the loss fell less than " + std::to_string(int(kRequiredLossDrop)) + "x";
    }
    if (failure.empty() && r.curve.back().accuracy < kRequiredAccuracy) {
      failure = who + ": training accuracy below " + std::to_string(int(100 * kRequiredAccuracy)) + "%";
    }
  }
  if (plugins.size() == 2 && runs.size() == 4) {
    for (size_t k = 0; k < runs.size(); k += 2) {
      const RunResult& a = runs[k];
      const RunResult& b = runs[k + 1];
      double max_loss_diff = 0, max_weight_diff = 0;
      bool within = true;
      for (size_t i = 0; i < a.curve.size(); ++i) {
        const double d = std::fabs(a.curve[i].loss - b.curve[i].loss);
        max_loss_diff = std::max(max_loss_diff, d);
        within = within && d <= kAbsTolerance + kRelTolerance * std::fabs(b.curve[i].loss);
      }
      for (size_t p = 0; p < a.trained.size(); ++p) {
        for (size_t i = 0; i < a.trained[p].size(); ++i) {
          max_weight_diff = std::max<double>(max_weight_diff, std::fabs(a.trained[p][i] - b.trained[p][i]));
        }
      }
      std::printf("  %-4s %s vs %s: max |loss difference| %.2e over the curve, max |weight "
                  "difference| %.2e\n",
                  OptimizerName(a.optimizer), a.plugin.c_str(), b.plugin.c_str(), max_loss_diff,
                  max_weight_diff);
      if (failure.empty() && !within) {
        failure = std::string(OptimizerName(a.optimizer)) + ": " + a.plugin + " and " + b.plugin +
                  " loss curves differ beyond atol " + std::to_string(kAbsTolerance) + " + rtol " +
                  std::to_string(kRelTolerance);
      }
    }
  }
  std::printf("\n");
  if (!failure.empty()) {
    std::printf("FAIL: %s\n", failure.c_str());
    return 1;
  }
  std::printf("PASS: every run cut the loss by more than %.0fx and classifies >= %.0f%% of the "
              "data; ",
              kRequiredLossDrop, 100 * kRequiredAccuracy);
  if (plugins.size() == 2) {
    std::printf("%s and %s agree within atol %.0e + rtol %.0e at every reported step; ",
                plugins[0].c_str(), plugins[1].c_str(), kAbsTolerance, kRelTolerance);
  }
  std::printf("the saved and reloaded weights reproduce the loss exactly\n");
  return 0;
}

}  // namespace
}  // namespace deepx::examples

int main(int argc, char** argv) {
  try {
    return deepx::examples::Main(argc, argv);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
