// Shared machinery of the neural-network kernels (nn.cc, nn_norm.cc): rows of a tensor split
// at a normalisation axis, gathering a strided (or f16/bf16) row into a compute-type buffer and
// scattering it back, accumulation in blocks, attribute readers, and a row-parallel driver
// whose split can be fixed by the problem alone (so partial sums never depend on the thread
// count and results are bit-identical on reruns).
#ifndef DEEPX_PLUGINS_CPU_NN_UTIL_H_
#define DEEPX_PLUGINS_CPU_NN_UTIL_H_

#include <omp.h>

#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"
#include "fast_math.h"
#include "kernels.h"
#include "strided.h"

namespace deepx::cpu::nn {

/// Registers log_softmax, layer_norm, rms_norm and batch_norm (nn_norm.cc).
void register_norm_kernels(Registrar& r);

constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;

// ---- element conversions ------------------------------------------------------------------------

/// Compute type of T: f32 for f32/f16/bf16, f64 for f64.
template <class T>
using Comp = typename Num<T>::C;

template <class T>
inline double load_f64(T v) {
  return static_cast<double>(Num<T>::load(v));
}

/// Rounds an f64 once to T (nearest even; f16/bf16 via round-to-odd f32, which is exact).
template <class T>
inline T store_f64(double v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else if constexpr (std::is_same_v<T, float>) return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, Half>) return Half{double_to_half(v)};
  else return BFloat16{double_to_bfloat16(v)};
}

/// e^v for max-shifted arguments v <= 0 (or -Inf, NaN), vectorisable: exp_nonpositive_f32
/// (terms below 2^-125 flush to 0; every caller adds them to a sum >= 1) or exp_f64.
template <class C>
inline C exp_c(C v) {
  if constexpr (std::is_same_v<C, double>) return exp_f64(v);
  else return exp_nonpositive_f32(v);
}

