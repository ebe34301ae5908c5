// dx.max_pool2d and dx.avg_pool2d (NCHW; attrs kernel (required), stride (default = kernel),
// padding (at most half the kernel); floor mode) and their gradients, with the reference's
// semantics: the max of a window is its first NaN, else its first maximal element (row-major
// window order), and the gradient goes to that element; the average counts only the window's
// elements inside the input (padding excluded).
//
// The input is read through a dense compute-type copy (f32 for f32/f16/bf16, f64 for f64; the
// tensor itself when it is compact); window sums and gradient accumulations are f64, rounded
// once (as the reference: an f32 sum can overflow, and overlapping windows would round once per
// contribution). The work is split across OpenMP threads by (n, c) planes, so each thread owns
// its planes of the output (and of the input gradient, accumulated in a per-thread f64 plane
// that stays in cache and is rounded into the gradient right after).
//
// Speed: max pooling is separable (see "max pool forward: separable" below): a horizontal pass
// takes each input row's choice over every window's columns into a per-thread buffer, a
// vertical pass each output row's choice over its window's rows, both vectorised and run band
// by band (a few output rows at a time, so the row maxima stay in L1); f32 on
// AVX-512 runs a fast form (vmaxps) checked for NaN/Inf, with an exact retry of a plane that
// holds one. Avg pooling computes the output columns whose window lies wholly inside the input
// row a whole output row at a time, vectorised along the output width (f64 sums over the
// window's rows and kernel columns, the column stride a compile-time 1 or 2 for the common
// cases), border columns per window. Windows are visited in the reference's row-major order, so
// the max (first NaN, else first maximum) and the f64 sums are the reference's bits.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "simd.h"

#include "dense.h"
#include "kernels.h"
#include "spatial.h"

namespace deepx::cpu {
namespace {

// Attribute slots (deepx/ops.h schema "kernel,stride,padding").
constexpr int kKernelSlot = 0, kStrideSlot = 1, kPaddingSlot = 2;

struct PoolPlan {
  View x;
  Pair2 kernel, stride, padding;
  int64_t planes = 0, h = 0, w = 0, ho = 0, wo = 0;
  int64_t out_shape[4];
};

PoolPlan plan_pool(const dx_kernel_call_t* call, const DLTensor* x, const char* op) {
  PoolPlan p;
  p.x = make_view(x, "input 0");
  if (p.x.rank != 4)
    fail(DX_SHAPE_MISMATCH, std::string("cpu: ") + op + ": x must be rank 4 (NCHW)");
  if (attr_at(call, kKernelSlot) == nullptr) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + op + ": attribute kernel is required");
  }
  p.kernel = pair_attr(call, kKernelSlot, "kernel", {1, 1}, 1);
  p.stride = pair_attr(call, kStrideSlot, "stride", p.kernel, 1);
  p.padding = pair_attr(call, kPaddingSlot, "padding", {0, 0}, 0);
  if (2 * p.padding.h > p.kernel.h || 2 * p.padding.w > p.kernel.w) {
    fail(DX_INVALID_ARGUMENT,
         std::string("cpu: ") + op + ": padding must be at most half the kernel");
  }
  p.h = p.x.shape[2], p.w = p.x.shape[3];
  p.ho = window_extent(p.h, p.padding.h, 1, p.kernel.h, p.stride.h, op);
  p.wo = window_extent(p.w, p.padding.w, 1, p.kernel.w, p.stride.w, op);
  p.planes = p.x.shape[0] * p.x.shape[1];
  p.out_shape[0] = p.x.shape[0], p.out_shape[1] = p.x.shape[1];
  p.out_shape[2] = p.ho, p.out_shape[3] = p.wo;
  return p;
}

/// The in-bounds window of output (oh, ow): rows [h0, h1), columns [w0, w1) of the plane.
struct Window {
  int64_t h0, h1, w0, w1;
};
inline Window window_of(const PoolPlan& p, int64_t oh, int64_t ow) {
  const int64_t hs = oh * p.stride.h - p.padding.h, ws = ow * p.stride.w - p.padding.w;
  return {std::max<int64_t>(hs, 0), std::min<int64_t>(hs + p.kernel.h, p.h),
          std::max<int64_t>(ws, 0), std::min<int64_t>(ws + p.kernel.w, p.w)};
}

/// Offset in the plane of the window's maximum (first NaN, else first maximum), or -1 for an
/// empty window.
template <class F>
inline int64_t window_argmax(const F* plane, int64_t width, const Window& win) {
  int64_t best = -1;
  F best_value = F(0);
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    const F* row = plane + ih * width;
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const F v = row[iw];
      if (best < 0 || std::isnan(v) || v > best_value) {
        best = ih * width + iw;
        best_value = v;
        if (std::isnan(v)) return best;
      }
    }
  }
  return best;
}

int plane_threads(int64_t work) { return work >= kParallelThreshold ? available_threads() : 1; }

