// dx.scaled_dot_product_attention and its gradient, with the reference's semantics:
// q (B..., L, E), k (B..., S, E), v (B..., S, Ev) with equal batch dims; an optional mask
// broadcastable to (B..., L, S), bool (true = attend) or additive of q's dtype; attrs `causal`
// (query i attends keys j <= i) and `scale` (unset = 1/sqrt(E)). A row whose scores contain a
// NaN, or that has no live key (or only -Inf/+Inf maxima), is NaN, as the reference computes.
//
// f64 computes in f64. f32, f16 and bf16 compute in f32 (sgemm, a vectorised f32 exp, row sums
// in f64) when f32_suffices() says f32 rounding stays within the suite's tolerance: the
// conformance suite holds attention to PyTorch's f32 rtol/atol (1.3e-6 / 1e-5) against the
// reference's f64 result, so a call whose operands are non-finite, could overflow f32 scores,
// or have magnitudes whose score rounding error would exceed that budget computes in f64
// (dgemm; inputs widened while packed) and rounds once, as before.
//
// Per batch matrix and block of query rows: scores = scale Q K^T (GEMM), the masked,
// max-shifted softmax in place (rows over fork-join threads, a vectorisable exp), then
// out = P V (GEMM). Causal calls without a mask on the f32 path use blocks of about L/8 rows
// and leave out the keys that are dead for a whole block (all scores are finite there and
// every row has a live key, so no row is NaN), about halving the work.
// The backward recomputes P per block and uses four GEMMs: dP = dO V^T, dV += P^T dO,
// dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK += scale dS^T Q; an additive mask's gradient
// is dS summed over its broadcast dims. The reference skips zero probabilities in P V and zero
// dS terms in dQ/dK; that only matters when V (or Q/K) holds Inf/NaN, so such batches take an
// exact loop that skips them the same way. Row blocks bound the score buffer whatever L and S.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "dense.h"
#include "fast_math.h"
#include "kernels.h"

namespace deepx::cpu {
namespace {

constexpr const char* kOp = "dx.scaled_dot_product_attention";
// Attribute slots (deepx/ops.h schema "causal,scale").
constexpr int kCausalSlot = 0, kScaleSlot = 1;
// Most score elements one block holds (rows x S).
constexpr int64_t kScoreBlock = int64_t{1} << 20;

struct AttentionPlan {
  View q, k, v, mask;
  bool has_mask = false;
  int rank = 0;
  int64_t batches = 1, l = 0, s = 0, e = 0, ev = 0;
  int64_t out_shape[kMaxRank];
  int64_t score_shape[kMaxRank];
  // The mask's element strides broadcast to (B..., L, S).
  int64_t mask_strides[kMaxRank];
  bool causal = false;
  double scale = 1;

