// dx.matmul: NumPy matmul semantics (batched, broadcast batch dims, rank-1 operands) with
// transpose_a / transpose_b.
//
// f32/f64 run one GEMM per batch matrix (gemm in sgemm.h: f32 through our AVX-512 kernel or
// OpenBLAS, f64 through OpenBLAS dgemm), straight on the caller's memory when each
// operand has a unit stride in one of its last two dims (a transposed view becomes a
// transposed operand, a column-major output swaps the product to C^T = B^T A^T); otherwise the
// operand is packed into a compact buffer first. f16/bf16 are widened to f32, multiplied in f32
// and rounded once. i8 x i8 -> i32 uses plain loops with wrapping i32 accumulation.
//
// The GEMMs are always called outside OpenMP regions, so their own threading is used as is;
// f32 batches whose products our AVX-512 kernel computes (the same bits on any thread count)
// are instead split over fork-join threads, one single-threaded GEMM per batch
// (batches_in_parallel): a 32 x 256^3 batch no longer starts and joins threads 32 times.
#include <omp.h>

#include <climits>
#include <exception>
#include <mutex>
#include <vector>

#include "dense.h"
#include "grad.h"
#include "kernels.h"
#include "strided.h"

namespace deepx::cpu {
namespace {

/// A matrix view inside one batch: element (i, j) is at base[i * row_stride + j * col_stride].
template <class T>
struct Matrix {
  T* base;
  int64_t rows, cols, row_stride, col_stride;
  Matrix transposed() const { return {base, cols, rows, col_stride, row_stride}; }
  T& at(int64_t i, int64_t j) const { return base[i * row_stride + j * col_stride]; }
};

/// How BLAS can read a matrix in place: row-major (NoTrans) or column-major (Trans), with its
/// leading dimension; `usable` is false when neither fits.
struct BlasLayout {
  bool usable = false;
  bool transposed = false;
  int64_t ld = 0;
};

template <class T>
BlasLayout blas_layout(const Matrix<T>& m) {
  BlasLayout l;
  const int64_t rows = m.rows, cols = m.cols;
  // Row-major: unit column stride (irrelevant with one column), rows at least `cols` apart
  // (irrelevant with one row).
  if ((m.col_stride == 1 || cols == 1) && (rows == 1 || m.row_stride >= std::max<int64_t>(1, cols))) {
    l.usable = true;
    l.ld = rows == 1 ? std::max<int64_t>(1, cols) : m.row_stride;
  } else if ((m.row_stride == 1 || rows == 1) &&
             (cols == 1 || m.col_stride >= std::max<int64_t>(1, rows))) {
    l.usable = true;
    l.transposed = true;
    l.ld = cols == 1 ? std::max<int64_t>(1, rows) : m.col_stride;
  }
  if (l.ld > INT_MAX) l.usable = false;
  return l;
}

/// C = A B + beta C (beta 0 or 1) through the plugin's one GEMM entry point (sgemm.h).
template <class F>
void gemm_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const F* a, int64_t lda,
               const F* b, int64_t ldb, F* c, int64_t ldc, F beta = F(0)) {
  gemm<F>(ta, tb, m, n, k, F(1), a, lda, b, ldb, beta, c, ldc);
}

/// Copies a matrix view (storage type S) into a compact row-major buffer of compute type F.
template <class F, class S>
void pack(const Matrix<S>& m, std::vector<F>& buffer) {
  using Element = std::remove_const_t<S>;
  buffer.resize(static_cast<size_t>(m.rows * m.cols));
  F* dst = buffer.data();
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) dst[i * m.cols + j] = Num<Element>::load(m.at(i, j));
  }
}

/// Where the GEMM reads operand `v`: in place when `layout` says BLAS can (only when the compute
/// type F is the storage type), else packed row-major into `buffer`, `layout` then saying so.
template <class F, class S>
const F* gemm_operand(const Matrix<const S>& v, BlasLayout& layout, std::vector<F>& buffer) {
  if (layout.usable) return reinterpret_cast<const F*>(v.base);
  pack<F>(v, buffer);
  layout = {true, false, std::max<int64_t>(1, v.cols)};
  return buffer.data();
}

/// Scratch buffers reused across the batches of one call.
template <class F>
struct GemmScratch {
  std::vector<F> a, b, c;
};

