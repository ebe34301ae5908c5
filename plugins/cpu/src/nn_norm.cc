// dx.log_softmax, dx.layer_norm, dx.rms_norm, dx.batch_norm and their gradients.
//
// Each normalisation group (a softmax line, a layer/rms-norm row, a batch-norm channel) is
// computed by one thread in a fixed order, so results never depend on the thread count. Rows
// run in the compute type (f32 for f32/f16/bf16, f64 for f64) straight on the tensor when the
// row is unit-stride f32/f64, else on a converted copy; every sum is accumulated in blocks into
// f64 (nn_util.h), and the statistics (mean, variance, rstd, log-sum-exp) are formed in f64.
// Means and variances use the corrected two-pass scheme of nn_util.h (Moments), so a large
// mean offset costs no accuracy, with an f64 fallback where f32 would overflow; the affine
// tails of layer_norm and batch_norm run in f64 (x_hat * w + b can cancel). Parameter
// gradients summed over rows (layer_norm dw/db, rms_norm dw) are accumulated per fixed range of
// rows and the ranges combined in order.
//
// Speed (docs/performance.md): a row in L1 costs instructions, a row not yet there costs DRAM
// latency with nothing to overlap (the hardware prefetchers stop at 4 KiB pages), so the row
// passes prefetch the next row while they compute (LinePrefetcher, nn_util.h). layer_norm
// backward runs three passes per row: moments, the row sums fused with the dw/db column sums,
// and dx; under AVX-512 the first two use 512-bit intrinsics. f32 rows collect their column
// sums in a per-thread f32 block row, folded into the f64 partials once per 16 rows (Columns).
// log_softmax's exp-sum pass is the shared exp_shifted_sum (512-bit under AVX-512).
#include <cmath>
#include <cstdint>
#include <vector>

#include "nn_util.h"

namespace deepx::cpu::nn {
namespace {

// Attribute slots (deepx/ops.h schema order).
constexpr int kNormAxis = 0, kNormEps = 1;
constexpr int kBnTraining = 0, kBnMomentum = 1, kBnEps = 2;

/// Row-parallel partitions for sums over rows: a function of the problem only (deterministic),
/// at most 32 and small enough that the partial arrays stay within 2^22 f64 each.
int64_t fixed_parts(int64_t rows, int64_t n) {
  const int64_t by_memory = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, n));
  return std::clamp<int64_t>(std::min<int64_t>(32, by_memory), 1, std::max<int64_t>(1, rows));
}

// ---- log_softmax ---------------------------------------------------------------------------------

/// The lines of a softmax-like op along `axis`: outer loop over the other dims (operand k's
/// strides), and each operand's stride along the axis.
template <int K>
struct Lines {
  StridedLoop<K> outer;
  int64_t rows = 1, length = 1;
  RowLayout line[K];
};

template <int K>
Lines<K> make_lines(const View* const (&ops)[K], int64_t axis) {
  Lines<K> l;
  const View& x = *ops[0];
  for (int d = 0; d < x.rank; ++d) {
    if (d == axis) continue;
    l.outer.shape[l.outer.rank] = x.shape[d];
    for (int k = 0; k < K; ++k) l.outer.strides[k][l.outer.rank] = ops[k]->strides[d];
    ++l.outer.rank;
  }
  l.rows = l.outer.count();
  l.length = x.rank == 0 ? 1 : x.shape[axis];
  for (int k = 0; k < K; ++k) {
    const int64_t shape = l.length, stride = ops[k]->rank == 0 ? 1 : ops[k]->strides[axis];
    l.line[k] = row_layout(&shape, &stride, 1);
  }
  l.outer.simplify();
  return l;
}

/// y = x - max - log(sum(exp(x - max))); a NaN poisons the line, an all -Inf line gives NaN
/// (-Inf - -Inf), as the reference. y may alias x.
/// `next` streams the next line in while the exp pass computes (see exp_shifted_sum).
template <class C>
void log_softmax_line(const C* x, C* y, int64_t n, LinePrefetcher& next) {
  bool nan = false;
  const C m = line_max(x, n, nan);
  if (nan) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<C>::quiet_NaN();
    return;
  }
  const double sum = exp_shifted_sum<C>(x, m, n, next);
  if (!(m > -std::numeric_limits<C>::infinity() && m < std::numeric_limits<C>::infinity())) {
    // An infinite max: x - max - log(sum) in f64 gives the reference's NaN / -Inf pattern.
    const double shift = static_cast<double>(m) + std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<C>(static_cast<double>(x[i]) - shift);
    return;
  }
  // (x - max) - log(sum) in the compute type: both terms are <= 0, so nothing cancels and the
  // result is within 1.5 ulp (f32) of the f64 value, without f64 conversions in the loop.
  const C log_sum = static_cast<C>(std::log(sum));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
}

/// dx = dy - softmax(x) * sum(dy), softmax recomputed from x.
template <class C>
void log_softmax_grad_line(const C* x, const C* g, C* dx, int64_t n) {
  bool nan = false;
  const C m = line_max(x, n, nan);
  if (nan) {
    for (int64_t i = 0; i < n; ++i) dx[i] = std::numeric_limits<C>::quiet_NaN();
    return;
  }
  const double sum = blocked_sum<C>(n, [x, m](int64_t i) { return exp_c<C>(x[i] - m); });
  const double total = blocked_sum<C>(n, [g](int64_t i) { return g[i]; });
  if (!(m > -std::numeric_limits<C>::infinity() && m < std::numeric_limits<C>::infinity())) {
    const double shift = static_cast<double>(m) + std::log(sum);
    for (int64_t i = 0; i < n; ++i) {
      const C s = exp_c<C>(static_cast<C>(static_cast<double>(x[i]) - shift));
      dx[i] = static_cast<C>(static_cast<double>(g[i]) - static_cast<double>(s) * total);
    }
    return;
  }
  // softmax = exp((x - max) - log(sum)) and dx = dy - softmax * sum(dy), in the compute type
  // (the exp argument is <= 0; its f32 rounding moves s by |argument| * 2^-24 relative).
  const C log_sum = static_cast<C>(std::log(sum));
  const C total_c = static_cast<C>(total);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] - exp_c<C>((x[i] - m) - log_sum) * total_c;
}

template <class T>
dx_error_t* log_softmax_kernel(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    const std::pair<View, View> views = unary_views<T, T>(call);
    const View& out = views.first;
    const View& in = views.second;
    const int64_t axis = softmax_axis(call, in.rank, "log_softmax");
    if (in.count() == 0) return;
    const View* const ops[2] = {&in, &out};
    const Lines<2> l = make_lines(ops, axis);
    const bool direct = std::is_same_v<T, C> && l.line[0].unit && l.line[1].unit;
    const int threads = threads_for(l.rows, l.length * 8);
    Scratch<C> scratch(threads, direct ? 0 : l.length);
    const T* const px = in.data<const T>();
    T* const py = out.data<T>();
    for_parts(l.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          const T* xr = px + off[0] + j * st[0];
          T* yr = py + off[1] + j * st[1];
          const C* xc = read_row(xr, l.line[0], buffer);
          C* yc = write_row(yr, l.line[1], buffer);
          LinePrefetcher next = next_line(xr, st[0], j + 1 < count, l.line[0].unit, l.length);
          log_softmax_line<C>(xc, yc, l.length, next);
          commit_row(yr, l.line[1], yc);
        }
      };
      run_range(l.outer, begin, end, rows);
    });
  });
}

