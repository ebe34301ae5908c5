// The f32 GEMM of the CPU plugin (sgemm.h): an AVX-512 kernel in the GotoBLAS/BLIS structure
// where the instruction-set variant has AVX-512F, OpenBLAS elsewhere and for small products.
//
// The kernel's loops, outermost first (each thread runs them over its own block of C):
//   jc: nc columns of C at a time (nc about 768, balanced),
//   pc: kc of the k dim at a time (kc about 384, balanced; blocks done in order),
//       pack B[pc:pc+kc, jc:jc+nc] into 48-column micro-panels, [p][48] each (L2-resident:
//       kc * nc * 4 bytes, about 1.1 MiB of the 2 MiB L2),
//   ic: 64 rows at a time: pack A[ic:ic+64, pc:pc+kc] into 8-row micro-panels, [p][8] each
//       (12 KiB: the one in use stays in L1); then for each micro-panel
//   jr: one 8 x 48 C tile per B micro-panel: 24 zmm accumulators, per k step 3 aligned loads
//       of B, 8 broadcasts of A and 24 FMAs; the last panel of a block may be 16 or 32 wide
//       (a narrower kernel, no wasted FMAs), rows past m compute on zero padding and are not
//       stored, columns past n are masked at the store.
// Packing absorbs transposition and leading dims (8x8 AVX transposes for the transposed
// cases). alpha and beta apply at the store: the first kc block writes alpha acc (beta = 0:
// C is never read) or alpha acc + beta C, later blocks add alpha acc to C.
//
// Threads (the std::thread fork/join of dense.h, so nothing spins next to the OpenBLAS calls
// and fork/join loops around; see fork_join) split C along n (or m when m is the larger side)
// at tile boundaries; each element is owned by one thread and summed in the same k order,
// so results do not depend on the thread count. Packing buffers belong to the calling thread
// (thread_local, grown on demand, never zero-filled) and are handed to the helpers.
#include "simd.h"  // first: <immintrin.h> with its warning set-up

#include "sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <string_view>
#include <vector>

#include "dense.h"
#include "transpose8x8.h"

namespace deepx::cpu {
namespace {

void blas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(lda, 1)), b,
              static_cast<int>(std::max<int64_t>(ldb, 1)), beta, c,
              static_cast<int>(std::max<int64_t>(ldc, 1)));
}

/// DEEPX_CPU_SGEMM=openblas sends every f32 product to OpenBLAS (to compare the two in one
/// build); unset or anything else: sgemm() chooses. Read once.
bool openblas_forced() {
  static const bool forced = [] {
    const char* v = std::getenv("DEEPX_CPU_SGEMM");
    return v != nullptr && std::string_view(v) == "openblas";
  }();
  return forced;
}

/// C = beta C (C = 0 when beta = 0, without reading C): the products with nothing to add.
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

#if defined(__AVX512F__)

constexpr int kMr = 8;         // rows of a C tile
constexpr int kNr = 48;        // columns of a C tile (3 zmm)
constexpr int64_t kKc = 384;   // k block: A micro-panel 8 x 384 x 4 = 12 KiB in L1
constexpr int64_t kNc = 768;   // n block: packed B 384 x 768 x 4 = 1.1 MiB in L2
constexpr int64_t kMc = 64;    // rows of A packed at once (8 micro-panels, 96 KiB)
constexpr int64_t kSplitCols = 16;  // the unit in which threads split n

/// Products from which the kernel runs on more than one thread (std::thread start and join
/// cost some tens of microseconds, about 2^21 FMAs at this kernel's speed).
constexpr int64_t kThreadedFmas = int64_t{1} << 22;

/// A 64-byte aligned float array that grows on demand and is never zero-filled.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats() { std::free(data_); }
  float* reserve(int64_t count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
    if (bytes > capacity_) {
      std::free(data_);
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      capacity_ = data_ != nullptr ? bytes : 0;
      if (data_ == nullptr) throw std::bad_alloc();
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

struct Workspace {
  AlignedFloats a, b;
};

/// The calling thread's workspaces, one per thread of its calls (grown on demand).
std::vector<std::unique_ptr<Workspace>>& workspaces(int count) {
  thread_local std::vector<std::unique_ptr<Workspace>> slots;
  while (static_cast<int>(slots.size()) < count) slots.push_back(std::make_unique<Workspace>());
  return slots;
}

/// dst[p * width + r] = src[r * ld + p] for p < depth and r < rows; zero for rows <= r < width
/// (width a multiple of 8). Packs a micro-panel whose lines run along k in memory.
void pack_transposed(const float* src, int64_t ld, int rows, int width, int64_t depth,
                     float* dst) {
  for (int r0 = 0; r0 < width; r0 += 8) {
    const int live = std::clamp(rows - r0, 0, 8);
    int64_t p = 0;
    for (; p + 8 <= depth; p += 8) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) {
        v[r] = r < live ? _mm256_loadu_ps(src + (r0 + r) * ld + p) : _mm256_setzero_ps();
      }
      transpose8x8_ps(v);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(dst + (p + q) * width + r0, v[q]);
    }
    for (; p < depth; ++p) {
      for (int r = 0; r < 8; ++r) dst[p * width + r0 + r] = r < live ? src[(r0 + r) * ld + p] : 0.0f;
    }
  }
}

