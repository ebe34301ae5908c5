// The launcher of the row bodies of include/deepx/gpu/nn.h (one block per row: `kPhases` block
// reductions in f64 through __shared__ memory and barriers, then the write pass), with its
// thread-by-thread emulation for the gpuemu build, and the small host helpers that the
// nn/conv/attention kernels share.
#ifndef DEEPX_PLUGINS_GPU_COMMON_NN_LAUNCH_H_
#define DEEPX_PLUGINS_GPU_COMMON_NN_LAUNCH_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepx/gpu/backward.h"
#include "deepx/gpu/nn.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {

#if defined(DXG_HOST_EMULATION)

template <class Fn>
void launch_rows(Exec&, const Fn& fn, int64_t rows) {
  std::vector<double> shared(kReduceThreads);
  double results[Fn::kPhases > 0 ? Fn::kPhases : 1] = {};
  for (int64_t o = 0; o < rows; ++o) {
    for (int ph = 0; ph < Fn::kPhases; ++ph) {
      for (int t = 0; t < kReduceThreads; ++t) shared[t] = fn.partial(o, t, kReduceThreads, ph, results);
      const bool is_max = fn.is_max(ph);
      for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
        for (int t = 0; t < stride; ++t) shared[t] = row_combine(is_max, shared[t], shared[t + stride]);
      }
      results[ph] = shared[0];
    }
    for (int t = 0; t < kReduceThreads; ++t) fn.write(o, t, kReduceThreads, results);
  }
}

#else

template <class Fn>
__global__ void rows_kernel(Fn fn, int64_t rows) {
  __shared__ double shared[kReduceThreads];
  double results[Fn::kPhases > 0 ? Fn::kPhases : 1];
  const int t = static_cast<int>(threadIdx.x);
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    for (int ph = 0; ph < Fn::kPhases; ++ph) {
      shared[t] = fn.partial(o, t, kReduceThreads, ph, results);
      __syncthreads();
      const bool is_max = fn.is_max(ph);
      for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) shared[t] = row_combine(is_max, shared[t], shared[t + stride]);
        __syncthreads();
      }
      results[ph] = shared[0];
      __syncthreads();
    }
    fn.write(o, t, kReduceThreads, results);
    __syncthreads();
  }
}

/// One block of kReduceThreads per row (grid-stride over rows).
template <class Fn>
void launch_rows(Exec& exec, const Fn& fn, int64_t rows) {
  if (rows <= 0) return;
  const int64_t blocks = std::min<int64_t>(rows, kMaxBlocks);
  rows_kernel<Fn><<<static_cast<unsigned>(blocks), kReduceThreads, 0, exec.stream()>>>(fn, rows);
  check(gpuGetLastError(), "row kernel launch");
}

#endif

// ---- host helpers ------------------------------------------------------------------------------

using ScratchPtr = std::unique_ptr<Exec::Scratch>;

inline int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

inline ScratchPtr scratch(Exec& exec, int64_t elements, int element_size) {
  return std::make_unique<Exec::Scratch>(exec, static_cast<uint64_t>(std::max<int64_t>(elements, 0)) *
                                                   static_cast<uint64_t>(element_size));
}

/// A zero-filled compact f64 buffer of `elements`.
inline ScratchPtr zeroed_f64(Exec& exec, int64_t elements) {
  ScratchPtr s = scratch(exec, elements, 8);
  if (elements > 0) check(gpuMemsetAsync(s->get(), 0, static_cast<size_t>(elements) * 8, exec.stream()), "memset");
  return s;
}

/// A compact f64 copy of a float (or bool) tensor, in the tensor's own shape.
inline ScratchPtr to_f64(Exec& exec, const View& v) {
  ScratchPtr s = scratch(exec, v.count(), 8);
  const OperandShape compact{v.shape, compact_strides(v.shape)};
  const Layout l = make_layout(v.shape, {compact, v.operand()});
  launch_for_each(exec, ScaleFn{l, static_cast<char*>(s->get()), v.base, DType::F64, v.dtype, 1.0}, l.count);
  return s;
}