  /// Element offset of batch `b` (row-major over the batch dims) in a tensor whose strides,
  /// broadcast to (B..., L, S), are `strides`.
  int64_t batch_offset(int64_t b, const int64_t* strides) const {
    int64_t offset = 0;
    for (int d = rank - 3; d >= 0; --d) {
      const int64_t extent = score_shape[d];
      offset += (b % extent) * strides[d];
      b /= extent;
    }
    return offset;
  }
  int64_t block_rows() const {
    return std::max<int64_t>(1, std::min<int64_t>(l, kScoreBlock / std::max<int64_t>(1, s)));
  }
};

/// Row block of the causal f32 path: about L/8 rows (at least 32), within the score bound.
int64_t causal_block_rows(const AttentionPlan& p) {
  return std::min(p.block_rows(), std::max<int64_t>(32, (p.l + 7) / 8));
}

AttentionPlan plan_attention(const dx_kernel_call_t* call, int first) {
  AttentionPlan p;
  p.q = make_view(call->inputs[first], "input 0");
  p.k = make_view(call->inputs[first + 1], "input 1");
  p.v = make_view(call->inputs[first + 2], "input 2");
  if (p.q.rank < 2 || p.k.rank != p.q.rank || p.v.rank != p.q.rank) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.scaled_dot_product_attention: q, k, v must share a rank >= 2");
  }
  const int r = p.rank = p.q.rank;
  for (int d = 0; d + 2 < r; ++d) {
    if (p.k.shape[d] != p.q.shape[d] || p.v.shape[d] != p.q.shape[d]) {
      fail(DX_SHAPE_MISMATCH, "cpu: dx.scaled_dot_product_attention: batch dims of q, k, v differ");
    }
    p.batches *= p.q.shape[d];
    p.out_shape[d] = p.score_shape[d] = p.q.shape[d];
  }
  p.l = p.q.shape[r - 2], p.e = p.q.shape[r - 1];
  p.s = p.k.shape[r - 2], p.ev = p.v.shape[r - 1];
  if (p.k.shape[r - 1] != p.e || p.v.shape[r - 2] != p.s) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.scaled_dot_product_attention: q " +
                                shape_string(p.q.shape, r) + ", k " + shape_string(p.k.shape, r) +
                                ", v " + shape_string(p.v.shape, r) + " disagree");
  }
  p.out_shape[r - 2] = p.l, p.out_shape[r - 1] = p.ev;
  p.score_shape[r - 2] = p.l, p.score_shape[r - 1] = p.s;
  if (call->inputs[first + 3] != nullptr) {
    p.mask = make_view(call->inputs[first + 3], "input 3");
    p.has_mask = true;
    bool ok = p.mask.rank <= r;
    const int lead = r - p.mask.rank;
    for (int d = 0; ok && d < r; ++d) {
      if (d < lead) {
        p.mask_strides[d] = 0;
        continue;
      }
      const int64_t extent = p.mask.shape[d - lead];
      ok = extent == 1 || extent == p.score_shape[d];
      p.mask_strides[d] = extent == 1 ? 0 : p.mask.strides[d - lead];
    }
    if (!ok) {
      std::string message = "cpu: dx.scaled_dot_product_attention: mask ";
      message += shape_string(p.mask.shape, p.mask.rank);
      message += " does not broadcast to ";
      message += shape_string(p.score_shape, r);
      fail(DX_SHAPE_MISMATCH, std::move(message));
    }
  }
  p.causal = attr_bool(call, kCausalSlot, "causal", false);
  const dx_attr_t* scale = attr_at(call, kScaleSlot);
  if (scale == nullptr) {
    p.scale = p.e > 0 ? 1.0 / std::sqrt(static_cast<double>(p.e)) : 1.0;
  } else if (scale->type == DX_ATTR_F64) {
    p.scale = scale->value.f64;
  } else if (scale->type == DX_ATTR_I64) {
    p.scale = static_cast<double>(scale->value.i64);
  } else {
    fail(DX_INVALID_ARGUMENT, "cpu: attribute scale must be an f64");
  }
  return p;
}

/// exp for f64 in straight-line code (so the softmax loop vectorises, also on plain SSE2),
/// within about 1 ulp for normal results: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite), the
/// degree-13 Taylor polynomial of e^r, times 2^n built from its bits. Results below 2^-1022
/// (x < -708.3, the masked keys' -Inf included) flush to exactly 0: the softmax divides by a sum
/// >= 1, so such a term is below any output's resolution. NaN stays NaN; x > 709.4 gives +Inf
/// (slightly early: the softmax only ever passes x <= 0).
inline double exp_f64(double x) {
  double clamped = x > 709.4 ? 709.4 : x;
  clamped = clamped < -708.3 ? -708.3 : clamped;
  clamped = (x != x) ? 0.0 : clamped;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const double shifted = clamped * 1.4426950408889634 + kShifter;
  const double n_double = shifted - kShifter;
  const uint64_t n_bits = std::bit_cast<uint64_t>(shifted) - std::bit_cast<uint64_t>(kShifter);
  constexpr double kLn2High = 6.93147180369123816490e-01;  // n * kLn2High is exact
  constexpr double kLn2Low = 1.90821492927058770002e-10;
  const double r = (clamped - n_double * kLn2High) - n_double * kLn2Low;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  const double y = p * (r * r) + r + 1.0;
  // n in [-1022, 1023]: (n + 1023) << 52 is 2^n (wrapping u64 arithmetic, n may be negative).
  const double scale = std::bit_cast<double>((n_bits + uint64_t{1023}) << 52);
  double result = y * scale;
  result = x < -708.3 ? 0.0 : result;
  result = x > 709.4 ? std::numeric_limits<double>::infinity() : result;
  return (x != x) ? x + x : result;
}