/// Packs the rows [0, rows) of op(A) = A^T (A stored depth x rows, lines `ld` apart) into
/// 8-row micro-panels (panel q at dst + q 8 depth, [p][8], zero past `rows`), reading A line by
/// line: a micro-panel at a time would use half a cache line per line and lose the other half.
void pack_a_lines(const float* src, int64_t ld, int64_t rows, int64_t depth, float* dst) {
  const int64_t panels = (rows + kMr - 1) / kMr;
  for (int64_t p = 0; p < depth; ++p) {
    const float* s = src + p * ld;
    for (int64_t q = 0; q < panels; ++q) {
      float* d = dst + q * kMr * depth + p * kMr;
      const int64_t live = std::min<int64_t>(kMr, rows - q * kMr);
      if (live == kMr) {
        _mm256_store_ps(d, _mm256_loadu_ps(s + q * kMr));
      } else {
        for (int r = 0; r < kMr; ++r) d[r] = r < live ? s[q * kMr + r] : 0.0f;
      }
    }
  }
}

/// Packs B[0:depth, 0:cols] (rows `ld` apart, unit column stride) into 48-column micro-panels
/// (panel q at dst + q 48 depth, [p][width], the last one 16 or 32 wide when narrower),
/// reading B row by row: sequential reads that the hardware prefetchers follow, where a panel at
/// a time would hop between rows a page apart.
void pack_b_rows(const float* src, int64_t ld, int64_t cols, int64_t depth, float* dst) {
  const int64_t panels = (cols + kNr - 1) / kNr;
  for (int64_t p = 0; p < depth; ++p) {
    const float* s = src + p * ld;
    for (int64_t q = 0; q < panels; ++q) {
      const int live_cols = static_cast<int>(std::min<int64_t>(kNr, cols - q * kNr));
      const int width = (live_cols + 15) / 16 * 16;
      float* d = dst + q * kNr * depth + p * width;
      for (int v = 0; v < width; v += 16) {
        const int live = std::clamp(live_cols - v, 0, 16);
        const __mmask16 mask = static_cast<__mmask16>((1u << live) - 1u);
        // Masked-off lanes are not read (no fault past the end of a row).
        _mm512_store_ps(d + v, _mm512_maskz_loadu_ps(mask, s + q * kNr + v));
      }
    }
  }
}

/// What a tile store does with C.
enum class Store {
  kOverwrite,   // C = alpha acc (first k block, beta = 0: C is not read)
  kScale,       // C = alpha acc + beta C (first k block)
  kAccumulate,  // C = alpha acc + C (later k blocks)
};

/// One C tile of `rows` (<= 8) x `cols` (<= 16 NV) from packed A [p][8] and packed B
/// [p][16 NV] over `depth` k steps.
template <int NV>
void micro_kernel(int64_t depth, const float* __restrict ap, const float* __restrict bp,
                  float* c, int64_t ldc, int rows, int cols, float alpha, float beta,
                  Store mode) {
  __m512 acc[kMr][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  if (mode != Store::kOverwrite) {
    for (int r = 0; r < rows; ++r) {
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * v), _MM_HINT_T0);
    }
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < depth; ++p) {
    __m512 b[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_ps(bp + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512 a = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
    ap += kMr;
    bp += 16 * NV;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      const int live = std::min(cols - 16 * v, 16);
      if (live <= 0) break;
      const __mmask16 mask = static_cast<__mmask16>(live == 16 ? 0xFFFFu : (1u << live) - 1u);
      float* cp = c + r * ldc + 16 * v;
      __m512 out;
      if (mode == Store::kOverwrite) {
        out = _mm512_mul_ps(va, acc[r][v]);
      } else if (mode == Store::kScale) {
        out = _mm512_fmadd_ps(va, acc[r][v], _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask, cp)));
      } else {
        out = _mm512_fmadd_ps(va, acc[r][v], _mm512_maskz_loadu_ps(mask, cp));
      }
      _mm512_mask_storeu_ps(cp, mask, out);
    }
  }
}

