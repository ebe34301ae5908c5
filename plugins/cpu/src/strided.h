// The N-d iteration engine behind every elementwise kernel: N operands (outputs and inputs)
// that share one iteration shape, each with its own element strides (0 = broadcast).
//
// The loop is first simplified (size-1 dims dropped, dims that are contiguous for every operand
// merged), so a compact tensor, or a compact tensor with a scalar, becomes one flat row. Rows
// are handed to a callback that picks a vectorised body for the stride pattern it sees. Large
// loops are split into one contiguous range of elements per OpenMP thread; small ones run on
// the calling thread.
#ifndef DEEPX_PLUGINS_CPU_STRIDED_H_
#define DEEPX_PLUGINS_CPU_STRIDED_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace deepx::cpu {

template <int N>
struct StridedLoop {
  int rank = 0;
  // Only the first `rank` entries are meaningful.
  int64_t shape[kMaxRank];
  int64_t strides[N][kMaxRank];

  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }

  /// Drops size-1 dims and merges neighbours that are contiguous for every operand.
  void simplify() {
    int out_rank = 0;
    int64_t new_shape[kMaxRank];
    int64_t new_strides[N][kMaxRank];
    for (int d = 0; d < rank; ++d) {
      if (shape[d] == 1) continue;
      bool mergeable = out_rank > 0;
      for (int k = 0; k < N && mergeable; ++k) {
        mergeable = new_strides[k][out_rank - 1] == strides[k][d] * shape[d];
      }
      if (mergeable) {
        new_shape[out_rank - 1] *= shape[d];
        for (int k = 0; k < N; ++k) new_strides[k][out_rank - 1] = strides[k][d];
      } else {
        new_shape[out_rank] = shape[d];
        for (int k = 0; k < N; ++k) new_strides[k][out_rank] = strides[k][d];
        ++out_rank;
      }
    }
    rank = out_rank;
    for (int d = 0; d < rank; ++d) {
      shape[d] = new_shape[d];
      for (int k = 0; k < N; ++k) strides[k][d] = new_strides[k][d];
    }
  }
};

/// The simplified loop over `first`'s shape with one operand per view, in order, each walking
/// that view's strides (of its first first.rank dims: the views have first's shape, or it as a
/// prefix).
template <class... Rest>
StridedLoop<1 + sizeof...(Rest)> loop_over(const View& first, const Rest&... rest) {
  constexpr int kOperands = 1 + static_cast<int>(sizeof...(Rest));
  const View* const views[kOperands] = {&first, &rest...};
  StridedLoop<kOperands> loop;
  loop.rank = first.rank;
  for (int d = 0; d < first.rank; ++d) {
    loop.shape[d] = first.shape[d];
    for (int k = 0; k < kOperands; ++k) loop.strides[k][d] = views[k]->strides[d];
  }
  loop.simplify();
  return loop;
}

/// Number of threads a parallel region would get here (1 inside an active parallel region).
inline int available_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

/// Calls `row(n, offsets, inner_strides)` for consecutive runs of elements along the innermost
/// dim, covering elements [begin, end) of the loop in row-major order. `offsets[k]` is operand
/// k's element offset of the run's first element.
template <int N, class RowFn>
void run_range(const StridedLoop<N>& loop, int64_t begin, int64_t end, RowFn& row) {
  if (begin >= end) return;
  const int rank = loop.rank;
  int64_t offsets[N] = {};
  int64_t inner_strides[N] = {};
  if (rank == 0) {
    row(int64_t{1}, offsets, inner_strides);
    return;
  }
  int64_t index[kMaxRank];
  int64_t rest = begin;
  for (int d = rank - 1; d >= 0; --d) {
    index[d] = rest % loop.shape[d];
    rest /= loop.shape[d];
    for (int k = 0; k < N; ++k) offsets[k] += index[d] * loop.strides[k][d];
  }
  for (int k = 0; k < N; ++k) inner_strides[k] = loop.strides[k][rank - 1];
  const int64_t inner = loop.shape[rank - 1];
  int64_t position = begin;
  while (position < end) {
    const int64_t n = std::min(inner - index[rank - 1], end - position);
    row(n, static_cast<const int64_t*>(offsets), static_cast<const int64_t*>(inner_strides));
    position += n;
    if (position >= end) break;
    // Advance the odometer by n along the inner dim, carrying into the outer dims.
    index[rank - 1] += n;
    for (int k = 0; k < N; ++k) offsets[k] += n * inner_strides[k];
    for (int d = rank - 1; d > 0 && index[d] == loop.shape[d]; --d) {
      index[d] = 0;
      for (int k = 0; k < N; ++k) offsets[k] -= loop.shape[d] * loop.strides[k][d];
      ++index[d - 1];
      for (int k = 0; k < N; ++k) offsets[k] += loop.strides[k][d - 1];
    }
  }
}

/// Calls body(begin, end) over [0, total), split into one contiguous range per thread when
/// total * work_per_element reaches kParallelThreshold. `body` must not throw.
template <class Body>
void for_each_range(int64_t total, Body&& body, int64_t work_per_element = 1) {
  if (total <= 0) return;
  const int threads = total * work_per_element < kParallelThreshold ? 1 : available_threads();
  if (threads <= 1) {
    body(int64_t{0}, total);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t team = omp_get_num_threads();
    const int64_t me = omp_get_thread_num();
    int64_t chunk = (total + team - 1) / team;
    chunk = (chunk + 63) / 64 * 64;
    const int64_t begin = std::min(total, me * chunk);
    const int64_t end = std::min(total, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

/// Runs the whole loop, in parallel when count * work_per_element reaches kParallelThreshold.
/// `row` must not throw (it may run on OpenMP worker threads).
template <int N, class RowFn>
void for_each_row(const StridedLoop<N>& loop, RowFn&& row, int64_t work_per_element = 1) {
  const int64_t total = loop.count();
  if (total == 0) return;
  const int threads = total * work_per_element < kParallelThreshold ? 1 : available_threads();
  if (threads <= 1) {
    run_range(loop, 0, total, row);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t team = omp_get_num_threads();
    const int64_t me = omp_get_thread_num();
    // Chunks are multiples of 64 elements so neighbouring threads rarely share a cache line.
    int64_t chunk = (total + team - 1) / team;
    chunk = (chunk + 63) / 64 * 64;
    const int64_t begin = std::min(total, me * chunk);
    const int64_t end = std::min(total, begin + chunk);
    run_range(loop, begin, end, row);
  }
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_STRIDED_H_
