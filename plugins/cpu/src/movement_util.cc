// simd.h first, so that its <immintrin.h> include decides how the intrinsics warn (see simd.h).
#include "simd.h"

#include "movement_util.h"
#include "transpose8x8.h"

#include <cmath>
#include <cstring>
#include <string>

namespace deepx::cpu::movement {
namespace {

template <int Size>
using Word = std::conditional_t<
    Size == 1, uint8_t,
    std::conditional_t<Size == 2, uint16_t, std::conditional_t<Size == 4, uint32_t, uint64_t>>>;

// ---- what a copy does to each element ---------------------------------------------------------

/// Element bytes moved unchanged (every forward data movement).
template <int Size>
struct Verbatim {
  using W = Word<Size>;
  static constexpr bool kIdentity = true;
  static W apply(W w) { return w; }
};

/// The gradient of a pure data movement in float type T: 0.0 + v, the reference's f64
/// accumulation from +0 rounded once (exact, except that -0 becomes +0).
template <class T>
struct PlusZero {
  using W = Word<static_cast<int>(sizeof(T))>;
  static constexpr bool kIdentity = false;
  static W apply(W w) {
    T v;
    std::memcpy(&v, &w, sizeof v);
    v = canonical_gradient(v);
    std::memcpy(&w, &v, sizeof w);
    return w;
  }
};

// ---- blocked transpose ------------------------------------------------------------------------
//
// A copy whose output runs along one dim while the input runs along another (a transpose, or a
// copy into / out of a transposed view) reads or writes one element per cache line in a plain
// row loop. It is done instead in square tiles over those two dims (kTile x kTile elements, so
// the pages a tile touches stay in the TLB), each tile in register micro-tiles, and tiles spread
// over the OpenMP threads. With AVX-512 a micro-tile is one cache line by one cache line (16x16
// 4-byte / 8x8 8-byte words): every input line is read once and every output line written once,
// whole, so the 4 KiB-aliasing of rows with large power-of-two pitches (all rows of a tile in
// one L1 set) costs nothing, and large outputs are written with non-temporal stores (no read for
// ownership: the output's lines are not fetched only to be overwritten). With AVX (8x8 / 4x4)
// and SSE2 (4x4 / 2x2) micro-tiles are grouped by cache line.

/// out[r * os + c] = P(in[c * is + r]) for r < rows, c < cols: a plain loop, for edges and for
/// the element sizes without a register transpose.
template <class P>
inline void transpose_scalar(typename P::W* out, int64_t os, const typename P::W* in, int64_t is,
                             int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    typename P::W* o = out + r * os;
    for (int64_t c = 0; c < cols; ++c) o[c] = P::apply(in[c * is + r]);
  }
}

#if defined(__SSE2__)
// P's fix-up of a vector of floats or doubles (identity for verbatim copies).
template <class P>
inline __m128 fix_ps(__m128 v) {
  if constexpr (P::kIdentity) return v;
  else return _mm_add_ps(v, _mm_setzero_ps());
}
template <class P>
inline __m128d fix_pd(__m128d v) {
  if constexpr (P::kIdentity) return v;
  else return _mm_add_pd(v, _mm_setzero_pd());
}
/// A 4x4 block of 4-byte words: out row r = in column r.
template <class P>
inline void transpose4x4_u32(uint32_t* out, int64_t os, const uint32_t* in, int64_t is) {
  __m128 r0 = fix_ps<P>(_mm_loadu_ps(reinterpret_cast<const float*>(in)));
  __m128 r1 = fix_ps<P>(_mm_loadu_ps(reinterpret_cast<const float*>(in + is)));
  __m128 r2 = fix_ps<P>(_mm_loadu_ps(reinterpret_cast<const float*>(in + 2 * is)));
  __m128 r3 = fix_ps<P>(_mm_loadu_ps(reinterpret_cast<const float*>(in + 3 * is)));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(reinterpret_cast<float*>(out), r0);
  _mm_storeu_ps(reinterpret_cast<float*>(out + os), r1);
  _mm_storeu_ps(reinterpret_cast<float*>(out + 2 * os), r2);
  _mm_storeu_ps(reinterpret_cast<float*>(out + 3 * os), r3);
}
/// A 2x2 block of 8-byte words.
template <class P>
inline void transpose2x2_u64(uint64_t* out, int64_t os, const uint64_t* in, int64_t is) {
  const __m128d a = fix_pd<P>(_mm_loadu_pd(reinterpret_cast<const double*>(in)));
  const __m128d b = fix_pd<P>(_mm_loadu_pd(reinterpret_cast<const double*>(in + is)));
  _mm_storeu_pd(reinterpret_cast<double*>(out), _mm_unpacklo_pd(a, b));
  _mm_storeu_pd(reinterpret_cast<double*>(out + os), _mm_unpackhi_pd(a, b));
}
#endif
#if defined(__AVX__)
template <class P>
inline __m256 fix_ps(__m256 v) {
  if constexpr (P::kIdentity) return v;
  else return _mm256_add_ps(v, _mm256_setzero_ps());
}
template <class P>
inline __m256d fix_pd(__m256d v) {
  if constexpr (P::kIdentity) return v;
  else return _mm256_add_pd(v, _mm256_setzero_pd());
}
/// An 8x8 block of 4-byte words (unpack, shuffle, then swap 128-bit halves).
template <class P>
inline void transpose8x8_u32(uint32_t* out, int64_t os, const uint32_t* in, int64_t is) {
  const float* src = reinterpret_cast<const float*>(in);
  float* dst = reinterpret_cast<float*>(out);
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = fix_ps<P>(_mm256_loadu_ps(src + i * is));
  transpose8x8_ps(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * os, r[i]);
}
/// A 4x4 block of 8-byte words.
template <class P>
inline void transpose4x4_u64(uint64_t* out, int64_t os, const uint64_t* in, int64_t is) {
  const double* src = reinterpret_cast<const double*>(in);
  double* dst = reinterpret_cast<double*>(out);
  const __m256d r0 = fix_pd<P>(_mm256_loadu_pd(src)), r1 = fix_pd<P>(_mm256_loadu_pd(src + is));
  const __m256d r2 = fix_pd<P>(_mm256_loadu_pd(src + 2 * is));
  const __m256d r3 = fix_pd<P>(_mm256_loadu_pd(src + 3 * is));
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dst + os, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dst + 2 * os, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dst + 3 * os, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif
#if defined(__AVX512F__)
template <class P>
inline __m512 fix_ps(__m512 v) {
  if constexpr (P::kIdentity) return v;
  else return _mm512_add_ps(v, _mm512_setzero_ps());
}
template <class P>
inline __m512d fix_pd(__m512d v) {
  if constexpr (P::kIdentity) return v;
  else return _mm512_add_pd(v, _mm512_setzero_pd());
}
/// Stores one whole output line: non-temporal when kStream (the address is 64-byte aligned).
template <bool kStream>
inline void store_line(float* dst, __m512 v) {
  if constexpr (kStream) _mm512_stream_ps(dst, v);
  else _mm512_storeu_ps(dst, v);
}
template <bool kStream>
inline void store_line(double* dst, __m512d v) {
  if constexpr (kStream) _mm512_stream_pd(dst, v);
  else _mm512_storeu_pd(dst, v);
}
/// A 16x16 block of 4-byte words: unpack pairs of rows, shuffle 4x4 blocks within 128-bit
/// lanes, then two rounds of 128-bit lane shuffles.
template <class P, bool kStream>
inline void transpose16x16_u32(uint32_t* out, int64_t os, const uint32_t* in, int64_t is) {
  const float* src = reinterpret_cast<const float*>(in);
  float* dst = reinterpret_cast<float*>(out);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = fix_ps<P>(_mm512_loadu_ps(src + i * is));
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + m], lane L: column 4L + m of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
    t[4 + m] = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
    t[8 + m] = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
  }
  for (int m = 0; m < 4; ++m) {
    store_line<kStream>(dst + m * os, _mm512_shuffle_f32x4(t[m], t[8 + m], 0x88));
    store_line<kStream>(dst + (4 + m) * os, _mm512_shuffle_f32x4(t[4 + m], t[12 + m], 0x88));
    store_line<kStream>(dst + (8 + m) * os, _mm512_shuffle_f32x4(t[m], t[8 + m], 0xDD));
    store_line<kStream>(dst + (12 + m) * os, _mm512_shuffle_f32x4(t[4 + m], t[12 + m], 0xDD));
  }
}
/// An 8x8 block of 8-byte words (the same scheme with 2-element lanes).
template <class P, bool kStream>
inline void transpose8x8_u64(uint64_t* out, int64_t os, const uint64_t* in, int64_t is) {
  const double* src = reinterpret_cast<const double*>(in);
  double* dst = reinterpret_cast<double*>(out);
  __m512d r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = fix_pd<P>(_mm512_loadu_pd(src + i * is));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  for (int m = 0; m < 2; ++m) {
    r[m] = _mm512_shuffle_f64x2(t[m], t[2 + m], 0x88);
    r[2 + m] = _mm512_shuffle_f64x2(t[m], t[2 + m], 0xDD);
    r[4 + m] = _mm512_shuffle_f64x2(t[4 + m], t[6 + m], 0x88);
    r[6 + m] = _mm512_shuffle_f64x2(t[4 + m], t[6 + m], 0xDD);
  }
  for (int m = 0; m < 2; ++m) {
    store_line<kStream>(dst + m * os, _mm512_shuffle_f64x2(r[m], r[4 + m], 0x88));
    store_line<kStream>(dst + (2 + m) * os, _mm512_shuffle_f64x2(r[2 + m], r[6 + m], 0x88));
    store_line<kStream>(dst + (4 + m) * os, _mm512_shuffle_f64x2(r[m], r[4 + m], 0xDD));
    store_line<kStream>(dst + (6 + m) * os, _mm512_shuffle_f64x2(r[2 + m], r[6 + m], 0xDD));
  }
}
#endif

