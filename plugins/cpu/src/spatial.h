// Attribute and shape helpers shared by dx.conv2d (conv.cc) and the 2-D pools (conv_pool.cc).
#ifndef DEEPX_PLUGINS_CPU_SPATIAL_H_
#define DEEPX_PLUGINS_CPU_SPATIAL_H_

#include <cstdint>
#include <string>

#include "common.h"

namespace deepx::cpu {

/// A (height, width) attribute value.
struct Pair2 {
  int64_t h = 0, w = 0;
};

/// A 2-D attribute: one i64 (both dims) or an i64 array of 1 or 2 values; `fallback` when
/// unset. DX_INVALID_ARGUMENT for another type, another count, or a value below `min_value`.
inline Pair2 pair_attr(const dx_kernel_call_t* call, int slot, const char* name, Pair2 fallback,
                       int64_t min_value) {
  const dx_attr_t* a = attr_at(call, slot);
  Pair2 p = fallback;
  if (a != nullptr) {
    if (a->type == DX_ATTR_I64) {
      p = {a->value.i64, a->value.i64};
    } else if (a->type == DX_ATTR_I64_ARRAY) {
      if (a->count < 0 || (a->count > 0 && a->value.i64s == nullptr)) {
        fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " is malformed");
      }
      if (a->count == 1)
        p = {a->value.i64s[0], a->value.i64s[0]};
      else if (a->count == 2)
        p = {a->value.i64s[0], a->value.i64s[1]};
      else
        fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " needs 1 or 2 values");
    } else {
      fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " must be an i64 array");
    }
  }
  if (p.h < min_value || p.w < min_value) {
    fail(DX_INVALID_ARGUMENT,
         std::string("cpu: attribute ") + name + " must be >= " + std::to_string(min_value));
  }
  return p;
}

/// Output extent of a strided, padded, dilated window over `in` (floor mode);
/// DX_SHAPE_MISMATCH when the window does not fit the padded input.
inline int64_t window_extent(int64_t in, int64_t pad, int64_t dilation, int64_t kernel,
                             int64_t stride, const char* op) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) {
    fail(DX_SHAPE_MISMATCH,
         std::string("cpu: ") + op + ": the kernel is larger than the padded input");
  }
  return span / stride + 1;
}

/// The output positions o in [0, extent) whose input coordinate o * stride + offset lies in
/// [0, in): [lo, hi) (empty when lo >= hi).
inline void valid_range(int64_t extent, int64_t stride, int64_t offset, int64_t in, int64_t& lo,
                        int64_t& hi) {
  // o * stride + offset >= 0  <=>  o >= ceil(-offset / stride)
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // o * stride + offset < in  <=>  o < ceil((in - offset) / stride)
  hi = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
  if (lo > extent) lo = extent;
  if (hi > extent) hi = extent;
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_SPATIAL_H_