template <class T>
dx_error_t* log_softmax_backward(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    expect_arity(call, 3, 1);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    const View x = typed_input<T>(call, 1, "forward input 0");
    expect_shape(dy, x.shape, x.rank, "output gradient 0");
    const View y = typed_input<T>(call, 2, "forward output 0");
    expect_shape(y, x.shape, x.rank, "forward output 0");
    const int64_t axis = softmax_axis(call, x.rank, "log_softmax");
    if (!has_output(call, 0)) return;
    const View dx = typed_output<T>(call, 0, "input gradient 0");
    expect_shape(dx, x.shape, x.rank, "input gradient 0");
    if (x.count() == 0) return;
    if (x.rank == 0) {
      *dx.data<T>() = Num<T>::store(0);  // log_softmax of one element is constant
      return;
    }
    const View* const ops[3] = {&x, &dy, &dx};
    const Lines<3> l = make_lines(ops, axis);
    const int threads = threads_for(l.rows, l.length * 12);
    Scratch<C> scratch(threads, 3 * l.length);
    const T* const px = x.data<const T>();
    const T* const pg = dy.data<const T>();
    T* const pd = dx.data<T>();
    for_parts(l.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          T* dr = pd + off[2] + j * st[2];
          const C* xc = read_row(px + off[0] + j * st[0], l.line[0], buffer);
          const C* gc = read_row(pg + off[1] + j * st[1], l.line[1], buffer + l.length);
          C* dc = write_row(dr, l.line[2], buffer + 2 * l.length);
          log_softmax_grad_line<C>(xc, gc, dc, l.length);
          commit_row(dr, l.line[2], dc);
        }
      };
      run_range(l.outer, begin, end, rows);
    });
  });
}

// ---- layer_norm, rms_norm ---------------------------------------------------------------------

/// x split at the normalisation axis: `rows` groups (the leading dims) of `n` elements (the
/// trailing dims from `axis`). Statistics have shape x.shape[:axis] + 1s.
struct NormSplit {
  int axis = 0;
  int64_t rows = 1, n = 1;
  int64_t stats_shape[kMaxRank];
  double eps = 1e-5;
};

NormSplit split_norm(const dx_kernel_call_t* call, const View& x) {
  NormSplit s;
  const int64_t requested = attr_i64(call, kNormAxis, "axis", -1);
  const int64_t axis = requested < 0 ? requested + x.rank : requested;
  if (axis < 0 || axis >= x.rank) {
    fail(DX_OUT_OF_RANGE, "cpu: normalisation axis " + std::to_string(requested) +
                              " is out of range for rank " + std::to_string(x.rank));
  }
  s.axis = static_cast<int>(axis);
  for (int d = 0; d < x.rank; ++d) {
    if (d < s.axis) s.rows *= x.shape[d];
    else s.n *= x.shape[d];
    s.stats_shape[d] = d < s.axis ? x.shape[d] : 1;
  }
  s.eps = attr_f64_or(call, kNormEps, "eps", 1e-5);
  return s;
}

/// An optional parameter with the normalised shape (weight, bias): its view when present.
template <class T>
bool norm_param(const dx_kernel_call_t* call, int i, const View& x, const NormSplit& s, const char* what,
                View& out) {
  if (!has_input(call, i)) return false;
  out = typed_input<T>(call, i, what);
  expect_shape(out, x.shape + s.axis, x.rank - s.axis, what);
  return true;
}

/// A parameter row in the compute type; `fallback` everywhere when absent.
template <class T, class C>
std::vector<C> param_values(bool present, const View& v, int64_t n, C fallback) {
  std::vector<C> values(static_cast<size_t>(n), fallback);
  if (present && n > 0) gather_row(v.data<const T>(), row_layout(v.shape, v.strides, v.rank), values.data());
  return values;
}

/// Outer loop over the leading `axis` dims of the operands (x-shaped or stats-shaped: both have
/// the leading dims).
template <int K>
StridedLoop<K> rows_loop(const View* const (&ops)[K], int axis) {
  StridedLoop<K> outer;
  outer.rank = axis;
  for (int d = 0; d < axis; ++d) {
    outer.shape[d] = ops[0]->shape[d];
    for (int k = 0; k < K; ++k) outer.strides[k][d] = ops[k]->strides[d];
  }
  outer.simplify();
  return outer;
}

inline RowLayout trailing_layout(const View& v, int axis) {
  return row_layout(v.shape + axis, v.strides + axis, v.rank - axis);
}

/// One layer_norm backward row entirely in f64 (rows whose statistics needed f64, see Moments).
template <class C>
void layer_norm_grad_wide(const C* x, const C* g, const C* w, int64_t n, double mean, double rs, double gm,
                          double gr, C* dx, double* dw, double* db) {
  const double inv_n = 1.0 / static_cast<double>(n);
  double a = 0, b = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xhat = (static_cast<double>(x[i]) - mean) * rs;
    const double dxhat = static_cast<double>(g[i]) * static_cast<double>(w[i]);
    a += dxhat;
    b += dxhat * xhat;
    if (dw != nullptr) dw[i] += static_cast<double>(g[i]) * xhat;
    if (db != nullptr) db[i] += static_cast<double>(g[i]);
  }
  a *= inv_n;
  b *= inv_n;
  if (dx == nullptr) return;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    const double xhat = d * rs;
    const double dxhat = static_cast<double>(g[i]) * static_cast<double>(w[i]);
    dx[i] = static_cast<C>(rs * (dxhat - a - xhat * b) + gm * inv_n - gr * rs * rs * rs * d * inv_n);
  }
}