/// Register block edge for element type W (1: no register transpose).
template <class W>
constexpr int64_t micro_block() {
#if defined(__AVX512F__)
  if constexpr (sizeof(W) == 4) return 16;
  if constexpr (sizeof(W) == 8) return 8;
#elif defined(__AVX__)
  if constexpr (sizeof(W) == 4) return 8;
  if constexpr (sizeof(W) == 8) return 4;
#elif defined(__SSE2__)
  if constexpr (sizeof(W) == 4) return 4;
  if constexpr (sizeof(W) == 8) return 2;
#endif
  return 1;
}

/// One register block at (r, c): out[r * os + c] = P(in[c * is + r]) over kB x kB elements.
template <class P, bool kStream>
inline void transpose_micro(typename P::W* out, int64_t os, const typename P::W* in, int64_t is) {
  using W = typename P::W;
#if defined(__AVX512F__)
  if constexpr (sizeof(W) == 4) transpose16x16_u32<P, kStream>(out, os, in, is);
  else transpose8x8_u64<P, kStream>(out, os, in, is);
#elif defined(__AVX__)
  if constexpr (sizeof(W) == 4) transpose8x8_u32<P>(out, os, in, is);
  else transpose4x4_u64<P>(out, os, in, is);
#elif defined(__SSE2__)
  if constexpr (sizeof(W) == 4) transpose4x4_u32<P>(out, os, in, is);
  else transpose2x2_u64<P>(out, os, in, is);
#else
  (void)out, (void)os, (void)in, (void)is;
#endif
}

