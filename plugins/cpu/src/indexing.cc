// Indexed data movement: dx.index_select (i32/i64 indices), dx.gather (torch.gather),
// dx.scatter_add (torch.scatter_add, out of place) and their gradients (F dtypes).
//
// Indices are validated in full (DX_OUT_OF_RANGE) before anything is written. Forwards move
// element bytes as 1/2/4/8-byte words; index_select copies one slab per (outer index, selected
// index) pair, in parallel over the pairs; gather walks its index tensor with the input's axis
// stride applied to each index. Sums (scatter_add on F, and the gradients of index_select and
// gather) accumulate in f64 in the reference's order and round once per element, so they agree
// with the reference bit for bit; the scatters themselves run serially for that reason.
#include <atomic>
#include <string>
#include <vector>

#include "movement_util.h"

namespace deepx::cpu {
namespace {

using namespace movement;

constexpr dx_kernel_flags_t kFlags = DX_KERNEL_FLAG_DETERMINISTIC;
constexpr int kAxisSlot = 0;

template <class I>
int64_t index_at(const View& idx, int64_t element_offset) {
  return static_cast<int64_t>(idx.data<const I>()[element_offset]);
}

/// DX_OUT_OF_RANGE unless every index lies in [0, limit). Scans in parallel; a failure is
/// rescanned serially for the first offender's message.
template <class I>
void check_indices(const View& idx, int64_t limit, const char* op) {
  if (idx.count() == 0) return;
  StridedLoop<1> loop = loop_over(idx);
  const I* const base = idx.data<const I>();
  std::atomic<bool> bad{false};
  for_each_row(loop, [&, base, limit](int64_t n, const int64_t* off, const int64_t* st) {
    const I* p = base + off[0];
    const int64_t s = st[0];
    bool row_bad = false;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(p[i * s]);
      row_bad |= v < 0 || v >= limit;
    }
    if (row_bad) bad.store(true, std::memory_order_relaxed);
  });
  if (!bad.load()) return;
  int64_t first_bad = 0;
  bool found = false;
  auto find = [&](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t i = 0; i < n && !found; ++i) {
      const int64_t v = static_cast<int64_t>(base[off[0] + i * st[0]]);
      if (v < 0 || v >= limit) {
        first_bad = v;
        found = true;
      }
    }
  };
  run_range(loop, 0, loop.count(), find);
  fail(DX_OUT_OF_RANGE, std::string(op) + ": index " + std::to_string(first_bad) +
                            " is outside [0, " + std::to_string(limit) + ")");
}

/// The dims of `v` after `axis`, as a view starting at `base`.
View inner_view(const View& v, int axis, char* base) {
  View inner;
  inner.base = base;
  inner.dtype = v.dtype;
  inner.rank = v.rank - axis - 1;
  for (int d = 0; d < inner.rank; ++d) {
    inner.shape[d] = v.shape[axis + 1 + d];
    inner.strides[d] = v.strides[axis + 1 + d];
  }
  return inner;
}

/// Byte offset of outer position `o` (row-major over v's dims before `axis`).
int64_t outer_offset(const View& v, int axis, int64_t o) {
  int64_t offset = 0;
  for (int d = axis - 1; d >= 0; --d) {
    offset += (o % v.shape[d]) * v.strides[d];
    o /= v.shape[d];
  }
  return offset * element_size(v.dtype);
}

int64_t product(const int64_t* shape, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= shape[d];
  return n;
}

// ---- index_select -------------------------------------------------------------------------------

/// The selected indices of a 1-D index tensor, validated against `limit`.
template <class I>
std::vector<int64_t> read_indices(const View& idx, int64_t limit, const char* op) {
  check_indices<I>(idx, limit, op);
  std::vector<int64_t> out(static_cast<size_t>(idx.shape[0]));
  for (int64_t j = 0; j < idx.shape[0]; ++j) out[static_cast<size_t>(j)] = index_at<I>(idx, j * idx.strides[0]);
  return out;
}