/// x[i * stride] (storage T) -> out[i] (compute type C), i < n.
template <class T, class C>
inline void load_run(const T* x, int64_t stride, int64_t n, C* out) {
  if (stride == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(Num<T>::load(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(Num<T>::load(x[i * stride]));
  }
}

/// in[i] (compute type C) -> y[i * stride] rounded once to T.
template <class T, class C>
inline void store_run(T* y, int64_t stride, int64_t n, const C* in) {
  if (stride == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = Num<T>::store(static_cast<Comp<T>>(in[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * stride] = Num<T>::store(static_cast<Comp<T>>(in[i]));
  }
}

// ---- the elements of one row (possibly several dims) ------------------------------------------

/// The layout of one row of an operand: the row's dims with this operand's strides, simplified.
/// `unit` rows are `count` consecutive elements.
struct RowLayout {
  StridedLoop<1> loop;
  int64_t count = 1;
  bool unit = true;
};

inline RowLayout row_layout(const int64_t* shape, const int64_t* strides, int rank) {
  RowLayout l;
  l.loop.rank = rank;
  for (int d = 0; d < rank; ++d) {
    l.loop.shape[d] = shape[d];
    l.loop.strides[0][d] = strides[d];
  }
  l.count = l.loop.count();
  l.loop.simplify();
  l.unit = l.loop.rank == 0 || (l.loop.rank == 1 && l.loop.strides[0][0] == 1);
  return l;
}

/// Copies the row at `base` into `buffer` (`l.count` compute-type elements).
template <class T, class C>
inline void gather_row(const T* base, const RowLayout& l, C* buffer) {
  if (l.unit) {
    load_run(base, 1, l.count, buffer);
    return;
  }
  int64_t position = 0;
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    load_run(base + off[0], st[0], n, buffer + position);
    position += n;
  };
  run_range(l.loop, 0, l.count, run);
}

/// The row at `base` as compute-type elements: the row itself when it is unit-stride storage of
/// the compute type, else a converted copy in `buffer`.
template <class T, class C>
inline const C* read_row(const T* base, const RowLayout& l, C* buffer) {
  if constexpr (std::is_same_v<T, C>) {
    if (l.unit) return base;
  }
  gather_row(base, l, buffer);
  return buffer;
}

/// Where a row's results are computed: the row itself when possible, else `buffer`; pair with
/// commit_row().
template <class T, class C>
inline C* write_row(T* base, const RowLayout& l, C* buffer) {
  if constexpr (std::is_same_v<T, C>) {
    if (l.unit) return base;
  }
  return buffer;
}

template <class T, class C>
inline void commit_row(T* base, const RowLayout& l, const C* computed) {
  if (static_cast<const void*>(computed) == static_cast<const void*>(base)) return;
  if (l.unit) {
    store_run(base, 1, l.count, computed);
    return;
  }
  int64_t position = 0;
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    store_run(base + off[0], st[0], n, computed + position);
    position += n;
  };
  run_range(l.loop, 0, l.count, run);
}

/// f64 values -> the row at `base`, each rounded once to T.
template <class T>
inline void store_row_f64(T* base, const RowLayout& l, const double* values) {
  int64_t position = 0;
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    T* p = base + off[0];
    for (int64_t i = 0; i < n; ++i) p[i * st[0]] = store_f64<T>(values[position + i]);
    position += n;
  };
  run_range(l.loop, 0, l.count, run);
}

/// A run of n elements at x with stride `stride` as compute type: itself when possible, else a
/// converted copy in `buffer`.
template <class T, class C>
inline const C* read_run(const T* x, int64_t stride, int64_t n, C* buffer) {
  if constexpr (std::is_same_v<T, C>) {
    if (stride == 1) return x;
  }
  load_run(x, stride, n, buffer);
  return buffer;
}

// ---- prefetching the next row -------------------------------------------------------------------

/// Walks the cache lines of a byte range (the next row of an operand) a few lines per call, so
/// a compute-bound pass over the current row (in L1) also streams the next row in from memory:
/// the hardware prefetchers stop at 4 KiB page boundaries, and a row pass that first touches
/// its row otherwise waits for DRAM with nothing to overlap. A null or empty range does
/// nothing; prefetching never changes a result.
class LinePrefetcher {
 public:
  LinePrefetcher() = default;
  LinePrefetcher(const void* begin, int64_t bytes)
      : next_(static_cast<const char*>(begin)), end_(begin == nullptr ? nullptr : next_ + std::max<int64_t>(0, bytes)) {
    if (begin == nullptr) next_ = nullptr;
  }
  /// Issues prefetches for up to `lines` more lines; kWrite asks for ownership (the row will be
  /// stored to); kLocality 3 brings the lines into L1, 2 into L2 only (for rows too long to
  /// share L1 with the row being computed).
  template <bool kWrite = false, int kLocality = 3>
  void step(int lines) {
    for (int k = 0; k < lines && next_ < end_; ++k, next_ += kLine) {
      __builtin_prefetch(next_, kWrite ? 1 : 0, kLocality);
    }
  }
  /// Lines still to prefetch.
  int64_t remaining() const { return next_ < end_ ? (end_ - next_ + kLine - 1) / kLine : 0; }

 private:
  static constexpr int64_t kLine = 64;
  const char* next_ = nullptr;
  const char* end_ = nullptr;
};

/// Lines to prefetch per step so that `lines` lines are spread over `steps` steps.
inline int lines_per_step(int64_t lines, int64_t steps) {
  return static_cast<int>(std::max<int64_t>(1, (lines + std::max<int64_t>(1, steps) - 1) / std::max<int64_t>(1, steps)));
}

// ---- accumulation ----------------------------------------------------------------------------

/// The lane skeleton of every blocked sum here: the sum of f(i), i < n, in a fixed order, with
/// step(i) run before each group of lanes starting at i (the row passes prefetch the next row
/// there). f32: 16 f32 lanes over chunks of at most 256 elements (16 terms per lane), each chunk
/// then added into 16 f64 lanes, so the loop stays single-precision wide SIMD while the error
/// is that of 16-term f32 sums; f64: 8 f64 lanes. Forced inline, so f and step inline into
/// the SIMD loop as if written there.
template <class C, class Step, class F>
[[gnu::always_inline]] inline double lane_sum(int64_t n, Step&& step, F&& f) {
  if constexpr (std::is_same_v<C, double>) {
    constexpr int kLanes = 8;
    double lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      step(i);
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) lanes[l] += f(i + l);
    }
    double total = 0;
    for (int l = 0; l < kLanes; ++l) total += lanes[l];
    for (; i < n; ++i) total += f(i);
    return total;
  } else {
    constexpr int kLanes = 16;
    constexpr int64_t kChunk = 256;
    double wide[kLanes] = {};
    int64_t i = 0;
    while (i + kLanes <= n) {
      const int64_t chunk_end = std::min(n - (n - i) % kLanes, i + kChunk);
      float lanes[kLanes] = {};
      for (; i < chunk_end; i += kLanes) {
        step(i);
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) lanes[l] += f(i + l);
      }
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) wide[l] += lanes[l];
    }
    double total = 0;
    for (int l = 0; l < kLanes; ++l) total += wide[l];
    for (; i < n; ++i) total += f(i);
    return total;
  }
}