/// The operands of one product (row-major, as sgemm()).
struct Product {
  bool ta, tb;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
};

/// Splits `total` into equal blocks of at most `limit`, rounded up to a multiple of `unit`.
int64_t balanced_block(int64_t total, int64_t limit, int64_t unit) {
  const int64_t blocks = (total + limit - 1) / limit;
  const int64_t size = (total + blocks - 1) / blocks;
  return (size + unit - 1) / unit * unit;
}

/// The k block size: depends on k alone, so every element is summed in the same order
/// whatever the thread split.
int64_t k_block(int64_t k) { return balanced_block(k, kKc, 8); }

/// Buffer sizes (floats) a thread needs for a block of C `cols` wide.
int64_t b_buffer_floats(int64_t k, int64_t cols) {
  const int64_t nc = balanced_block(cols, kNc, kNr);
  return std::min<int64_t>(k_block(k), k) * nc;
}
int64_t a_buffer_floats(int64_t k) { return std::min<int64_t>(k_block(k), k) * kMc; }

/// C[m0:m1, n0:n1] of the product, on the calling thread.
void run_block(const Product& pr, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* abuf,
               float* bbuf) {
  const int64_t kc_step = k_block(pr.k);
  const int64_t nc_step = balanced_block(n1 - n0, kNc, kNr);
  for (int64_t jc = n0; jc < n1; jc += nc_step) {
    const int64_t nc = std::min(nc_step, n1 - jc);
    const int64_t panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < pr.k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, pr.k - pc);
      if (pr.tb) {
        for (int64_t jp = 0; jp < panels; ++jp) {
          const int64_t j = jc + jp * kNr;
          const int cols = static_cast<int>(std::min<int64_t>(kNr, nc - jp * kNr));
          const int width = (cols + 15) / 16 * 16;
          pack_transposed(pr.b + j * pr.ldb + pc, pr.ldb, cols, width, kc, bbuf + jp * kNr * kc);
        }
      } else {
        pack_b_rows(pr.b + pc * pr.ldb + jc, pr.ldb, nc, kc, bbuf);
      }
      const Store mode = pc > 0 ? Store::kAccumulate
                                : (pr.beta == 0.0f ? Store::kOverwrite : Store::kScale);
      for (int64_t ic0 = m0; ic0 < m1; ic0 += kMc) {
        const int64_t mc = std::min(kMc, m1 - ic0);
        if (pr.ta) {
          pack_a_lines(pr.a + pc * pr.lda + ic0, pr.lda, mc, kc, abuf);
        } else {
          for (int64_t q = 0; q * kMr < mc; ++q) {
            const int rows = static_cast<int>(std::min<int64_t>(kMr, mc - q * kMr));
            pack_transposed(pr.a + (ic0 + q * kMr) * pr.lda + pc, pr.lda, rows, kMr, kc,
                            abuf + q * kMr * kc);
          }
        }
        for (int64_t ic = ic0; ic < ic0 + mc; ic += kMr) {
          const int rows = static_cast<int>(std::min<int64_t>(kMr, m1 - ic));
          const float* ap = abuf + (ic - ic0) * kc;
          for (int64_t jp = 0; jp < panels; ++jp) {
            const int64_t j = jc + jp * kNr;
            const int cols = static_cast<int>(std::min<int64_t>(kNr, nc - jp * kNr));
            const float* bp = bbuf + jp * kNr * kc;
            float* cp = pr.c + ic * pr.ldc + j;
            switch ((cols + 15) / 16) {
              case 3:
                micro_kernel<3>(kc, ap, bp, cp, pr.ldc, rows, cols, pr.alpha, pr.beta, mode);
                break;
              case 2:
                micro_kernel<2>(kc, ap, bp, cp, pr.ldc, rows, cols, pr.alpha, pr.beta, mode);
                break;
              default:
                micro_kernel<1>(kc, ap, bp, cp, pr.ldc, rows, cols, pr.alpha, pr.beta, mode);
                break;
            }
          }
        }
      }
    }
  }
}