struct IndexSelectPlan {
  int axis = 0;
  std::vector<int64_t> indices;
};

template <class I>
IndexSelectPlan plan_index_select(const dx_kernel_call_t* call, const View& x, const View& idx,
                                  const View& y_like, const char* what) {
  IndexSelectPlan p;
  p.axis = normal_axis(call, kAxisSlot, x.rank, 0, "dx.index_select");
  if (idx.rank != 1) fail(DX_SHAPE_MISMATCH, "dx.index_select: indices must be 1-D");
  int64_t expected[kMaxRank];
  for (int d = 0; d < x.rank; ++d) expected[d] = x.shape[d];
  expected[p.axis] = idx.shape[0];
  expect_shape(y_like, expected, x.rank, what);
  p.indices = read_indices<I>(idx, x.shape[p.axis], "dx.index_select");
  return p;
}

template <class T, class I>
dx_error_t* index_select_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const View x = input(call, 0, dtype_of<T>());
    const View idx = input(call, 1, dtype_of<I>());
    const View y = output(call, 0, dtype_of<T>());
    const IndexSelectPlan p = plan_index_select<I>(call, x, idx, y, "dx.index_select output");
    if (y.count() == 0) return;
    const int axis = p.axis;
    const int64_t outer = product(x.shape, 0, axis);
    const int64_t k = static_cast<int64_t>(p.indices.size());
    const int64_t inner = product(x.shape, axis + 1, x.rank);
    const int64_t esize = element_size(x.dtype);
    // One slab (the dims after the axis) per (outer position, selected index).
    const auto slab = [&](int64_t item, bool parallel) {
      const int64_t o = item / k, j = item % k;
      char* yb = y.base + outer_offset(y, axis, o) + j * y.strides[axis] * esize;
      char* xb = x.base + outer_offset(x, axis, o) + p.indices[static_cast<size_t>(j)] * x.strides[axis] * esize;
      copy_view(inner_view(y, axis, yb), inner_view(x, axis, xb), parallel);
    };
    const int64_t items = outer * k;
    if (items >= 4 * available_threads() || inner < kParallelThreshold) {
      for_each_range(items, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) slab(item, false);
      }, inner);
    } else {
      for (int64_t item = 0; item < items; ++item) slab(item, true);
    }
  });
}

template <class T, class I>
dx_error_t* index_select_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, x, idx, y; outputs: dx, didx (zeros).
    expect_arity(call, 4, 2);
    const View dy = input(call, 0, dtype_of<T>());
    const View x = input(call, 1, dtype_of<T>());
    const View idx = input(call, 2, dtype_of<I>());
    const IndexSelectPlan p = plan_index_select<I>(call, x, idx, dy, "dx.index_select output gradient");
    const std::optional<View> dx = gradient(call, 0, x);
    const std::optional<View> didx = gradient(call, 1, idx);
    if (dx) {
      // dx[o, idx[j], :] += dy[o, j, :], j increasing: the reference's order per element.
      GradBuffer buffer(x.shape, x.rank);
      const int axis = p.axis;
      const int64_t outer = product(x.shape, 0, axis);
      const int64_t k = static_cast<int64_t>(p.indices.size());
      const int64_t inner = product(x.shape, axis + 1, x.rank);
      const int64_t rows = x.shape[axis];
      if (dy.count() > 0) {
        for_each_range(outer, [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            for (int64_t j = 0; j < k; ++j) {
              double* a = buffer.data.data() + (o * rows + p.indices[static_cast<size_t>(j)]) * inner;
              const View g = inner_view(dy, axis, dy.base + outer_offset(dy, axis, o) +
                                                      j * dy.strides[axis] * static_cast<int64_t>(sizeof(T)));
              StridedLoop<2> loop;
              loop.rank = g.rank;
              int64_t stride = 1;
              for (int d = g.rank - 1; d >= 0; --d) {
                loop.shape[d] = g.shape[d];
                loop.strides[0][d] = stride;
                loop.strides[1][d] = g.strides[d];
                stride *= g.shape[d];
              }
              loop.simplify();
              const T* const pg = g.data<const T>();
              auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
                double* ar = a + off[0];
                const T* gr = pg + off[1];
                for (int64_t i = 0; i < n; ++i) ar[i * st[0]] += to_f64(gr[i * st[1]]);
              };
              run_range(loop, 0, loop.count(), row);
            }
          }
        }, k * inner);
      }
      buffer.store<T>(*dx);
    }
    if (didx) zero_view(*didx);
  });
}