/// sum of f(i), i < n, in lane_sum's fixed order.
template <class C, class F>
inline double blocked_sum(int64_t n, F&& f) {
  return lane_sum<C>(n, [](int64_t) {}, f);
}

/// The skeleton of the one-pass double sums: s1 and s2 over i < n, where body(i, a1, a2) adds
/// element i's two terms into the compute-type lane accumulators a1, a2 (16 lanes; f32: chunks of
/// at most 256 elements added into f64 lanes, as lane_sum; f64: one chunk), step() runs before
/// each group of 16 (prefetching), and tail(i, s1, s2) adds a leftover element into the f64 sums
/// (it may compute in f64 where the lanes compute in C). Forced inline, as lane_sum.
template <class C, class Step, class Body, class Tail>
[[gnu::always_inline]] inline void lane_sums2(int64_t n, double& s1, double& s2, Step&& step, Body&& body, Tail&& tail) {
  constexpr int kLanes = 16;
  constexpr int64_t kChunk = std::is_same_v<C, double> ? (int64_t{1} << 62) : 256;
  double w1[kLanes] = {}, w2[kLanes] = {};
  int64_t i = 0;
  while (i + kLanes <= n) {
    const int64_t chunk_end = std::min(n - (n - i) % kLanes, i + kChunk);
    C l1[kLanes] = {}, l2[kLanes] = {};
    for (; i < chunk_end; i += kLanes) {
      step();
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) body(i + l, l1[l], l2[l]);
    }
    for (int l = 0; l < kLanes; ++l) {
      w1[l] += l1[l];
      w2[l] += l2[l];
    }
  }
  s1 = 0;
  s2 = 0;
  for (int l = 0; l < kLanes; ++l) {
    s1 += w1[l];
    s2 += w2[l];
  }
  for (; i < n; ++i) tail(i, s1, s2);
}

/// Prefetcher of the next row of a softmax-like line, `count` elements at `row + stride`, when
/// there is one and it is unit-stride; else nothing. The address is formed only when the next
/// row exists (past the last row it could point outside the tensor).
template <class T>
LinePrefetcher next_line(const T* row, int64_t stride, bool has_next, bool unit, int64_t count) {
  if (!has_next || !unit) return {};
  return LinePrefetcher(row + stride, count * static_cast<int64_t>(sizeof(T)));
}

#if defined(__AVX512F__)
/// The low and high 8 lanes of an f32 vector widened to f64.
inline __m512d widen_low(__m512 v) { return _mm512_maskz_cvtps_pd(0xff, _mm512_castps512_ps256(v)); }
inline __m512d widen_high(__m512 v) {
  return _mm512_maskz_cvtps_pd(0xff, _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xee)));
}