/// C = A B for one batch with BLAS type F (float or double) and storage type S.
template <class F, class S>
void gemm_blas(Matrix<const S> a, Matrix<const S> b, Matrix<S> c, GemmScratch<F>& scratch) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c.at(i, j) = Num<S>::store(0);
    }
    return;
  }
  constexpr bool kDirect = std::is_same_v<F, S>;
  BlasLayout lc = kDirect ? blas_layout(c) : BlasLayout{};
  if (kDirect && lc.usable && lc.transposed && !(m == 1 && n == 1)) {
    // Column-major output: C^T = B^T A^T writes it row-major.
    gemm_blas<F, S>(b.transposed(), a.transposed(), c.transposed(), scratch);
    return;
  }
  BlasLayout la, lb;
  if constexpr (kDirect) {
    la = blas_layout(a);
    lb = blas_layout(b);
  }
  const F* pa = gemm_operand<F>(a, la, scratch.a);
  const F* pb = gemm_operand<F>(b, lb, scratch.b);
  if (lc.usable && !lc.transposed) {
    gemm_call(la.transposed, lb.transposed, m, n, k, pa, la.ld, pb, lb.ld,
              reinterpret_cast<F*>(c.base), lc.ld);
    return;
  }
  scratch.c.resize(static_cast<size_t>(m * n));
  gemm_call(la.transposed, lb.transposed, m, n, k, pa, la.ld, pb, lb.ld, scratch.c.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c.at(i, j) = Num<S>::store(scratch.c[i * n + j]);
  }
}

/// The bytes [first, last) that view `v` of `size`-byte elements can touch.
std::pair<const char*, const char*> byte_range(const View& v, int64_t size) {
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < v.rank; ++d) {
    const int64_t reach = (v.shape[d] - 1) * v.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {v.base + lo * size, v.base + (hi + 1) * size};
}

/// Whether a forward matmul of `count` batches runs them in parallel, one single-threaded GEMM
/// per batch: f32 products that our kernel computes (sgemm_runs_kernel: the same bits on any
/// thread count), at least two batches per thread or an even split (an odd count of large
/// products is better split inside each GEMM), a compact output (batches never share an
/// element) that overlaps no input.
template <class F>
bool batches_in_parallel(int64_t count, int64_t m, int64_t n, int64_t k, const View& out,
                         const View& a, const View& b) {
  if constexpr (!std::is_same_v<F, float>) {
    return false;
  } else {
    const int64_t threads = available_threads();
    if (threads < 2 || count < 2 || !sgemm_runs_kernel(m, n, k)) return false;
    if (count % threads != 0 && count < 2 * threads) return false;
    if (!out.compact()) return false;
    const int64_t size = static_cast<int64_t>(out.dtype.bits / 8);
    const auto o = byte_range(out, size);
    for (const View* in : {&a, &b}) {
      const auto r = byte_range(*in, static_cast<int64_t>(in->dtype.bits / 8));
      if (r.first < o.second && o.first < r.second) return false;
    }
    return true;
  }
}

struct IntScratch {
  std::vector<int32_t> b;    // compact K x N copy of B (i8 widened)
  std::vector<uint32_t> acc;  // one accumulator row per thread
};

/// i8 x i8 -> i32 for one batch; i32 accumulation wraps (done in u32).
void gemm_i8(Matrix<const int8_t> a, Matrix<const int8_t> b, Matrix<int32_t> c, IntScratch& s) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  pack<int32_t>(b, s.b);
  const int32_t* pb = s.b.data();
  const int threads =
      (m * n * k >= kParallelThreshold * 4 && m > 1) ? available_threads() : 1;
  s.acc.resize(static_cast<size_t>(threads * n));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < m; ++i) {
    uint32_t* acc = s.acc.data() + static_cast<int64_t>(omp_get_thread_num()) * n;
    for (int64_t j = 0; j < n; ++j) acc[j] = 0;
    for (int64_t p = 0; p < k; ++p) {
      const int32_t av = a.at(i, p);
      const int32_t* brow = pb + p * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<uint32_t>(av * brow[j]);
    }
    for (int64_t j = 0; j < n; ++j) c.at(i, j) = static_cast<int32_t>(acc[j]);
  }
}

/// Row and column strides of one batch's matrix. NumPy's rank-1 operands: a vector on the left
/// is one row (row stride 0), on the right one column (column stride 0); the product drops the
/// vector's dim, so its remaining stride serves as the column (left vector) or row (right).
struct MatrixStrides {
  int64_t rs = 0, cs = 0;
};