template <class T>
dx_error_t* layer_norm_kernel(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    expect_arity(call, 3, 3);
    const View x = typed_input<T>(call, 0, "input 0");
    const NormSplit s = split_norm(call, x);
    View w, b;
    const bool has_w = norm_param<T>(call, 1, x, s, "weight", w);
    const bool has_b = norm_param<T>(call, 2, x, s, "bias", b);
    const View y = typed_output<T>(call, 0, "output 0");
    const View mean = typed_output<T>(call, 1, "output 1");
    const View rstd = typed_output<T>(call, 2, "output 2");
    expect_shape(y, x.shape, x.rank, "output 0");
    expect_shape(mean, s.stats_shape, x.rank, "output 1 (mean)");
    expect_shape(rstd, s.stats_shape, x.rank, "output 2 (rstd)");
    if (s.rows == 0) return;
    const int64_t n = s.n;
    // The affine tail runs in f64: x_hat * w + b may cancel (w and b of similar size), and a
    // compute-type tail would then miss the f64 reference's tolerance.
    const std::vector<double> wv = param_values<T, double>(has_w, w, n, 1.0);
    const std::vector<double> bv = param_values<T, double>(has_b, b, n, 0.0);
    const View* const ops[4] = {&x, &y, &mean, &rstd};
    const StridedLoop<4> outer = rows_loop(ops, s.axis);
    const RowLayout lx = trailing_layout(x, s.axis), ly = trailing_layout(y, s.axis);
    const int threads = threads_for(s.rows, n * 6);
    Scratch<C> scratch(threads, 2 * n);
    const T* const px = x.data<const T>();
    T* const py = y.data<T>();
    T* const pm = mean.data<T>();
    T* const pr = rstd.data<T>();
    const double* const pw = wv.data();
    const double* const pb = bv.data();
    const std::vector<C> wcv(wv.begin(), wv.end()), bcv(bv.begin(), bv.end());
    const C* const pwc = wcv.data();
    const C* const pbc = bcv.data();
    const double eps = s.eps;
    for_parts(s.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          T* yr = py + off[1] + j * st[1];
          const C* xc = read_row(px + off[0] + j * st[0], lx, buffer);
          C* yc = write_row(yr, ly, buffer + n);
          const Moments<C> mo = row_moments<C>(xc, n);
          const double rs = 1.0 / std::sqrt(mo.var + eps);
          const double mu = mo.mean;
          if (std::is_same_v<C, float> && !mo.wide) {
            // f32 rows: x_hat = ((x - mc) - delta) * rs in f32 (x - mc is exact near the mean),
            // then x_hat * w + b. A cancelling w, b pair leaves an absolute error of a few f32
            // ulps of |x_hat * w|, inside the f32 atol; f64 rows keep the f64 tail.
            const C mc = mo.mc, delta = mo.delta, rs_c = static_cast<C>(rs);
            const C* const wc = pwc;
            const C* const bc = pbc;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) yc[i] = (((xc[i] - mc) - delta) * rs_c) * wc[i] + bc[i];
          } else {
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) yc[i] = static_cast<C>((static_cast<double>(xc[i]) - mu) * rs * pw[i] + pb[i]);
          }
          commit_row(yr, ly, yc);
          pm[off[2] + j * st[2]] = store_f64<T>(mo.mean);
          pr[off[3] + j * st[3]] = store_f64<T>(rs);
        }
      };
      run_range(outer, begin, end, rows);
    });
  });
}

/// `count` zero-initialised rows of `n` T, each starting on its own 64-byte cache line: rows
/// that different threads update (per-part column sums, per-thread block rows) must not share
/// a line, or the line moves between the cores on every update of either row.
template <class T>
class LineRows {
 public:
  LineRows(int64_t count, int64_t n)
      : stride_((std::max<int64_t>(n, 1) + kPerLine - 1) / kPerLine * kPerLine),
        storage_(count > 0 && n > 0 ? static_cast<size_t>(count * stride_ + kPerLine) : 0) {
    if (storage_.empty()) return;
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    base_ = storage_.data() + ((64 - address % 64) % 64) / sizeof(T);
  }
  LineRows(const LineRows&) = delete;
  LineRows& operator=(const LineRows&) = delete;
  bool empty() const { return base_ == nullptr; }
  T* row(int64_t k) { return base_ == nullptr ? nullptr : base_ + k * stride_; }
  const T* row(int64_t k) const { return base_ == nullptr ? nullptr : base_ + k * stride_; }

 private:
  static constexpr int64_t kPerLine = 64 / static_cast<int64_t>(sizeof(T));
  int64_t stride_;
  std::vector<T> storage_;
  T* base_ = nullptr;
};

/// Sums the per-part f64 partials (in part order) and stores them rounded into `grad`.
template <class T>
void store_partials(const LineRows<double>& partial, int64_t parts, int64_t n, const View& grad) {
  std::vector<double> total(static_cast<size_t>(n), 0.0);
  for (int64_t p = 0; p < parts; ++p) {
    const double* src = partial.row(p);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) total[i] += src[i];
  }
  store_row_f64(grad.data<T>(), row_layout(grad.shape, grad.strides, grad.rank), total.data());
}

/// dx of one compute-type layer_norm row. Built without FMA contraction: g * w - a must cancel
/// exactly where a row has no spread (a one-element row, a constant row: a is then the rounded
/// g * w itself), and a fused g * w - a would leave the product's rounding error, which rs
/// (up to 1 / sqrt(eps)) then magnifies past the tolerance (seen under -march=native).
/// `next_dx` streams the next row's dx lines in for writing meanwhile.
template <class C>
[[gnu::optimize("fp-contract=off")]] void layer_norm_dx_row(const C* xc, const C* gc, const C* pw, int64_t n, C mc,
                                                            C delta, C r, C ac, C bc, C c1, C c2, C* dc,
                                                            LinePrefetcher& next_dx, int per_step) {
  constexpr int64_t kStep = 16;
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    next_dx.step<true>(per_step);
#pragma omp simd
    for (int64_t l = i; l < i + kStep; ++l) {
      const C d = (xc[l] - mc) - delta;
      dc[l] = r * (gc[l] * pw[l] - ac - d * r * bc) + c1 - c2 * d;
    }
  }
  for (; i < n; ++i) {
    const C d = (xc[i] - mc) - delta;
    dc[i] = r * (gc[i] * pw[i] - ac - d * r * bc) + c1 - c2 * d;
  }
}

/// How a row's column contributions (g x_hat to dw, g to db) reach the column sums. kF64: added
/// into the part's f64 partials (f64 rows). kStart, kAdd: f32 rows collect them in a per-thread
/// f32 block row, kBlockRows rows at a time (the first row of a block stores its contributions,
/// the others add theirs), and fold_block() adds the block into the f64 partials once: an f64
/// read-modify-write per row cost more than the rest of an L1-resident row. Blocks are counted
/// from the start of each fixed part of rows, so the sums never depend on the thread count; an
/// f32 block sum of 16 terms adds at most 15 f32 roundings of its terms (the f32 lane sums of
/// blocked_sum round as often), far inside the norm-wise gradient tolerance.
enum class Columns { kF64, kStart, kAdd };
constexpr int64_t kBlockRows = 16;

/// One element's column contributions.
template <Columns kMode, bool kDw, bool kDb, class C>
inline void add_columns(int64_t i, C gx, C gv, double* dw, double* db, C* bdw, C* bdb) {
  if constexpr (kMode == Columns::kF64) {
    if constexpr (kDw) dw[i] += static_cast<double>(gx);
    if constexpr (kDb) db[i] += static_cast<double>(gv);
  } else if constexpr (kMode == Columns::kStart) {
    if constexpr (kDw) bdw[i] = gx;
    if constexpr (kDb) bdb[i] = gv;
  } else {
    if constexpr (kDw) bdw[i] += gx;
    if constexpr (kDb) bdb[i] += gv;
  }
}

