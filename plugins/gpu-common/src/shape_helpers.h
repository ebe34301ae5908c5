// Host-side helpers of the shape and indexing kernels (movement_shape.cu, indexing.cu):
// sub-views, strided moves and fills on the call's stream, axis attributes.
#ifndef DEEPX_PLUGINS_GPU_COMMON_SHAPE_HELPERS_H_
#define DEEPX_PLUGINS_GPU_COMMON_SHAPE_HELPERS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime.h"

namespace deepx::gpu {

/// The view of `v`'s storage starting `offset` elements further, with its own shape and strides.
View sub_view(const View& v, int64_t offset, std::vector<int64_t> shape, std::vector<int64_t> strides);
/// dst = src (src broadcast to dst's shape): element bytes, or through f64 rounded once with
/// `convert` (gradients; -0 becomes +0). A compact-to-compact byte move is one memcpy.
void move_view(Exec& exec, const View& dst, const View& src, bool convert);
/// Every element of `v` = the element whose bits are the low dtype_size bytes of `bits`.
void fill_view(Exec& exec, const View& v, uint64_t bits);
/// The i64 `axis` attribute in `slot` (default 0) for rank `rank`; out of range = DX_OUT_OF_RANGE.
int64_t normal_axis(const dx_kernel_call_t* call, int slot, int rank, const char* op);

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_SHAPE_HELPERS_H_