inline double exp_of(double x) { return exp_f64(x); }
inline float exp_of(float x) { return exp_f32(x); }

/// Turns `rows` rows of scale * q k^T (query rows i0...) into attention probabilities in place,
/// applying the causal rule and the mask (`mask` points at this batch's element (0, 0)).
template <class F, class M>
void softmax_rows(const AttentionPlan& p, F* scores, int64_t i0, int64_t rows, const M* mask,
                  int64_t cols) {
  const int64_t s = cols;  // live columns (causal blocks end early)
  const int64_t ld = p.s;
  const int64_t msl = p.has_mask ? p.mask_strides[p.rank - 2] : 0;
  const int64_t mss = p.has_mask ? p.mask_strides[p.rank - 1] : 0;
  constexpr F kNegInf = -std::numeric_limits<F>::infinity();
  fork_join(rows, rows * s, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = i0 + r;
      F* row = scores + r * ld;
      bool has_nan = false;
      F row_max = kNegInf;
      // Keys j > i are dead under the causal rule; a dead key's score still counts for NaN
      // (the f32 path, whose scores are all finite, leaves out the columns dead for a whole
      // block: `cols`).
      const int64_t live_end = p.causal ? std::min<int64_t>(s, i + 1) : s;
      for (int64_t j = 0; j < s; ++j) {
        F score = row[j];
        bool live = j < live_end;
        if (mask != nullptr) {
          const M m = mask[i * msl + j * mss];
          if constexpr (std::is_same_v<M, Bool>) {
            live = live && m.bits != 0;
          } else {
            score += static_cast<F>(Num<M>::load(m));
          }
        }
        has_nan = has_nan || std::isnan(score);
        row_max = (live && score > row_max) ? score : row_max;
        row[j] = live ? score : kNegInf;
      }
      if (has_nan || !std::isfinite(row_max)) {
        // No live key, or an Inf/NaN that makes every probability NaN in the reference's f64 sum.
        for (int64_t j = 0; j < s; ++j) row[j] = std::numeric_limits<F>::quiet_NaN();
        continue;
      }
      // The sum in f64 whatever F: a long f32 sum would add S roundings.
      double total = 0;
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < s; ++j) {
        const F e = exp_of(row[j] - row_max);
        row[j] = e;
        total += static_cast<double>(e);
      }
      const F inverse = static_cast<F>(1.0 / total);
#pragma omp simd
      for (int64_t j = 0; j < s; ++j) row[j] *= inverse;
    }
  });
}

template <class S, class M>
void check_dtypes(const dx_kernel_call_t* call, bool backward) {
  constexpr DLDataType t = dtype_of<S>();
  constexpr DLDataType mt = dtype_of<M>();
  if (!backward) {
    expect_call_arity(call, 4, 1, kOp);
    for (int i = 0; i < 3; ++i) expect_tensor(call->inputs[i], t, "input " + std::to_string(i));
    if (call->inputs[3] != nullptr) expect_tensor(call->inputs[3], mt, "input 3");
    expect_tensor(call->outputs[0], t, "output 0");
    return;
  }
  // inputs: dout, q, k, v, mask (may be null), out; outputs: dq, dk, dv, dmask.
  expect_call_arity(call, 6, 4, "backward of dx.scaled_dot_product_attention");
  expect_tensor(call->inputs[0], t, "output gradient 0");
  expect_tensor(call->inputs[5], t, "forward output 0");
  for (int i = 0; i < 4; ++i) {
    const DLDataType want = i == 3 ? mt : t;
    if (i == 3 && call->inputs[4] == nullptr) {
      if (call->outputs[3] != nullptr) {
        fail(DX_INVALID_ARGUMENT,
             "cpu: backward of dx.scaled_dot_product_attention: gradient 3 requested for an "
             "absent mask");
      }
      continue;
    }
    expect_tensor(call->inputs[1 + i], want, "forward input " + std::to_string(i));
    if (call->outputs[i] != nullptr) {
      expect_tensor(call->outputs[i], want, "input gradient " + std::to_string(i));
    }
  }
}

