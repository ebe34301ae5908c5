// Shared plumbing of the CPU plugin: tensor views, dtype traits, errors, attribute access.
//
// Everything here is internal to libdeepx-plugin-cpu.so (hidden visibility); the only exported
// symbol is dx_plugin_entry (plugin.cc).
#ifndef DEEPX_PLUGINS_CPU_COMMON_H_
#define DEEPX_PLUGINS_CPU_COMMON_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "half.h"

namespace deepx::cpu {

/// Highest tensor rank the kernels accept (fixed-size index arrays keep the hot paths free of
/// allocations). Larger ranks are refused with DX_UNSUPPORTED.
constexpr int kMaxRank = 16;

/// Element counts at or above which an elementwise loop is split across OpenMP threads; below
/// it a call stays on the calling thread so tiny ops pay no fork/join cost.
constexpr int64_t kParallelThreshold = int64_t{1} << 16;

/// An error raised inside the plugin. Thrown only on the calling thread (never inside an OpenMP
/// region) and turned into a dx_error_t by guard() at the C entry point.
struct Failure {
  dx_status_t code;
  std::string message;
};

[[noreturn]] inline void fail(dx_status_t code, std::string message) {
  throw Failure{code, std::move(message)};
}

/// Runs `body` and converts whatever it throws into an error owned by the caller. Every kernel
/// and memory function goes through this, so no exception crosses the C ABI.
template <class Body>
dx_error_t* guard(const dx_host_t* host, Body&& body) noexcept {
  if (host == nullptr) return nullptr;  // nothing to report through; the host never does this
  try {
    body();
    return nullptr;
  } catch (const Failure& f) {
    return host->error_create(f.code, f.message.c_str());
  } catch (const std::bad_alloc&) {
    return host->error_create(DX_OUT_OF_MEMORY, "cpu plugin: out of memory");
  } catch (const std::exception& e) {
    return host->error_create(DX_INTERNAL, e.what());
  } catch (...) {
    return host->error_create(DX_INTERNAL, "cpu plugin: unknown exception");
  }
}

// ---- dtypes -----------------------------------------------------------------------------------

/// One byte 0/1 (DLPack bool); a distinct type so that registration can tell it from u8.
struct Bool {
  uint8_t bits;
};

constexpr DLDataType make_dtype(uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; }

template <class T>
constexpr DLDataType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return make_dtype(kDLFloat, 32);
  else if constexpr (std::is_same_v<T, double>) return make_dtype(kDLFloat, 64);
  else if constexpr (std::is_same_v<T, Half>) return make_dtype(kDLFloat, 16);
  else if constexpr (std::is_same_v<T, BFloat16>) return make_dtype(kDLBfloat, 16);
  else if constexpr (std::is_same_v<T, int64_t>) return make_dtype(kDLInt, 64);
  else if constexpr (std::is_same_v<T, int32_t>) return make_dtype(kDLInt, 32);
  else if constexpr (std::is_same_v<T, int16_t>) return make_dtype(kDLInt, 16);
  else if constexpr (std::is_same_v<T, int8_t>) return make_dtype(kDLInt, 8);
  else if constexpr (std::is_same_v<T, uint8_t>) return make_dtype(kDLUInt, 8);
  else if constexpr (std::is_same_v<T, Bool>) return make_dtype(DX_DLPACK_CODE_BOOL, 8);
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

inline bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

std::string dtype_name(DLDataType t);

/// Arithmetic traits: the type an element is computed in, and the conversions in and out.
/// f16/bf16 compute in f32 and round once (nearest even) on the way out.
template <class T>
struct Num {
  using C = T;
  static C load(T v) { return v; }
  static T store(C v) { return v; }
};
template <>
struct Num<Half> {
  using C = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Num<BFloat16> {
  using C = float;
  static float load(BFloat16 v) { return bfloat16_to_float(v.bits); }
  static BFloat16 store(float v) { return BFloat16{float_to_bfloat16(v)}; }
};

template <class T>
constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                            std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Unsigned type at least as wide as `int` for T, so wrapping arithmetic never promotes to a
/// signed int (uint16 * uint16 would overflow int: undefined behaviour).
template <class T>
using WrapT = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// ---- tensor views -----------------------------------------------------------------------------

/// A validated DLTensor: base pointer with byte_offset applied, explicit strides in elements.
struct View {
  char* base = nullptr;
  DLDataType dtype{};
  int rank = 0;
  // Only the first `rank` entries are meaningful (left uninitialised: this is on every call's
  // path).
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];

  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
  /// True when the elements are dense in row-major order (size-1 dims' strides ignored).
  bool compact() const {
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expected) return false;
      expected *= shape[d];
    }
    return true;
  }
  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(base);
  }
};

/// Validates `t` (non-null, host device, sane rank/shape, data present when non-empty).
View make_view(const DLTensor* t, const char* what);

/// Checks arity and returns the views of the call's inputs and outputs.
void expect_arity(const dx_kernel_call_t* call, int inputs, int outputs);

void expect_dtype(const View& v, DLDataType want, const char* what);

/// DX_SHAPE_MISMATCH unless `out` has exactly the shape of `in`.
void check_same_shape(const View& out, const View& in);

/// Validates a one-input, one-output call whose output has the input's shape, with input dtype
/// In and output dtype Out; returns {out, in}.
template <class In, class Out>
std::pair<View, View> unary_views(const dx_kernel_call_t* call) {
  expect_arity(call, 1, 1);
  const View in = make_view(call->inputs[0], "input 0");
  const View out = make_view(call->outputs[0], "output 0");
  expect_dtype(in, dtype_of<In>(), "input 0");
  expect_dtype(out, dtype_of<Out>(), "output 0");
  check_same_shape(out, in);
  return {out, in};
}


std::string shape_string(const int64_t* shape, int rank);

/// Attribute in schema slot `slot`, or null when absent/unset.
inline const dx_attr_t* attr_at(const dx_kernel_call_t* call, int slot) {
  if (call->attrs == nullptr || slot >= call->num_attrs) return nullptr;
  const dx_attr_t* a = &call->attrs[slot];
  return a->type == DX_ATTR_NONE ? nullptr : a;
}

/// A bool attribute (DX_ATTR_BOOL or DX_ATTR_I64); `fallback` when unset.
bool attr_bool(const dx_kernel_call_t* call, int slot, const char* name, bool fallback);

/// An i64 attribute; `fallback` when unset.
int64_t attr_i64(const dx_kernel_call_t* call, int slot, const char* name, int64_t fallback);

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_COMMON_H_