/// One tile: out[r * os + c] = P(in[c * is + r]), r < rows, c < cols. kStream: whole output
/// lines go out as non-temporal stores (only with line-sized micro-tiles, on a 64-byte aligned
/// output whose row pitch is a multiple of 64 bytes).
template <class P, bool kStream>
void transpose_tile(typename P::W* out, int64_t os, const typename P::W* in, int64_t is,
                    int64_t rows, int64_t cols) {
  using W = typename P::W;
  constexpr int64_t kB = micro_block<W>();
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(W));
  const int64_t block_rows = rows / kLine * kLine, block_cols = cols / kLine * kLine;
  if constexpr (kB == kLine) {
    // Line-sized micro-tiles: a band of kB input rows (output columns c) at a time, walked
    // along the input rows (r), so the band's rows are read as sequential streams.
    for (int64_t c = 0; c < block_cols; c += kB) {
      for (int64_t r = 0; r < block_rows; r += kB) {
        transpose_micro<P, kStream>(out + r * os + c, os, in + c * is + r, is);
      }
    }
    if (block_rows < rows) {
      transpose_scalar<P>(out + block_rows * os, os, in + block_rows, is, rows - block_rows,
                          block_cols);
    }
    if (block_cols < cols) {
      transpose_scalar<P>(out + block_cols, os, in + block_cols * is, is, rows, cols - block_cols);
    }
#if defined(__SSE2__)
    if constexpr (kStream) _mm_sfence();  // order the streamed lines before the tile is done
#endif
  } else if constexpr (kB > 1) {
    // Register blocks grouped into cache-line blocks (kLine x kLine elements), visited so that
    // both halves (or quarters) of each input line are read back to back and each output line
    // is completed before the next line block: with row pitches that are multiples of 4 KiB
    // every row maps to the same L1 set, so a line left half-used is usually evicted before its
    // other half is needed (measured: 1.8x faster than micro-tiles in plain row order).
    for (int64_t r = 0; r < block_rows; r += kLine) {
      for (int64_t c = 0; c < block_cols; c += kLine) {
        for (int64_t cb = 0; cb < kLine; cb += kB) {
          for (int64_t rb = 0; rb < kLine; rb += kB) {
            transpose_micro<P, false>(out + (r + rb) * os + c + cb, os,
                                      in + (c + cb) * is + r + rb, is);
          }
        }
      }
      if (block_cols < cols) {
        transpose_scalar<P>(out + r * os + block_cols, os, in + block_cols * is + r, is, kLine,
                            cols - block_cols);
      }
    }
    if (block_rows < rows) {
      transpose_scalar<P>(out + block_rows * os, os, in + block_rows, is, rows - block_rows, cols);
    }
  } else {
    transpose_scalar<P>(out, os, in, is, rows, cols);
  }
}

