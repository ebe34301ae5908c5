// Shared plumbing of the data-movement, indexing and creation kernels (movement.cc,
// indexing.cc, movement_util.cc): dtype-blind byte movement (elements are moved as 1/2/4/8-byte
// words, so one instantiation serves every dtype of a size), loops that know each run's
// row-major position, the f64 gradient buffers of the backward kernels, and the attribute
// readers whose statuses follow the reference plugin.
#ifndef DEEPX_PLUGINS_CPU_MOVEMENT_UTIL_H_
#define DEEPX_PLUGINS_CPU_MOVEMENT_UTIL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common.h"
#include "grad.h"
#include "kernels.h"
#include "map.h"
#include "strided.h"

namespace deepx::cpu {

/// index_select, gather, scatter_add and their gradients (indexing.cc).
void register_indexing_kernels(Registrar& r);

namespace movement {

/// Bytes per element of a (validated, lanes == 1) dtype.
inline int element_size(DLDataType t) { return (t.bits + 7) / 8; }

/// A compact row-major view of `base` with `shape` (the strides are computed here).
View compact_view(void* base, DLDataType dtype, const int64_t* shape, int rank);

/// out[i] = in[i] over out's shape (in already arranged in out's dim order; any strides, 0
/// included). Element bytes are moved unchanged; contiguous runs use memcpy; large copies run on
/// every OpenMP thread, unless `parallel` is false (a caller that is itself parallel).
void copy_view(const View& out, const View& in, bool parallel = true);

/// copy_view for an F dtype with each element turned into 0.0 + v (exact, except that -0
/// becomes +0): the gradient of a pure data movement (transpose, copy), which the reference
/// accumulates in f64 from +0 and rounds once. Same tiles and threads as copy_view.
void copy_gradient_view(const View& out, const View& in);

/// Writes the element_size(out.dtype) bytes at `value` into every element of `out`.
void fill_view(const View& out, const void* value, bool parallel = true);

/// Zero bytes into every element of `out` (0 / +0.0 / false in every dtype).
void zero_view(const View& out);

/// Like for_each_row, but `row(flat, n, offsets, strides)` also gets the row-major position of
/// the run's first element in the loop's iteration space (the loop may be simplified: dropping
/// size-1 dims and merging contiguous ones keeps the row-major order).
template <int N, class RowFn>
void for_each_row_flat(const StridedLoop<N>& loop, RowFn&& row, int64_t work = 1) {
  for_each_range(
      loop.count(),
      [&](int64_t begin, int64_t end) {
        int64_t position = begin;
        auto run = [&](int64_t n, const int64_t* offsets, const int64_t* strides) {
          row(position, n, offsets, strides);
          position += n;
        };
        run_range(loop, begin, end, run);
      },
      work);
}

/// An f64 gradient buffer over `shape` (compact, zero-initialised): gradients are accumulated in
/// f64 in the reference's order and rounded once into the gradient tensor, so results agree
/// bit for bit. A gradient that receives one contribution is 0.0 + dy (so -0 becomes +0, as in
/// the reference).
struct GradBuffer {
  std::vector<double> data;
  View view;
  GradBuffer(const int64_t* shape, int rank);
  /// Rounds every element once into `grad` (same shape as the buffer).
  template <class T>
  void store(const View& grad) const {
    map_elements<T, double>(grad, {&view}, [](double v) { return from_f64<T>(v); });
  }
};

/// grad[i] = 0.0 + dy[i] rounded to T (an exact copy except -0 -> +0), dy already arranged in
/// grad's shape: the gradient of an op whose every input element receives at most one output
/// element.
template <class T>
inline T canonical_gradient(T v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return static_cast<T>(v + T(0));
  } else {
    return from_f64<T>(0.0 + to_f64(v));
  }
}

template <class T>
void copy_gradient(const View& grad, const View& dy) {
  map_elements<T, T>(grad, {&dy}, [](T v) { return canonical_gradient(v); });
}

// ---- attributes (the reference's readers and statuses) ----------------------------------------

/// An i64 list attribute: DX_ATTR_I64_ARRAY, or a single DX_ATTR_I64 as a one-entry list;
/// nullopt when unset; anything else DX_INVALID_ARGUMENT.
std::optional<std::vector<int64_t>> attr_i64_list(const dx_kernel_call_t* call, int slot,
                                                  const char* name);

/// An f64 attribute (DX_ATTR_F64, or DX_ATTR_I64 converted); nullopt when unset.
std::optional<double> attr_f64(const dx_kernel_call_t* call, int slot, const char* name);

/// The i64 attribute `axis` in `slot` (default `fallback`) normalised for `rank`;
/// DX_OUT_OF_RANGE outside [-rank, rank).
int normal_axis(const dx_kernel_call_t* call, int slot, int rank, int64_t fallback,
                const char* op);

/// dx.fill's value rules (i64 exact/wrapping, f64 converted: ints truncate and saturate, NaN ->
/// 0, bool != 0; i64 -> f16/bf16 rounded once via round-to-odd; unset = 0) into
/// element_size(dtype) bytes.
void encode_value(const dx_attr_t* a, DLDataType dtype, void* bytes);

/// An f64 converted to integer type T: truncated toward zero, saturated, NaN -> 0.
template <class T>
T saturating_cast(double d) {
  if (d != d) return T(0);
  constexpr T lo = std::numeric_limits<T>::min();
  constexpr T hi = std::numeric_limits<T>::max();
  if (d <= static_cast<double>(lo)) return lo;
  if (d >= static_cast<double>(hi)) return hi;  // (double)hi may round up: >= catches it
  return static_cast<T>(d);
}

/// DX_SHAPE_MISMATCH unless `v` has shape `expected`.
void expect_shape(const View& v, const int64_t* expected, int rank, const char* what);

// ---- operands (the movement and indexing kernels) -----------------------------------------------

/// Input / output `i` of the call as a view of dtype `t` ("input i" / "output i" in messages).
View input(const dx_kernel_call_t* call, int i, DLDataType t);
View output(const dx_kernel_call_t* call, int i, DLDataType t);
/// A requested gradient output `i` (nullopt: not wanted) with the forward input's dtype and shape.
std::optional<View> gradient(const dx_kernel_call_t* call, int i, const View& like);

}  // namespace movement
}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_MOVEMENT_UTIL_H_