template <class S>
void check_dtypes(const dx_kernel_call_t* call, bool backward, const char* op) {
  constexpr DLDataType t = dtype_of<S>();
  if (!backward) {
    expect_call_arity(call, 1, 1, op);
    expect_tensor(call->inputs[0], t, "input 0");
    expect_tensor(call->outputs[0], t, "output 0");
    return;
  }
  // inputs: dy, x, y; outputs: dx (may be null).
  expect_call_arity(call, 3, 1, op);
  expect_tensor(call->inputs[0], t, "output gradient 0");
  expect_tensor(call->inputs[2], t, "forward output 0");
  expect_tensor(call->inputs[1], t, "forward input 0");
  if (call->outputs[0] != nullptr) expect_tensor(call->outputs[0], t, "input gradient 0");
}

/// The output columns [lo, hi) whose window lies wholly inside the row (no column clipping):
/// those take the vectorised paths below, the few border columns the per-window loops.
inline void interior_columns(const PoolPlan& p, int64_t& lo, int64_t& hi) {
  valid_range(p.wo, p.stride.w, -p.padding.w, p.w - p.kernel.w + 1, lo, hi);
  if (hi < lo) hi = lo;
}

/// The max-pool select: v replaces the running maximum when larger, or when it is the first NaN
/// (a NaN maximum stays). Branch-free, so the column loops vectorise.
template <class F>
inline F max_step(F best, F v) {
  return (best == best && (v > best || v != v)) ? v : best;
}

/// One output row's interior columns [lo, hi) of an avg-pool plane: out[ow] = the f64 sum of
/// the window rows [h0, h1) x kernel columns, divided once, vectorised along ow. The loop visits
/// each window in row-major order (rows outer, kernel columns inner), as the reference does, so
/// the f64 sums are its bits. kStride is the column stride when known at compile time (1, 2),
/// else 0.
template <class F, int kStride>
void avg_row_interior(const PoolPlan& p, const F* plane, int64_t h0, int64_t h1, int64_t lo,
                      int64_t hi, F* out, double* sums) {
  const int64_t sw = kStride > 0 ? kStride : p.stride.w;
  const int64_t kw = p.kernel.w;
  for (int64_t ow = lo; ow < hi; ++ow) sums[ow] = 0;
  for (int64_t ih = h0; ih < h1; ++ih) {
    for (int64_t kj = 0; kj < kw; ++kj) {
      // Column ow reads row[ow * sw]; ow >= lo keeps the index >= 0.
      const F* row = plane + ih * p.w + kj - p.padding.w;
#pragma omp simd
      for (int64_t ow = lo; ow < hi; ++ow) sums[ow] += static_cast<double>(row[ow * sw]);
    }
  }
  const double members = static_cast<double>((h1 - h0) * kw);
#pragma omp simd
  for (int64_t ow = lo; ow < hi; ++ow) out[ow] = static_cast<F>(sums[ow] / members);
}

/// One avg-pool output by its window (border columns; every column of narrow inputs): the f64
/// sum, as the reference (an f32 sum could overflow or round differently), over the members.
template <class F>
inline F avg_window(const PoolPlan& p, const F* plane, int64_t oh, int64_t ow) {
  const Window win = window_of(p, oh, ow);
  double sum = 0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<double>(plane[ih * p.w + iw]);
  }
  const int64_t members =
      std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
  return static_cast<F>(sum / static_cast<double>(members));
}

template <class F, int kStride>
void avg_plane_forward(const PoolPlan& p, const F* plane, F* out, double* sums) {
  int64_t lo, hi;
  interior_columns(p, lo, hi);
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    F* out_row = out + oh * p.wo;
    const Window rows = window_of(p, oh, 0);
    for (int64_t ow = 0; ow < lo; ++ow) out_row[ow] = avg_window(p, plane, oh, ow);
    if (lo < hi && rows.h0 < rows.h1) {
      avg_row_interior<F, kStride>(p, plane, rows.h0, rows.h1, lo, hi, out_row, sums);
    } else {
      for (int64_t ow = lo; ow < hi; ++ow) out_row[ow] = avg_window(p, plane, oh, ow);
    }
    for (int64_t ow = hi; ow < p.wo; ++ow) out_row[ow] = avg_window(p, plane, oh, ow);
  }
}

// ---- max pool forward: separable ------------------------------------------------------------
//
// max_step is "the first NaN, else the first maximum" of a sequence, an associative choice: the
// window's row-major result equals the same choice over its rows' results taken in row order.
// So a plane is pooled in two passes through a per-thread buffer of row maxima (h x wo),
// taken in bands of output rows (max_plane_banded): a horizontal pass (each input row's choice
// over every output column's kernel columns: one pass per input row instead of one per window
// row and output row, so rows shared by neighbouring windows are reduced once) and a vertical
// pass (each output row's choice over its window's rows). Each window is still visited in the
// reference's order, so results (NaN payloads, the sign of a +0/-0 tie) are its bits; padding
// is never a member.
//
// Where no NaN is involved the choice is plain "v > best ? v : best", which AVX-512's vmaxps
// computes in one instruction (it returns its second operand on ties and unordered pairs),
// against three for the exact select. The f32 passes therefore first run that fast form,
// tracking whether a NaN or an infinity was read (0 * x is NaN exactly for those, and an OR of
// such products keeps a NaN's bits), and a plane where one was is redone with the exact form.
// An infinity only costs that retry; the results are the same bits either way.