/// Tile edge in elements: 256 x 256 4-byte words (256 KiB read + 256 KiB written, within L2,
/// and 512 pages, within the second-level TLB), 128 x 128 8-byte words.
template <class W>
constexpr int64_t tile_edge() {
  return sizeof(W) >= 8 ? 128 : sizeof(W) == 4 ? 256 : 64;
}

/// Output size from which line-sized micro-tiles are stored non-temporally: well past the
/// per-core caches, where the output would only evict the caller's data on its way to memory
/// (a smaller transpose is often read again right away, from cache).
constexpr int64_t kStreamingBytes = int64_t{8} << 20;

/// If the simplified loop moves a transpose (the output's unit-stride dim is the last one and
/// the input's unit-stride dim another, or the other way round), copies it tile by tile and
/// returns true; otherwise returns false and leaves it to the row loop.
template <class P>
bool copy_transposed(const StridedLoop<2>& loop, typename P::W* po, const typename P::W* pi,
                     bool parallel) {
  using W = typename P::W;
  const int rank = loop.rank;
  if (rank < 2) return false;
  const int last = rank - 1;
  // Operand `along_rows` has unit stride in the last dim, the other in dim `other`.
  int other = -1;
  bool out_contiguous_in_last;
  if (loop.strides[0][last] == 1 && loop.strides[1][last] != 1) {
    out_contiguous_in_last = true;
    for (int d = last - 1; d >= 0 && other < 0; --d) if (loop.strides[1][d] == 1) other = d;
  } else if (loop.strides[1][last] == 1 && loop.strides[0][last] != 1) {
    out_contiguous_in_last = false;
    for (int d = last - 1; d >= 0 && other < 0; --d) if (loop.strides[0][d] == 1) other = d;
  } else {
    return false;
  }
  if (other < 0) return false;
  // The tile kernel writes out rows along its c index and reads in columns: r runs along the
  // input's unit-stride dim, c along the output's.
  const int r_dim = out_contiguous_in_last ? other : last;
  const int c_dim = out_contiguous_in_last ? last : other;
  const int64_t rows = loop.shape[r_dim], cols = loop.shape[c_dim];
  const int64_t os = loop.strides[0][r_dim], is = loop.strides[1][c_dim];
  if (rows < 4 || cols < 4) return false;  // too thin to gain from tiles
  // The remaining dims, iterated as a flat outer index.
  int outer_dims[kMaxRank];
  int outer_rank = 0;
  int64_t outer = 1;
  for (int d = 0; d < rank; ++d) {
    if (d == r_dim || d == c_dim) continue;
    outer_dims[outer_rank++] = d;
    outer *= loop.shape[d];
  }
  constexpr int64_t kTile = tile_edge<W>();
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tasks = outer * row_tiles * col_tiles;
  const int64_t total = outer * rows * cols;
  const int threads = (!parallel || total < kParallelThreshold) ? 1 : available_threads();
  // Non-temporal stores need whole, aligned lines: line-sized micro-tiles and a pitch of whole
  // lines (each tile's own start is checked below).
  const bool stream = micro_block<W>() * static_cast<int64_t>(sizeof(W)) == 64 &&
                      total * static_cast<int64_t>(sizeof(W)) >= kStreamingBytes &&
                      (os * static_cast<int64_t>(sizeof(W))) % 64 == 0;
  auto tile = [&](int64_t t) {
    const int64_t ct = t % col_tiles, rt = (t / col_tiles) % row_tiles;
    int64_t rest = t / (col_tiles * row_tiles);
    int64_t out_offset = 0, in_offset = 0;
    for (int k = outer_rank - 1; k >= 0; --k) {
      const int d = outer_dims[k];
      const int64_t index = rest % loop.shape[d];
      rest /= loop.shape[d];
      out_offset += index * loop.strides[0][d];
      in_offset += index * loop.strides[1][d];
    }
    const int64_t r0 = rt * kTile, c0 = ct * kTile;
    W* const o = po + out_offset + r0 * os + c0;
    const W* const i = pi + in_offset + c0 * is + r0;
    const int64_t tile_rows = std::min(kTile, rows - r0), tile_cols = std::min(kTile, cols - c0);
    if (stream && reinterpret_cast<uintptr_t>(o) % 64 == 0) {
      transpose_tile<P, true>(o, os, i, is, tile_rows, tile_cols);
    } else {
      transpose_tile<P, false>(o, os, i, is, tile_rows, tile_cols);
    }
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) tile(t);
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < tasks; ++t) tile(t);
  }
  return true;
}

