// dx.linear, dx.embedding, dx.cross_entropy and their gradients; register_nn_kernels() (which
// also registers the normalisations of nn_norm.cc).
//
// linear: y = x W^T + b through the plugin's GEMM (sgemm.h) straight on the caller's memory
// whenever each operand is a BLAS-readable matrix (x's batch dims must collapse into one row
// stride; W is read in place, transposed by the GEMM call); other layouts and f16/bf16 are packed into f32
// first and rounded once. The bias is written into the output before a beta = 1 product, so
// f16/bf16 results are rounded once. Gradients: dx = dy W, dW = dy^T x (two more products),
// db = column sums of dy in f64.
//
// embedding checks every index before writing anything, copies rows with the next rows
// prefetched (they are at random addresses) and writes outputs of 8 MiB or more with
// non-temporal stores; its gradient sums repeated rows in
// f64 in index order (rows bucketed by a counting sort, then one row per task), so results do
// not depend on the thread count. cross_entropy computes each row's log(sum(exp(x - max))) in the
// compute type with an f64 sum (exp_shifted_sum, which prefetches the next row meanwhile), takes
// the loss as that minus (x[label] - max) so huge logits do not cancel, and reduces the per-row
// losses in row order in f64.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "nn_util.h"
#include "sgemm.h"
#include "simd.h"

namespace deepx::cpu {
namespace nn {
namespace {

// ---- matrices and BLAS ------------------------------------------------------------------------

/// Element (i, j) at base[i * rs + j * cs].
template <class T>
struct Mat {
  T* base;
  int64_t rows, cols, rs, cs;
  Mat transposed() const { return {base, cols, rows, cs, rs}; }
  T& at(int64_t i, int64_t j) const { return base[i * rs + j * cs]; }
};

/// How BLAS can read a matrix in place: row-major (NoTrans) or column-major (Trans) with a
/// leading dimension; `ok` false when neither fits.
struct BlasForm {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

template <class T>
BlasForm blas_form(const Mat<T>& m) {
  BlasForm f;
  if ((m.cs == 1 || m.cols == 1) && (m.rows == 1 || m.rs >= std::max<int64_t>(1, m.cols))) {
    f = {true, false, m.rows == 1 ? std::max<int64_t>(1, m.cols) : m.rs};
  } else if ((m.rs == 1 || m.rows == 1) && (m.cols == 1 || m.cs >= std::max<int64_t>(1, m.rows))) {
    f = {true, true, m.cols == 1 ? std::max<int64_t>(1, m.rows) : m.cs};
  }
  if (f.ld > INT_MAX) f.ok = false;
  return f;
}

template <class T>
using BlasT = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Compact row-major copy of a matrix in the BLAS type.
template <class F, class T>
void pack(const Mat<const T>& m, std::vector<F>& out) {
  out.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) out[i * m.cols + j] = static_cast<F>(Num<T>::load(m.at(i, j)));
  }
}

/// c = a b (+ bias per column when `bias` is non-null), rounded once into c's dtype.
template <class T>
void matmul_into(Mat<const T> a, Mat<const T> b, Mat<T> c, const BlasT<T>* bias) {
  using F = BlasT<T>;
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c.at(i, j) = Num<T>::store(bias != nullptr ? bias[j] : F(0));
    }
    return;
  }
  std::vector<F> a_copy, b_copy, c_copy;
  BlasForm la, lb, lc;
  if constexpr (std::is_same_v<T, F>) {
    la = blas_form(a);
    lb = blas_form(b);
    lc = blas_form(c);
  }
  const F* pa;
  const F* pb;
  if (la.ok) {
    pa = reinterpret_cast<const F*>(a.base);
  } else {
    pack<F>(a, a_copy);
    pa = a_copy.data();
    la = {true, false, std::max<int64_t>(1, k)};
  }
  if (lb.ok) {
    pb = reinterpret_cast<const F*>(b.base);
  } else {
    pack<F>(b, b_copy);
    pb = b_copy.data();
    lb = {true, false, std::max<int64_t>(1, n)};
  }
  F* pc;
  int64_t ldc;
  const bool direct = lc.ok && !lc.trans;
  if (direct) {
    pc = reinterpret_cast<F*>(c.base);
    ldc = lc.ld;
  } else {
    c_copy.resize(static_cast<size_t>(m * n));
    pc = c_copy.data();
    ldc = n;
  }
  F beta = 0;
  if (bias != nullptr) {
    for (int64_t i = 0; i < m; ++i) {
      F* row = pc + i * ldc;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] = bias[j];
    }
    beta = 1;
  }
  gemm<F>(la.trans, lb.trans, m, n, k, F(1), pa, la.ld, pb, lb.ld, beta, pc, ldc);
  if (!direct) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c.at(i, j) = Num<T>::store(c_copy[i * n + j]);
    }
  }
}

