// Per-element bodies of the shape and indexing kernels (src/movement_shape.cu, src/indexing.cu):
// reshape's re-mapping copy, the axis-split iteration of index_select / gather / scatter_add,
// the device-side index check, and the gradient sums of the indexing ops.
//
// Elements are moved as raw bytes (bit-exact for every dtype) unless `convert` is set: then
// they go through f64 and are rounded once to the destination dtype, with "+ 0" so that -0
// comes out as +0 (a gradient is a sum that starts at +0, as in the reference).
#ifndef DEEPX_GPU_MOVEMENT_H_
#define DEEPX_GPU_MOVEMENT_H_

#include <stdint.h>

#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

/// Moves one element of `size` bytes (1, 2, 4 or 8; element-aligned pointers).
DXG_HD void move_element(char* dst, const char* src, int size) {
  switch (size) {
    case 8: *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src); break;
    case 4: *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src); break;
    case 2: *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src); break;
    default: *dst = *src; break;
  }
}

/// dst element = src element (bytes), or through f64 when `convert` (gradients).
DXG_HD void move_or_convert(char* dst, DType dst_type, const char* src, DType src_type, bool convert) {
  if (convert) store_from_double(dst, dst_type, load_as_double(src, src_type) + 0.0);
  else move_element(dst, src, dtype_size(dst_type));
}

/// Row-major position i of two differently shaped operands with the same element count
/// (reshape and its gradient): each side has its own layout (operand 0 of each).
struct RemapFn {
  Layout dst_layout, src_layout;
  char* dst;
  const char* src;
  DType dst_type, src_type;
  bool convert;
  DXG_HD void operator()(int64_t i) const {
    move_or_convert(dst + layout_offset(dst_layout, 0, i) * dtype_size(dst_type), dst_type,
                    src + layout_offset(src_layout, 0, i) * dtype_size(src_type), src_type, convert);
  }
};

/// Strided copy with optional conversion; operands 0 = dst, 1 = src (slice, pad, concat, split,
/// tile, broadcast_to, and their gradients).
struct StridedMoveFn {
  Layout layout;
  char* dst;
  const char* src;
  DType dst_type, src_type;
  bool convert;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    move_or_convert(dst + off[0] * dtype_size(dst_type), dst_type, src + off[1] * dtype_size(src_type), src_type,
                    convert);
  }
};

/// An iteration space split at one axis: position i = ((o * extent) + j) * inner.count + k,
/// with `outer` over the dimensions before the axis and `inner` over those after it (each a
/// layout with one operand per tensor of the kernel, same operand numbering on both sides).
struct AxisSpace {
  Layout outer, inner;
  int64_t extent;
  DXG_HD void split(int64_t i, int64_t& o, int64_t& j, int64_t& k) const {
    k = i % inner.count;
    i /= inner.count;
    j = i % extent;
    o = i / extent;
  }
  /// Offset of operand `op` at (o, position `j` along the axis with stride `axis_stride`, k).
  DXG_HD int64_t offset(int op, int64_t o, int64_t j, int64_t axis_stride, int64_t k) const {
    return layout_offset(outer, op, o) + j * axis_stride + layout_offset(inner, op, k);
  }
};

/// index_select and gather (and scatter_add's src gradient): over the destination's shape
/// split at the axis, dst(o, j, k) = src(o, idx(o, j, k), k). Operands: 0 = dst, 1 = idx,
/// 2 = src (index_select: idx's outer/inner strides are 0).
struct AxisIndexFn {
  AxisSpace space;
  char* dst;
  const char* idx;
  const char* src;
  int64_t dst_axis_stride, idx_axis_stride, src_axis_stride;
  DType dst_type, idx_type, src_type;
  bool convert;
  DXG_HD void operator()(int64_t i) const {
    int64_t o, j, k;
    space.split(i, o, j, k);
    const int64_t v = load_as_int(idx + space.offset(1, o, j, idx_axis_stride, k) * dtype_size(idx_type), idx_type);
    move_or_convert(dst + space.offset(0, o, j, dst_axis_stride, k) * dtype_size(dst_type), dst_type,
                    src + space.offset(2, o, v, src_axis_stride, k) * dtype_size(src_type), src_type, convert);
  }
};