/// How a pass chooses: exactly (max_step), fast while checking its inputs for NaN/Inf (returns
/// false when it saw one, leaving its output unfinished), or fast on inputs known to hold no NaN.
enum class Form { kExact, kChecked, kNoNaN };

#if defined(__AVX512F__)
/// max_step on 16 lanes: take v where best is ordered and !(v <= best) (v larger, or v NaN).
inline __m512 max_step(__m512 best, __m512 v) {
  const __mmask16 ordered = _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q);
  const __mmask16 take = _mm512_mask_cmp_ps_mask(ordered, v, best, _CMP_NLE_UQ);
  return _mm512_mask_blend_ps(take, best, v);
}
template <Form kForm>
inline __m512 choose(__m512 best, __m512 v) {
  if constexpr (kForm == Form::kExact) return max_step(best, v);
  else return _mm512_max_ps(v, best);  // v > best ? v : best
}
/// seen | 0 * x | 0 * y (bitwise): NaN from the first NaN or infinity in x or y on (0 * a finite
/// value is +-0, whose bits OR into no NaN); an OR keeps the loop free of a long dependency chain.
inline __m512 track_special(__m512 seen, __m512 x, __m512 y) {
  const __m512 zero = _mm512_setzero_ps();
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(seen), _mm512_castps_si512(_mm512_mul_ps(x, zero)),
      _mm512_castps_si512(_mm512_mul_ps(y, zero)), 0xFE));
}
inline bool saw_special(__m512 seen) {
  return _mm512_cmp_ps_mask(seen, seen, _CMP_UNORD_Q) != 0;
}
inline __mmask16 first_lanes(int64_t k) {
  return k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << k) - 1u);
}
#endif

/// Whether the fast forms exist for F on this build.
template <class F>
constexpr bool has_fast_form() {
#if defined(__AVX512F__)
  return std::is_same_v<F, float>;
#else
  return false;
#endif
}

/// dst[j] = the choice over a[j], b[j], c[j] in that order (c null: over a[j], b[j]), j < n;
/// dst may be a. Returns false only in Form::kChecked, when a NaN or an infinity was read.
template <Form kForm, class F>
inline bool max_rows(F* dst, const F* a, const F* b, const F* c, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<F, float>) {
    __m512 seen = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = first_lanes(n - j);
      const __m512 va = _mm512_maskz_loadu_ps(m, a + j), vb = _mm512_maskz_loadu_ps(m, b + j);
      __m512 r = choose<kForm>(va, vb);
      if constexpr (kForm == Form::kChecked) seen = track_special(seen, va, vb);
      if (c != nullptr) {
        const __m512 vc = _mm512_maskz_loadu_ps(m, c + j);
        r = choose<kForm>(r, vc);
        if constexpr (kForm == Form::kChecked) seen = track_special(seen, vc, vc);
      }
      _mm512_mask_storeu_ps(dst + j, m, r);
    }
    return !(kForm == Form::kChecked && saw_special(seen));
  }
#endif
  static_assert(kForm == Form::kExact || has_fast_form<F>());
  if (c != nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] = max_step(max_step(a[j], b[j]), c[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] = max_step(a[j], b[j]);
  }
  return true;
}

/// dst[j] = the choice over src[2j], src[2j + 1], src[2j + 2], j < n: a 3-wide window at column
/// stride 2 (AVX-512: even and odd columns split by two-source permutes). kForm as max_rows.
template <Form kForm, class F>
inline bool max_stride2_k3(F* dst, const F* src, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<F, float>) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 seen = _mm512_setzero_ps();
    for (; j + 16 <= n; j += 16) {
      const float* s = src + 2 * j;
      const __m512 lo = _mm512_loadu_ps(s), hi = _mm512_loadu_ps(s + 16);
      const __m512 lo2 = _mm512_loadu_ps(s + 2), hi2 = _mm512_loadu_ps(s + 18);
      const __m512 first = _mm512_permutex2var_ps(lo, even, hi);    // src[2j]
      const __m512 second = _mm512_permutex2var_ps(lo, odd, hi);    // src[2j + 1]
      const __m512 third = _mm512_permutex2var_ps(lo2, even, hi2);  // src[2j + 2]
      if constexpr (kForm == Form::kChecked) seen = track_special(seen, lo, hi);  // s[0, 32)
      _mm512_storeu_ps(dst + j, choose<kForm>(choose<kForm>(first, second), third));
    }
    if constexpr (kForm == Form::kChecked) {
      if (saw_special(seen)) return false;
      // src[2j] (the next x0, or the last element when there is no tail) is not checked yet.
      if (n > 0 && src[2 * j] != src[2 * j]) return false;
    }
    // The tail (fewer than 16) runs exactly, below.
  }