/// Adds a block row of f32 column sums into the f64 partials (a null partial is skipped).
template <class C>
inline void fold_block(int64_t n, double* dw, double* db, const C* bdw, const C* bdb) {
  if (dw != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dw[i] += static_cast<double>(bdw[i]);
  }
  if (db != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) db[i] += static_cast<double>(bdb[i]);
  }
}

/// The row sums of a compute-type layer_norm row, a = sum(g w) and bq = sum(g w x_hat) with
/// x_hat = ((x - mc) - delta) r, blocked as blocked_sum (f32: 16-lane f32 sums over chunks of
/// at most 256 elements, added into f64), fused with the column contributions (see Columns) so
/// the row is read once. `next_x`, `next_g` stream the next row in meanwhile (this pass is
/// compute-bound on a row already in L1).
template <class C, bool kDw, bool kDb, Columns kMode>
void layer_norm_row_sums(const C* x, const C* g, const C* w, int64_t n, C mc, C delta, C r, double* dw, double* db,
                         C* bdw, C* bdb, double& a, double& bq, LinePrefetcher& next_x, LinePrefetcher& next_g,
                         int per_step) {
  // One element's terms, added into the compute-type lanes or, for the tail, into the f64 sums.
  auto terms = [=](int64_t i, auto& sa, auto& sb) {
    const C xhat = ((x[i] - mc) - delta) * r;
    const C gw = g[i] * w[i];
    sa += gw;
    sb += gw * xhat;
    add_columns<kMode, kDw, kDb>(i, g[i] * xhat, g[i], dw, db, bdw, bdb);
  };
  lane_sums2<C>(
      n, a, bq,
      [&] {
        next_x.step(per_step);
        next_g.step(per_step);
      },
      terms, terms);
}

#if defined(__AVX512F__)
/// layer_norm_row_sums for f32 rows in 512-bit registers (GCC's x86-64-v4 tuning vectorises at
/// 256 bits and keeps wide lane arrays in memory): the same sums, two 16-lane f32 accumulators
/// per sum over 512-element chunks (16 terms per lane) added into f64, and the same column
/// contributions into the f32 block row (kStart, kAdd).
template <bool kDw, bool kDb, Columns kMode>
void layer_norm_row_sums_avx512(const float* x, const float* g, const float* w, int64_t n, float mc, float delta,
                                float r, double* dw, double* db, float* bdw, float* bdb, double& a, double& bq,
                                LinePrefetcher& next_x, LinePrefetcher& next_g, int per_step) {
  static_assert(kMode != Columns::kF64, "f32 rows collect their columns in the block row");
  const __m512 vmc = _mm512_set1_ps(mc), vdelta = _mm512_set1_ps(delta), vr = _mm512_set1_ps(r);
  __m512d wa = _mm512_setzero_pd(), wb = _mm512_setzero_pd();
  auto widen_add = [](__m512d acc, __m512 v) { return _mm512_add_pd(_mm512_add_pd(acc, widen_low(v)), widen_high(v)); };
  auto columns = [&](int64_t i, __m512 gv, __m512 xh) {
    if constexpr (kDw) {
      if constexpr (kMode == Columns::kStart) _mm512_storeu_ps(bdw + i, _mm512_mul_ps(gv, xh));
      else _mm512_storeu_ps(bdw + i, _mm512_fmadd_ps(gv, xh, _mm512_loadu_ps(bdw + i)));
    }
    if constexpr (kDb) {
      if constexpr (kMode == Columns::kStart) _mm512_storeu_ps(bdb + i, gv);
      else _mm512_storeu_ps(bdb + i, _mm512_add_ps(gv, _mm512_loadu_ps(bdb + i)));
    }
  };
  constexpr int64_t kChunk = 512;
  int64_t i = 0;
  while (i + 32 <= n) {
    const int64_t chunk_end = std::min(n - (n - i) % 32, i + kChunk);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    for (; i < chunk_end; i += 32) {
      next_x.step(2 * per_step);
      next_g.step(2 * per_step);
      const __m512 g0 = _mm512_loadu_ps(g + i), g1 = _mm512_loadu_ps(g + i + 16);
      const __m512 x0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmc), vdelta), vr);
      const __m512 x1 = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmc), vdelta), vr);
      const __m512 gw0 = _mm512_mul_ps(g0, _mm512_loadu_ps(w + i));
      const __m512 gw1 = _mm512_mul_ps(g1, _mm512_loadu_ps(w + i + 16));
      a0 = _mm512_add_ps(a0, gw0);
      a1 = _mm512_add_ps(a1, gw1);
      b0 = _mm512_fmadd_ps(gw0, x0, b0);
      b1 = _mm512_fmadd_ps(gw1, x1, b1);
      columns(i, g0, x0);
      columns(i + 16, g1, x1);
    }
    wa = widen_add(wa, _mm512_add_ps(a0, a1));
    wb = widen_add(wb, _mm512_add_ps(b0, b1));
  }
  a = _mm512_reduce_add_pd(wa);
  bq = _mm512_reduce_add_pd(wb);
  for (; i < n; ++i) {
    const float xhat = ((x[i] - mc) - delta) * r;
    const float gw = g[i] * w[i];
    a += gw;
    bq += gw * xhat;
    add_columns<kMode, kDw, kDb>(i, g[i] * xhat, g[i], dw, db, bdw, bdb);
  }
}
#endif

template <class C>
using RowSumsFn = void (*)(const C*, const C*, const C*, int64_t, C, C, C, double*, double*, C*, C*, double&, double&,
                           LinePrefetcher&, LinePrefetcher&, int);

template <class C, Columns kMode>
RowSumsFn<C> pick_row_sums(bool dw, bool db) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<C, float> && kMode != Columns::kF64) {
    if (dw && db) return &layer_norm_row_sums_avx512<true, true, kMode>;
    if (dw) return &layer_norm_row_sums_avx512<true, false, kMode>;
    if (db) return &layer_norm_row_sums_avx512<false, true, kMode>;
    return &layer_norm_row_sums_avx512<false, false, kMode>;
  }
#endif
  if (dw && db) return &layer_norm_row_sums<C, true, true, kMode>;
  if (dw) return &layer_norm_row_sums<C, true, false, kMode>;
  if (db) return &layer_norm_row_sums<C, false, true, kMode>;
  return &layer_norm_row_sums<C, false, false, kMode>;
}

/// Where the next row of an operand lies when it is unit-stride storage (its bytes, for
/// prefetching), else nothing.
template <class T>
LinePrefetcher next_row(const T* row, const RowLayout& l, bool has_next, int64_t step) {
  if (!has_next || !l.unit) return {};
  return LinePrefetcher(row + step, l.count * static_cast<int64_t>(sizeof(T)));
}