// ---- gather -------------------------------------------------------------------------------------

/// torch.gather / scatter_add shapes: idx has x's rank and fits in x off the axis.
void check_gather_shapes(const View& x, const View& idx, int axis, const char* op) {
  if (idx.rank != x.rank) fail(DX_SHAPE_MISMATCH, std::string(op) + ": index rank differs from the input's");
  for (int d = 0; d < x.rank; ++d) {
    if (d != axis && idx.shape[d] > x.shape[d]) {
      fail(DX_SHAPE_MISMATCH, std::string(op) + ": index shape " + shape_string(idx.shape, idx.rank) +
                                  " exceeds input " + shape_string(x.shape, x.rank));
    }
  }
}

/// The loop over idx's shape with operands (a, idx, b); b's axis stride is zeroed (the index
/// supplies that coordinate) and returned in `b_axis_stride`.
StridedLoop<3> index_loop(const View& a, const View& idx, const View& b, int axis,
                          int64_t& b_axis_stride) {
  StridedLoop<3> loop;
  loop.rank = idx.rank;
  for (int d = 0; d < idx.rank; ++d) {
    loop.shape[d] = idx.shape[d];
    loop.strides[0][d] = a.strides[d];
    loop.strides[1][d] = idx.strides[d];
    loop.strides[2][d] = d == axis ? 0 : b.strides[d];
  }
  b_axis_stride = b.strides[axis];
  loop.simplify();
  return loop;
}

template <class W>
void gather_words(const View& y, const View& idx, const View& x, int axis) {
  int64_t axis_stride = 0;
  const StridedLoop<3> loop = index_loop(y, idx, x, axis, axis_stride);
  W* const py = y.data<W>();
  const int64_t* const pi = idx.data<const int64_t>();
  const W* const px = x.data<const W>();
  for_each_row(loop, [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = py + off[0];
    const int64_t* ix = pi + off[1];
    const W* s = px + off[2];
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = s[i * st[2] + ix[i * st[1]] * axis_stride];
  });
}

template <class T>
dx_error_t* gather_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const View x = input(call, 0, dtype_of<T>());
    const View idx = input(call, 1, dtype_of<int64_t>());
    const View y = output(call, 0, dtype_of<T>());
    const int axis = normal_axis(call, kAxisSlot, x.rank, 0, "dx.gather");
    check_gather_shapes(x, idx, axis, "dx.gather");
    expect_shape(y, idx.shape, idx.rank, "dx.gather output");
    check_indices<int64_t>(idx, x.shape[axis], "dx.gather");
    if (y.count() == 0) return;
    switch (sizeof(T)) {
      case 1: gather_words<uint8_t>(y, idx, x, axis); break;
      case 2: gather_words<uint16_t>(y, idx, x, axis); break;
      case 4: gather_words<uint32_t>(y, idx, x, axis); break;
      default: gather_words<uint64_t>(y, idx, x, axis); break;
    }
  });
}