#endif
  static_assert(kForm == Form::kExact || has_fast_form<F>());
  const int64_t tail = j;
#pragma omp simd
  for (int64_t i = tail; i < n; ++i) {
    dst[i] = max_step(max_step(src[2 * i], src[2 * i + 1]), src[2 * i + 2]);
  }
  if constexpr (kForm == Form::kChecked) {
    // Unchecked inputs: the pass after this one needs to know that no choice is NaN.
    for (int64_t i = tail; i < n; ++i) {
      if (dst[i] != dst[i]) return false;
    }
  }
  return true;
}

/// How far ahead of its loads the centred stride-2 pass prefetches (elements): the hardware
/// prefetchers stop at each 4 KiB page and rest while a plane's vertical pass runs; 4 KiB
/// ahead keeps the input streaming across both (measured: the pass at about 1.4x the speed).
constexpr int64_t kPoolPrefetch = 1024;

/// dst[j] = the choice over x[2j - 1], x[2j], x[2j + 1], j < n (for j = 0 over x[0], x[1]; x[-1]
/// is never read): a 3-wide window at column stride 2 centred on the even columns (padding 1).
/// AVX-512: aligned loads of 32 columns (when x is), even and odd columns split by permutes,
/// x[2j - 1] the odd columns moved up one lane. kForm as max_rows.
template <Form kForm, class F>
inline bool max_stride2_k3_centered(F* dst, const F* x, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<F, float>) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 seen = _mm512_setzero_ps();
    // x[2j - 1] of j = 0 is no member: -Inf is never chosen over a member (a -Inf member has the
    // same bits, a NaN member wins), so that lane is the choice over x[0], x[1].
    __m512 previous_odd = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (; j + 16 <= n; j += 16) {
      const float* s = x + 2 * j;
      _mm_prefetch(reinterpret_cast<const char*>(s + kPoolPrefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(s + kPoolPrefetch + 16), _MM_HINT_T0);
      const __m512 lo = _mm512_loadu_ps(s), hi = _mm512_loadu_ps(s + 16);
      const __m512 center = _mm512_permutex2var_ps(lo, even, hi);  // x[2j]
      const __m512 right = _mm512_permutex2var_ps(lo, odd, hi);    // x[2j + 1]
      const __m512 left = _mm512_castsi512_ps(_mm512_alignr_epi32(  // x[2j - 1]
          _mm512_castps_si512(right), _mm512_castps_si512(previous_odd), 15));
      previous_odd = right;
      if constexpr (kForm == Form::kChecked) seen = track_special(seen, lo, hi);
      _mm512_storeu_ps(dst + j, choose<kForm>(choose<kForm>(left, center), right));
    }
    if (kForm == Form::kChecked && saw_special(seen)) return false;
  }
#endif
  static_assert(kForm == Form::kExact || has_fast_form<F>());
  const int64_t tail = j;
  for (int64_t i = tail; i < n; ++i) {
    const F best = i > 0 ? max_step(x[2 * i - 1], x[2 * i]) : x[2 * i];
    dst[i] = max_step(best, x[2 * i + 1]);
  }
  if constexpr (kForm == Form::kChecked) {
    for (int64_t i = tail; i < n; ++i) {
      if (dst[i] != dst[i]) return false;
    }
  }
  return true;
}

/// The choice over columns [c0, c1) of `row` (a non-empty range), in order.
template <class F>
inline F row_choice(const F* row, int64_t c0, int64_t c1) {
  F best = row[c0];
  for (int64_t c = c0 + 1; c < c1; ++c) best = max_step(best, row[c]);
  return best;
}

/// Whether max_rows_horizontal has a fast (kChecked) form for this instantiation.
template <class F, int kStride, int kKernel>
constexpr bool has_fast_rows() {
  return has_fast_form<F>() && ((kStride == 2 && kKernel == 3) || (kStride == 1 && kKernel == 3) ||
                                (kStride == 1 && kKernel == 2));
}