template <class P>
void copy_words(const View& out, const View& in, bool parallel) {
  using W = typename P::W;
  StridedLoop<2> loop = loop_over(out, in);
  if (copy_transposed<P>(loop, out.data<W>(), in.data<const W>(), parallel)) return;
  W* const po = out.data<W>();
  const W* const pi = in.data<const W>();
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = po + off[0];
    const W* x = pi + off[1];
    if (st[0] == 1 && st[1] == 1) {
      if constexpr (P::kIdentity) {
        if (o != x) std::memcpy(o, x, static_cast<size_t>(n) * sizeof(W));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = P::apply(x[i]);
      }
    } else if (st[0] == 1 && st[1] == 0) {
      const W v = P::apply(*x);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    } else if (st[0] == 1) {
      const int64_t sx = st[1];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = P::apply(x[i * sx]);
    } else {
      const int64_t so = st[0], sx = st[1];
      for (int64_t i = 0; i < n; ++i) o[i * so] = P::apply(x[i * sx]);
    }
  };
  if (parallel) {
    for_each_row(loop, row);
  } else {
    run_range(loop, 0, loop.count(), row);
  }
}

template <class W>
void fill_words(const View& out, W value, bool parallel) {
  StridedLoop<1> loop = loop_over(out);
  W* const po = out.data<W>();
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = po + off[0];
    if (st[0] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = value;
    } else {
      const int64_t so = st[0];
      for (int64_t i = 0; i < n; ++i) o[i * so] = value;
    }
  };
  if (parallel) {
    for_each_row(loop, row);
  } else {
    run_range(loop, 0, loop.count(), row);
  }
}