template <class T>
dx_error_t* gather_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, x, idx, y; outputs: dx, didx (zeros).
    expect_arity(call, 4, 2);
    const View dy = input(call, 0, dtype_of<T>());
    const View x = input(call, 1, dtype_of<T>());
    const View idx = input(call, 2, dtype_of<int64_t>());
    const int axis = normal_axis(call, kAxisSlot, x.rank, 0, "dx.gather");
    check_gather_shapes(x, idx, axis, "dx.gather");
    expect_shape(dy, idx.shape, idx.rank, "dx.gather output gradient");
    check_indices<int64_t>(idx, x.shape[axis], "dx.gather");
    const std::optional<View> dx = gradient(call, 0, x);
    const std::optional<View> didx = gradient(call, 1, idx);
    if (dx) {
      // Serial, in idx's row-major order (the reference's summation order per element).
      GradBuffer buffer(x.shape, x.rank);
      if (idx.count() > 0) {
        int64_t axis_stride = 0;
        const StridedLoop<3> loop = index_loop(dy, idx, buffer.view, axis, axis_stride);
        const T* const pg = dy.data<const T>();
        const int64_t* const pi = idx.data<const int64_t>();
        double* const pa = buffer.data.data();
        auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
          const T* g = pg + off[0];
          const int64_t* ix = pi + off[1];
          double* a = pa + off[2];
          for (int64_t i = 0; i < n; ++i) a[i * st[2] + ix[i * st[1]] * axis_stride] += to_f64(g[i * st[0]]);
        };
        run_range(loop, 0, loop.count(), row);
      }
      buffer.store<T>(*dx);
    }
    if (didx) zero_view(*didx);
  });
}

// ---- scatter_add --------------------------------------------------------------------------------

/// The scatter_add shape rules; returns the normalised axis.
int check_scatter(const dx_kernel_call_t* call, const View& x, const View& idx, const View& src) {
  const int axis = normal_axis(call, kAxisSlot, x.rank, 0, "dx.scatter_add");
  check_gather_shapes(x, idx, axis, "dx.scatter_add");
  if (src.rank != idx.rank) fail(DX_SHAPE_MISMATCH, "dx.scatter_add: src rank differs from the index's");
  for (int d = 0; d < idx.rank; ++d) {
    if (idx.shape[d] > src.shape[d]) fail(DX_SHAPE_MISMATCH, "dx.scatter_add: index shape exceeds src");
  }
  return axis;
}

template <class T>
dx_error_t* scatter_add_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // y = x; y[i with i[axis] = idx[i]] += src[i] over idx's positions in row-major order.
    // F: f64 sums rounded once per element; I: wrapping. Accumulated in a buffer (y may alias
    // x or src).
    expect_arity(call, 3, 1);
    const View x = input(call, 0, dtype_of<T>());
    const View idx = input(call, 1, dtype_of<int64_t>());
    const View src = input(call, 2, dtype_of<T>());
    const View y = output(call, 0, dtype_of<T>());
    const int axis = check_scatter(call, x, idx, src);
    expect_shape(y, x.shape, x.rank, "dx.scatter_add output");
    check_indices<int64_t>(idx, x.shape[axis], "dx.scatter_add");
    if (y.count() == 0) return;
    using Acc = std::conditional_t<is_float_v<T>, double, T>;
    std::vector<Acc> acc(static_cast<size_t>(x.count()));
    const View av = compact_view(acc.data(), dtype_of<Acc>(), x.shape, x.rank);
    if constexpr (is_float_v<T>) {
      map_elements<double, T>(av, {&x}, [](T v) { return to_f64(v); });
    } else {
      copy_view(av, x);
    }
    if (idx.count() > 0) {
      int64_t axis_stride = 0;
      const StridedLoop<3> loop = index_loop(src, idx, av, axis, axis_stride);
      const T* const ps = src.data<const T>();
      const int64_t* const pi = idx.data<const int64_t>();
      Acc* const pa = acc.data();
      auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
        const T* s = ps + off[0];
        const int64_t* ix = pi + off[1];
        Acc* a = pa + off[2];
        for (int64_t i = 0; i < n; ++i) {
          Acc& target = a[i * st[2] + ix[i * st[1]] * axis_stride];
          if constexpr (is_float_v<T>) {
            target += to_f64(s[i * st[0]]);
          } else {
            target = static_cast<T>(static_cast<WrapT<T>>(target) + static_cast<WrapT<T>>(s[i * st[0]]));
          }
        }
      };
      run_range(loop, 0, loop.count(), row);
    }
    if constexpr (is_float_v<T>) {
      map_elements<T, double>(y, {&av}, [](double v) { return from_f64<T>(v); });
    } else {
      copy_view(y, av);
    }
  });
}

