// A generic elementwise engine for kernels whose operands have different element types
// (comparisons -> bool, where(bool, T, T), cast T -> U) and for the math ops: `out[i] =
// f(in0[i], in1[i], ...)` with NumPy broadcasting, any strides (0 included) and byte offsets.
//
// Same plan as the arithmetic kernels in elementwise.cc: the loop is simplified (size-1 dims
// dropped, dims contiguous for every operand merged), rows whose operands all have unit stride
// run a `#pragma omp simd` body, other rows a strided one, and loops above the parallel
// threshold are split into one contiguous range per OpenMP thread. `f` must not throw (it may
// run on worker threads) and sees storage types (Half, Bool, ...), so each op decides how it
// computes (natively, in f32, or in f64 rounded once).
#ifndef DEEPX_PLUGINS_CPU_MAP_H_
#define DEEPX_PLUGINS_CPU_MAP_H_

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "common.h"
#include "strided.h"

namespace deepx::cpu {

/// Strides of `v` aligned to an iteration space of rank `rank` under NumPy broadcasting.
inline void broadcast_strides_into(const View& v, int rank, int64_t* out) {
  const int lead = rank - v.rank;
  for (int d = 0; d < rank; ++d) {
    out[d] = d < lead ? 0 : (v.shape[d - lead] == 1 ? 0 : v.strides[d - lead]);
  }
}

/// Fails with DX_SHAPE_MISMATCH unless `out`'s shape is the broadcast of the inputs' shapes.
template <size_t K>
void expect_broadcast_of(const View& out, const std::array<const View*, K>& ins) {
  int rank = 0;
  for (const View* v : ins) rank = v->rank > rank ? v->rank : rank;
  bool ok = out.rank == rank;
  for (int d = 0; ok && d < rank; ++d) {
    int64_t want = 1;
    for (const View* v : ins) {
      const int dv = d - (rank - v->rank);
      const int64_t s = dv >= 0 ? v->shape[dv] : 1;
      if (s == 1) continue;
      if (want != 1 && want != s) {
        fail(DX_SHAPE_MISMATCH, "cpu: input shapes do not broadcast (" +
                                    shape_string(ins[0]->shape, ins[0]->rank) + " and " +
                                    shape_string(v->shape, v->rank) + ")");
      }
      want = s;
    }
    ok = out.shape[d] == want;
  }
  if (!ok) {
    // Appended piecewise: `" " + std::string` trips GCC 12's false -Wrestrict.
    std::string message = "cpu: output shape ";
    message += shape_string(out.shape, out.rank);
    message += " is not the broadcast of the inputs' shapes";
    for (const View* v : ins) {
      message += ' ';
      message += shape_string(v->shape, v->rank);
    }
    fail(DX_SHAPE_MISMATCH, std::move(message));
  }
}

namespace map_detail {

template <class Out, class... In, class F, size_t... I>
void run_row(Out* o, const std::tuple<const In*...>& p, int64_t n, const int64_t* st, F& f,
             std::index_sequence<I...>) {
  bool unit = st[0] == 1;
  ((unit = unit && st[I + 1] == 1), ...);
  if (unit) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = f(std::get<I>(p)[i]...);
  } else {
    const int64_t so = st[0];
    for (int64_t i = 0; i < n; ++i) o[i * so] = f(std::get<I>(p)[i * st[I + 1]]...);
  }
}

}  // namespace map_detail

/// out[i] = f(ins[k][i]...) over the broadcast iteration space of `out` (shapes already
/// checked). `work` is a rough per-element cost (1 = a load, an op and a store) that lowers
/// the element count at which the loop goes parallel.
template <class Out, class... In, class F>
void map_elements(const View& out, const std::array<const View*, sizeof...(In)>& ins, F f,
                  int64_t work = 1) {
  constexpr int K = static_cast<int>(sizeof...(In));
  if (out.count() == 0) return;
  StridedLoop<K + 1> loop;
  loop.rank = out.rank;
  for (int d = 0; d < out.rank; ++d) {
    loop.shape[d] = out.shape[d];
    loop.strides[0][d] = out.strides[d];
  }
  for (int k = 0; k < K; ++k) broadcast_strides_into(*ins[k], out.rank, loop.strides[k + 1]);
  loop.simplify();
  Out* const po = out.data<Out>();
  const auto bases = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<const In*...>(ins[I]->template data<const In>()...);
  }(std::index_sequence_for<In...>{});
  auto row = [&, po, bases](int64_t n, const int64_t* off, const int64_t* st) {
    const auto p = [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<const In*...>((std::get<I>(bases) + off[I + 1])...);
    }(std::index_sequence_for<In...>{});
    map_detail::run_row<Out, In...>(po + off[0], p, n, st, f, std::index_sequence_for<In...>{});
  };
  for_each_row(loop, row, work);
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_MAP_H_
