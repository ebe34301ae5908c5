// Differential tests of the CPU plugin against the reference plugin, through the public host
// API: the same op, inputs and attributes run once pinned to each plugin
// (DX_INVOKE_FLAG_PLUGIN), and the outputs are compared. Header-only; used by the tests of the
// op families (nn, conv/attention, movement, random, backward).
//
//   deepx::cpu::testing::Differential diff;              // loads "cpu" and "reference"
//   auto r = diff.run("dx.layer_norm", {In::random(DX_DTYPE_F32, {4, 7})},
//                     {Out(DX_DTYPE_F32, {4, 7}), Out(DX_DTYPE_F32, {4, 1}), ...},
//                     Attrs().i64("axis", -1).f64("eps", 1e-5));
//   expect_close(r, 1e-5, 1e-6);
//
// Backward calls pass DX_INVOKE_FLAG_BACKWARD: inputs are the output gradients, the forward
// inputs, then the forward outputs; outputs are the input gradients (Out::absent() for a gradient
// that is not wanted).
#ifndef DEEPX_PLUGINS_CPU_TESTS_DIFFERENTIAL_H_
#define DEEPX_PLUGINS_CPU_TESTS_DIFFERENTIAL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../../host/tests/dx_test_util.h"
#include "deepx/host.h"

namespace deepx::cpu::testing {

/// Distance in representable f32 values (NaN matches NaN only; +0 and -0 are one apart).
inline int64_t ulp_distance(float a, float b) {
  if (a != a || b != b) return (a != a && b != b) ? 0 : int64_t{1} << 40;
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) - 1 : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

/// Takes the result of a client call (an error the caller owns, null on success): destroys it and
/// returns its code (DX_OK for null); its message goes to `*message` when given and not null.
inline dx_status_t take_status(dx_error_t* error, std::string* message = nullptr) {
  return deepx_test::TakeStatus(error, message);
}

/// Throws when a client call failed, with its status and message.
inline void check(dx_error_t* error, const std::string& what) {
  std::string message;
  const dx_status_t status = take_status(error, &message);
  if (status != DX_OK) {
    throw std::runtime_error(what + ": " + dx_status_string(status) + ": " + message);
  }
}

// ---- values <-> bytes --------------------------------------------------------------------------

inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {                                                // f16 subnormal or zero
    const float magnitude = std::fabs(f) * 16777216.0f;                   // / 2^-24, exact
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(magnitude)));
  }
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xFFFu + mantissa_odd;  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline size_t dtype_bytes(dx_dtype_t dtype) { return ((dtype >> 8) & 0xFFu) / 8; }

inline std::vector<uint8_t> to_bytes(dx_dtype_t dtype, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * dtype_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = out.data() + i * dtype_bytes(dtype);
    const double v = values[i];
    auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (dtype) {
      case DX_DTYPE_F64: put(v); break;
      case DX_DTYPE_F32: put(static_cast<float>(v)); break;
      case DX_DTYPE_F16: put(float_to_half_bits(static_cast<float>(v))); break;
      case DX_DTYPE_BF16: put(float_to_bf16_bits(static_cast<float>(v))); break;
      case DX_DTYPE_I64: put(static_cast<int64_t>(v)); break;
      case DX_DTYPE_I32: put(static_cast<int32_t>(v)); break;
      case DX_DTYPE_I16: put(static_cast<int16_t>(v)); break;
      case DX_DTYPE_I8: put(static_cast<int8_t>(v)); break;
      case DX_DTYPE_U8: put(static_cast<uint8_t>(v)); break;
      case DX_DTYPE_BOOL: put(static_cast<uint8_t>(v != 0)); break;
      default: throw std::runtime_error("differential.h: unknown dtype");
    }
  }
  return out;
}