/// Horizontal pass over input rows [r0, r1): rows[ih * wo + ow] = the choice over row ih's
/// columns of window column ow. kStride / kKernel: the column stride and kernel width when known
/// at compile time, else 0. kForm: kExact or kChecked (then false when the plane must be redone
/// exactly: a NaN or an infinity was read, or a border choice is NaN).
template <Form kForm, class F, int kStride, int kKernel>
bool max_rows_horizontal(const PoolPlan& p, const F* plane, F* rows, int64_t r0, int64_t r1) {
  if constexpr (kForm != Form::kExact && !has_fast_rows<F, kStride, kKernel>()) {
    (void)p, (void)plane, (void)rows, (void)r0, (void)r1;
    return false;
  } else {
    const int64_t sw = kStride > 0 ? kStride : p.stride.w;
    const int64_t kw = kKernel > 0 ? kKernel : p.kernel.w;
    const int64_t pw = p.padding.w, w = p.w, wo = p.wo;
    int64_t lo, hi;
    interior_columns(p, lo, hi);
    // n interior choices of a run whose first window starts at src[0]: src[j * sw + kj].
    auto interior = [&](const F* src, F* dst, int64_t n) {
      if constexpr (kStride == 2 && kKernel == 3) {
        return max_stride2_k3<kForm>(dst, src, n);
      } else if constexpr (kStride == 1 && kKernel == 3) {
        return max_rows<kForm>(dst, src, src + 1, src + 2, n);
      } else if constexpr (kStride == 1 && kKernel == 2) {
        return max_rows<kForm, F>(dst, src, src + 1, nullptr, n);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) dst[j] = src[j * sw];
        for (int64_t kj = 1; kj < kw; ++kj) {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) dst[j] = max_step(dst[j], src[j * sw + kj]);
        }
        return true;
      }
    };
    if (has_fast_form<F>() && kStride == 2 && kKernel == 3 && pw == 1 && w == 2 * wo && lo < hi) {
      // ResNet's stem pool: the rows as one run of centred windows (flat index ih * wo + ow
      // reads plane[2 (ih * wo + ow) - 1 + kj]); column 0 of each row, whose window would
      // wrap into the row above, is redone below.
      if (!max_stride2_k3_centered<kForm>(rows + r0 * wo, plane + r0 * w, (r1 - r0) * wo)) {
        return false;
      }
    } else if (w == wo * sw && lo < hi) {
      // Rows of exactly wo * sw columns: output column j of the plane (flat index
      // ih * wo + ow) reads plane[j * sw - pw + kj], so one flat loop covers every row; the
      // entries whose window would wrap into a neighbouring row (border columns) are redone
      // below.
      const int64_t first = std::max<int64_t>(r0 * wo, (pw + sw - 1) / sw);  // j * sw - pw >= 0
      const int64_t last =  // j * sw - pw + kw <= h * w
          std::min<int64_t>(r1 * wo, (p.h * w - kw + pw) / sw + 1);
      if (last > first && !interior(plane + first * sw - pw, rows + first, last - first)) {
        return false;
      }
    } else if (lo < hi) {
      for (int64_t ih = r0; ih < r1; ++ih) {
        if (!interior(plane + ih * w + lo * sw - pw, rows + ih * wo + lo, hi - lo)) return false;
      }
    }
    // Border columns (or every column when no window fits inside a row), exactly.
    const int64_t left = lo < hi ? lo : wo, right = lo < hi ? hi : wo;
    bool no_nan = true;
    for (int64_t ih = r0; ih < r1; ++ih) {
      const F* row = plane + ih * w;
      F* dst = rows + ih * wo;
      auto border = [&](int64_t ow) {
        const int64_t ws = ow * sw - pw;
        const F v = row_choice(row, std::max<int64_t>(ws, 0), std::min<int64_t>(ws + kw, w));
        no_nan = no_nan && v == v;
        dst[ow] = v;
      };
      for (int64_t ow = 0; ow < left; ++ow) border(ow);
      for (int64_t ow = right; ow < wo; ++ow) border(ow);
    }
    return kForm == Form::kExact || no_nan;
  }
}

/// Vertical pass over output rows [oa, ob): out[oh * wo + ow] = the choice over the window's
/// rows of rows[ih * wo + ow]. kForm: kExact, or kNoNaN when the row maxima hold no NaN.
template <Form kForm, class F, int kKernel>
void max_rows_vertical(const PoolPlan& p, const F* rows, F* out, int64_t oa, int64_t ob) {
  const int64_t sh = p.stride.h, ph = p.padding.h, wo = p.wo;
  const int64_t kh = kKernel > 0 ? kKernel : p.kernel.h;
  int64_t top, bottom;  // output rows whose window rows all lie inside the input
  valid_range(p.ho, sh, -ph, p.h - kh + 1, top, bottom);
  if (bottom < top) bottom = top;
  // The choice over window rows [k0, k1) (k1 > k0) of rows starting at `first` (row k0), n
  // columns.
  auto choose_rows = [&](const F* first, F* dst, int64_t n, int64_t k0, int64_t k1) {
    if (k1 - k0 == 1) {
      std::copy(first, first + n, dst);
      return;
    }
    const int64_t pair_end = (k1 - k0) % 2 == 1 ? k0 + 3 : k0 + 2;
    max_rows<kForm>(dst, first, first + wo, pair_end == k0 + 3 ? first + 2 * wo : nullptr, n);
    for (int64_t k = pair_end; k < k1; ++k) {
      max_rows<kForm, F>(dst, dst, first + (k - k0) * wo, nullptr, n);
    }
  };
  auto row_of = [&](int64_t oh) {
    const int64_t hs = oh * sh - ph;
    const int64_t k0 = std::max<int64_t>(-hs, 0), k1 = std::min<int64_t>(kh, p.h - hs);
    choose_rows(rows + (hs + k0) * wo, out + oh * wo, wo, k0, k1);
  };
  const int64_t mid_lo = std::clamp(top, oa, ob), mid_hi = std::clamp(bottom, oa, ob);
  for (int64_t oh = oa; oh < mid_lo; ++oh) row_of(oh);
  if (mid_lo < mid_hi) {
    if (sh == 1) {
      // Consecutive output rows read consecutive row-maxima rows: one flat loop.
      choose_rows(rows + (mid_lo - ph) * wo, out + mid_lo * wo, (mid_hi - mid_lo) * wo, 0, kh);
    } else {
      for (int64_t oh = mid_lo; oh < mid_hi; ++oh) {
        choose_rows(rows + (oh * sh - ph) * wo, out + oh * wo, wo, 0, kh);
      }
    }
  }
  for (int64_t oh = mid_hi; oh < ob; ++oh) row_of(oh);
}