template <class T>
dx_error_t* layer_norm_backward(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    // inputs: dy, dmean, drstd, x, w, b, y, mean, rstd; outputs: dx, dw, db.
    expect_arity(call, 9, 3);
    if ((!has_input(call, 4) && has_output(call, 1)) || (!has_input(call, 5) && has_output(call, 2))) {
      fail(DX_INVALID_ARGUMENT, "cpu: layer_norm backward: gradient requested for an absent input");
    }
    const View x = typed_input<T>(call, 3, "forward input 0");
    const NormSplit s = split_norm(call, x);
    View w, b;
    const bool has_w = norm_param<T>(call, 4, x, s, "weight", w);
    norm_param<T>(call, 5, x, s, "bias", b);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    const View dmean = typed_input<T>(call, 1, "output gradient 1");
    const View drstd = typed_input<T>(call, 2, "output gradient 2");
    expect_shape(dy, x.shape, x.rank, "output gradient 0");
    expect_shape(dmean, s.stats_shape, x.rank, "output gradient 1");
    expect_shape(drstd, s.stats_shape, x.rank, "output gradient 2");
    View dx, dw, db;
    const bool want_dx = has_output(call, 0), want_dw = has_output(call, 1), want_db = has_output(call, 2);
    if (want_dx) dx = gradient_output<T>(call, 0, x.shape, x.rank);
    if (want_dw) dw = gradient_output<T>(call, 1, x.shape + s.axis, x.rank - s.axis);
    if (want_db) db = gradient_output<T>(call, 2, x.shape + s.axis, x.rank - s.axis);
    const int64_t n = s.n;
    const bool sums = want_dw || want_db;
    const int threads = threads_for(s.rows, n * 10);
    const int64_t parts = sums ? fixed_parts(s.rows, n) : threads;
    LineRows<double> pdw(want_dw ? parts : 0, n), pdb(want_db ? parts : 0, n);
    if (s.rows > 0 && n > 0) {
      const std::vector<C> wv = param_values<T, C>(has_w, w, n, C(1));
      const View& dx_or_x = want_dx ? dx : x;
      const View* const ops[5] = {&x, &dy, &dmean, &drstd, &dx_or_x};
      const StridedLoop<5> outer = rows_loop(ops, s.axis);
      const RowLayout lx = trailing_layout(x, s.axis), lg = trailing_layout(dy, s.axis);
      const RowLayout ld = trailing_layout(dx_or_x, s.axis);
      Scratch<C> scratch(threads, 3 * n);
      const T* const px = x.data<const T>();
      const T* const pg = dy.data<const T>();
      const T* const pgm = dmean.data<const T>();
      const T* const pgr = drstd.data<const T>();
      T* const pd = want_dx ? dx.data<T>() : nullptr;
      const C* const pw = wv.data();
      const double eps = s.eps;
      const double inv_n = 1.0 / static_cast<double>(n);
      // f32 rows collect their column contributions in per-thread f32 block rows (Columns).
      constexpr bool kBlocked = std::is_same_v<C, float>;
      const RowSumsFn<C> start_sums = pick_row_sums<C, kBlocked ? Columns::kStart : Columns::kF64>(want_dw, want_db);
      const RowSumsFn<C> add_sums = pick_row_sums<C, kBlocked ? Columns::kAdd : Columns::kF64>(want_dw, want_db);
      LineRows<C> blocks(kBlocked && sums ? 2 * threads : 0, n);
      // The next row's lines, spread over the 16-element steps of one pass.
      const int per_step = lines_per_step(n * static_cast<int64_t>(sizeof(T)) / 64, n / 16);
      for_parts(s.rows, parts, threads, [&](int64_t part, int64_t begin, int64_t end, int slot) {
        C* buffer = scratch.at(slot);
        double* part_dw = pdw.row(part);
        double* part_db = pdb.row(part);
        C* block_dw = blocks.row(2 * slot);
        C* block_db = blocks.row(2 * slot + 1);
        int64_t in_block = 0;  // rows collected in the block row since its last fold
        auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
          for (int64_t j = 0; j < count; ++j) {
            const T* xr = px + off[0] + j * st[0];
            const T* gr_row = pg + off[1] + j * st[1];
            const C* xc = read_row(xr, lx, buffer);
            const C* gc = read_row(gr_row, lg, buffer + n);
            const double gm = load_f64(pgm[off[2] + j * st[2]]);
            const double gr = load_f64(pgr[off[3] + j * st[3]]);
            const Moments<C> mo = row_moments<C>(xc, n);
            const double rs = 1.0 / std::sqrt(mo.var + eps);
            T* dr = pd != nullptr ? pd + off[4] + j * st[4] : nullptr;
            C* dc = pd != nullptr ? write_row(dr, ld, buffer + 2 * n) : nullptr;
            if (mo.wide) {
              layer_norm_grad_wide<C>(xc, gc, pw, n, mo.mean, rs, gm, gr, dc, part_dw, part_db);
            } else {
              const bool has_next = j + 1 < count;
              LinePrefetcher next_x = next_row(xr, lx, has_next, st[0]);
              LinePrefetcher next_g = next_row(gr_row, lg, has_next, st[1]);
              const C r = static_cast<C>(rs), mc = mo.mc, delta = mo.delta;
              double a = 0, bq = 0;
              const RowSumsFn<C> row_sums = in_block == 0 ? start_sums : add_sums;
              row_sums(xc, gc, pw, n, mc, delta, r, part_dw, part_db, block_dw, block_db, a, bq, next_x, next_g,
                       per_step);
              if (kBlocked && sums && ++in_block == kBlockRows) {
                fold_block(n, part_dw, part_db, block_dw, block_db);
                in_block = 0;
              }
              a *= inv_n;
              bq *= inv_n;
              if (dc != nullptr) {
                LinePrefetcher next_d = next_row(static_cast<const T*>(dr), ld, has_next, st[4]);
                const C ac = static_cast<C>(a), bc = static_cast<C>(bq);
                const C c1 = static_cast<C>(gm * inv_n);
                const C c2 = static_cast<C>(gr * rs * rs * rs * inv_n);
                layer_norm_dx_row<C>(xc, gc, pw, n, mc, delta, r, ac, bc, c1, c2, dc, next_d, per_step);
              }
            }
            if (dc != nullptr) commit_row(dr, ld, dc);
          }
        };
        run_range(outer, begin, end, rows);
        if (in_block > 0) fold_block(n, part_dw, part_db, block_dw, block_db);
      });
    }
    if (want_dw) store_partials<T>(pdw, parts, n, dw);
    if (want_db) store_partials<T>(pdb, parts, n, db);
  });
}