/// Largest |element| of a view (NaN when one is NaN, Inf when one is infinite).
template <class S>
double max_abs(const View& v) {
  if (v.count() == 0) return 0;
  StridedLoop<1> loop = loop_over(v);
  const S* base = v.data<const S>();
  double largest = 0;
  bool nan = false;
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    const S* x = base + off[0];
    const int64_t sx = st[0];
    float m = 0;
    bool row_nan = false;
#pragma omp simd reduction(max : m) reduction(|| : row_nan)
    for (int64_t i = 0; i < n; ++i) {
      const float a = std::fabs(static_cast<float>(Num<S>::load(x[i * sx])));
      m = a > m ? a : m;
      row_nan = row_nan || a != a;
    }
    largest = std::max(largest, static_cast<double>(m));
    nan = nan || row_nan;
  };
  run_range(loop, 0, loop.count(), row);
  return nan ? std::numeric_limits<double>::quiet_NaN() : largest;
}

/// Whether an f32/f16/bf16 call may compute in f32 (sgemm, f32 softmax) rather than f64: every
/// operand finite (the exact loops for Inf/NaN are the f64 path's), no f32 overflow in a score
/// or product, and a statistical estimate of the f32 rounding error of the output within the
/// budget below. Scores s = scale q.k accumulate E products: their error is about
/// u sqrt(E) sum|q_e k_e| <= u sqrt(E) |scale| E max|q| max|k| (u = 2^-24, errors of random
/// sign); a score error d moves an output (a convex combination of V's rows) by at most
/// 2 d max|v|. Measured against the f64 reference (B = 2, L = S = 512, E = 64, uniform q, k in
/// [-a, a], v in [-2, 2]): a = 2: estimate 6.1e-5, largest error 1.0e-6 (0.10 of the suite's
/// f32 tolerance 1e-5 + 1.3e-6 |expected|); a = 4: 2.4e-4 and 6.1e-6 (0.59); a = 8: 9.8e-4 and
/// 2.0e-5 (1.8, fails). The estimate runs 40-60x above the error, so a budget of 10x the
/// tolerance's atol admits calls whose error stays near a quarter of the tolerance.
constexpr double kF32ErrorBudget = 1e-4;

template <class S, class M>
bool f32_suffices(const AttentionPlan& p, const View* dout) {
  if constexpr (std::is_same_v<S, double>) {
    (void)p, (void)dout;
    return false;
  } else {
    const double mq = max_abs<S>(p.q), mk = max_abs<S>(p.k), mv = max_abs<S>(p.v);
    const double mo = dout != nullptr ? max_abs<S>(*dout) : 0.0;
    constexpr double kFinite = 1e30;  // far from FLT_MAX (3.4e38): sums of products stay finite
    if (!(mq <= kFinite && mk <= kFinite && mv <= kFinite && mo <= kFinite)) return false;
    const double e = static_cast<double>(p.e), ev = static_cast<double>(p.ev);
    const double score_bound = std::fabs(p.scale) * e * mq * mk;
    if (!(score_bound <= kFinite) || !(ev * mo * mv <= kFinite)) return false;
    // A NaN in an additive mask makes its row NaN even where the key is dead (the reference
    // adds it to the score): the f64 path, which scores every key, handles it.
    if constexpr (!std::is_same_v<M, Bool>) {
      if (p.has_mask && std::isnan(max_abs<S>(p.mask))) return false;
    }
    const double u = 0x1p-24;
    const double score_error = u * std::sqrt(e) * score_bound;
    return 2.0 * score_error * std::max(mv, 1.0) <= kF32ErrorBudget;
  }
}