/// Input elements (f32: 8 KiB) per band of max_plane_banded: a band's input rows, row maxima
/// and output rows stay in L1 between its two passes, and the input keeps streaming from memory
/// between the vertical passes (whole-plane passes wrote 25 KiB of row maxima for the stem pool,
/// which the streaming input pushed out of L1, and left the memory idle during the vertical
/// pass; banded: about 15% less time per call, 1 thread).
constexpr int64_t kPoolBandElements = 2048;

/// Both passes over bands of output rows: a band's vertical pass right after the horizontal
/// pass over the input rows it needs (those not already done for the band before). kH, kV:
/// the passes' forms; false when the kChecked horizontal pass refused the plane (outputs then
/// unfinished).
template <Form kH, Form kV, class F, int kStride, int kKernel>
bool max_plane_banded(const PoolPlan& p, const F* plane, F* out, F* rows) {
  const int64_t sh = p.stride.h, ph = p.padding.h;
  const int64_t kh = kKernel > 0 ? kKernel : p.kernel.h;
  const int64_t band = std::max<int64_t>(1, kPoolBandElements / std::max<int64_t>(sh * p.w, 1));
  int64_t done = 0;  // input rows [0, done) have their row maxima
  for (int64_t oa = 0; oa < p.ho; oa += band) {
    const int64_t ob = std::min(oa + band, p.ho);
    const int64_t need = std::clamp<int64_t>((ob - 1) * sh - ph + kh, 0, p.h);
    if (need > done) {
      if (!max_rows_horizontal<kH, F, kStride, kKernel>(p, plane, rows, done, need)) return false;
      done = need;
    }
    max_rows_vertical<kV, F, kKernel>(p, rows, out, oa, ob);
  }
  return true;
}

template <class F, int kStride, int kKernel>
void max_plane_forward(const PoolPlan& p, const F* plane, F* out, F* rows) {
  if constexpr (has_fast_rows<F, kStride, kKernel>()) {
    if (max_plane_banded<Form::kChecked, Form::kNoNaN, F, kStride, kKernel>(p, plane, out, rows)) {
      return;
    }
  }
  max_plane_banded<Form::kExact, Form::kExact, F, kStride, kKernel>(p, plane, out, rows);
}

/// Dispatches one plane to the instantiation for its column stride and (square) kernel.
template <class F>
void max_plane_dispatch(const PoolPlan& p, const F* plane, F* out, F* rows) {
  const int64_t sw = p.stride.w;
  const int64_t k = p.kernel.h == p.kernel.w ? p.kernel.w : 0;
  if (k == 3 && sw == 2) return max_plane_forward<F, 2, 3>(p, plane, out, rows);
  if (k == 3 && sw == 1) return max_plane_forward<F, 1, 3>(p, plane, out, rows);
  if (k == 2 && sw == 2) return max_plane_forward<F, 2, 2>(p, plane, out, rows);
  if (sw == 1) return max_plane_forward<F, 1, 0>(p, plane, out, rows);
  if (sw == 2) return max_plane_forward<F, 2, 0>(p, plane, out, rows);
  max_plane_forward<F, 0, 0>(p, plane, out, rows);
}

