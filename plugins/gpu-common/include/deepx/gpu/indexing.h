// Index math shared by every strided kernel: a linear position in the (broadcast) output shape
// becomes an element offset in each operand. Kernel parameters are passed by value, so the
// layout is a fixed-size struct (kMaxDims dimensions after coalescing; the host refuses more).
#ifndef DEEPX_GPU_INDEXING_H_
#define DEEPX_GPU_INDEXING_H_

#include <stdint.h>

#include "deepx/gpu/portability.h"

namespace deepx::gpu {

/// Most dimensions a kernel sees, after the host has dropped size-1 dimensions and merged
/// dimensions that are contiguous in every operand.
constexpr int kMaxDims = 8;
/// Most operands of one strided kernel (output included): where has 4.
constexpr int kMaxOperands = 4;

/// The iteration space of an elementwise kernel: `shape` (row-major positions 0 .. count-1)
/// and, per operand, the stride in elements of each dimension (0 for a broadcast dimension).
struct Layout {
  int rank = 0;
  int operands = 0;
  int64_t count = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

/// Element offsets of position `i` in every operand. The loop runs from the innermost
/// dimension outwards, one division per dimension; rank 1 (every dense call, once the builder
/// has merged its dimensions) needs none: a 64-bit division per element would cost a
/// memory-bound kernel most of its bandwidth.
DXG_HD void layout_offsets(const Layout& l, int64_t i, int64_t* offsets) {
  for (int k = 0; k < kMaxOperands; ++k) offsets[k] = 0;
  if (l.rank == 1) {
    for (int k = 0; k < l.operands; ++k) offsets[k] = i * l.strides[k][0];
    return;
  }
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t extent = l.shape[d];
    const int64_t index = i % extent;
    i /= extent;
    for (int k = 0; k < l.operands; ++k) offsets[k] += index * l.strides[k][d];
  }
}

/// Offset of position `i` in one operand only (cheaper when the kernel needs one).
DXG_HD int64_t layout_offset(const Layout& l, int operand, int64_t i) {
  if (l.rank == 1) return i * l.strides[operand][0];
  int64_t offset = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t extent = l.shape[d];
    offset += (i % extent) * l.strides[operand][d];
    i /= extent;
  }
  return offset;
}

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_INDEXING_H_