template <class S, class M, class F>
void forward_body(const AttentionPlan& p, const View& outv) {
  // Causal without a mask, f32 path (all scores finite, every row has a live key, so no row is
  // NaN): blocks of about L/8 rows, whose keys past the block's last row are dead for all of
  // it and are neither scored nor summed. (A masked row without a live key is NaN in the
  // reference, and its NaN reaches every key's gradient: those calls score every key.)
  const bool skip_dead = p.causal && !p.has_mask && std::is_same_v<F, float>;
  const int64_t lb = skip_dead ? causal_block_rows(p) : p.block_rows();
  const DenseInput<F, S> q(p.q), k(p.k), v(p.v);
  const DenseOutput<F, S> out(outv, false);
  const M* mask = p.has_mask ? p.mask.data<const M>() : nullptr;
  std::vector<F> scores(static_cast<size_t>(lb * p.s));
  const F scale = static_cast<F>(p.scale);
  for (int64_t b = 0; b < p.batches; ++b) {
    const F* qb = q.data() + b * p.l * p.e;
    const F* kb = k.data() + b * p.s * p.e;
    const F* vb = v.data() + b * p.s * p.ev;
    F* ob = out.data() + b * p.l * p.ev;
    const M* mb = mask != nullptr ? mask + p.batch_offset(b, p.mask_strides) : nullptr;
    const bool v_finite = all_finite(vb, p.s * p.ev);
    for (int64_t i0 = 0; i0 < p.l; i0 += lb) {
      const int64_t rows = std::min(lb, p.l - i0);
      const int64_t live = skip_dead ? std::min(p.s, i0 + rows) : p.s;
      gemm<F>(false, true, rows, live, p.e, scale, qb + i0 * p.e, p.e, kb, p.e, F(0),
              scores.data(), p.s);
      softmax_rows<F, M>(p, scores.data(), i0, rows, mb, live);
      if (v_finite) {
        gemm<F>(false, false, rows, p.ev, live, F(1), scores.data(), p.s, vb, p.ev, F(0),
                ob + i0 * p.ev, p.ev);
        continue;
      }
      // Inf/NaN in V: a zero probability must contribute nothing (0 * Inf would be NaN).
      for (int64_t r = 0; r < rows; ++r) {
        F* o = ob + (i0 + r) * p.ev;
        for (int64_t d = 0; d < p.ev; ++d) o[d] = F(0);
        for (int64_t j = 0; j < live; ++j) {
          const F prob = scores[static_cast<size_t>(r * p.s + j)];
          if (prob == F(0)) continue;
          const F* vj = vb + j * p.ev;
          for (int64_t d = 0; d < p.ev; ++d) o[d] += prob * vj[d];
        }
      }
    }
  }
  out.finish();
}

template <class S, class M>
dx_error_t* attention_forward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    check_dtypes<S, M>(call, false);
    const AttentionPlan p = plan_attention(call, 0);
    const View outv = make_view(call->outputs[0], "output 0");
    expect_shape(outv, p.out_shape, p.rank, "output 0");
    if (outv.count() == 0) return;
    check_blas_dims({p.l, p.s, p.e, p.ev}, kOp);
    if (f32_suffices<S, M>(p, nullptr)) {
      forward_body<S, M, float>(p, outv);
    } else {
      forward_body<S, M, double>(p, outv);
    }
  });
}

/// Fills a (bool) tensor with zero bytes.
void zero_fill(const View& v, size_t element_size) {
  if (v.count() == 0) return;
  StridedLoop<1> loop = loop_over(v);
  char* base = v.base;
  for_each_row(loop, [base, element_size](int64_t n, const int64_t* off, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      std::memset(base + (off[0] + i * st[0]) * static_cast<int64_t>(element_size), 0,
                  element_size);
    }
  });
}

template <class S, class M, class F>
void backward_body(const AttentionPlan& p, const View& doutv, const View* grads,
                   const bool* want);