template <class T>
dx_error_t* scatter_add_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, x, idx, src, y; outputs: dx = dy, didx (zeros), dsrc = gather(dy, idx) on
    // idx's extent (0 beyond it).
    expect_arity(call, 5, 3);
    const View dy = input(call, 0, dtype_of<T>());
    const View x = input(call, 1, dtype_of<T>());
    const View idx = input(call, 2, dtype_of<int64_t>());
    const View src = input(call, 3, dtype_of<T>());
    const int axis = check_scatter(call, x, idx, src);
    expect_shape(dy, x.shape, x.rank, "dx.scatter_add output gradient");
    check_indices<int64_t>(idx, x.shape[axis], "dx.scatter_add");
    const std::optional<View> dx = gradient(call, 0, x);
    const std::optional<View> didx = gradient(call, 1, idx);
    const std::optional<View> dsrc = gradient(call, 2, src);
    if (dx) copy_gradient<T>(*dx, dy);
    if (didx) zero_view(*didx);
    if (dsrc) {
      if (idx.count() != src.count()) zero_view(*dsrc);
      if (idx.count() > 0) {
        int64_t axis_stride = 0;
        const StridedLoop<3> loop = index_loop(*dsrc, idx, dy, axis, axis_stride);
        T* const po = dsrc->data<T>();
        const int64_t* const pi = idx.data<const int64_t>();
        const T* const pg = dy.data<const T>();
        for_each_row(loop, [=](int64_t n, const int64_t* off, const int64_t* st) {
          T* o = po + off[0];
          const int64_t* ix = pi + off[1];
          const T* g = pg + off[2];
          for (int64_t i = 0; i < n; ++i) o[i * st[0]] = canonical_gradient(g[i * st[2] + ix[i * st[1]] * axis_stride]);
        });
      }
    }
  });
}

// ---- registration -------------------------------------------------------------------------------

template <class T>
void add_indexing(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  constexpr DLDataType i32 = dtype_of<int32_t>(), i64 = dtype_of<int64_t>();
  dx_kernel_fn select32_bw = nullptr, select64_bw = nullptr, gather_bw = nullptr, scatter_bw = nullptr;
  if constexpr (is_float_v<T>) {
    select32_bw = &index_select_backward<T, int32_t>;
    select64_bw = &index_select_backward<T, int64_t>;
    gather_bw = &gather_backward<T>;
    scatter_bw = &scatter_add_backward<T>;
  }
  r.add("dx.index_select", 2, 1, {t, i32, t}, &index_select_kernel<T, int32_t>, kFlags, select32_bw);
  r.add("dx.index_select", 2, 1, {t, i64, t}, &index_select_kernel<T, int64_t>, kFlags, select64_bw);
  r.add("dx.gather", 2, 1, {t, i64, t}, &gather_kernel<T>, kFlags, gather_bw);
  if constexpr (!std::is_same_v<T, Bool>) {
    r.add("dx.scatter_add", 3, 1, {t, i64, t, t}, &scatter_add_kernel<T>, kFlags, scatter_bw);
  }
}

}  // namespace

void register_indexing_kernels(Registrar& r) {
  add_indexing<double>(r);
  add_indexing<float>(r);
  add_indexing<Half>(r);
  add_indexing<BFloat16>(r);
  add_indexing<int64_t>(r);
  add_indexing<int32_t>(r);
  add_indexing<int16_t>(r);
  add_indexing<int8_t>(r);
  add_indexing<uint8_t>(r);
  add_indexing<Bool>(r);
}

}  // namespace deepx::cpu