/// exp_nonpositive_f32 on 16 lanes: the same reduction, polynomial and flush below -87, in
/// 512-bit registers. GCC's x86-64-v4 tuning vectorises at 256 bits; the exp is the whole cost
/// of a cached softmax row, and 512-bit FMAs halve its instruction count.
inline __m512 exp_nonpositive_avx512(__m512 d) {
  const __m512 lowest = _mm512_set1_ps(-87.0f);
  const __m512 c = _mm512_max_ps(d, lowest);
  const __m512 shifter = _mm512_set1_ps(detail::kExpShifter);
  const __m512 shifted = _mm512_fmadd_ps(c, _mm512_set1_ps(detail::kLog2E), shifter);
  const __m512 n_float = _mm512_sub_ps(shifted, shifter);
  const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(shifter));
  __m512 r = _mm512_fnmadd_ps(n_float, _mm512_set1_ps(detail::kExpLn2High), c);
  r = _mm512_fnmadd_ps(n_float, _mm512_set1_ps(detail::kExpLn2Low), r);
  const __m512 p = detail::exp_poly_f32x16(r);
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
  // d < -87 (and -Inf) flush to 0. max_ps turns a NaN d into -87, so NaN is put back
  // explicitly (callers drop NaN rows first; this keeps the function exp_nonpositive_f32's).
  const __mmask16 flush = _mm512_cmp_ps_mask(d, lowest, _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
  const __m512 result = _mm512_maskz_mov_ps(static_cast<__mmask16>(~flush), _mm512_mul_ps(y, scale));
  return _mm512_mask_mov_ps(result, nan, d);
}

/// The f32 body of exp_shifted_sum in 512-bit registers: two 16-lane f32 accumulators over
/// chunks of 512 elements (16 terms per lane, as blocked_sum's f32 chunks), added into f64.
inline double exp_shifted_sum_avx512(const float* x, float m, int64_t n, LinePrefetcher& next, int per_step) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512d w0 = _mm512_setzero_pd(), w1 = _mm512_setzero_pd(), w2 = _mm512_setzero_pd(), w3 = _mm512_setzero_pd();
  constexpr int64_t kChunk = 512;
  int64_t i = 0;
  while (i + 32 <= n) {
    const int64_t chunk_end = std::min(n - (n - i) % 32, i + kChunk);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i < chunk_end; i += 32) {
      next.step<false, 2>(2 * per_step);
      a0 = _mm512_add_ps(a0, exp_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
      a1 = _mm512_add_ps(a1, exp_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm)));
    }
    w0 = _mm512_add_pd(w0, widen_low(a0));
    w1 = _mm512_add_pd(w1, widen_high(a0));
    w2 = _mm512_add_pd(w2, widen_low(a1));
    w3 = _mm512_add_pd(w3, widen_high(a1));
  }
  double total = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(w0, w1), _mm512_add_pd(w2, w3)));
  for (; i < n; ++i) total += exp_nonpositive_f32(x[i] - m);
  return total;
}
#endif

/// sum of exp_c(x[i] - m), i < n, exactly as blocked_sum<C> of it (AVX-512: the same terms in
/// another order), while `next` streams the
/// next row into L2 (one line per 16 elements: this pass is compute-bound on a row already in
/// cache, and the next row's max pass then reads L2 instead of waiting for DRAM).
template <class C>
double exp_shifted_sum(const C* x, C m, int64_t n, LinePrefetcher& next) {
  const int per_step = lines_per_step(next.remaining(), n / 16);
  if constexpr (std::is_same_v<C, double>) {
    // One prefetch step per 16 elements (every other group of 8 lanes).
    return lane_sum<double>(
        n, [&](int64_t i) { if ((i & 15) == 0) next.step<false, 2>(per_step); },
        [x, m](int64_t i) { return exp_f64(x[i] - m); });
  } else {
#if defined(__AVX512F__)
    return exp_shifted_sum_avx512(x, m, n, next, per_step);
#else
    return lane_sum<float>(
        n, [&](int64_t) { next.step<false, 2>(per_step); }, [x, m](int64_t i) { return exp_nonpositive_f32(x[i] - m); });
#endif
  }
}