inline MatrixStrides left_strides(const View& v, bool vector) {
  return {vector ? 0 : v.strides[v.rank - 2], v.strides[v.rank - 1]};
}

inline MatrixStrides right_strides(const View& v, bool vector) {
  return {vector ? v.strides[0] : v.strides[v.rank - 2], vector ? 0 : v.strides[v.rank - 1]};
}

inline MatrixStrides product_strides(const View& c, bool a_vector, bool b_vector) {
  if (!a_vector && !b_vector) return {c.strides[c.rank - 2], c.strides[c.rank - 1]};
  if (!a_vector) return {c.strides[c.rank - 1], 0};
  if (!b_vector) return {0, c.strides[c.rank - 1]};
  return {};
}

template <class S, class O>
dx_error_t* matmul_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    View a = make_view(call->inputs[0], "input 0");
    View b = make_view(call->inputs[1], "input 1");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(a, dtype_of<S>(), "input 0");
    expect_dtype(b, dtype_of<S>(), "input 1");
    expect_dtype(out, dtype_of<O>(), "output 0");
    if (a.rank == 0 || b.rank == 0) fail(DX_SHAPE_MISMATCH, "cpu: matmul operands must have rank >= 1");
    auto swap_last = [](View& v) {
      std::swap(v.shape[v.rank - 1], v.shape[v.rank - 2]);
      std::swap(v.strides[v.rank - 1], v.strides[v.rank - 2]);
    };
    if (a.rank >= 2 && attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false)) swap_last(a);
    if (b.rank >= 2 && attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false)) swap_last(b);

    const bool a_vector = a.rank == 1, b_vector = b.rank == 1;
    const int64_t m = a_vector ? 1 : a.shape[a.rank - 2];
    const int64_t k = a.shape[a.rank - 1];
    const int64_t k_b = b_vector ? b.shape[0] : b.shape[b.rank - 2];
    const int64_t n = b_vector ? 1 : b.shape[b.rank - 1];
    if (k != k_b) {
      fail(DX_SHAPE_MISMATCH, "cpu: matmul inner dims differ: " + shape_string(a.shape, a.rank) +
                                  " x " + shape_string(b.shape, b.rank));
    }
    // Batch dims: NumPy broadcast of everything before the last two dims.
    const int a_batch = a_vector ? 0 : a.rank - 2, b_batch = b_vector ? 0 : b.rank - 2;
    const int batch_rank = std::max(a_batch, b_batch);
    int64_t expected[kMaxRank + 2];
    StridedLoop<3> batches;  // operand 0: out, 1: a, 2: b
    batches.rank = batch_rank;
    for (int d = 0; d < batch_rank; ++d) {
      const int da = d - (batch_rank - a_batch), db = d - (batch_rank - b_batch);
      const int64_t sa = da >= 0 ? a.shape[da] : 1, sb = db >= 0 ? b.shape[db] : 1;
      if (sa != sb && sa != 1 && sb != 1) {
        fail(DX_SHAPE_MISMATCH, "cpu: matmul batch dims do not broadcast: " +
                                    shape_string(a.shape, a.rank) + " x " +
                                    shape_string(b.shape, b.rank));
      }
      expected[d] = sa == 1 ? sb : sa;
      batches.shape[d] = expected[d];
      batches.strides[1][d] = (da >= 0 && a.shape[da] != 1) ? a.strides[da] : 0;
      batches.strides[2][d] = (db >= 0 && b.shape[db] != 1) ? b.strides[db] : 0;
    }
    int expected_rank = batch_rank;
    if (!a_vector) expected[expected_rank++] = m;
    if (!b_vector) expected[expected_rank++] = n;
    bool ok = out.rank == expected_rank;
    for (int d = 0; ok && d < expected_rank; ++d) ok = out.shape[d] == expected[d];
    if (!ok) {
      fail(DX_SHAPE_MISMATCH, "cpu: matmul output shape " + shape_string(out.shape, out.rank) +
                                  " should be " + shape_string(expected, expected_rank));
    }
    for (int d = 0; d < batch_rank; ++d) batches.strides[0][d] = out.strides[d];
    if (out.count() == 0) return;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
      fail(DX_UNSUPPORTED, "cpu: matmul dims above 2^31 - 1 are not supported");
    }

    // Per-batch matrix strides.
    const auto [a_rs, a_cs] = left_strides(a, a_vector);
    const auto [b_rs, b_cs] = right_strides(b, b_vector);
    const auto [c_rs, c_cs] = product_strides(out, a_vector, b_vector);
    const S* const pa = a.data<const S>();
    const S* const pb = b.data<const S>();
    O* const pc = out.data<O>();

    if constexpr (std::is_same_v<S, int8_t>) {
      IntScratch scratch;
      auto row = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          gemm_i8({pa + off[1] + j * st[1], m, k, a_rs, a_cs},
                  {pb + off[2] + j * st[2], k, n, b_rs, b_cs},
                  {pc + off[0] + j * st[0], m, n, c_rs, c_cs}, scratch);
        }
      };
      run_range(batches, 0, batches.count(), row);
    } else {
      using F = std::conditional_t<std::is_same_v<S, double>, double, float>;
      const int64_t count = batches.count();
      if (batches_in_parallel<F>(count, m, n, k, out, a, b)) {
        // Independent f32 products through our kernel (thread-count independent bits): the
        // batches are split over the threads, one single-threaded GEMM each, instead of every
        // GEMM starting and joining its own threads.
        // fork_join bodies must not throw: the first failure (bad_alloc) is rethrown here.
        std::mutex failure_mutex;
        std::exception_ptr failure;
        fork_join(count, kForkJoinThreshold, [&](int64_t begin, int64_t end) {
          try {
            SgemmSingleThreaded single;
            GemmScratch<F> scratch;
            auto row = [&](int64_t rows, const int64_t* off, const int64_t* st) {
              for (int64_t j = 0; j < rows; ++j) {
                gemm_blas<F, S>({pa + off[1] + j * st[1], m, k, a_rs, a_cs},
                                {pb + off[2] + j * st[2], k, n, b_rs, b_cs},
                                {pc + off[0] + j * st[0], m, n, c_rs, c_cs}, scratch);
              }
            };
            run_range(batches, begin, end, row);
          } catch (...) {
            const std::lock_guard<std::mutex> lock(failure_mutex);
            if (!failure) failure = std::current_exception();
          }
        });
        if (failure) std::rethrow_exception(failure);
        return;
      }
      GemmScratch<F> scratch;
      auto row = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          gemm_blas<F, S>({pa + off[1] + j * st[1], m, k, a_rs, a_cs},
                          {pb + off[2] + j * st[2], k, n, b_rs, b_cs},
                          {pc + off[0] + j * st[0], m, n, c_rs, c_cs}, scratch);
        }
      };
      run_range(batches, 0, count, row);
    }
  });
}