/// mean(x^2) of a row; recomputed in f64 (and `wide` set) when the compute type overflows.
template <class C>
double mean_square(const C* x, int64_t n, bool& wide) {
  double ms = blocked_sum<C>(n, [x](int64_t i) { return x[i] * x[i]; }) / static_cast<double>(n);
  wide = !std::isfinite(ms);
  if (wide) {
    ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    ms /= static_cast<double>(n);
  }
  return ms;
}

template <class T>
dx_error_t* rms_norm_kernel(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const View x = typed_input<T>(call, 0, "input 0");
    const NormSplit s = split_norm(call, x);
    View w;
    const bool has_w = norm_param<T>(call, 1, x, s, "weight", w);
    const View y = typed_output<T>(call, 0, "output 0");
    expect_shape(y, x.shape, x.rank, "output 0");
    const int64_t n = s.n;
    if (s.rows == 0 || n == 0) return;
    const std::vector<C> wv = param_values<T, C>(has_w, w, n, C(1));
    const View* const ops[2] = {&x, &y};
    const StridedLoop<2> outer = rows_loop(ops, s.axis);
    const RowLayout lx = trailing_layout(x, s.axis), ly = trailing_layout(y, s.axis);
    const int threads = threads_for(s.rows, n * 4);
    Scratch<C> scratch(threads, 2 * n);
    const T* const px = x.data<const T>();
    T* const py = y.data<T>();
    const C* const pw = wv.data();
    const double eps = s.eps;
    for_parts(s.rows, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < count; ++j) {
          T* yr = py + off[1] + j * st[1];
          const C* xc = read_row(px + off[0] + j * st[0], lx, buffer);
          C* yc = write_row(yr, ly, buffer + n);
          bool wide = false;
          const double rd = 1.0 / std::sqrt(mean_square<C>(xc, n, wide) + eps);
          if (!wide) {
            const C r = static_cast<C>(rd);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) yc[i] = xc[i] * r * pw[i];
          } else {
            for (int64_t i = 0; i < n; ++i) {
              yc[i] = static_cast<C>(static_cast<double>(xc[i]) * rd * static_cast<double>(pw[i]));
            }
          }
          commit_row(yr, ly, yc);
        }
      };
      run_range(outer, begin, end, rows);
    });
  });
}

template <class T>
dx_error_t* rms_norm_backward(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    // inputs: dy, x, w, y; outputs: dx, dw.
    expect_arity(call, 4, 2);
    if (!has_input(call, 2) && has_output(call, 1)) {
      fail(DX_INVALID_ARGUMENT, "cpu: rms_norm backward: a weight gradient was requested without a weight");
    }
    const View x = typed_input<T>(call, 1, "forward input 0");
    const NormSplit s = split_norm(call, x);
    View w;
    const bool has_w = norm_param<T>(call, 2, x, s, "weight", w);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    expect_shape(dy, x.shape, x.rank, "output gradient 0");
    View dx, dw;
    const bool want_dx = has_output(call, 0), want_dw = has_output(call, 1);
    if (want_dx) dx = gradient_output<T>(call, 0, x.shape, x.rank);
    if (want_dw) dw = gradient_output<T>(call, 1, x.shape + s.axis, x.rank - s.axis);
    const int64_t n = s.n;
    const int threads = threads_for(s.rows, n * 8);
    const int64_t parts = want_dw ? fixed_parts(s.rows, n) : threads;
    LineRows<double> pdw(want_dw ? parts : 0, n);
    if (s.rows > 0 && n > 0) {
      const std::vector<C> wv = param_values<T, C>(has_w, w, n, C(1));
      const View& dx_or_x = want_dx ? dx : x;
      const View* const ops[3] = {&x, &dy, &dx_or_x};
      const StridedLoop<3> outer = rows_loop(ops, s.axis);
      const RowLayout lx = trailing_layout(x, s.axis), lg = trailing_layout(dy, s.axis);
      const RowLayout ld = trailing_layout(dx_or_x, s.axis);
      Scratch<C> scratch(threads, 3 * n);
      const T* const px = x.data<const T>();
      const T* const pg = dy.data<const T>();
      T* const pd = want_dx ? dx.data<T>() : nullptr;
      const C* const pw = wv.data();
      const double eps = s.eps;
      const double inv_n = 1.0 / static_cast<double>(n);
      for_parts(s.rows, parts, threads, [&](int64_t part, int64_t begin, int64_t end, int slot) {
        C* buffer = scratch.at(slot);
        double* part_dw = pdw.row(part);
        auto rows = [&](int64_t count, const int64_t* off, const int64_t* st) {
          for (int64_t j = 0; j < count; ++j) {
            const C* xc = read_row(px + off[0] + j * st[0], lx, buffer);
            const C* gc = read_row(pg + off[1] + j * st[1], lg, buffer + n);
            bool wide = false;
            const double rd = 1.0 / std::sqrt(mean_square<C>(xc, n, wide) + eps);
            T* dr = pd != nullptr ? pd + off[2] + j * st[2] : nullptr;
            C* dc = pd != nullptr ? write_row(dr, ld, buffer + 2 * n) : nullptr;
            if (wide) {
              // f64 throughout (see Moments).
              double bq = 0;
              for (int64_t i = 0; i < n; ++i) {
                const double xhat = static_cast<double>(xc[i]) * rd;
                bq += static_cast<double>(gc[i]) * static_cast<double>(pw[i]) * xhat;
                if (part_dw != nullptr) part_dw[i] += static_cast<double>(gc[i]) * xhat;
              }
              bq *= inv_n;
              for (int64_t i = 0; dc != nullptr && i < n; ++i) {
                const double xhat = static_cast<double>(xc[i]) * rd;
                dc[i] = static_cast<C>(rd * (static_cast<double>(gc[i]) * static_cast<double>(pw[i]) - xhat * bq));
              }
            } else {
              const C r = static_cast<C>(rd);
              const double bq = blocked_sum<C>(n, [gc, pw, xc, r](int64_t i) { return gc[i] * pw[i] * (xc[i] * r); }) * inv_n;
              if (part_dw != nullptr) {
#pragma omp simd
                for (int64_t i = 0; i < n; ++i) part_dw[i] += static_cast<double>(gc[i] * (xc[i] * r));
              }
              if (dc != nullptr) {
                const C bc = static_cast<C>(bq);
#pragma omp simd
                for (int64_t i = 0; i < n; ++i) dc[i] = r * (gc[i] * pw[i] - xc[i] * r * bc);
              }
            }
            if (dc != nullptr) commit_row(dr, ld, dc);
          }
        };
        run_range(outer, begin, end, rows);
      });
    }
    if (want_dw) store_partials<T>(pdw, parts, n, dw);
  });
}

// ---- batch_norm -------------------------------------------------------------------------------------

struct BatchNormPlan {
  View x;
  View params[4];  // weight, bias, running_mean, running_var
  bool present[4] = {};
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  int64_t channels = 0, per_channel = 0;
};