/// e[i] = exp_c(x[i] - m) for i < n, returning their sum exactly as exp_shifted_store below,
/// while `next` streams the next row into L2 (as exp_shifted_sum). e may be x.
template <class C>
inline double exp_shifted_store(const C* x, C m, C* e, int64_t n, LinePrefetcher& next) {
  const int per_step = lines_per_step(next.remaining(), n / 16);
  return lane_sum<C>(
      n, [&](int64_t i) { if ((i & 15) == 0) next.step<false, 2>(per_step); },
      [x, m, e](int64_t i) {
        const C v = exp_c<C>(x[i] - m);
        e[i] = v;
        return v;
      });
}

/// e[i] = exp_c(x[i] - m) for i < n, returning their sum, blocked as blocked_sum. e may be x.
template <class C>
inline double exp_shifted_store(const C* x, C m, C* e, int64_t n) {
  return blocked_sum<C>(n, [x, m, e](int64_t i) {
    const C v = exp_c<C>(x[i] - m);
    e[i] = v;
    return v;
  });
}

#if defined(__AVX512F__)
/// The f32 body of exp_shifted_store_dot in 512-bit registers: 16-lane f32 accumulators for
/// sum(e) and sum(g e) over chunks of 256 elements (16 terms per lane, as blocked_sum), added
/// into f64 lanes, while `next_x`, `next_g` stream the next line in.
inline void exp_shifted_store_dot_avx512(const float* x, const float* g, float m, float* e, int64_t n, double& sum,
                                         double& dot, LinePrefetcher& next_x, LinePrefetcher& next_g, int per_step) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd(), d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  constexpr int64_t kChunk = 256;
  int64_t i = 0;
  while (i + 16 <= n) {
    const int64_t chunk_end = std::min(n - (n - i) % 16, i + kChunk);
    __m512 as = _mm512_setzero_ps(), ad = _mm512_setzero_ps();
    for (; i < chunk_end; i += 16) {
      next_x.step(per_step);
      next_g.step(per_step);
      const __m512 v = exp_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
      _mm512_storeu_ps(e + i, v);
      as = _mm512_add_ps(as, v);
      ad = _mm512_fmadd_ps(_mm512_loadu_ps(g + i), v, ad);
    }
    s0 = _mm512_add_pd(s0, widen_low(as));
    s1 = _mm512_add_pd(s1, widen_high(as));
    d0 = _mm512_add_pd(d0, widen_low(ad));
    d1 = _mm512_add_pd(d1, widen_high(ad));
  }
  sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  dot = _mm512_reduce_add_pd(_mm512_add_pd(d0, d1));
  for (; i < n; ++i) {
    const float v = exp_nonpositive_f32(x[i] - m);
    e[i] = v;
    sum += v;
    dot += static_cast<double>(g[i]) * v;
  }
}
#endif

/// e[i] = exp_c(x[i] - m) for i < n; sum = sum(e), dot = sum(g * e), blocked as blocked_sum
/// (f32: 16-lane f32 sums over chunks of at most 256 elements, added into f64; AVX-512: the same
/// terms in another order). e may be x but not g. `next_x`, `next_g` stream the next line in
/// meanwhile (this pass is compute-bound on a line already in cache).
template <class C>
inline void exp_shifted_store_dot(const C* x, const C* g, C m, C* e, int64_t n, double& sum, double& dot,
                                  LinePrefetcher& next_x, LinePrefetcher& next_g) {
  const int per_step = lines_per_step(std::max(next_x.remaining(), next_g.remaining()), n / 16);
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<C, float>) {
    exp_shifted_store_dot_avx512(x, g, m, e, n, sum, dot, next_x, next_g, per_step);
    return;
  }
#endif
  lane_sums2<C>(
      n, sum, dot,
      [&] {
        next_x.step(per_step);
        next_g.step(per_step);
      },
      [x, g, m, e](int64_t i, C& s, C& d) {
        const C v = exp_c<C>(x[i] - m);
        e[i] = v;
        s += v;
        d += g[i] * v;
      },
      [x, g, m, e](int64_t i, double& s, double& d) {
        const C v = exp_c<C>(x[i] - m);
        e[i] = v;
        s += v;
        d += static_cast<double>(g[i]) * v;
      });
}

