// The __global__ wrappers that run the DXG_HD bodies of include/deepx/gpu/ on a GPU, and the
// host functions that launch them. The same phases run in tests/emulator.h on the CPU.
#ifndef DEEPX_PLUGINS_GPU_COMMON_LAUNCH_H_
#define DEEPX_PLUGINS_GPU_COMMON_LAUNCH_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "deepx/gpu/backward.h"
#include "deepx/gpu/gemm.h"
#include "deepx/gpu/reduce.h"
#include "runtime.h"

namespace deepx::gpu {

constexpr int kElementwiseThreads = 256;
/// Grid size cap of grid-stride loops (enough blocks to fill any current GPU several times).
constexpr int64_t kMaxBlocks = 65535;

/// Blocks per output of a split reduction (launch_reduce_split): enough for about 2048 blocks
/// in all, each folding at least 16 elements per thread; 1 (no split) for calls with many
/// outputs or short rows. A function of the call's shape only, so a result does not depend on
/// the device it ran on.
inline int reduce_splits(int64_t outputs, int64_t inner_count) {
  if (outputs <= 0) return 1;
  const int64_t by_work = inner_count / (int64_t{kReduceThreads} * 16);
  const int64_t by_grid = (2048 + outputs - 1) / outputs;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({by_work, by_grid, 1024})));
}

/// Phase 2 of a split reduction for output o: its `splits` partials folded in order, then
/// finished.
template <class Fn>
DXG_HD void finish_split(const Fn& fn, int64_t o, int splits, const typename Fn::Acc* partials) {
  typename Fn::Acc acc = partials[o * splits];
  for (int s = 1; s < splits; ++s) acc = fn.combine(acc, partials[o * splits + s]);
  fn.finish(o, acc);
}

#if defined(DXG_HOST_EMULATION)
// ---- grid emulation: the same phases, thread by thread, barrier by barrier -------------------

template <class Fn>
void launch_for_each(gpuStream_t, const Fn& fn, int64_t n) {
  for (int64_t i = 0; i < n; ++i) fn(i);
}
template <class Fn>
void launch_for_each(Exec&, const Fn& fn, int64_t n) {
  for (int64_t i = 0; i < n; ++i) fn(i);
}

/// One block's tree: thread t stores part(t) in shared[t], then the tree combines them with
/// fn's combine; returns the root.
template <class Fn, class C, class Part>
C block_tree(const Fn& fn, std::vector<C>& shared, const Part& part) {
  for (int t = 0; t < kReduceThreads; ++t) shared[t] = part(t);
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < kReduceThreads; ++t) tree_step(shared.data(), t, stride, fn);
  }
  return shared[0];
}

/// One block's fold of output o: thread t folds elements first + t, first + t + step, ...,
/// then the tree; returns the block's result.
template <class Fn>
typename Fn::Acc block_fold(const Fn& fn, std::vector<typename Fn::Acc>& shared, int64_t o,
                            int first, int step) {
  return block_tree(fn, shared, [&](int t) { return fn.partial(o, first + t, step); });
}

template <class Fn>
void launch_reduce(Exec&, const Fn& fn, int64_t outputs) {
  std::vector<typename Fn::Acc> shared(kReduceThreads);
  for (int64_t o = 0; o < outputs; ++o) fn.finish(o, block_fold(fn, shared, o, 0, kReduceThreads));
}

template <class Fn>
void launch_reduce_split(Exec& exec, const Fn& fn, int64_t outputs, int64_t inner_count) {
  const int splits = reduce_splits(outputs, inner_count);
  if (splits == 1) return launch_reduce(exec, fn, outputs);
  using Acc = typename Fn::Acc;
  std::vector<Acc> shared(kReduceThreads), partials(static_cast<size_t>(outputs * splits));
  for (int64_t b = 0; b < outputs * splits; ++b) {
    const int s = static_cast<int>(b % splits);
    partials[b] = block_fold(fn, shared, b / splits, s * kReduceThreads, splits * kReduceThreads);
  }
  for (int64_t o = 0; o < outputs; ++o) finish_split(fn, o, splits, partials.data());
}

