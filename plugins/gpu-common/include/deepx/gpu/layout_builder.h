// Host side of indexing.h: builds a Layout from DLPack-style shapes and strides, applying
// NumPy broadcasting and collapsing the iteration space (size-1 dimensions dropped, dimensions
// contiguous in every operand merged), so most kernels run with rank 1 or 2 and one division
// per element. Plain C++ (no GPU API): the plugins and the host-emulation tests share it.
#ifndef DEEPX_GPU_LAYOUT_BUILDER_H_
#define DEEPX_GPU_LAYOUT_BUILDER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "deepx/gpu/indexing.h"

namespace deepx::gpu {

/// An operand as the host sees it: shape and strides in elements (explicit, never null).
struct OperandShape {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

/// NumPy broadcast of several shapes; nullopt when they are incompatible.
inline std::optional<std::vector<int64_t>> broadcast_shapes(
    const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = s.size() > rank ? s.size() : rank;
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t d = rank - s.size() + i;
      if (s[i] == out[d] || s[i] == 1) continue;
      if (out[d] == 1) {
        out[d] = s[i];
        continue;
      }
      return std::nullopt;
    }
  }
  return out;
}

/// Builds the layout over `out_shape` for `operands` (operand 0 is usually the output). Each
/// operand's shape must broadcast to `out_shape` (checked by the caller). Returns nullopt when
/// the collapsed rank still exceeds kMaxDims or there are more than kMaxOperands operands.
inline std::optional<Layout> build_layout(const std::vector<int64_t>& out_shape,
                                          const std::vector<OperandShape>& operands) {
  if (operands.size() > static_cast<size_t>(kMaxOperands)) return std::nullopt;
  const size_t rank = out_shape.size();
  const size_t n = operands.size();
  // Strides aligned to the output's rank (0 for broadcast and missing dimensions).
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    const auto& op = operands[k];
    for (size_t i = 0; i < op.shape.size(); ++i) {
      const size_t d = rank - op.shape.size() + i;
      strides[k][d] = op.shape[i] == 1 ? 0 : op.strides[i];
    }
  }
  Layout l;
  l.operands = static_cast<int>(n);
  l.count = 1;
  for (int64_t e : out_shape) l.count *= e;
  // Keep dimensions of extent > 1, then merge an outer dimension into the next inner one
  // when every operand steps through them as one.
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> kept(n);
  for (size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;
    shape.push_back(out_shape[d]);
    for (size_t k = 0; k < n; ++k) kept[k].push_back(strides[k][d]);
  }
  std::vector<int64_t> merged_shape;
  std::vector<std::vector<int64_t>> merged(n);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!merged_shape.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < n && mergeable; ++k) {
        mergeable = merged[k].back() == kept[k][d] * shape[d];
      }
      if (mergeable) {
        merged_shape.back() *= shape[d];
        for (size_t k = 0; k < n; ++k) merged[k].back() = kept[k][d];
        continue;
      }
    }
    merged_shape.push_back(shape[d]);
    for (size_t k = 0; k < n; ++k) merged[k].push_back(kept[k][d]);
  }
  if (merged_shape.size() > static_cast<size_t>(kMaxDims)) return std::nullopt;
  l.rank = static_cast<int>(merged_shape.size());
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = merged_shape[d];
    for (size_t k = 0; k < n; ++k) l.strides[k][d] = merged[k][d];
  }
  return l;
}

/// Compact row-major strides of a shape.
inline std::vector<int64_t> compact_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = stride;
    stride *= shape[d];
  }
  return s;
}

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_LAYOUT_BUILDER_H_