/// The kernel over the whole product on `threads` threads (<= 0: as many as pay).
void kernel_sgemm(const Product& pr, int threads) {
  const int64_t tiles_m = (pr.m + kMr - 1) / kMr, tiles_n = (pr.n + kNr - 1) / kNr;
  if (threads <= 0) threads = pr.m * pr.n * pr.k >= kThreadedFmas ? available_threads() : 1;
  // Split the larger side (in elements); one thread when neither side has a tile per thread.
  // n is cut at multiples of 16 columns (not of the 48-column tile): each part ends with a
  // 16- or 32-wide panel at worst, and the parts stay within 16 columns of each other (n = 512
  // on 2 threads: 256 + 256 rather than 240 + 272 columns, a 12 % longer critical path).
  bool split_n = pr.n >= pr.m ? tiles_n >= threads : tiles_m < threads;
  const int64_t unit = split_n ? kSplitCols : kMr;
  const int64_t tiles = split_n ? (pr.n + kSplitCols - 1) / kSplitCols : tiles_m;
  const int parts = static_cast<int>(std::min<int64_t>(threads, split_n ? tiles_n : tiles_m));
  auto range = [&](int part, int64_t total) {
    const int64_t begin = std::min(total, tiles * part / parts * unit);
    const int64_t end = std::min(total, tiles * (part + 1) / parts * unit);
    return std::pair<int64_t, int64_t>{begin, end};
  };
  // Buffers for every part, allocated here (a helper thread must not throw).
  auto& slots = workspaces(parts);
  std::vector<float*> abufs(static_cast<size_t>(parts)), bbufs(static_cast<size_t>(parts));
  for (int part = 0; part < parts; ++part) {
    const int64_t cols = split_n ? range(part, pr.n).second - range(part, pr.n).first : pr.n;
    abufs[part] = slots[part]->a.reserve(a_buffer_floats(pr.k));
    bbufs[part] = slots[part]->b.reserve(std::max<int64_t>(b_buffer_floats(pr.k, cols), 1));
  }
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      const int p = static_cast<int>(part);
      if (split_n) {
        const auto [n0, n1] = range(p, pr.n);
        if (n0 < n1) run_block(pr, 0, pr.m, n0, n1, abufs[p], bbufs[p]);
      } else {
        const auto [m0, m1] = range(p, pr.m);
        if (m0 < m1) run_block(pr, m0, m1, 0, pr.n, abufs[p], bbufs[p]);
      }
    }
  };
  if (parts <= 1) {
    body(0, parts);
  } else {
    fork_join(parts, kForkJoinThreshold, body);
  }
}

/// Whether sgemm() uses the kernel. Measured on this box (one thread, CPU time): the kernel
/// beats OpenBLAS 0.3.21's Haswell path from 32^3 up (1.4x there, 1.7x at 128^3; 16 x 256 x 64
/// 1.4x); below 16 rows or columns most of a tile would be padding, and below 32^3 the packing
/// is not repaid.
bool kernel_pays(int64_t m, int64_t n, int64_t k) {
  return m >= 16 && n >= 16 && k >= 16 && m * n * k >= int64_t{32} * 32 * 32;
}

#endif  // __AVX512F__

}  // namespace

namespace {
/// The calling thread's thread limit for sgemm() (0: the default; SgemmSingleThreaded sets 1).
int& sgemm_thread_limit() {
  thread_local int limit = 0;
  return limit;
}
}  // namespace

SgemmSingleThreaded::SgemmSingleThreaded() : saved_(sgemm_thread_limit()) {
  sgemm_thread_limit() = 1;
}
SgemmSingleThreaded::~SgemmSingleThreaded() { sgemm_thread_limit() = saved_; }

bool sgemm_runs_kernel(int64_t m, int64_t n, int64_t k) {
#if defined(__AVX512F__)
  return !openblas_forced() && kernel_pays(m, n, k);
#else
  (void)m;
  (void)n;
  (void)k;
  return false;
#endif
}

bool sgemm_kernel_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void sgemm_with(SgemmPath path, int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
#if defined(__AVX512F__)
  if (path == SgemmPath::kAuto) path = kernel_pays(m, n, k) ? SgemmPath::kKernel : SgemmPath::kBlas;
  if (path == SgemmPath::kKernel) {
    kernel_sgemm({ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, threads);
    return;
  }
#endif
  (void)path;
  (void)threads;  // OpenBLAS uses its own thread count
  blas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm_with(openblas_forced() ? SgemmPath::kBlas : SgemmPath::kAuto, sgemm_thread_limit(), ta,
             tb, m, n, k, alpha,
             a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
    }
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(lda, 1)), b,
              static_cast<int>(std::max<int64_t>(ldb, 1)), beta, c,
              static_cast<int>(std::max<int64_t>(ldc, 1)));
}

}  // namespace deepx::cpu