/// Copies between a view and a compact row-major buffer.
template <class T>
void copy_view(const View& v, T* compact, bool to_compact) {
  StridedLoop<1> loop = loop_over(v);
  T* base = v.data<T>();
  int64_t position = 0;
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      if (to_compact) compact[position + i] = base[off[0] + i * st[0]];
      else base[off[0] + i * st[0]] = compact[position + i];
    }
    position += n;
  };
  run_range(loop, 0, loop.count(), run);
}

/// A view of rank >= 1 as a matrix (all leading dims as rows, the last dim as columns), in
/// place when the leading dims collapse into one row stride, else through a compact copy in
/// `holder` (`copy_back` tells the caller to write the copy back for an output).
template <class T>
Mat<T> as_matrix(const View& v, std::vector<T>& holder, bool is_output, bool& copy_back) {
  const int64_t cols = v.shape[v.rank - 1];
  StridedLoop<1> lead;
  lead.rank = v.rank - 1;
  for (int d = 0; d < lead.rank; ++d) {
    lead.shape[d] = v.shape[d];
    lead.strides[0][d] = v.strides[d];
  }
  const int64_t rows = lead.count();
  lead.simplify();
  copy_back = false;
  if (lead.rank <= 1) {
    const int64_t rs = lead.rank == 0 ? std::max<int64_t>(1, cols) : lead.strides[0][0];
    return {v.data<T>(), rows, cols, rs, v.strides[v.rank - 1]};
  }
  holder.resize(static_cast<size_t>(rows * cols));
  if (is_output) copy_back = true;
  else copy_view(v, holder.data(), true);
  return {holder.data(), rows, cols, cols, 1};
}

// ---- linear -------------------------------------------------------------------------------------

struct LinearPlan {
  View x, w, b;
  bool has_b = false;
  int64_t in = 0, out = 0;
  int64_t y_shape[kMaxRank];
  int y_rank = 0;
};

template <class T>
LinearPlan plan_linear(const dx_kernel_call_t* call, int first) {
  LinearPlan p;
  p.x = typed_input<T>(call, first, "input 0 (x)");
  p.w = typed_input<T>(call, first + 1, "input 1 (weight)");
  p.has_b = has_input(call, first + 2);
  if (p.has_b) p.b = typed_input<T>(call, first + 2, "input 2 (bias)");
  if (p.x.rank < 1 || p.w.rank != 2) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.linear needs x of rank >= 1 and a rank-2 weight, got " +
                                shape_string(p.x.shape, p.x.rank) + " and " + shape_string(p.w.shape, p.w.rank));
  }
  p.out = p.w.shape[0];
  p.in = p.w.shape[1];
  if (p.x.shape[p.x.rank - 1] != p.in) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.linear: x " + shape_string(p.x.shape, p.x.rank) + " and weight " +
                                shape_string(p.w.shape, p.w.rank) + " disagree on the input features");
  }
  if (p.has_b && (p.b.rank != 1 || p.b.shape[0] != p.out)) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.linear: bias " + shape_string(p.b.shape, p.b.rank) + " must be (" +
                                std::to_string(p.out) + ",)");
  }
  p.y_rank = p.x.rank;
  for (int d = 0; d + 1 < p.x.rank; ++d) p.y_shape[d] = p.x.shape[d];
  p.y_shape[p.y_rank - 1] = p.out;
  return p;
}