template <class T>
void launch_softmax(Exec&, const SoftmaxFn<T>& fn, int64_t rows) {
  using C = typename SoftmaxFn<T>::C;
  std::vector<C> shared(kReduceThreads);
  SoftmaxFn<T> maxer = fn, summer = fn;
  maxer.summing = false;
  summer.summing = true;
  for (int64_t o = 0; o < rows; ++o) {
    const C max = block_tree(maxer, shared, [&](int t) { return fn.partial_max(o, t, kReduceThreads); });
    const C sum = block_tree(summer, shared, [&](int t) { return fn.partial_sum(o, t, kReduceThreads, max); });
    for (int t = 0; t < kReduceThreads; ++t) fn.write(o, t, kReduceThreads, max, sum);
  }
}

template <class T>
void launch_softmax_grad(Exec&, const SoftmaxGradFn<T>& fn, int64_t rows) {
  using C = typename SoftmaxGradFn<T>::C;
  std::vector<C> shared(kReduceThreads);
  SoftmaxGradFn<T> maxer = fn, summer = fn;
  maxer.summing = false;
  summer.summing = true;
  for (int64_t o = 0; o < rows; ++o) {
    const C max = block_tree(maxer, shared, [&](int t) { return fn.partial_max(o, t, kReduceThreads); });
    const C sum = block_tree(summer, shared, [&](int t) { return fn.partial_sum(o, t, kReduceThreads, max); });
    const C dot = block_tree(summer, shared, [&](int t) { return fn.partial_dot(o, t, kReduceThreads, max); });
    for (int t = 0; t < kReduceThreads; ++t) fn.write(o, t, kReduceThreads, max, sum, dot);
  }
}

template <class T, class Out>
void launch_gemm(Exec&, const GemmTile<T, Out>& g) {
  using Tile = GemmTile<T, Out>;
  const int64_t tiles_n = (g.s.n + Tile::BN - 1) / Tile::BN;
  const int64_t tiles_m = (g.s.m + Tile::BM - 1) / Tile::BM;
  auto sh = std::make_unique<typename Tile::Shared>();
  std::vector<typename Tile::Registers> regs(Tile::kThreads);
  for (int64_t batch = 0; batch < g.s.batch.count; ++batch) {
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
      for (int64_t tn = 0; tn < tiles_n; ++tn) {
        for (int t = 0; t < Tile::kThreads; ++t) g.clear(regs[t]);
        for (int64_t k0 = 0; k0 < g.s.k; k0 += Tile::BK) {
          for (int t = 0; t < Tile::kThreads; ++t) g.load(*sh, batch, tm, tn, k0, t);
          for (int t = 0; t < Tile::kThreads; ++t) g.compute(*sh, regs[t], t);
        }
        for (int t = 0; t < Tile::kThreads; ++t) g.store(regs[t], batch, tm, tn, t);
      }
    }
  }
}

#else

template <class Fn>
__global__ void for_each_kernel(Fn fn, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    fn(i);
  }
}

/// Runs fn(i) for i in [0, n) on the call's stream.
template <class Fn>
void launch_for_each(gpuStream_t stream, const Fn& fn, int64_t n) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kElementwiseThreads - 1) / kElementwiseThreads,
                                           kMaxBlocks);
  for_each_kernel<Fn><<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(fn, n);
  check(gpuGetLastError(), "kernel launch");
}
template <class Fn>
void launch_for_each(Exec& exec, const Fn& fn, int64_t n) {
  launch_for_each(exec.stream(), fn, n);
}

/// One block's tree over shared memory: thread t (this thread) stores `value` in shared[t],
/// then the tree combines them with fn's combine; every thread gets the root, and shared is
/// free for the block's next tree on return.
template <class Fn, class C, class V>
__device__ C block_tree(const Fn& fn, C* shared, int t, const V& value) {
  shared[t] = value;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    tree_step(shared, t, stride, fn);
    __syncthreads();
  }
  const C result = shared[0];
  __syncthreads();  // shared is reused by the block's next tree
  return result;
}