/// s1 = sum(x - shift) and s2 = sum((x - shift)^2) over x[0..n) in one pass, blocked as
/// blocked_sum (f32: 16-term f32 lane sums added into f64).
template <class C>
inline void shifted_sums(const C* x, int64_t n, C shift, double& s1, double& s2) {
  lane_sums2<C>(
      n, s1, s2, [] {},
      [x, shift](int64_t i, C& a, C& b) {
        const C d = x[i] - shift;
        a += d;
        b += d * d;
      },
      [x, shift](int64_t i, double& a, double& b) {
        const double d = static_cast<double>(x[i] - shift);
        a += d;
        b += d * d;
      });
}

/// Mean and biased variance of a group, in f64. The mean is an f64 sum (exact enough for any
/// offset or magnitude mix); the variance is two-pass around mc = the mean rounded to the
/// compute type: s2 = sum((x - mc)^2) in the compute type (x - mc is exact near the mean), and
/// var = s2 / n - (mean - mc)^2. Row passes use (x - mc) - delta with delta = mean - mc. When
/// the compute type would overflow (|x| beyond ~1e19 in f32) or the group holds Inf/NaN,
/// `wide` is set and the variance is recomputed in f64 (the row passes then run in f64 too).
template <class C>
struct Moments {
  double mean = 0, var = 0;
  C mc = 0, delta = 0;
  bool wide = false;
};

/// Finishes the moments from the f64 mean and the shifted sum of squares; false when not finite.
template <class C>
inline bool finish_moments(Moments<C>& m, double mean, double s2, int64_t n) {
  m.mean = mean;
  m.mc = static_cast<C>(mean);
  if (!(std::isfinite(mean) && std::isfinite(s2)) || n == 0) return false;
  const double d = mean - static_cast<double>(m.mc);
  m.var = s2 / static_cast<double>(n) - d * d;
  m.var = m.var < 0 ? 0 : m.var;
  m.delta = static_cast<C>(d);
  return true;
}

/// The f64 fallback of row_moments (m.mean already set): the variance in f64, `wide` set.
template <class C>
inline Moments<C> wide_moments(const C* x, int64_t n, Moments<C>& m) {
  m.wide = true;
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(x[i]) - m.mean;
    squares += e * e;
  }
  m.var = squares / static_cast<double>(n);
  m.delta = 0;
  return m;
}

/// sum of x[0..n) in f64, 16 lanes (several independent vector chains: the f64 adds would
/// otherwise bound an L1-resident row by their latency).
template <class C>
inline double wide_sum(const C* x, int64_t n) {
  constexpr int kLanes = 16;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(x[i + l]);
  }
  double total = 0;
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  for (; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}

#if defined(__AVX512F__)
/// wide_sum and shifted_sums for f32 rows in 512-bit registers (four f64 accumulators for the
/// mean; two 16-lane f32 accumulators per shifted sum over 512-element chunks, 16 terms per lane,
/// added into f64), so a cached row is not bound by add latency or lane arrays kept in memory.
inline double wide_sum_avx512(const float* x, int64_t n) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd(), s2 = _mm512_setzero_pd(), s3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_add_pd(s0, _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(x + i)));
    s1 = _mm512_add_pd(s1, _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(x + i + 8)));
    s2 = _mm512_add_pd(s2, _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(x + i + 16)));
    s3 = _mm512_add_pd(s3, _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(x + i + 24)));
  }
  double total = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
  for (; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}

inline void shifted_sums_avx512(const float* x, int64_t n, float shift, double& s1, double& s2) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512d w1 = _mm512_setzero_pd(), w2 = _mm512_setzero_pd();
  auto widen_add = [](__m512d acc, __m512 v) { return _mm512_add_pd(_mm512_add_pd(acc, widen_low(v)), widen_high(v)); };
  constexpr int64_t kChunk = 512;
  int64_t i = 0;
  while (i + 32 <= n) {
    const int64_t chunk_end = std::min(n - (n - i) % 32, i + kChunk);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), q0 = _mm512_setzero_ps(), q1 = _mm512_setzero_ps();
    for (; i < chunk_end; i += 32) {
      const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vs);
      const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vs);
      a0 = _mm512_add_ps(a0, d0);
      a1 = _mm512_add_ps(a1, d1);
      q0 = _mm512_fmadd_ps(d0, d0, q0);
      q1 = _mm512_fmadd_ps(d1, d1, q1);
    }
    w1 = widen_add(w1, _mm512_add_ps(a0, a1));
    w2 = widen_add(w2, _mm512_add_ps(q0, q1));
  }
  s1 = _mm512_reduce_add_pd(w1);
  s2 = _mm512_reduce_add_pd(w2);
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i] - shift);
    s1 += d;
    s2 += d * d;
  }
}
#endif