/// Reads and checks the forward inputs starting at input `first`, in the reference's order.
template <class T>
BatchNormPlan plan_batch_norm(const dx_kernel_call_t* call, int first) {
  BatchNormPlan p;
  p.x = typed_input<T>(call, first, "input 0");
  static const char* const kNames[4] = {"weight", "bias", "running_mean", "running_var"};
  for (int k = 0; k < 4; ++k) {
    p.present[k] = has_input(call, first + 1 + k);
    if (p.present[k]) p.params[k] = typed_input<T>(call, first + 1 + k, kNames[k]);
  }
  p.training = attr_bool(call, kBnTraining, "training", false);
  p.momentum = attr_f64_or(call, kBnMomentum, "momentum", 0.1);
  p.eps = attr_f64_or(call, kBnEps, "eps", 1e-5);
  if (p.x.rank < 2) fail(DX_SHAPE_MISMATCH, "cpu: batch_norm: x must be (N, C, ...)");
  p.channels = p.x.shape[1];
  p.per_channel = p.channels > 0 ? p.x.count() / p.channels : 0;
  for (int k = 0; k < 4; ++k) {
    if (p.present[k] && (p.params[k].rank != 1 || p.params[k].shape[0] != p.channels)) {
      fail(DX_SHAPE_MISMATCH, "cpu: batch_norm: per-channel tensors must be (C,) with C = " +
                                  std::to_string(p.channels));
    }
  }
  if (!p.training && (!p.present[2] || !p.present[3])) {
    fail(DX_INVALID_ARGUMENT, "cpu: batch_norm: evaluation mode needs running_mean and running_var");
  }
  return p;
}

template <class T>
double channel_value(const BatchNormPlan& p, int k, int64_t c, double fallback) {
  if (!p.present[k]) return fallback;
  return load_f64(p.params[k].data<const T>()[c * p.params[k].strides[0]]);
}

/// The elements of one channel: every dim but dim 1, with operand k's strides.
template <int K>
StridedLoop<K> channel_loop(const View* const (&ops)[K]) {
  StridedLoop<K> loop;
  const View& x = *ops[0];
  for (int d = 0; d < x.rank; ++d) {
    if (d == 1) continue;
    loop.shape[loop.rank] = x.shape[d];
    for (int k = 0; k < K; ++k) loop.strides[k][loop.rank] = ops[k]->strides[d];
    ++loop.rank;
  }
  loop.simplify();
  return loop;
}

constexpr int64_t kChunk = 2048;

/// Calls fn(n, offsets, strides) for the runs of channel c, at most kChunk elements each.
template <int K, class Fn>
void for_channel_runs(const StridedLoop<K>& loop, const View* const (&ops)[K], int64_t c, Fn&& fn) {
  int64_t base[K];
  for (int k = 0; k < K; ++k) base[k] = c * ops[k]->strides[1];
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t start = 0; start < n; start += kChunk) {
      int64_t o[K];
      for (int k = 0; k < K; ++k) o[k] = base[k] + off[k] + start * st[k];
      fn(std::min(kChunk, n - start), static_cast<const int64_t*>(o), st);
    }
  };
  run_range(loop, 0, loop.count(), run);
}

/// Batch mean and (biased) variance of channel c, as row_moments() but over the channel's runs.
template <class T, int K>
Moments<Comp<T>> channel_moments(const StridedLoop<K>& loop, const View* const (&ops)[K], int64_t c,
                                 int64_t count, Comp<T>* buffer) {
  using C = Comp<T>;
  const T* px = ops[0]->template data<const T>();
  Moments<C> m;
  double sum = 0;
  for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
    const C* xc = read_run(px + off[0], st[0], n, buffer);
    sum += blocked_sum<double>(n, [xc](int64_t i) { return static_cast<double>(xc[i]); });
  });
  const double mean = sum / static_cast<double>(count);
  const C mc = static_cast<C>(mean);
  double s2 = 0;
  if (std::isfinite(mean)) {
    for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
      const C* xc = read_run(px + off[0], st[0], n, buffer);
      double a = 0, b = 0;
      shifted_sums(xc, n, mc, a, b);
      s2 += b;
    });
  }
  if (finish_moments(m, mean, s2, count)) return m;
  m.wide = true;
  double squares = 0;
  for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      const double e = load_f64(px[off[0] + i * st[0]]) - m.mean;
      squares += e * e;
    }
  });
  m.var = squares / static_cast<double>(count);
  m.mc = static_cast<C>(m.mean);
  m.delta = 0;
  return m;
}

/// The statistics batch_norm normalises channel c with: the batch's in training, else the
/// running ones.
template <class T, int K>
Moments<Comp<T>> channel_stats(const BatchNormPlan& p, const StridedLoop<K>& loop, const View* const (&ops)[K],
                               int64_t c, int64_t count, Comp<T>* buffer) {
  if (p.training) return channel_moments<T>(loop, ops, c, count, buffer);
  Moments<Comp<T>> m;
  m.mean = channel_value<T>(p, 2, c, 0);
  m.var = channel_value<T>(p, 3, c, 1);
  m.mc = static_cast<Comp<T>>(m.mean);  // exact: the running mean is a T
  return m;
}

template <class T>
dx_error_t* batch_norm_kernel(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    expect_arity(call, 5, 1);
    const BatchNormPlan p = plan_batch_norm<T>(call, 0);
    const View y = typed_output<T>(call, 0, "output 0");
    expect_shape(y, p.x.shape, p.x.rank, "output 0");
    if (p.channels == 0) return;
    const View* const ops[2] = {&p.x, &y};
    const StridedLoop<2> loop = channel_loop(ops);
    const int64_t count = p.per_channel;
    const bool update = p.training && p.present[2] && p.present[3] && count > 0;
    const int threads = threads_for(p.channels, count * 6);
    Scratch<C> scratch(threads, 2 * kChunk);
    const T* const px = p.x.data<const T>();
    T* const py = y.data<T>();
    for_parts(p.channels, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      for (int64_t c = begin; c < end; ++c) {
        if (count == 0) continue;
        const Moments<C> mo = channel_stats<T>(p, loop, ops, c, count, buffer);
        const double mean = mo.mean, var = mo.var;
        const double rstd = 1.0 / std::sqrt(var + p.eps);
        const double w = channel_value<T>(p, 0, c, 1), b = channel_value<T>(p, 1, c, 0);
        // y = (x - mean) * rstd * w + b, with x - mean = (x - mc) - delta.
        // In f64, as layer_norm's affine tail (w and b may cancel).
        const double a = rstd * w;
        for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
          const C* xc = read_run(px + off[0], st[0], n, buffer);
          T* yr = py + off[1];
          C* yc = (std::is_same_v<T, C> && st[1] == 1) ? reinterpret_cast<C*>(yr) : buffer + kChunk;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) yc[i] = static_cast<C>((static_cast<double>(xc[i]) - mean) * a + b);
          if (static_cast<void*>(yc) != static_cast<void*>(yr)) store_run(yr, st[1], n, yc);
        });
        if (update) {
          const double n = static_cast<double>(count);
          const double unbiased = count > 1 ? var * n / (n - 1) : std::numeric_limits<double>::quiet_NaN();
          const View& rm = p.params[2];
          const View& rv = p.params[3];
          T* prm = rm.data<T>() + c * rm.strides[0];
          T* prv = rv.data<T>() + c * rv.strides[0];
          *prm = store_f64<T>((1 - p.momentum) * load_f64(*prm) + p.momentum * mean);
          *prv = store_f64<T>((1 - p.momentum) * load_f64(*prv) + p.momentum * unbiased);
        }
      }
    });
  });
}