template <class S, class M>
dx_error_t* attention_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr bool kFloatMask = !std::is_same_v<M, Bool>;
    check_dtypes<S, M>(call, true);
    const AttentionPlan p = plan_attention(call, 1);
    const int r = p.rank;
    const View doutv = make_view(call->inputs[0], "output gradient 0");
    expect_shape(doutv, p.out_shape, r, "output gradient 0");
    View grads[4];
    bool want[4] = {false, false, false, false};
    const View* forward[4] = {&p.q, &p.k, &p.v, &p.mask};
    for (int i = 0; i < 4; ++i) {
      if (call->outputs[i] == nullptr || (i == 3 && !p.has_mask)) continue;
      const std::string role = "gradient output " + std::to_string(i);
      grads[i] = make_view(call->outputs[i], role.c_str());
      expect_shape(grads[i], forward[i]->shape, forward[i]->rank, role.c_str());
      want[i] = true;
    }
    if (want[3] && !kFloatMask) {
      zero_fill(grads[3], 1);  // a bool mask has no gradient
      want[3] = false;
    }
    if (!want[0] && !want[1] && !want[2] && !want[3]) return;
    check_blas_dims({p.l, p.s, p.e, p.ev}, "backward of dx.scaled_dot_product_attention");
    if (f32_suffices<S, M>(p, &doutv)) {
      backward_body<S, M, float>(p, doutv, grads, want);
    } else {
      backward_body<S, M, double>(p, doutv, grads, want);
    }
  });
}