/// i64 -> f64 rounded to odd (exact below 2^53): rounding that to f16/bf16 afterwards gives the
/// correctly rounded i64 -> f16/bf16 conversion (one rounding, as the reference does).
double int64_to_double_round_odd(int64_t v) {
  const bool negative = v < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int shift = 0;
  while ((magnitude >> shift) >= (uint64_t{1} << 53)) ++shift;
  uint64_t kept = magnitude >> shift;
  if (shift > 0 && (magnitude & ((uint64_t{1} << shift) - 1)) != 0) kept |= 1;
  const double d = std::ldexp(static_cast<double>(kept), shift);  // exact
  return negative ? -d : d;
}

template <class T>
T value_of(const dx_attr_t* a) {
  if (a == nullptr) return T{};
  if (a->type == DX_ATTR_I64 || a->type == DX_ATTR_BOOL) {
    const int64_t v = a->value.i64;
    if constexpr (std::is_same_v<T, Bool>) return Bool{static_cast<uint8_t>(v != 0)};
    else if constexpr (std::is_same_v<T, Half>) return Half{double_to_half(int64_to_double_round_odd(v))};
    else if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16{double_to_bfloat16(int64_to_double_round_odd(v))};
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(v);  // one rounding (i64 -> f64 or f32)
    } else {
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(v)));
    }
  }
  if (a->type == DX_ATTR_F64) {
    const double v = a->value.f64;
    if constexpr (std::is_same_v<T, Bool>) return Bool{static_cast<uint8_t>(v != 0)};
    else if constexpr (is_float_v<T>) return from_f64<T>(v);
    else return saturating_cast<T>(v);
  }
  fail(DX_INVALID_ARGUMENT, "cpu: attribute 'value' must be an i64, f64 or bool");
}

template <class T>
void encode_as(const dx_attr_t* a, void* bytes) {
  const T v = value_of<T>(a);
  std::memcpy(bytes, &v, sizeof(T));
}

}  // namespace

View compact_view(void* base, DLDataType dtype, const int64_t* shape, int rank) {
  View v;
  v.base = static_cast<char*>(base);
  v.dtype = dtype;
  v.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return v;
}

void copy_view(const View& out, const View& in, bool parallel) {
  if (out.count() == 0) return;
  switch (element_size(out.dtype)) {
    case 1: copy_words<Verbatim<1>>(out, in, parallel); break;
    case 2: copy_words<Verbatim<2>>(out, in, parallel); break;
    case 4: copy_words<Verbatim<4>>(out, in, parallel); break;
    case 8: copy_words<Verbatim<8>>(out, in, parallel); break;
    default: fail(DX_UNSUPPORTED, "cpu: unsupported element size " + dtype_name(out.dtype));
  }
}

void copy_gradient_view(const View& out, const View& in) {
  if (out.count() == 0) return;
  if (out.dtype.code == kDLFloat && out.dtype.bits == 64) return copy_words<PlusZero<double>>(out, in, true);
  if (out.dtype.code == kDLFloat && out.dtype.bits == 32) return copy_words<PlusZero<float>>(out, in, true);
  if (out.dtype.code == kDLFloat && out.dtype.bits == 16) return copy_words<PlusZero<Half>>(out, in, true);
  if (out.dtype.code == kDLBfloat && out.dtype.bits == 16) {
    return copy_words<PlusZero<BFloat16>>(out, in, true);
  }
  fail(DX_UNSUPPORTED, "cpu: no gradient copy for dtype " + dtype_name(out.dtype));
}

void fill_view(const View& out, const void* value, bool parallel) {
  if (out.count() == 0) return;
  switch (element_size(out.dtype)) {
    case 1: { Word<1> w; std::memcpy(&w, value, 1); fill_words(out, w, parallel); break; }
    case 2: { Word<2> w; std::memcpy(&w, value, 2); fill_words(out, w, parallel); break; }
    case 4: { Word<4> w; std::memcpy(&w, value, 4); fill_words(out, w, parallel); break; }
    case 8: { Word<8> w; std::memcpy(&w, value, 8); fill_words(out, w, parallel); break; }
    default: fail(DX_UNSUPPORTED, "cpu: unsupported element size " + dtype_name(out.dtype));
  }
}