inline std::vector<double> from_bytes(dx_dtype_t dtype, const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size() / dtype_bytes(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + i * dtype_bytes(dtype);
    auto get = [&](auto x) {
      std::memcpy(&x, p, sizeof(x));
      return x;
    };
    switch (dtype) {
      case DX_DTYPE_F64: out[i] = get(double{}); break;
      case DX_DTYPE_F32: out[i] = get(float{}); break;
      case DX_DTYPE_F16: out[i] = half_bits_to_float(get(uint16_t{})); break;
      case DX_DTYPE_BF16: out[i] = bf16_bits_to_float(get(uint16_t{})); break;
      case DX_DTYPE_I64: out[i] = static_cast<double>(get(int64_t{})); break;
      case DX_DTYPE_I32: out[i] = get(int32_t{}); break;
      case DX_DTYPE_I16: out[i] = get(int16_t{}); break;
      case DX_DTYPE_I8: out[i] = get(int8_t{}); break;
      case DX_DTYPE_U8: out[i] = get(uint8_t{}); break;
      case DX_DTYPE_BOOL: out[i] = get(uint8_t{}); break;
      default: throw std::runtime_error("differential.h: unknown dtype");
    }
  }
  return out;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// Every F dtype, in the order the tests loop over them.
inline constexpr dx_dtype_t kFloatDtypes[] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16};

/// A dtype's name in failure messages ("f32"): the host's dx_dtype_string.
inline std::string dtype_name(dx_dtype_t d) { return dx_dtype_string(d); }

/// A shape in failure messages: "[2,3]".
inline std::string shape_name(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// ---- call description --------------------------------------------------------------------------

/// One input: dtype, shape, values (row-major, converted to the dtype), or absent (optional input).
struct In {
  dx_dtype_t dtype = DX_DTYPE_F32;
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool present = true;

  /// Uniform values in [lo, hi) from a fixed seed (integers: rounded down).
  static In random(dx_dtype_t dtype, std::vector<int64_t> shape, double lo = -2.0, double hi = 2.0,
                   uint64_t seed = 1) {
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(numel(shape)));
    std::uniform_real_distribution<double> dist(lo, hi);
    In in{dtype, shape, {}, true};
    in.values.resize(static_cast<size_t>(numel(shape)));
    const bool integral = dtype != DX_DTYPE_F64 && dtype != DX_DTYPE_F32 &&
                          dtype != DX_DTYPE_F16 && dtype != DX_DTYPE_BF16;
    for (double& v : in.values) v = integral ? std::floor(dist(rng)) : dist(rng);
    return in;
  }
  static In of(dx_dtype_t dtype, std::vector<int64_t> shape, std::vector<double> values) {
    return In{dtype, std::move(shape), std::move(values), true};
  }
  static In absent() { return In{DX_DTYPE_F32, {}, {}, false}; }
};

/// One output: dtype and shape, or absent (an unwanted gradient in a backward call).
struct Out {
  dx_dtype_t dtype = DX_DTYPE_F32;
  std::vector<int64_t> shape;
  bool present = true;
  Out(dx_dtype_t d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {}
  static Out absent() {
    Out o(DX_DTYPE_F32, {});
    o.present = false;
    return o;
  }
};

/// Attribute builder (owns a dx_attrs_t).
class Attrs {
 public:
  Attrs() { check(dx_attrs_create(&attrs_), "dx_attrs_create"); }
  Attrs(const Attrs&) = delete;
  Attrs& operator=(const Attrs&) = delete;
  Attrs(Attrs&& o) noexcept : attrs_(o.attrs_) { o.attrs_ = nullptr; }
  ~Attrs() { dx_error_destroy(dx_attrs_destroy(attrs_)); }
  Attrs&& i64(const char* name, int64_t v) && { check(dx_attrs_set_i64(attrs_, name, v), name); return std::move(*this); }
  Attrs&& f64(const char* name, double v) && { check(dx_attrs_set_f64(attrs_, name, v), name); return std::move(*this); }
  Attrs&& boolean(const char* name, bool v) && { check(dx_attrs_set_bool(attrs_, name, v ? 1 : 0), name); return std::move(*this); }
  Attrs&& str(const char* name, const char* v) && { check(dx_attrs_set_string(attrs_, name, v, -1), name); return std::move(*this); }
  Attrs&& i64s(const char* name, std::vector<int64_t> v) && {
    check(dx_attrs_set_i64_array(attrs_, name, v.data(), static_cast<int32_t>(v.size())), name);
    return std::move(*this);
  }
  Attrs&& f64s(const char* name, std::vector<double> v) && {
    check(dx_attrs_set_f64_array(attrs_, name, v.data(), static_cast<int32_t>(v.size())), name);
    return std::move(*this);
  }
  const dx_attrs_t* get() const { return attrs_; }