template <class C>
inline Moments<C> row_moments(const C* x, int64_t n) {
  Moments<C> m;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<C, float>) {
    const double mean = wide_sum_avx512(x, n) / static_cast<double>(n);
    double s1 = 0, s2 = 0;
    if (std::isfinite(mean)) shifted_sums_avx512(x, n, static_cast<C>(mean), s1, s2);
    if (finish_moments(m, mean, s2, n)) return m;
    return wide_moments(x, n, m);
  }
#endif
  const double mean = wide_sum(x, n) / static_cast<double>(n);
  double s1 = 0, s2 = 0;
  if (std::isfinite(mean)) shifted_sums(x, n, static_cast<C>(mean), s1, s2);
  if (finish_moments(m, mean, s2, n)) return m;
  return wide_moments(x, n, m);
}

/// Maximum of x[0..n) ignoring NaN (-Inf for none); `nan` tells whether a NaN was seen.
template <class C>
inline C line_max(const C* x, int64_t n, bool& nan) {
  constexpr int kLanes = 16;
  C lanes[kLanes];
  int nan_lanes[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) lanes[l] = -std::numeric_limits<C>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const C v = x[i + l];
      lanes[l] = v > lanes[l] ? v : lanes[l];
      nan_lanes[l] |= (v != v);
    }
  }
  C m = -std::numeric_limits<C>::infinity();
  int any_nan = 0;
  for (int l = 0; l < kLanes; ++l) {
    m = lanes[l] > m ? lanes[l] : m;
    any_nan |= nan_lanes[l];
  }
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    any_nan |= (x[i] != x[i]);
  }
  nan = any_nan != 0;
  return m;
}

// ---- parallel rows -------------------------------------------------------------------------------

/// Threads for `rows` rows of `work_per_row` element-operations each (1 below the parallel
/// threshold, as the elementwise kernels).
inline int threads_for(int64_t rows, int64_t work_per_row) {
  if (rows <= 1) return 1;
  const int64_t work = rows * std::max<int64_t>(1, work_per_row);
  if (work < kParallelThreshold) return 1;
  return static_cast<int>(std::min<int64_t>(available_threads(), rows));
}

/// Runs body(part, begin, end, slot) over `parts` contiguous ranges of [0, rows) on `threads`
/// threads; `slot` < threads indexes per-thread scratch. The ranges depend only on rows and
/// parts. `body` must not throw.
template <class Body>
void for_parts(int64_t rows, int64_t parts, int threads, Body&& body) {
  if (rows <= 0) return;
  parts = std::clamp<int64_t>(parts, 1, rows);
  const int64_t base = rows / parts, extra = rows % parts;
  auto range = [&](int64_t p, int64_t& begin, int64_t& end) {
    begin = p * base + std::min(p, extra);
    end = begin + base + (p < extra ? 1 : 0);
  };
  if (threads <= 1 || parts == 1) {
    for (int64_t p = 0; p < parts; ++p) {
      int64_t begin, end;
      range(p, begin, end);
      body(p, begin, end, 0);
    }
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t p = 0; p < parts; ++p) {
    int64_t begin, end;
    range(p, begin, end);
    body(p, begin, end, omp_get_thread_num());
  }
}

/// Per-thread scratch of compute type C.
template <class C>
struct Scratch {
  std::vector<C> data;
  int64_t per = 0;
  Scratch(int threads, int64_t per_thread) : data(static_cast<size_t>(threads * per_thread)), per(per_thread) {}
  C* at(int slot) { return data.data() + slot * per; }
};