/// A compact f64 copy of `v` broadcast to `shape`.
inline ScratchPtr to_f64_broadcast(Exec& exec, const View& v, const std::vector<int64_t>& shape) {
  ScratchPtr s = scratch(exec, count_of(shape), 8);
  const Layout l = make_layout(shape, {OperandShape{shape, compact_strides(shape)}, v.operand()});
  launch_for_each(exec, ScaleFn{l, static_cast<char*>(s->get()), v.base, DType::F64, v.dtype, 1.0}, l.count);
  return s;
}

/// A compact copy of `v` (same dtype, bytes unchanged); the returned view points into `holder`.
inline View compact_copy(Exec& exec, const View& v, ScratchPtr& holder) {
  holder = scratch(exec, v.count(), dtype_size(v.dtype));
  View c = v;
  c.base = static_cast<char*>(holder->get());
  c.strides = compact_strides(v.shape);
  const Layout l = make_layout(v.shape, {c.operand(), v.operand()});
  dispatch_size(v.dtype, [&](auto tag) {
    using W = tag_t<decltype(tag)>;
    launch_for_each(exec, CopyWordsFn<W>{l, reinterpret_cast<W*>(c.base), reinterpret_cast<const W*>(v.base)}, l.count);
  });
  return c;
}

/// An output the kernel writes through `out`: the output itself, or, when it aliases one of
/// the kernel's inputs, a compact buffer (`staged`, kept alive by `holder`) that unstage()
/// copies into place after the kernel has read its inputs.
struct StagedOutput {
  View out;
  ScratchPtr holder;
  bool staged = false;
};

/// `g` (nullopt: not wanted, nothing staged) staged when its base is that of one of `inputs`.
inline StagedOutput stage_if_aliased(Exec& exec, const std::optional<View>& g, const std::vector<const View*>& inputs) {
  StagedOutput t;
  if (!g) return t;
  t.out = *g;
  for (const View* v : inputs) t.staged |= v->base == g->base;
  if (t.staged) {
    t.holder = scratch(exec, g->count(), dtype_size(g->dtype));
    t.out.base = static_cast<char*>(t.holder->get());
    t.out.strides = compact_strides(g->shape);
  }
  return t;
}

/// Copies a staged output into `g` (element bytes unchanged); nothing when it was not staged.
inline void unstage(Exec& exec, const StagedOutput& t, const std::optional<View>& g) {
  if (!t.staged) return;
  const Layout c = make_layout(g->shape, {g->operand(), t.out.operand()});
  dispatch_size(g->dtype, [&](auto tag) {
    using W = tag_t<decltype(tag)>;
    launch_for_each(exec, CopyWordsFn<W>{c, g->data<W>(), t.out.data<W>()}, c.count);
  });
}

/// Zero-fills a tensor of any dtype and layout.
inline void zero_fill(Exec& exec, const View& v) {
  const Layout l = make_layout(v.shape, {v.operand()});
  launch_for_each(exec, ZeroBytesFn{l, v.base, dtype_size(v.dtype)}, l.count);
}

/// An optional input: nullopt for a null tensor (or a missing slot).
inline std::optional<View> optional_input(const dx_kernel_call_t* call, int i, const char* what) {
  if (i >= call->num_inputs || call->inputs[i] == nullptr) return std::nullopt;
  return make_view(call->inputs[i], what);
}

template <class T>
T* data_or_null(const std::optional<View>& v) {
  return v ? v->data<T>() : nullptr;
}

/// The bias epilogue of linear and conv2d: y = acc + bias, rounded once into y (any layout).
/// `acc` is a compact f64 buffer of y's shape; `bias` is the bias operand broadcast to y's
/// shape (all-zero strides and a null `b` when there is no bias).
inline void round_with_bias(Exec& exec, const View& y, const ScratchPtr& acc, const OperandShape& bias,
                            const std::optional<View>& b) {
  const Layout l = make_layout(y.shape, {y.operand(), OperandShape{y.shape, compact_strides(y.shape)}, bias});
  dispatch_float(y.dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    launch_for_each(exec, BiasRoundFn<T>{l, y.data<T>(), static_cast<const double*>(acc->get()), data_or_null<T>(b)},
                    l.count);
  });
}

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_NN_LAUNCH_H_