 private:
  dx_attrs_t* attrs_ = nullptr;
};

/// What one plugin returned: the status, its message, and each output's values (empty when absent).
struct PluginResult {
  dx_status_t status = DX_OK;
  std::string message;
  std::vector<std::vector<double>> outputs;
};
struct Result {
  PluginResult cpu, ref;
};

// ---- the runtime --------------------------------------------------------------------------------

class Differential {
 public:
  Differential() {
    check(dx_runtime_create(nullptr, &runtime_), "dx_runtime_create");
    check(dx_runtime_load_plugin(runtime_, "cpu", &cpu_plugin_), "loading the cpu plugin");
    check(dx_runtime_load_plugin(runtime_, "reference", &ref_plugin_), "loading the reference plugin");
    check(dx_runtime_find_device(runtime_, "cpu", &device_), "finding the cpu memory space");
  }
  Differential(const Differential&) = delete;
  Differential& operator=(const Differential&) = delete;
  ~Differential() { dx_error_destroy(dx_runtime_destroy(runtime_)); }

  dx_runtime_t* runtime() const { return runtime_; }
  int32_t device() const { return device_; }
  int32_t cpu_plugin() const { return cpu_plugin_; }
  int32_t reference_plugin() const { return ref_plugin_; }

  /// Runs `op` on both plugins with identical inputs. `backward` selects the backward kernel.
  Result run(const char* op, const std::vector<In>& inputs, const std::vector<Out>& outputs,
             const Attrs& attrs = Attrs(), bool backward = false) {
    return Result{run_on(cpu_plugin_, op, inputs, outputs, attrs, backward),
                  run_on(ref_plugin_, op, inputs, outputs, attrs, backward)};
  }

  /// Runs `op` on one plugin.
  PluginResult run_on(int32_t plugin, const char* op, const std::vector<In>& inputs,
                      const std::vector<Out>& outputs, const Attrs& attrs, bool backward) {
    struct TensorDeleter {
      void operator()(dx_tensor_t* t) const { dx_error_destroy(dx_tensor_destroy(t)); }
    };
    std::vector<std::unique_ptr<dx_tensor_t, TensorDeleter>> owned;
    std::vector<dx_tensor_t*> in_ptrs, out_ptrs;
    for (const In& in : inputs) {
      if (!in.present) {
        in_ptrs.push_back(nullptr);
        continue;
      }
      if (static_cast<int64_t>(in.values.size()) != numel(in.shape)) {
        throw std::runtime_error(std::string(op) + ": input values do not match the shape");
      }
      dx_tensor_t* t = nullptr;
      check(dx_tensor_create(runtime_, device_, in.dtype, in.shape.data(),
                             static_cast<int32_t>(in.shape.size()), &t), "dx_tensor_create");
      owned.emplace_back(t);
      const std::vector<uint8_t> bytes = to_bytes(in.dtype, in.values);
      if (!bytes.empty()) check(dx_tensor_write(t, bytes.data(), bytes.size()), "dx_tensor_write");
      in_ptrs.push_back(t);
    }
    for (const Out& out : outputs) {
      if (!out.present) {
        out_ptrs.push_back(nullptr);
        continue;
      }
      dx_tensor_t* t = nullptr;
      check(dx_tensor_create(runtime_, device_, out.dtype, out.shape.data(),
                             static_cast<int32_t>(out.shape.size()), &t), "dx_tensor_create");
      owned.emplace_back(t);
      // Poison the output so a kernel that leaves elements unwritten is caught.
      std::vector<double> poison(static_cast<size_t>(numel(out.shape)), 12345.0);
      const std::vector<uint8_t> bytes = to_bytes(out.dtype, poison);
      if (!bytes.empty()) check(dx_tensor_write(t, bytes.data(), bytes.size()), "dx_tensor_write");
      out_ptrs.push_back(t);
    }
    dx_op_id_t id{};
    check(dx_runtime_op_lookup(runtime_, op, &id), std::string("lookup ") + op);
    dx_invoke_options_t options{};
    options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    options.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
    options.plugin_index = plugin;
    PluginResult result;
    result.status = take_status(dx_invoke_ex(runtime_, id, in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()),
                                             out_ptrs.data(), static_cast<int32_t>(out_ptrs.size()), attrs.get(),
                                             &options),
                                &result.message);
    if (result.status != DX_OK) return result;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (out_ptrs[i] == nullptr) {
        result.outputs.emplace_back();
        continue;
      }
      std::vector<uint8_t> bytes(static_cast<size_t>(numel(outputs[i].shape)) * dtype_bytes(outputs[i].dtype));
      if (!bytes.empty()) check(dx_tensor_read(out_ptrs[i], bytes.data(), bytes.size()), "dx_tensor_read");
      result.outputs.push_back(from_bytes(outputs[i].dtype, bytes));
    }
    return result;
  }

 private:
  dx_runtime_t* runtime_ = nullptr;
  int32_t cpu_plugin_ = -1, ref_plugin_ = -1, device_ = -1;
};