void check_blas_dims(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d > INT_MAX) fail(DX_UNSUPPORTED, "cpu: dx.linear dims above 2^31 - 1 are not supported");
  }
}

template <class T>
dx_error_t* linear_kernel(const dx_kernel_call_t* call) noexcept {
  using F = BlasT<T>;
  return guard(call->host, [&] {
    expect_arity(call, 3, 1);
    const LinearPlan p = plan_linear<T>(call, 0);
    const View y = typed_output<T>(call, 0, "output 0");
    expect_shape(y, p.y_shape, p.y_rank, "output 0");
    if (y.count() == 0) return;
    std::vector<T> x_holder, y_holder;
    bool unused = false, y_back = false;
    const Mat<T> xm = as_matrix<T>(p.x, x_holder, false, unused);
    const Mat<T> ym = as_matrix<T>(y, y_holder, true, y_back);
    check_blas_dims({xm.rows, p.in, p.out});
    std::vector<F> bias;
    if (p.has_b) {
      bias.resize(static_cast<size_t>(p.out));
      const T* pb = p.b.data<const T>();
      for (int64_t j = 0; j < p.out; ++j) bias[j] = static_cast<F>(Num<T>::load(pb[j * p.b.strides[0]]));
    }
    // W^T (in x out) read in place: W's strides swapped.
    const Mat<const T> wt{p.w.data<const T>(), p.in, p.out, p.w.strides[1], p.w.strides[0]};
    matmul_into<T>({xm.base, xm.rows, xm.cols, xm.rs, xm.cs}, wt, ym, p.has_b ? bias.data() : nullptr);
    if (y_back) copy_view(y, y_holder.data(), false);
  });
}

template <class T>
dx_error_t* linear_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, x, w, b, y; outputs: dx, dw, db.
    expect_arity(call, 5, 3);
    if (!has_input(call, 3) && has_output(call, 2)) {
      fail(DX_INVALID_ARGUMENT, "cpu: dx.linear backward: a bias gradient was requested without a bias");
    }
    const LinearPlan p = plan_linear<T>(call, 1);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    expect_shape(dy, p.y_shape, p.y_rank, "output gradient 0");
    View dx, dw, db;
    const bool want_dx = has_output(call, 0), want_dw = has_output(call, 1), want_db = has_output(call, 2);
    if (want_dx) dx = gradient_output<T>(call, 0, p.x.shape, p.x.rank);
    if (want_dw) dw = gradient_output<T>(call, 1, p.w.shape, 2);
    if (want_db) db = gradient_output<T>(call, 2, &p.out, 1);
    std::vector<T> dy_holder, x_holder, dx_holder;
    bool unused = false;
    const Mat<T> g = as_matrix<T>(dy, dy_holder, false, unused);
    const Mat<const T> gm{g.base, g.rows, g.cols, g.rs, g.cs};
    check_blas_dims({g.rows, p.in, p.out});
    if (want_dx && dx.count() > 0) {
      bool dx_back = false;
      const Mat<T> dxm = as_matrix<T>(dx, dx_holder, true, dx_back);
      const Mat<const T> wm{p.w.data<const T>(), p.out, p.in, p.w.strides[0], p.w.strides[1]};
      matmul_into<T>(gm, wm, dxm, nullptr);
      if (dx_back) copy_view(dx, dx_holder.data(), false);
    }
    if (want_dw && dw.count() > 0) {
      const Mat<T> xm = as_matrix<T>(p.x, x_holder, false, unused);
      const Mat<T> dwm{dw.data<T>(), p.out, p.in, dw.strides[0], dw.strides[1]};
      matmul_into<T>(gm.transposed(), {xm.base, xm.rows, xm.cols, xm.rs, xm.cs}, dwm, nullptr);
    }
    if (want_db && p.out > 0) {
      std::vector<double> sums(static_cast<size_t>(p.out), 0.0);
      for (int64_t i = 0; i < g.rows; ++i) {
        const T* row = g.base + i * g.rs;
        if (g.cs == 1) {
#pragma omp simd
          for (int64_t j = 0; j < p.out; ++j) sums[j] += load_f64(row[j]);
        } else {
          for (int64_t j = 0; j < p.out; ++j) sums[j] += load_f64(row[j * g.cs]);
        }
      }
      T* pdb = db.data<T>();
      for (int64_t j = 0; j < p.out; ++j) pdb[j * db.strides[0]] = store_f64<T>(sums[j]);
    }
  });
}