/// One block's fold of output o: thread t folds elements first + t, first + t + step, ...,
/// then the tree over shared memory; every thread gets the block's result.
template <class Fn>
__device__ typename Fn::Acc block_fold(const Fn& fn, typename Fn::Acc* shared, int64_t o,
                                       int first, int step) {
  const int t = static_cast<int>(threadIdx.x);
  return block_tree(fn, shared, t, fn.partial(o, first + t, step));
}

/// One block per output element (grid-stride over outputs): partial folds, then the tree.
template <class Fn>
__global__ void reduce_kernel(Fn fn, int64_t outputs) {
  __shared__ typename Fn::Acc shared[kReduceThreads];
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const typename Fn::Acc result = block_fold(fn, shared, o, 0, kReduceThreads);
    if (threadIdx.x == 0) fn.finish(o, result);
  }
}

template <class Fn>
void launch_reduce(Exec& exec, const Fn& fn, int64_t outputs) {
  if (outputs <= 0) return;
  const int64_t blocks = std::min<int64_t>(outputs, kMaxBlocks);
  reduce_kernel<Fn><<<static_cast<unsigned>(blocks), kReduceThreads, 0, exec.stream()>>>(fn, outputs);
  check(gpuGetLastError(), "reduction launch");
}

/// Phase 1 of a split reduction: block b = o * splits + s folds the reduced elements
/// s * T + t, s * T + t + splits * T, ... (T threads) of output o and writes its tree's result
/// to partials[b].
template <class Fn>
__global__ void reduce_split_kernel(Fn fn, int64_t outputs, int splits, typename Fn::Acc* partials) {
  __shared__ typename Fn::Acc shared[kReduceThreads];
  for (int64_t b = blockIdx.x; b < outputs * splits; b += gridDim.x) {
    const int s = static_cast<int>(b % splits);
    const typename Fn::Acc result =
        block_fold(fn, shared, b / splits, s * kReduceThreads, splits * kReduceThreads);
    if (threadIdx.x == 0) partials[b] = result;
  }
}

/// Phase 2: one thread per output folds its `splits` partials in order, then finishes.
template <class Fn>
__global__ void reduce_split_finish_kernel(Fn fn, int64_t outputs, int splits,
                                           const typename Fn::Acc* partials) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += step) {
    finish_split(fn, o, splits, partials);
  }
}

/// A reduction whose few outputs have long rows (sum of a whole tensor): each output is split
/// over reduce_splits() blocks whose partial results are folded in a fixed order (deterministic
/// run to run); otherwise launch_reduce.
template <class Fn>
void launch_reduce_split(Exec& exec, const Fn& fn, int64_t outputs, int64_t inner_count) {
  const int splits = reduce_splits(outputs, inner_count);
  if (splits == 1) return launch_reduce(exec, fn, outputs);
  using Acc = typename Fn::Acc;
  Exec::Scratch partials(exec, static_cast<uint64_t>(outputs * splits) * sizeof(Acc));
  Acc* p = static_cast<Acc*>(partials.get());
  const int64_t blocks = std::min<int64_t>(outputs * splits, kMaxBlocks);
  reduce_split_kernel<Fn><<<static_cast<unsigned>(blocks), kReduceThreads, 0, exec.stream()>>>(fn, outputs, splits, p);
  check(gpuGetLastError(), "reduction launch");
  const int64_t finish_blocks = std::min<int64_t>((outputs + kElementwiseThreads - 1) / kElementwiseThreads, kMaxBlocks);
  reduce_split_finish_kernel<Fn><<<static_cast<unsigned>(finish_blocks), kElementwiseThreads, 0, exec.stream()>>>(fn, outputs, splits, p);
  check(gpuGetLastError(), "reduction launch");
}