// ---- attributes and views -------------------------------------------------------------------------

/// An f64 attribute (an i64 one converts, as the reference); `fallback` when unset.
inline double attr_f64_or(const dx_kernel_call_t* call, int slot, const char* name, double fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " must be an f64");
}

/// A string attribute, or `fallback` when unset.
inline std::string_view attr_string_or(const dx_kernel_call_t* call, int slot, const char* name,
                                       std::string_view fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_STRING || a->value.str == nullptr || a->count < 0) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " must be a string");
  }
  return std::string_view(a->value.str, static_cast<size_t>(a->count));
}

/// The normalised axis of softmax / log_softmax (attr `axis`, default -1) of a rank-`rank`
/// tensor; rank 0 acts as rank 1 (axis 0 or -1); DX_OUT_OF_RANGE ("cpu: <op> axis ...") outside.
inline int64_t softmax_axis(const dx_kernel_call_t* call, int rank, const char* op) {
  const int64_t requested = attr_i64(call, DX_SOFTMAX_AXIS, "axis", -1);
  const int64_t limit = rank == 0 ? 1 : rank;
  const int64_t axis = requested < 0 ? requested + limit : requested;
  if (axis < 0 || axis >= limit) {
    fail(DX_OUT_OF_RANGE, std::string("cpu: ") + op + " axis " + std::to_string(requested) +
                              " is out of range for rank " + std::to_string(rank));
  }
  return axis;
}

/// The input `i` when present (an absent optional input is a null tensor).
inline bool has_input(const dx_kernel_call_t* call, int i) {
  return i < call->num_inputs && call->inputs[i] != nullptr;
}
inline bool has_output(const dx_kernel_call_t* call, int i) {
  return i < call->num_outputs && call->outputs[i] != nullptr;
}

/// DX_SHAPE_MISMATCH unless `v` has exactly `shape`.
inline void expect_shape(const View& v, const int64_t* shape, int rank, const char* what) {
  bool ok = v.rank == rank;
  for (int d = 0; ok && d < rank; ++d) ok = v.shape[d] == shape[d];
  if (!ok) {
    std::string message = std::string("cpu: ") + what + " has shape ";
    message += shape_string(v.shape, v.rank);
    message += ", expected ";
    message += shape_string(shape, rank);
    fail(DX_SHAPE_MISMATCH, std::move(message));
  }
}

/// A view of input `i` whose dtype must be T.
template <class T>
View typed_input(const dx_kernel_call_t* call, int i, const char* what) {
  const View v = make_view(call->inputs[i], what);
  expect_dtype(v, dtype_of<T>(), what);
  return v;
}
template <class T>
View typed_output(const dx_kernel_call_t* call, int i, const char* what) {
  const View v = make_view(call->outputs[i], what);
  expect_dtype(v, dtype_of<T>(), what);
  return v;
}

/// Input gradient `i` of a backward kernel (one the caller wants: has_output) as a view of
/// dtype T with shape `shape` ("input gradient i" in messages).
template <class T>
View gradient_output(const dx_kernel_call_t* call, int i, const int64_t* shape, int rank) {
  const std::string what = "input gradient " + std::to_string(i);
  const View g = typed_output<T>(call, i, what.c_str());
  expect_shape(g, shape, rank, what.c_str());
  return g;
}

/// Writes zeros (all-zero bytes) into every element of `v`, any strides.
inline void zero_fill(const View& v) {
  if (v.count() == 0) return;
  const int64_t size = v.dtype.bits / 8;
  StridedLoop<1> loop = loop_over(v);
  auto run = [&](int64_t n, const int64_t* off, const int64_t* st) {
    char* p = v.base + off[0] * size;
    if (st[0] == 1) {
      std::memset(p, 0, static_cast<size_t>(n * size));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memset(p + i * st[0] * size, 0, static_cast<size_t>(size));
    }
  };
  run_range(loop, 0, loop.count(), run);
}

}  // namespace deepx::cpu::nn

#endif  // DEEPX_PLUGINS_CPU_NN_UTIL_H_