// ---- backward ---------------------------------------------------------------------------------
// (dy, a, b, y) -> (da, db) with A' = a (transposed when transpose_a), B' likewise:
// dA' = dC B'^T and dB' = A'^T dC per batch, summed over the batches where the operand was
// broadcast, written through the gradient's own (equally transposed) view. Every product is one
// gemm on the caller's memory where the strides allow; the batches of one gradient element
// accumulate with beta = 1 in the gradient itself (f32/f64 with a BLAS-compatible layout) or in
// a compact f32/f64 buffer rounded once at the end (f16/bf16, other layouts).

/// C (row-major, leading dim ldc, compute type F) = A B + (accumulate ? C : 0).
template <class F, class S>
void gemm_accumulate(Matrix<const S> a, Matrix<const S> b, F* c, int64_t ldc, bool accumulate,
                     GemmScratch<F>& scratch) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = F(0);
      }
    }
    return;
  }
  constexpr bool kDirect = std::is_same_v<F, S>;
  BlasLayout la, lb;
  if constexpr (kDirect) {
    la = blas_layout(a);
    lb = blas_layout(b);
  }
  const F* pa = gemm_operand<F>(a, la, scratch.a);
  const F* pb = gemm_operand<F>(b, lb, scratch.b);
  gemm_call(la.transposed, lb.transposed, m, n, k, pa, la.ld, pb, lb.ld, c, ldc, F(accumulate ? 1 : 0));
}