void zero_view(const View& out) {
  const uint64_t zero = 0;
  fill_view(out, &zero);
}

GradBuffer::GradBuffer(const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  data.assign(static_cast<size_t>(n), 0.0);
  view = compact_view(data.data(), make_dtype(kDLFloat, 64), shape, rank);
}

std::optional<std::vector<int64_t>> attr_i64_list(const dx_kernel_call_t* call, int slot,
                                                  const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_I64) return std::vector<int64_t>{a->value.i64};
  if (a->type != DX_ATTR_I64_ARRAY) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' must be an i64 array");
  }
  if (a->count < 0 || (a->count > 0 && a->value.i64s == nullptr)) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' is malformed");
  }
  return std::vector<int64_t>(a->value.i64s, a->value.i64s + a->count);
}

std::optional<double> attr_f64(const dx_kernel_call_t* call, int slot, const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' must be an f64");
}

int normal_axis(const dx_kernel_call_t* call, int slot, int rank, int64_t fallback,
                const char* op) {
  const int64_t axis = attr_i64(call, slot, "axis", fallback);
  const int64_t normal = axis < 0 ? axis + rank : axis;
  if (normal < 0 || normal >= rank) {
    fail(DX_OUT_OF_RANGE, std::string(op) + ": axis " + std::to_string(axis) +
                              " is out of range for rank " + std::to_string(rank));
  }
  return static_cast<int>(normal);
}

void encode_value(const dx_attr_t* a, DLDataType dtype, void* bytes) {
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 64) return encode_as<double>(a, bytes);
      if (dtype.bits == 32) return encode_as<float>(a, bytes);
      if (dtype.bits == 16) return encode_as<Half>(a, bytes);
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return encode_as<BFloat16>(a, bytes);
      break;
    case kDLInt:
      if (dtype.bits == 64) return encode_as<int64_t>(a, bytes);
      if (dtype.bits == 32) return encode_as<int32_t>(a, bytes);
      if (dtype.bits == 16) return encode_as<int16_t>(a, bytes);
      if (dtype.bits == 8) return encode_as<int8_t>(a, bytes);
      break;
    case kDLUInt:
      if (dtype.bits == 8) return encode_as<uint8_t>(a, bytes);
      break;
    case DX_DLPACK_CODE_BOOL:
      if (dtype.bits == 8) return encode_as<Bool>(a, bytes);
      break;
    default: break;
  }
  fail(DX_UNSUPPORTED, "cpu: no value encoding for dtype " + dtype_name(dtype));
}

void expect_shape(const View& v, const int64_t* expected, int rank, const char* what) {
  bool ok = v.rank == rank;
  for (int d = 0; ok && d < rank; ++d) ok = v.shape[d] == expected[d];
  if (!ok) {
    std::string message = std::string("cpu: ") + what + " has shape ";
    message += shape_string(v.shape, v.rank);
    message += ", expected ";
    message += shape_string(expected, rank);
    fail(DX_SHAPE_MISMATCH, std::move(message));
  }
}

View input(const dx_kernel_call_t* call, int i, DLDataType t) {
  const std::string what = "input " + std::to_string(i);
  const View v = make_view(call->inputs[i], what.c_str());
  expect_dtype(v, t, what.c_str());
  return v;
}

View output(const dx_kernel_call_t* call, int i, DLDataType t) {
  const std::string what = "output " + std::to_string(i);
  const View v = make_view(call->outputs[i], what.c_str());
  expect_dtype(v, t, what.c_str());
  return v;
}

std::optional<View> gradient(const dx_kernel_call_t* call, int i, const View& like) {
  if (call->outputs[i] == nullptr) return std::nullopt;
  const View g = output(call, i, like.dtype);
  expect_shape(g, like.shape, like.rank, "gradient output");
  return g;
}

}  // namespace deepx::cpu::movement