// ---- embedding ---------------------------------------------------------------------------------

/// The rows named by `idx` (row-major order) and, for each, the offset of its row in `rows_of`
/// (a tensor of shape idx.shape + (D,)); DX_OUT_OF_RANGE for an index outside [0, vocab).
template <class I>
void collect_indices(const View& idx, const View& rows_of, int64_t vocab, std::vector<int64_t>& rows,
                     std::vector<int64_t>& offsets) {
  const int64_t count = idx.count();
  rows.resize(static_cast<size_t>(count));
  offsets.resize(static_cast<size_t>(count));
  if (count == 0) return;
  StridedLoop<2> loop = loop_over(idx, rows_of);
  const I* pi = idx.data<const I>();
  int64_t position = 0;
  bool bad = false;
  int64_t bad_value = 0, bad_position = 0;
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(pi[off[0] + i * st[0]]);
      if ((row < 0 || row >= vocab) && !bad) {
        bad = true;
        bad_value = row;
        bad_position = position + i;
      }
      rows[position + i] = row;
      offsets[position + i] = off[1] + i * st[1];
    }
    position += n;
  };
  run_range(loop, 0, count, run);
  if (bad) {
    fail(DX_OUT_OF_RANGE, "cpu: dx.embedding: index " + std::to_string(bad_value) + " at position " +
                              std::to_string(bad_position) + " is outside [0, " + std::to_string(vocab) + ")");
  }
}

/// Outputs at least this large are written with non-temporal stores: they are larger than what
/// the caches keep usefully, and streaming stores skip reading each output line before writing
/// it (a third of a plain copy's memory traffic).
constexpr int64_t kEmbeddingStreamBytes = int64_t{8} << 20;

/// Copies `bytes` from src to dst with non-temporal stores for the 64-byte-aligned part of dst
/// (plain copies for the unaligned head and the tail). The caller issues a store fence
/// (stream_fence) before anything else may read dst.
inline void copy_streaming(char* dst, const char* src, size_t bytes) {
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
#elif defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32)));
#else
    for (size_t k = 0; k < 64; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + k)));
    }
#endif
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// Orders the non-temporal stores of copy_streaming before later stores (and the end of the
/// parallel region that publishes them).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// Hints the first `bytes` (at most 4 KiB) of a row that will be copied soon into the cache: rows
/// are at random addresses, which the hardware prefetchers cannot guess.
inline void prefetch_row(const char* row, size_t bytes) {
#if defined(__SSE2__)
  const size_t n = std::min<size_t>(bytes, 4096);
  for (size_t i = 0; i < n; i += 64) _mm_prefetch(row + i, _MM_HINT_T0);
#else
  (void)row;
  (void)bytes;
#endif
}