template <class S, bool kMax>
dx_error_t* pool_forward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    check_dtypes<S>(call, false, op);
    const PoolPlan p = plan_pool(call, call->inputs[0], op);
    const View yv = make_view(call->outputs[0], "output 0");
    expect_shape(yv, p.out_shape, 4, "output 0");
    if (yv.count() == 0) return;
    const DenseInput<F, S> x(p.x);
    const DenseOutput<F, S> y(yv, false);
    const int64_t in_plane = p.h * p.w, out_plane = p.ho * p.wo;
    const int64_t work = p.planes * out_plane * p.kernel.h * p.kernel.w;
    const int threads = plane_threads(work);
    if constexpr (kMax) {
      if (p.h == 0 || p.w == 0) {
        // Windows of padding alone (an empty input dim): no maximum, NaN (the reference's).
        std::fill(y.data(), y.data() + p.planes * out_plane, std::numeric_limits<F>::quiet_NaN());
      } else {
        // Per thread: the plane's row maxima (h x wo), see max_rows_horizontal; whole cache
        // lines apart, and not zero-filled (every entry is written before it is read).
        const size_t rows_size = (static_cast<size_t>(p.h * p.wo) + 15) / 16 * 16;
        const std::unique_ptr<F[]> row_max(new F[static_cast<size_t>(threads) * rows_size + 16]);
        F* const rows_base = reinterpret_cast<F*>(
            (reinterpret_cast<uintptr_t>(row_max.get()) + 63) / 64 * 64);  // sizeof(F) divides 64
        // Planes in small dynamic chunks: a plane redone exactly (it held a NaN or an infinity)
        // takes longer than the others, and a thread the machine delays (a shared VM) no longer
        // holds up a fixed half of the planes.
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads) if (threads > 1)
        for (int64_t c = 0; c < p.planes; ++c) {
          F* rows = rows_base + static_cast<size_t>(omp_get_thread_num()) * rows_size;
          max_plane_dispatch<F>(p, x.data() + c * in_plane, y.data() + c * out_plane, rows);
        }
      }
    } else {
      // One row of f64 window sums per thread.
      std::vector<double> sums(static_cast<size_t>(threads * p.wo));
      const int64_t stride = p.stride.w;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
      for (int64_t c = 0; c < p.planes; ++c) {
        const F* plane = x.data() + c * in_plane;
        F* out = y.data() + c * out_plane;
        double* row_sums = sums.data() + omp_get_thread_num() * p.wo;
        if (stride == 1) {
          avg_plane_forward<F, 1>(p, plane, out, row_sums);
        } else if (stride == 2) {
          avg_plane_forward<F, 2>(p, plane, out, row_sums);
        } else {
          avg_plane_forward<F, 0>(p, plane, out, row_sums);
        }
      }
    }
    y.finish();
  });
}

/// Rounds the f64 gradient plane `src` (compact h x w) once into plane `c` of `dx` (any strides).
template <class S>
void store_grad_plane(const PoolPlan& p, const double* src, const View& dx, int64_t c) {
  using C = typename Num<S>::C;
  const int64_t n = c / p.x.shape[1], ch = c % p.x.shape[1];
  S* base = dx.data<S>() + n * dx.strides[0] + ch * dx.strides[1];
  const int64_t sh = dx.strides[2], sw = dx.strides[3];
  for (int64_t ih = 0; ih < p.h; ++ih) {
    S* row = base + ih * sh;
    const double* in = src + ih * p.w;
    if (sw == 1) {
#pragma omp simd
      for (int64_t iw = 0; iw < p.w; ++iw) row[iw] = Num<S>::store(static_cast<C>(in[iw]));
    } else {
      for (int64_t iw = 0; iw < p.w; ++iw) row[iw * sw] = Num<S>::store(static_cast<C>(in[iw]));
    }
  }
}