/// One block per softmax row: max fold + tree, sum fold + tree, then the normalised writes.
template <class T>
__global__ void softmax_kernel(SoftmaxFn<T> fn, int64_t rows) {
  using C = typename SoftmaxFn<T>::C;
  __shared__ C shared[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  SoftmaxFn<T> maxer = fn;
  maxer.summing = false;
  SoftmaxFn<T> summer = fn;
  summer.summing = true;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const C max = block_tree(maxer, shared, t, fn.partial_max(o, t, kReduceThreads));
    const C sum = block_tree(summer, shared, t, fn.partial_sum(o, t, kReduceThreads, max));
    fn.write(o, t, kReduceThreads, max, sum);
  }
}

template <class T>
void launch_softmax(Exec& exec, const SoftmaxFn<T>& fn, int64_t rows) {
  if (rows <= 0) return;
  const int64_t blocks = std::min<int64_t>(rows, kMaxBlocks);
  softmax_kernel<T><<<static_cast<unsigned>(blocks), kReduceThreads, 0, exec.stream()>>>(fn, rows);
  check(gpuGetLastError(), "softmax launch");
}

/// One block per softmax-gradient row: three fold + tree phases, then the writes.
template <class T>
__global__ void softmax_grad_kernel(SoftmaxGradFn<T> fn, int64_t rows) {
  using C = typename SoftmaxGradFn<T>::C;
  __shared__ C shared[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  SoftmaxGradFn<T> maxer = fn;
  maxer.summing = false;
  SoftmaxGradFn<T> summer = fn;
  summer.summing = true;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const C max = block_tree(maxer, shared, t, fn.partial_max(o, t, kReduceThreads));
    const C sum = block_tree(summer, shared, t, fn.partial_sum(o, t, kReduceThreads, max));
    const C dot = block_tree(summer, shared, t, fn.partial_dot(o, t, kReduceThreads, max));
    fn.write(o, t, kReduceThreads, max, sum, dot);
  }
}

template <class T>
void launch_softmax_grad(Exec& exec, const SoftmaxGradFn<T>& fn, int64_t rows) {
  if (rows <= 0) return;
  const int64_t blocks = std::min<int64_t>(rows, kMaxBlocks);
  softmax_grad_kernel<T><<<static_cast<unsigned>(blocks), kReduceThreads, 0, exec.stream()>>>(fn, rows);
  check(gpuGetLastError(), "softmax gradient launch");
}

/// Tiled GEMM: grid (tiles of N, tiles of M, batches), kThreads per block.
template <class T, class Out>
__global__ void gemm_kernel(GemmTile<T, Out> g) {
  using Tile = GemmTile<T, Out>;
  __shared__ typename Tile::Shared sh;
  typename Tile::Registers r;
  const int t = static_cast<int>(threadIdx.x);
  const int64_t tile_n = blockIdx.x, tile_m = blockIdx.y, batch = blockIdx.z;
  g.clear(r);
  for (int64_t k0 = 0; k0 < g.s.k; k0 += Tile::BK) {
    g.load(sh, batch, tile_m, tile_n, k0, t);
    __syncthreads();
    g.compute(sh, r, t);
    __syncthreads();
  }
  g.store(r, batch, tile_m, tile_n, t);
}

/// Launches one grid per chunk of at most 65535 batches and tile rows (grid y/z limits).
template <class T, class Out>
void launch_gemm(Exec& exec, const GemmTile<T, Out>& g) {
  using Tile = GemmTile<T, Out>;
  const int64_t tiles_n = (g.s.n + Tile::BN - 1) / Tile::BN;
  const int64_t tiles_m = (g.s.m + Tile::BM - 1) / Tile::BM;
  const int64_t batches = g.s.batch.count;
  if (tiles_n == 0 || tiles_m == 0 || batches == 0) return;
  if (tiles_n > 0x7fffffff || tiles_m > 65535 || batches > 65535) {
    fail(DX_UNSUPPORTED, DXG_BACKEND_NAME ": matmul: problem too large for one grid");
  }
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                  static_cast<unsigned>(batches));
  gemm_kernel<T, Out><<<grid, Tile::kThreads, 0, exec.stream()>>>(g);
  check(gpuGetLastError(), "gemm launch");
}

#endif  // DXG_HOST_EMULATION

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_LAUNCH_H_