template <class T, class I>
dx_error_t* embedding_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const View w = typed_input<T>(call, 0, "input 0 (weight)");
    const View idx = typed_input<I>(call, 1, "input 1 (indices)");
    const View out = typed_output<T>(call, 0, "output 0");
    if (w.rank != 2) fail(DX_SHAPE_MISMATCH, "cpu: dx.embedding: weight must be rank 2, got " + shape_string(w.shape, w.rank));
    if (idx.rank + 1 > kMaxRank) fail(DX_UNSUPPORTED, "cpu: dx.embedding: indices of too high a rank");
    int64_t expected[kMaxRank];
    for (int d = 0; d < idx.rank; ++d) expected[d] = idx.shape[d];
    const int64_t dim = w.shape[1];
    expected[idx.rank] = dim;
    expect_shape(out, expected, idx.rank + 1, "output 0");
    std::vector<int64_t> rows, offsets;
    collect_indices<I>(idx, out, w.shape[0], rows, offsets);
    const int64_t count = idx.count();
    if (count == 0 || dim == 0) return;
    const T* const pw = w.data<const T>();
    T* const po = out.data<T>();
    const int64_t ws0 = w.strides[0], ws1 = w.strides[1], os = out.strides[idx.rank];
    const int threads = threads_for(count, dim);
    const size_t row_bytes = static_cast<size_t>(dim) * sizeof(T);
    if (ws1 == 1 && os == 1) {
      // Contiguous rows: memcpy, or for large outputs non-temporal stores, with the next rows
      // prefetched.
      const bool streaming = static_cast<int64_t>(row_bytes) * count >= kEmbeddingStreamBytes;
      for_parts(count, threads, threads, [&](int64_t, int64_t begin, int64_t end, int) {
        constexpr int64_t kAhead = 2;
        for (int64_t p = begin; p < std::min(end, begin + kAhead); ++p) {
          prefetch_row(reinterpret_cast<const char*>(pw + rows[p] * ws0), row_bytes);
        }
        for (int64_t p = begin; p < end; ++p) {
          if (p + kAhead < end) {
            prefetch_row(reinterpret_cast<const char*>(pw + rows[p + kAhead] * ws0), row_bytes);
          }
          const char* src = reinterpret_cast<const char*>(pw + rows[p] * ws0);
          char* dst = reinterpret_cast<char*>(po + offsets[p]);
          if (streaming) {
            copy_streaming(dst, src, row_bytes);
          } else {
            std::memcpy(dst, src, row_bytes);
          }
        }
        if (streaming) stream_fence();
      });
      return;
    }
    for_parts(count, threads, threads, [&](int64_t, int64_t begin, int64_t end, int) {
      for (int64_t p = begin; p < end; ++p) {
        const T* src = pw + rows[p] * ws0;
        T* dst = po + offsets[p];
        for (int64_t j = 0; j < dim; ++j) dst[j * os] = src[j * ws1];
      }
    });
  });
}

template <class T, class I>
dx_error_t* embedding_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, weight, indices, y; outputs: dweight (rows summed), dindices (zeros).
    expect_arity(call, 4, 2);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    const View w = typed_input<T>(call, 1, "forward input 0 (weight)");
    const View idx = typed_input<I>(call, 2, "forward input 1 (indices)");
    if (w.rank != 2) fail(DX_SHAPE_MISMATCH, "cpu: dx.embedding: weight must be rank 2");
    if (idx.rank + 1 > kMaxRank) fail(DX_UNSUPPORTED, "cpu: dx.embedding: indices of too high a rank");
    int64_t expected[kMaxRank];
    for (int d = 0; d < idx.rank; ++d) expected[d] = idx.shape[d];
    const int64_t vocab = w.shape[0], dim = w.shape[1];
    expected[idx.rank] = dim;
    expect_shape(dy, expected, idx.rank + 1, "output gradient 0");
    View dw, didx;
    const bool want_dw = has_output(call, 0), want_didx = has_output(call, 1);
    if (want_dw) dw = gradient_output<T>(call, 0, w.shape, 2);
    if (want_didx) didx = gradient_output<I>(call, 1, idx.shape, idx.rank);
    std::vector<int64_t> rows, offsets;
    collect_indices<I>(idx, dy, vocab, rows, offsets);
    if (want_dw && vocab > 0 && dim > 0) {
      // Bucket the positions by row (a stable counting sort keeps index order within a row).
      const int64_t count = static_cast<int64_t>(rows.size());
      std::vector<int64_t> start(static_cast<size_t>(vocab + 1), 0), order(static_cast<size_t>(count));
      for (int64_t p = 0; p < count; ++p) ++start[rows[p] + 1];
      for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
      {
        std::vector<int64_t> next(start.begin(), start.end() - 1);
        for (int64_t p = 0; p < count; ++p) order[next[rows[p]]++] = p;
      }
      const T* const pg = dy.data<const T>();
      T* const pd = dw.data<T>();
      const int64_t gs = dy.strides[idx.rank], ds0 = dw.strides[0], ds1 = dw.strides[1];
      const int threads = threads_for(vocab, dim + dim * count / vocab);
      Scratch<double> scratch(threads, dim);
      for_parts(vocab, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
        double* acc = scratch.at(slot);
        for (int64_t v = begin; v < end; ++v) {
          T* dst = pd + v * ds0;
          if (start[v] == start[v + 1]) {
            for (int64_t j = 0; j < dim; ++j) dst[j * ds1] = store_f64<T>(0.0);
            continue;
          }
          std::fill(acc, acc + dim, 0.0);
          for (int64_t q = start[v]; q < start[v + 1]; ++q) {
            const T* src = pg + offsets[order[q]];
            if (gs == 1) {
#pragma omp simd
              for (int64_t j = 0; j < dim; ++j) acc[j] += load_f64(src[j]);
            } else {
              for (int64_t j = 0; j < dim; ++j) acc[j] += load_f64(src[j * gs]);
            }
          }
          for (int64_t j = 0; j < dim; ++j) dst[j * ds1] = store_f64<T>(acc[j]);
        }
      });
    }
    if (want_didx) zero_fill(didx);
  });
}