template <class T>
dx_error_t* batch_norm_backward(const dx_kernel_call_t* call) noexcept {
  using C = Comp<T>;
  return guard(call->host, [&] {
    // inputs: dy, x, w, b, running_mean, running_var, y; outputs: dx, dw, db, drm, drv.
    expect_arity(call, 7, 5);
    for (int k = 1; k <= 4; ++k) {
      if (!has_input(call, 1 + k) && has_output(call, k)) {
        fail(DX_INVALID_ARGUMENT, "cpu: batch_norm backward: gradient " + std::to_string(k) +
                                      " requested for an absent optional input");
      }
    }
    const BatchNormPlan p = plan_batch_norm<T>(call, 1);
    const View dy = typed_input<T>(call, 0, "output gradient 0");
    expect_shape(dy, p.x.shape, p.x.rank, "output gradient 0");
    View grads[5];
    bool want[5];
    for (int k = 0; k < 5; ++k) {
      want[k] = has_output(call, k);
      if (!want[k]) continue;
      grads[k] = typed_output<T>(call, k, "input gradient");
      if (k == 0) expect_shape(grads[0], p.x.shape, p.x.rank, "input gradient 0");
      else expect_shape(grads[k], &p.channels, 1, "input gradient");
    }
    if (p.channels == 0) return;
    const View& dx_or_x = want[0] ? grads[0] : p.x;
    const View* const ops[3] = {&p.x, &dy, &dx_or_x};
    const StridedLoop<3> loop = channel_loop(ops);
    const int64_t count = p.per_channel;
    const int threads = threads_for(p.channels, count * 10);
    Scratch<C> scratch(threads, 3 * kChunk);
    const T* const px = p.x.data<const T>();
    const T* const pg = dy.data<const T>();
    T* const pd = want[0] ? grads[0].data<T>() : nullptr;
    auto put = [&](int k, int64_t c, double v) {
      if (want[k]) grads[k].data<T>()[c * grads[k].strides[0]] = store_f64<T>(v);
    };
    for_parts(p.channels, threads, threads, [&](int64_t, int64_t begin, int64_t end, int slot) {
      C* buffer = scratch.at(slot);
      for (int64_t c = begin; c < end; ++c) {
        if (count == 0) {
          for (int k = 1; k < 5; ++k) put(k, c, 0.0);
          continue;
        }
        const Moments<C> mo = channel_stats<T>(p, loop, ops, c, count, buffer);
        const double mean = mo.mean;
        const double rstd = 1.0 / std::sqrt(mo.var + p.eps);
        const double w = channel_value<T>(p, 0, c, 1);
        const C mc = mo.mc, delta = mo.delta;
        // sum_g = sum(dy), sum_gx = sum(dy * xhat) with xhat = (x - mean) * rstd.
        double sum_g = 0, sum_gd = 0;
        for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
          const C* xc = read_run(px + off[0], st[0], n, buffer);
          const C* gc = read_run(pg + off[1], st[1], n, buffer + kChunk);
          sum_g += blocked_sum<C>(n, [gc](int64_t i) { return gc[i]; });
          if (!mo.wide) {
            sum_gd += blocked_sum<C>(n, [gc, xc, mc, delta](int64_t i) { return gc[i] * ((xc[i] - mc) - delta); });
          } else {
            for (int64_t i = 0; i < n; ++i) sum_gd += static_cast<double>(gc[i]) * (static_cast<double>(xc[i]) - mean);
          }
        });
        const double sum_gx = sum_gd * rstd;
        put(1, c, sum_gx);
        put(2, c, sum_g);
        put(3, c, p.training ? 0.0 : -w * rstd * sum_g);
        put(4, c, p.training ? 0.0 : -0.5 * w * rstd * rstd * sum_gx);
        if (pd == nullptr) continue;
        const double n_total = static_cast<double>(count);
        // dx = w rstd (g - sum_g / n - xhat sum_gx / n) in training, w rstd g in evaluation:
        // dx = k1 * g - k2 * (x - mean) - k3.
        const double k1 = w * rstd;
        const double k2 = p.training ? w * rstd * rstd * sum_gx / n_total : 0.0;
        const double k3 = p.training ? w * rstd * sum_g / n_total : 0.0;
        const C c1 = static_cast<C>(k1), c2 = static_cast<C>(k2), c3 = static_cast<C>(k3);
        for_channel_runs(loop, ops, c, [&](int64_t n, const int64_t* off, const int64_t* st) {
          const C* xc = read_run(px + off[0], st[0], n, buffer);
          const C* gc = read_run(pg + off[1], st[1], n, buffer + kChunk);
          T* dr = pd + off[2];
          C* dc = (std::is_same_v<T, C> && st[2] == 1) ? reinterpret_cast<C*>(dr) : buffer + 2 * kChunk;
          if (!mo.wide) {
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) dc[i] = c1 * gc[i] - c2 * ((xc[i] - mc) - delta) - c3;
          } else {
            for (int64_t i = 0; i < n; ++i) {
              dc[i] = static_cast<C>(k1 * static_cast<double>(gc[i]) - k2 * (static_cast<double>(xc[i]) - mean) - k3);
            }
          }
          if (static_cast<void*>(dc) != static_cast<void*>(dr)) store_run(dr, st[2], n, dc);
        });
      }
    });
  });
}

template <class T>
void add_norm_kernels(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  r.add("dx.log_softmax", 1, 1, {t, t}, &log_softmax_kernel<T>, kDeterministic, &log_softmax_backward<T>);
  r.add("dx.layer_norm", 3, 3, {t, t, t, t, t, t}, &layer_norm_kernel<T>, kDeterministic,
        &layer_norm_backward<T>);
  r.add("dx.rms_norm", 2, 1, {t, t, t}, &rms_norm_kernel<T>, kDeterministic, &rms_norm_backward<T>);
  r.add("dx.batch_norm", 5, 1, {t, t, t, t, t, t}, &batch_norm_kernel<T>, kDeterministic,
        &batch_norm_backward<T>);
}

}  // namespace

void register_norm_kernels(Registrar& r) {
  add_norm_kernels<double>(r);
  add_norm_kernels<float>(r);
  add_norm_kernels<Half>(r);
  add_norm_kernels<BFloat16>(r);
}

}  // namespace deepx::cpu::nn