/// Sets *flag when an index lies outside [0, limit) (checked before anything is written).
struct IndexRangeFn {
  Layout layout;
  const char* idx;
  DType idx_type;
  int64_t limit;
  int* flag;
  DXG_HD void operator()(int64_t i) const {
    const int64_t v = load_as_int(idx + layout_offset(layout, 0, i) * dtype_size(idx_type), idx_type);
    if (v < 0 || v >= limit) *flag = 1;  // benign race: every writer writes 1
  }
};

/// The sums of the indexing ops (scatter_add, the gradients of index_select and gather) in
/// three phases over a compact 8-byte buffer of the destination region (o, m, k), element
/// i = (o * extent + m) * inner.count + k, so no atomics are needed and the order is the
/// reference's:
///   1. AxisSumEndsFn (store = false), one thread per element: buffer = base(o, m, k) or 0;
///   2. AxisSumLinesFn, one thread per line (o, k): for j = 0, 1, ... < count,
///      buffer(o, idx(o, j, k), k) += src(o, j, k) (only line (o, k) touches those elements);
///   3. AxisSumEndsFn (store = true): dst(o, m, k) = buffer, rounded once (F, f64 sums) or
///      wrapped (I, u64 sums).
/// Operands of the space: 0 = dst, 1 = idx, 2 = src, 3 = base (the dst layout when none).
struct AxisSumEndsFn {
  AxisSpace space;  // over the destination region, extent = the destination's axis length
  char* dst;
  const char* base;  // null: start from 0
  void* buffer;
  int64_t dst_axis_stride, base_axis_stride;
  DType dst_type;
  bool store;
  DXG_HD void operator()(int64_t i) const {
    int64_t o, m, k;
    space.split(i, o, m, k);
    const bool is_float = dtype_is_float(dst_type);
    if (store) {
      char* out = dst + space.offset(0, o, m, dst_axis_stride, k) * dtype_size(dst_type);
      if (is_float) store_from_double(out, dst_type, static_cast<const double*>(buffer)[i]);
      else store_int_wrapping(out, dst_type, static_cast<int64_t>(static_cast<const uint64_t*>(buffer)[i]));
      return;
    }
    const char* b = base != nullptr ? base + space.offset(3, o, m, base_axis_stride, k) * dtype_size(dst_type) : nullptr;
    if (is_float) static_cast<double*>(buffer)[i] = b != nullptr ? load_as_double(b, dst_type) : 0.0;
    else static_cast<uint64_t*>(buffer)[i] = b != nullptr ? static_cast<uint64_t>(load_as_int(b, dst_type)) : 0u;
  }
};

struct AxisSumLinesFn {
  AxisSpace space;  // as AxisSumEndsFn's (extent = the destination's axis length)
  const char* idx;
  const char* src;
  void* buffer;
  int64_t idx_axis_stride, src_axis_stride;
  int64_t count;  // contributions per line: the index's extent along the axis
  DType idx_type, src_type;
  bool is_float;
  DXG_HD void operator()(int64_t line) const {
    const int64_t o = line / space.inner.count, k = line % space.inner.count;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t m = load_as_int(idx + space.offset(1, o, j, idx_axis_stride, k) * dtype_size(idx_type), idx_type);
      const int64_t at = (o * space.extent + m) * space.inner.count + k;
      const char* s = src + space.offset(2, o, j, src_axis_stride, k) * dtype_size(src_type);
      if (is_float) static_cast<double*>(buffer)[at] += load_as_double(s, src_type);
      else static_cast<uint64_t*>(buffer)[at] += static_cast<uint64_t>(load_as_int(s, src_type));
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_MOVEMENT_H_