// ---- cross_entropy -------------------------------------------------------------------------------

enum class Reduction { kNone, kMean, kSum };

struct CrossEntropyPlan {
  View logits, labels;
  int64_t rows = 1, classes = 0;
  int64_t row_stride = 0, class_stride = 1, label_stride = 0;
  bool batched = true;
  Reduction reduction = Reduction::kMean;
  int64_t ignore_index = -100;
  int64_t out_shape[1] = {0};
  int out_rank = 0;
};

template <class T>
CrossEntropyPlan plan_cross_entropy(const dx_kernel_call_t* call, int first) {
  CrossEntropyPlan p;
  p.logits = typed_input<T>(call, first, "input 0 (logits)");
  p.labels = typed_input<int64_t>(call, first + 1, "input 1 (labels)");
  const std::string_view reduction = attr_string_or(call, 0, "reduction", "mean");
  if (reduction == "mean") p.reduction = Reduction::kMean;
  else if (reduction == "sum") p.reduction = Reduction::kSum;
  else if (reduction == "none") p.reduction = Reduction::kNone;
  else fail(DX_INVALID_ARGUMENT, "cpu: dx.cross_entropy: reduction must be none, mean or sum, got \"" + std::string(reduction) + "\"");
  p.ignore_index = attr_i64(call, 1, "ignore_index", -100);
  if (p.logits.rank == 2 && p.labels.rank == 1 && p.labels.shape[0] == p.logits.shape[0]) {
    p.rows = p.logits.shape[0];
    p.classes = p.logits.shape[1];
    p.row_stride = p.logits.strides[0];
    p.class_stride = p.logits.strides[1];
    p.label_stride = p.labels.strides[0];
  } else if (p.logits.rank == 1 && p.labels.rank == 0) {
    p.batched = false;
    p.classes = p.logits.shape[0];
    p.class_stride = p.logits.strides[0];
  } else {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.cross_entropy takes logits (N, C) with labels (N,) or (C,) with (), got " +
                                shape_string(p.logits.shape, p.logits.rank) + " and " +
                                shape_string(p.labels.shape, p.labels.rank));
  }
  if (p.reduction == Reduction::kNone && p.batched) {
    p.out_shape[0] = p.rows;
    p.out_rank = 1;
  }
  return p;
}

/// Every row's label, checked (DX_OUT_OF_RANGE) before anything is written; returns the number
/// of rows not ignored.
int64_t check_labels(const CrossEntropyPlan& p, std::vector<int64_t>& labels) {
  labels.resize(static_cast<size_t>(p.rows));
  const int64_t* pl = p.labels.data<const int64_t>();
  int64_t counted = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t label = pl[r * p.label_stride];
    if (label != p.ignore_index && (label < 0 || label >= p.classes)) {
      fail(DX_OUT_OF_RANGE, "cpu: dx.cross_entropy: label " + std::to_string(label) + " of row " +
                                std::to_string(r) + " is outside [0, " + std::to_string(p.classes) + ")");
    }
    labels[r] = label;
    counted += label != p.ignore_index ? 1 : 0;
  }
  return counted;
}