/// Both plugins succeeded and every output element agrees within atol + rtol * |ref|
/// (NaN must match NaN, infinities must match exactly). A `normwise` factor k > 0 adds the
/// suite's norm-wise floor for gradients that cancel (docs/tolerances.md, rtol_atol_normwise):
/// atol + rtol (|ref| + k max|ref| of that output).
inline void expect_close(const Result& r, double rtol, double atol, const std::string& what = "",
                         double normwise = 0) {
  ASSERT_EQ(r.ref.status, DX_OK) << what << ": reference failed: " << r.ref.message;
  ASSERT_EQ(r.cpu.status, DX_OK) << what << ": cpu failed: " << r.cpu.message;
  ASSERT_EQ(r.cpu.outputs.size(), r.ref.outputs.size()) << what;
  for (size_t o = 0; o < r.ref.outputs.size(); ++o) {
    const auto& a = r.cpu.outputs[o];
    const auto& b = r.ref.outputs[o];
    ASSERT_EQ(a.size(), b.size()) << what << " output " << o;
    double largest = 0;
    if (normwise > 0) {
      for (double v : b) largest = std::isfinite(v) ? std::max(largest, std::fabs(v)) : largest;
    }
    int reported = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      bool ok;
      if (std::isnan(b[i])) ok = std::isnan(a[i]);
      else if (std::isinf(b[i])) ok = a[i] == b[i];
      else ok = std::fabs(a[i] - b[i]) <= atol + rtol * (std::fabs(b[i]) + normwise * largest);
      if (!ok && reported++ < 5) {
        ADD_FAILURE() << what << " output " << o << " element " << i << ": cpu " << a[i]
                      << " reference " << b[i];
      }
    }
  }
}

/// Both plugins refused the call with the same status.
inline void expect_same_error(const Result& r, const std::string& what = "") {
  EXPECT_NE(r.ref.status, DX_OK) << what << ": the reference accepted the call";
  EXPECT_EQ(r.cpu.status, r.ref.status) << what << ": cpu: " << r.cpu.message
                                        << " / reference: " << r.ref.message;
}

/// Bit-for-bit equal outputs (movement ops, random ops).
inline void expect_equal(const Result& r, const std::string& what = "") {
  ASSERT_EQ(r.ref.status, DX_OK) << what << ": reference failed: " << r.ref.message;
  ASSERT_EQ(r.cpu.status, DX_OK) << what << ": cpu failed: " << r.cpu.message;
  ASSERT_EQ(r.cpu.outputs.size(), r.ref.outputs.size()) << what;
  for (size_t o = 0; o < r.ref.outputs.size(); ++o) {
    const auto& a = r.cpu.outputs[o];
    const auto& b = r.ref.outputs[o];
    ASSERT_EQ(a.size(), b.size()) << what << " output " << o;
    int reported = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      const bool ok = (std::isnan(a[i]) && std::isnan(b[i])) ||
                      (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
      if (!ok && reported++ < 5) {
        ADD_FAILURE() << what << " output " << o << " element " << i << ": cpu " << a[i]
                      << " reference " << b[i];
      }
    }
  }
}

}  // namespace deepx::cpu::testing

#endif  // DEEPX_PLUGINS_CPU_TESTS_DIFFERENTIAL_H_