/// Gradient of one plane into the f64 plane `dst` (zeroed here). Contributions are added in the
/// reference's order for max (outputs row-major, each to its window's first NaN or first
/// maximum); avg adds each window's share over the window, interior columns vectorised.
template <class F, bool kMax, int kStride>
void pool_plane_backward(const PoolPlan& p, const F* plane, const F* grad, double* dst,
                         int64_t* argmax, F* values, double* shares) {
  const int64_t in_plane = p.h * p.w;
  std::fill(dst, dst + in_plane, 0.0);
  int64_t lo, hi;
  interior_columns(p, lo, hi);
  const int64_t sw = kStride > 0 ? kStride : p.stride.w;
  const int64_t kw = p.kernel.w;
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    const F* g_row = grad + oh * p.wo;
    const Window rows = window_of(p, oh, 0);
    const bool interior = lo < hi && rows.h0 < rows.h1;
    const int64_t mid_lo = interior ? lo : p.wo, mid_hi = interior ? hi : p.wo;
    auto border = [&](int64_t ow) {
      const Window win = window_of(p, oh, ow);
      const double g = g_row[ow];
      if constexpr (kMax) {
        const int64_t at = window_argmax(plane, p.w, win);
        if (at >= 0) dst[at] += g;
      } else {
        const int64_t members =
            std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
        const double share = g / static_cast<double>(members);
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) dst[ih * p.w + iw] += share;
        }
      }
    };
    for (int64_t ow = 0; ow < std::min(mid_lo, p.wo); ++ow) border(ow);
    if (interior) {
      if constexpr (kMax) {
        // Vectorised argmax along ow (row-major window order), then the scatter in ow order.
        const F* first = plane + rows.h0 * p.w - p.padding.w;
        for (int64_t ow = lo; ow < hi; ++ow) argmax[ow] = rows.h0 * p.w + ow * sw - p.padding.w;
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) values[ow] = first[ow * sw];
        for (int64_t ih = rows.h0; ih < rows.h1; ++ih) {
          for (int64_t kj = (ih == rows.h0 ? 1 : 0); kj < kw; ++kj) {
            const int64_t offset = ih * p.w + kj - p.padding.w;
            const F* row = plane + offset;
#pragma omp simd
            for (int64_t ow = lo; ow < hi; ++ow) {
              const F v = row[ow * sw];
              const F b = values[ow];
              const bool take = b == b && (v > b || v != v);
              values[ow] = take ? v : b;
              argmax[ow] = take ? offset + ow * sw : argmax[ow];
            }
          }
        }
        for (int64_t ow = lo; ow < hi; ++ow) dst[argmax[ow]] += static_cast<double>(g_row[ow]);
      } else {
        const double members = static_cast<double>((rows.h1 - rows.h0) * kw);
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) shares[ow] = static_cast<double>(g_row[ow]) / members;
        for (int64_t ih = rows.h0; ih < rows.h1; ++ih) {
          for (int64_t kj = 0; kj < kw; ++kj) {
            double* row = dst + ih * p.w + kj - p.padding.w;
            // Distinct ow hit distinct elements within one (ih, kj) pass.
#pragma omp simd
            for (int64_t ow = lo; ow < hi; ++ow) row[ow * sw] += shares[ow];
          }
        }
      }
    }
    for (int64_t ow = std::max<int64_t>(mid_hi, mid_lo); ow < p.wo; ++ow) border(ow);
  }
}

template <class S, bool kMax>
dx_error_t* pool_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    check_dtypes<S>(call, true, op);
    const PoolPlan p = plan_pool(call, call->inputs[1], op);
    const View dyv = make_view(call->inputs[0], "output gradient 0");
    expect_shape(dyv, p.out_shape, 4, "output gradient 0");
    if (call->outputs[0] == nullptr) return;
    const View dxv = make_view(call->outputs[0], "gradient output 0");
    expect_shape(dxv, p.x.shape, 4, "gradient output 0");
    if (dxv.count() == 0) return;
    const DenseInput<F, S> dy(dyv);
    const DenseInput<F, S> x(kMax ? p.x : empty_view(p.x));
    const int64_t in_plane = p.h * p.w, out_plane = p.ho * p.wo;
    const int64_t work = p.planes * (out_plane * p.kernel.h * p.kernel.w + in_plane);
    const int threads = plane_threads(work);
    // Per thread: an f64 gradient plane (overlapping windows add several gradients into one
    // element: accumulated in f64 and rounded once, as the reference), and rows of scratch.
    const size_t team = static_cast<size_t>(threads), row = static_cast<size_t>(p.wo);
    std::vector<double> planes(team * static_cast<size_t>(in_plane)), shares(team * row);
    std::vector<F> values(kMax ? team * row : 0);
    std::vector<int64_t> argmax(kMax ? team * row : 0);
    const int64_t stride = p.stride.w;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < p.planes; ++c) {
      const size_t me = static_cast<size_t>(omp_get_thread_num());
      double* dst = planes.data() + me * static_cast<size_t>(in_plane);
      double* share_row = shares.data() + me * row;
      F* value_row = kMax ? values.data() + me * row : nullptr;
      int64_t* argmax_row = kMax ? argmax.data() + me * row : nullptr;
      const F* plane = kMax ? x.data() + c * in_plane : nullptr;
      const F* grad = dy.data() + c * out_plane;
      if (stride == 1) {
        pool_plane_backward<F, kMax, 1>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      } else if (stride == 2) {
        pool_plane_backward<F, kMax, 2>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      } else {
        pool_plane_backward<F, kMax, 0>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      }
      store_grad_plane<S>(p, dst, dxv, c);
    }
  });
}

}  // namespace

/// dx.max_pool2d and dx.avg_pool2d for every F dtype (called from conv.cc's registration).
void register_pool_kernels(Registrar& r) {
  auto add = [&r](auto tag) {
    using T = decltype(tag);
    constexpr DLDataType t = dtype_of<T>();
    r.add("dx.max_pool2d", 1, 1, {t, t}, &pool_forward<T, true>, DX_KERNEL_FLAG_DETERMINISTIC,
          &pool_backward<T, true>);
    r.add("dx.avg_pool2d", 1, 1, {t, t}, &pool_forward<T, false>, DX_KERNEL_FLAG_DETERMINISTIC,
          &pool_backward<T, false>);
  };
  add(double{});
  add(float{});
  add(Half{});
  add(BFloat16{});
}

}  // namespace deepx::cpu