template <class S, class M, class F>
void backward_body(const AttentionPlan& p, const View& doutv, const View* grads,
                   const bool* want) {
  const int r = p.rank;
  // Causal without a mask, f32 path (all scores finite, every row has a live key, so no row is
  // NaN): blocks of about L/8 rows, whose keys past the block's last row are dead for all of
  // it and are neither scored nor summed. (A masked row without a live key is NaN in the
  // reference, and its NaN reaches every key's gradient: those calls score every key.)
  const bool skip_dead = p.causal && !p.has_mask && std::is_same_v<F, float>;
  const int64_t lb = skip_dead ? causal_block_rows(p) : p.block_rows();
  const DenseInput<F, S> q(p.q), k(p.k), v(p.v), dout(doutv);
  const DenseOutput<F, S> dq(want[0] ? grads[0] : empty_view(p.q), true);
  const DenseOutput<F, S> dk(want[1] ? grads[1] : empty_view(p.k), true);
  const DenseOutput<F, S> dv(want[2] ? grads[2] : empty_view(p.v), true);
  const DenseOutput<F, S> dmask(want[3] ? grads[3] : empty_view(p.q), true);
  // dmask's strides broadcast to (B..., L, S): those of a compact array of the mask's shape.
  int64_t gm_strides[kMaxRank] = {};
  if (want[3]) {
    const int lead = r - p.mask.rank;
    int64_t compact = 1;
    for (int d = r - 1; d >= lead; --d) {
      const int64_t extent = p.mask.shape[d - lead];
      gm_strides[d] = extent == 1 ? 0 : compact;
      compact *= extent;
    }
  }
  const M* mask = p.has_mask ? p.mask.data<const M>() : nullptr;
  std::vector<F> prob(static_cast<size_t>(lb * p.s)), ds(static_cast<size_t>(lb * p.s));
  const F scale = static_cast<F>(p.scale);
  for (int64_t b = 0; b < p.batches; ++b) {
    const F* qb = q.data() + b * p.l * p.e;
    const F* kb = k.data() + b * p.s * p.e;
    const F* vb = v.data() + b * p.s * p.ev;
    const F* dob = dout.data() + b * p.l * p.ev;
    const M* mb = mask != nullptr ? mask + p.batch_offset(b, p.mask_strides) : nullptr;
    F* gmb = want[3] ? dmask.data() + p.batch_offset(b, gm_strides) : nullptr;
    const bool qk_finite = all_finite(qb, p.l * p.e) && all_finite(kb, p.s * p.e);
    for (int64_t i0 = 0; i0 < p.l; i0 += lb) {
      const int64_t rows = std::min(lb, p.l - i0);
      const int64_t live = skip_dead ? std::min(p.s, i0 + rows) : p.s;
      const F* do_block = dob + i0 * p.ev;
      gemm<F>(false, true, rows, live, p.e, scale, qb + i0 * p.e, p.e, kb, p.e, F(0), prob.data(),
              p.s);
      softmax_rows<F, M>(p, prob.data(), i0, rows, mb, live);
      if (want[2]) {
        gemm<F>(true, false, live, p.ev, rows, F(1), prob.data(), p.s, do_block, p.ev, F(1),
                dv.data() + b * p.s * p.ev, p.ev);
      }
      if (!want[0] && !want[1] && !want[3]) continue;
      // dP = dO V^T, then dS = P (dP - rowsum(P dP)) in place (unscaled).
      gemm<F>(false, true, rows, live, p.ev, F(1), do_block, p.ev, vb, p.ev, F(0), ds.data(), p.s);
      fork_join(rows, rows * live, [&](int64_t begin, int64_t end) {
        for (int64_t rr = begin; rr < end; ++rr) {
          const F* pr = prob.data() + rr * p.s;
          F* dr = ds.data() + rr * p.s;
          double sum = 0;  // in f64 whatever F, as the softmax's sum
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < live; ++j) sum += static_cast<double>(pr[j] * dr[j]);
          const F dot = static_cast<F>(sum);
#pragma omp simd
          for (int64_t j = 0; j < live; ++j) dr[j] = pr[j] * (dr[j] - dot);
        }
      });
      if (want[3]) {
        const int64_t gsl = gm_strides[r - 2], gss = gm_strides[r - 1];
        if (gsl != 0) {
          fork_join(rows, rows * live, [&](int64_t begin, int64_t end) {
            for (int64_t rr = begin; rr < end; ++rr) {
              F* g = gmb + (i0 + rr) * gsl;
              const F* dr = ds.data() + rr * p.s;
              for (int64_t j = 0; j < live; ++j) g[j * gss] += dr[j];
            }
          });
        } else {
          for (int64_t rr = 0; rr < rows; ++rr) {
            const F* dr = ds.data() + rr * p.s;
            for (int64_t j = 0; j < live; ++j) gmb[j * gss] += dr[j];
          }
        }
      }
      if (!want[0] && !want[1]) continue;
      if (qk_finite) {
        if (want[0]) {
          gemm<F>(false, false, rows, p.e, live, scale, ds.data(), p.s, kb, p.e, F(0),
                  dq.data() + (b * p.l + i0) * p.e, p.e);
        }
        if (want[1]) {
          gemm<F>(true, false, live, p.e, rows, scale, ds.data(), p.s, qb + i0 * p.e, p.e, F(1),
                  dk.data() + b * p.s * p.e, p.e);
        }
        continue;
      }
      // Inf/NaN in Q or K: skip zero terms as the reference does (0 * Inf would be NaN).
      for (int64_t rr = 0; rr < rows; ++rr) {
        const F* qi = qb + (i0 + rr) * p.e;
        F* dqi = want[0] ? dq.data() + (b * p.l + i0 + rr) * p.e : nullptr;
        for (int64_t j = 0; j < live; ++j) {
          const F g = ds[static_cast<size_t>(rr * p.s + j)] * scale;
          if (g == F(0)) continue;
          const F* kj = kb + j * p.e;
          if (dqi != nullptr) {
            for (int64_t d = 0; d < p.e; ++d) dqi[d] += g * kj[d];
          }
          if (want[1]) {
            F* dkj = dk.data() + (b * p.s + j) * p.e;
            for (int64_t d = 0; d < p.e; ++d) dkj[d] += g * qi[d];
          }
        }
      }
    }
  }
  if (want[0]) dq.finish();
  if (want[1]) dk.finish();
  if (want[2]) dv.finish();
  if (want[3]) dmask.finish();
}

}  // namespace

/// dx.scaled_dot_product_attention for every F dtype, with a mask of that dtype or bool
/// (called from conv.cc's registration).
void register_attention_kernels(Registrar& r) {
  auto add = [&r](auto tag) {
    using T = decltype(tag);
    constexpr DLDataType t = dtype_of<T>();
    r.add(kOp, 4, 1, {t, t, t, t, t}, &attention_forward<T, T>, 0, &attention_backward<T, T>);
    r.add(kOp, 4, 1, {t, t, t, dtype_of<Bool>(), t}, &attention_forward<T, Bool>, 0,
          &attention_backward<T, Bool>);
  };
  add(double{});
  add(float{});
  add(Half{});
  add(BFloat16{});
}

}  // namespace deepx::cpu