/// log(sum(exp(x - m))) of one line with m its max, so that log(sum(exp(x))) = m + the result;
/// the two are kept apart because m + log(sum) rounds to m at huge logits (1e17 + log 2 is
/// 1e17) and anything then subtracted from it cancels. NaN with a NaN; 0 when m is infinite
/// (all -Inf, or a +Inf), so m + the result is m.
/// `next` streams the next row in meanwhile (see exp_shifted_sum).
template <class C>
double log_sum_exp_shifted(const C* x, int64_t n, C& m, LinePrefetcher& next) {
  bool nan = false;
  m = line_max(x, n, nan);
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(m)) return 0;
  return std::log(exp_shifted_sum<C>(x, m, n, next));
}

/// One row's loss log(sum(exp(x))) - x[label] from log_sum_exp_shifted's result: (log_sum) -
/// (x[label] - m), which keeps log 2 for [1e17, 1e17, 0, 0]; a row with a NaN (log_sum NaN,
/// whatever its max) gives NaN; else with an infinite m, m - x[label] (the reference's Inf / NaN).
template <class C>
double cross_entropy_loss(double log_sum, C m, double x_label) {
  const double md = static_cast<double>(m);
  if (std::isnan(log_sum)) return log_sum;
  if (std::isinf(md)) return md - x_label;
  return log_sum - (x_label - md);
}

template <class T>
dx_error_t* cross_entropy_kernel(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const CrossEntropyPlan p = plan_cross_entropy<T>(call, 0);
    const View out = typed_output<T>(call, 0, "output 0");
    expect_shape(out, p.out_shape, p.out_rank, "output 0");
    std::vector<int64_t> labels;
    const int64_t counted = check_labels(p, labels);
    std::vector<double> losses(static_cast<size_t>(p.rows), 0.0);
    const T* const px = p.logits.data<const T>();
    const int64_t n = p.classes;
    const int threads = threads_for(p.rows, n * 8);
    Scratch<C> scratch(threads, n);
    for_parts(p.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      for (int64_t r = begin; r < end; ++r) {
        if (labels[r] == p.ignore_index) continue;  // loss 0, not counted in the mean
        const T* row = px + r * p.row_stride;
        const C* xc = read_run(row, p.class_stride, n, scratch.at(slot));
        C m;
        LinePrefetcher next = next_line(row, p.row_stride, r + 1 < end, p.class_stride == 1, n);
        const double log_sum = log_sum_exp_shifted<C>(xc, n, m, next);
        losses[r] = cross_entropy_loss<C>(log_sum, m, load_f64(row[labels[r] * p.class_stride]));
      }
    });
    T* const po = out.data<T>();
    if (p.reduction == Reduction::kNone) {
      const int64_t os = p.out_rank == 1 ? out.strides[0] : 0;
      for (int64_t r = 0; r < p.rows; ++r) po[r * os] = store_f64<T>(losses[r]);
      return;
    }
    double total = 0;
    for (double l : losses) total += l;
    // The mean over no counted rows is 0 / 0 = NaN (PyTorch).
    *po = store_f64<T>(p.reduction == Reduction::kSum ? total : total / static_cast<double>(counted));
  });
}