template <class S>
dx_error_t* matmul_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 4, 2);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    View a = make_view(call->inputs[1], "forward input 0");
    View b = make_view(call->inputs[2], "forward input 1");
    const View y = make_view(call->inputs[3], "forward output 0");
    constexpr DLDataType t = dtype_of<S>();
    expect_dtype(dy, t, "output gradient 0");
    expect_dtype(a, t, "forward input 0");
    expect_dtype(b, t, "forward input 1");
    expect_dtype(y, t, "forward output 0");
    if (a.rank == 0 || b.rank == 0) fail(DX_SHAPE_MISMATCH, "cpu: matmul operands must have rank >= 1");
    const std::optional<View> va = grad_view(call, 0, t, a);
    const std::optional<View> vb = grad_view(call, 1, t, b);
    // The gemms read dy, a and b while they write the gradients, so a gradient that overlaps
    // any of them goes through a temporary.
    GradTarget ga(va, {&dy, &a, &b}, false);
    GradTarget gb(vb, {&dy, &a, &b}, false);
    View da = ga ? ga.view() : a, db = gb ? gb.view() : b;
    auto swap_last = [](View& v) {
      std::swap(v.shape[v.rank - 1], v.shape[v.rank - 2]);
      std::swap(v.strides[v.rank - 1], v.strides[v.rank - 2]);
    };
    if (a.rank >= 2 && attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false)) {
      swap_last(a);
      swap_last(da);
    }
    if (b.rank >= 2 && attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false)) {
      swap_last(b);
      swap_last(db);
    }
    const bool a_vector = a.rank == 1, b_vector = b.rank == 1;
    const int64_t m = a_vector ? 1 : a.shape[a.rank - 2];
    const int64_t k = a.shape[a.rank - 1];
    const int64_t k_b = b_vector ? b.shape[0] : b.shape[b.rank - 2];
    const int64_t n = b_vector ? 1 : b.shape[b.rank - 1];
    if (k != k_b) {
      fail(DX_SHAPE_MISMATCH, "cpu: matmul inner dims differ: " + shape_string(a.shape, a.rank) +
                                  " x " + shape_string(b.shape, b.rank));
    }
    const int a_batch = a_vector ? 0 : a.rank - 2, b_batch = b_vector ? 0 : b.rank - 2;
    const int batch_rank = std::max(a_batch, b_batch);
    int64_t expected[kMaxRank + 2];
    // Operands: 0 dy, 1 a, 2 b, 3 da (view), 4 db (view), 5 da's compact batch index, 6 db's.
    StridedLoop<7> batches;
    batches.rank = batch_rank;
    int64_t a_batches = 1, b_batches = 1;
    for (int d = batch_rank - 1; d >= 0; --d) {
      const int da_ = d - (batch_rank - a_batch), db_ = d - (batch_rank - b_batch);
      const int64_t sa = da_ >= 0 ? a.shape[da_] : 1, sb = db_ >= 0 ? b.shape[db_] : 1;
      if (sa != sb && sa != 1 && sb != 1) {
        fail(DX_SHAPE_MISMATCH, "cpu: matmul batch dims do not broadcast: " +
                                    shape_string(a.shape, a.rank) + " x " +
                                    shape_string(b.shape, b.rank));
      }
      expected[d] = sa == 1 ? sb : sa;
      batches.shape[d] = expected[d];
      batches.strides[1][d] = sa != 1 ? a.strides[da_] : 0;
      batches.strides[2][d] = sb != 1 ? b.strides[db_] : 0;
      batches.strides[3][d] = sa != 1 ? da.strides[da_] : 0;
      batches.strides[4][d] = sb != 1 ? db.strides[db_] : 0;
      batches.strides[5][d] = sa != 1 ? a_batches : 0;
      batches.strides[6][d] = sb != 1 ? b_batches : 0;
      a_batches *= sa;
      b_batches *= sb;
    }
    int expected_rank = batch_rank;
    if (!a_vector) expected[expected_rank++] = m;
    if (!b_vector) expected[expected_rank++] = n;
    bool ok = dy.rank == expected_rank && y.rank == expected_rank;
    for (int d = 0; ok && d < expected_rank; ++d) ok = dy.shape[d] == expected[d] && y.shape[d] == expected[d];
    if (!ok) {
      fail(DX_SHAPE_MISMATCH, "cpu: matmul output gradient shape " + shape_string(dy.shape, dy.rank) +
                                  " should be " + shape_string(expected, expected_rank));
    }
    for (int d = 0; d < batch_rank; ++d) batches.strides[0][d] = dy.strides[d];
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
      fail(DX_UNSUPPORTED, "cpu: matmul dims above 2^31 - 1 are not supported");
    }

    const auto [a_rs, a_cs] = left_strides(a, a_vector);
    const auto [b_rs, b_cs] = right_strides(b, b_vector);
    const auto [da_rs, da_cs] = left_strides(da, a_vector);
    const auto [db_rs, db_cs] = right_strides(db, b_vector);
    const auto [c_rs, c_cs] = product_strides(dy, a_vector, b_vector);
    const S* const pdy = dy.data<const S>();
    const S* const pa = a.data<const S>();
    const S* const pb = b.data<const S>();
    using F = std::conditional_t<std::is_same_v<S, double>, double, float>;
    GemmScratch<F> scratch;

    // target: 0 = da, 1 = db.
    auto run = [&](int target) {
      const View& g = target == 0 ? da : db;
      if (g.count() == 0) return;
      const int64_t rows = target == 0 ? m : k, cols = target == 0 ? k : n;
      const int64_t rs = target == 0 ? da_rs : db_rs, cs = target == 0 ? da_cs : db_cs;
      const int64_t count = target == 0 ? a_batches : b_batches;
      S* const pg = g.data<S>();
      if (batches.count() == 0) {  // no product reaches the gradient: zeros
        map_elements<S>(g, {}, []() { return from_f64<S>(0.0); });
        return;
      }
      // Direct: accumulate in the gradient itself when BLAS can address it.
      BlasLayout layout;
      if constexpr (std::is_same_v<F, S>) layout = blas_layout(Matrix<S>{pg, rows, cols, rs, cs});
      std::vector<F> buffer;
      if (!layout.usable) buffer.assign(static_cast<size_t>(count * rows * cols), F(0));
      std::vector<unsigned char> started(static_cast<size_t>(count), 0);
      std::vector<int64_t> where(static_cast<size_t>(count), 0);
      auto row = [&](int64_t batch_count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < batch_count; ++j) {
          const Matrix<const S> c_m{pdy + off[0] + j * st[0], m, n, c_rs, c_cs};
          Matrix<const S> lhs, rhs;
          if (target == 0) {
            lhs = c_m;
            rhs = Matrix<const S>{pb + off[2] + j * st[2], k, n, b_rs, b_cs}.transposed();
          } else {
            lhs = Matrix<const S>{pa + off[1] + j * st[1], m, k, a_rs, a_cs}.transposed();
            rhs = c_m;
          }
          const int64_t index = off[5 + target] + j * st[5 + target];
          const int64_t g_offset = off[3 + target] + j * st[3 + target];
          const bool accumulate = started[index] != 0;
          started[index] = 1;
          where[index] = g_offset;
          if (!layout.usable) {
            gemm_accumulate<F, S>(lhs, rhs, buffer.data() + index * rows * cols,
                                  std::max<int64_t>(1, cols), accumulate, scratch);
          } else if constexpr (std::is_same_v<F, S>) {
            F* c = reinterpret_cast<F*>(pg + g_offset);
            if (layout.transposed && !(rows == 1 && cols == 1)) {
              // Column-major gradient: G^T = rhs^T lhs^T, row-major.
              gemm_accumulate<F, S>(rhs.transposed(), lhs.transposed(), c, layout.ld, accumulate, scratch);
            } else {
              gemm_accumulate<F, S>(lhs, rhs, c, layout.ld, accumulate, scratch);
            }
          }
        }
      };
      run_range(batches, 0, batches.count(), row);
      if (!layout.usable) {
        for (int64_t index = 0; index < count; ++index) {
          const F* src = buffer.data() + index * rows * cols;
          S* dst = pg + where[index];
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j) dst[i * rs + j * cs] = Num<S>::store(src[i * cols + j]);
          }
        }
      }
    };
    if (ga) run(0);
    if (gb) run(1);
    ga.finish();
    gb.finish();
  });
}

}  // namespace

void register_matmul_kernels(Registrar& r) {
  // OpenBLAS results depend on its blocking and thread split (and it runs every product on the
  // baseline and x86-64-v3 variants, the small ones on x86-64-v4), so F kernels do not claim
  // DETERMINISTIC; the integer kernel is exact.
  auto add_float = [&r](auto tag) {
    using T = decltype(tag);
    constexpr DLDataType t = dtype_of<T>();
    r.add("dx.matmul", 2, 1, {t, t, t}, &matmul_kernel<T, T>, 0, &matmul_backward_kernel<T>);
  };
  add_float(double{});
  add_float(float{});
  add_float(Half{});
  add_float(BFloat16{});
  r.add("dx.matmul", 2, 1, {dtype_of<int8_t>(), dtype_of<int8_t>(), dtype_of<int32_t>()},
        &matmul_kernel<int8_t, int32_t>, DX_KERNEL_FLAG_DETERMINISTIC);
}

}  // namespace deepx::cpu