template <class T>
dx_error_t* cross_entropy_backward(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    // inputs: dy, logits, labels, y; outputs: dlogits = g (softmax - onehot), dlabels (zeros).
    expect_arity(call, 4, 2);
    const CrossEntropyPlan p = plan_cross_entropy<T>(call, 1);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    expect_shape(dy, p.out_shape, p.out_rank, "output gradient 0");
    View dl, dlabels;
    const bool want_dl = has_output(call, 0), want_dlabels = has_output(call, 1);
    if (want_dl) dl = gradient_output<T>(call, 0, p.logits.shape, p.logits.rank);
    if (want_dlabels) dlabels = gradient_output<int64_t>(call, 1, p.labels.shape, p.labels.rank);
    std::vector<int64_t> labels;
    const int64_t counted = check_labels(p, labels);
    if (want_dl && p.rows > 0 && p.classes > 0) {
      const T* const px = p.logits.data<const T>();
      const T* const pg = dy.data<const T>();
      T* const pd = dl.data<T>();
      const int64_t drs = p.batched ? dl.strides[0] : 0, dcs = dl.strides[dl.rank - 1];
      const int64_t gs = p.out_rank == 1 ? dy.strides[0] : 0;
      const int64_t n = p.classes;
      const int threads = threads_for(p.rows, n * 10);
      Scratch<C> scratch(threads, 2 * n);
      for_parts(p.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
        C* buffer = scratch.at(slot);
        for (int64_t r = begin; r < end; ++r) {
          T* drow = pd + r * drs;
          C* dc = (std::is_same_v<T, C> && dcs == 1) ? reinterpret_cast<C*>(drow) : buffer + n;
          const int64_t label = labels[r];
          if (label == p.ignore_index) {
            std::fill(dc, dc + n, C(0));
          } else {
            double scale = load_f64(pg[r * gs]);
            if (p.reduction == Reduction::kMean) scale /= static_cast<double>(counted);
            const C* xc = read_run(px + r * p.row_stride, p.class_stride, n, buffer);
            C m;
            LinePrefetcher next = next_line(px + r * p.row_stride, p.row_stride, r + 1 < end,
                                            p.class_stride == 1, n);
            const double log_sum = log_sum_exp_shifted<C>(xc, n, m, next);
            const C sc = static_cast<C>(scale);
            const double md = static_cast<double>(m);
            if (std::isfinite(log_sum) && std::isfinite(md)) {
              // softmax = exp((x - max) - log(sum)) in the compute type: the argument is <= 0
              // and nothing cancels (log(sum) >= 0).
              const C log_sum_c = static_cast<C>(log_sum);
#pragma omp simd
              for (int64_t c = 0; c < n; ++c) dc[c] = sc * exp_c<C>((xc[c] - m) - log_sum_c);
              // The label's term in f64, from the same split (never x - (max + log(sum)), which
              // gives softmax 1 and a zero gradient for [1e17, 1e17, 0, 0]).
              dc[label] = static_cast<C>(
                  scale * (static_cast<double>(exp_c<C>(static_cast<C>((static_cast<double>(xc[label]) - md) - log_sum))) - 1.0));
            } else {
              // NaN or an infinite max: exp(x - (max + log(sum))) in f64 gives the reference's
              // NaN / 0 pattern (log_sum is NaN or 0 here).
              const double lse = md + log_sum;
#pragma omp simd
              for (int64_t c = 0; c < n; ++c) dc[c] = sc * exp_c<C>(static_cast<C>(static_cast<double>(xc[c]) - lse));
              dc[label] = static_cast<C>(scale * (static_cast<double>(exp_c<C>(static_cast<C>(static_cast<double>(xc[label]) - lse))) - 1.0));
            }
          }
          if (static_cast<void*>(dc) != static_cast<void*>(drow)) store_run(drow, dcs, n, dc);
        }
      });
    }
    if (want_dlabels) zero_fill(dlabels);
  });
}

template <class T>
void add_kernels(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  constexpr DLDataType i32 = dtype_of<int32_t>(), i64 = dtype_of<int64_t>();
  // OpenBLAS results depend on its blocking and thread split, so linear does not claim
  // DETERMINISTIC (as dx.matmul).
  r.add("dx.linear", 3, 1, {t, t, t, t}, &linear_kernel<T>, 0, &linear_backward<T>);
  r.add("dx.embedding", 2, 1, {t, i32, t}, &embedding_kernel<T, int32_t>, kDeterministic,
        &embedding_backward<T, int32_t>);
  r.add("dx.embedding", 2, 1, {t, i64, t}, &embedding_kernel<T, int64_t>, kDeterministic,
        &embedding_backward<T, int64_t>);
  r.add("dx.cross_entropy", 2, 1, {t, i64, t}, &cross_entropy_kernel<T>, kDeterministic,
        &cross_entropy_backward<T>);
}

}  // namespace
}  // namespace nn

void register_nn_kernels(Registrar& r) {
  nn::register_norm_kernels(r);
  nn::add_kernels<double>(r);
  nn::add_kernels<float>(r);
  nn::add_kernels<Half>(r);
  nn::add_kernels<BFloat16>(r);
}

}  // namespace deepx::cpu
