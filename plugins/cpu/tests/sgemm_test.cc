// The plugin's f32 GEMM (src/sgemm.cc) against a naive f64 product. The source is compiled into
// this test twice (CMakeLists.txt): as is (namespace deepx, the baseline build: OpenBLAS) and
// with -march=x86-64-v4 and the namespace renamed to deepx_x86_64_v4 (the AVX-512 kernel), as
// in the plugin's instruction-set variants. The kernel tests skip on CPUs without AVX-512.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../src/sgemm.h"

// The x86-64-v4 copy's entry points (same declarations, renamed namespace).
namespace deepx_x86_64_v4::cpu {
enum class SgemmPath { kAuto, kBlas, kKernel };
void sgemm_with(SgemmPath path, int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc);
bool sgemm_kernel_available();
}  // namespace deepx_x86_64_v4::cpu

namespace {

using deepx::cpu::SgemmPath;

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}

/// One product's operands with padded leading dims (the padding holds NaN, which must never
/// be read).
struct Case {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t pad = 0;  // extra leading-dim elements
  float alpha = 1, beta = 0;
  std::vector<float> a, b, c;
  int64_t lda = 0, ldb = 0, ldc = 0;

  Case(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, int64_t pad_, float alpha_,
       float beta_, uint32_t seed)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), pad(pad_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    lda = a_cols + pad;
    ldb = b_cols + pad;
    ldc = n + pad;
    a.assign(static_cast<size_t>(std::max<int64_t>(a_rows * lda, 1)), nan);
    b.assign(static_cast<size_t>(std::max<int64_t>(b_rows * ldb, 1)), nan);
    c.assign(static_cast<size_t>(std::max<int64_t>(m * ldc, 1)), nan);
    for (int64_t i = 0; i < a_rows; ++i)
      for (int64_t j = 0; j < a_cols; ++j) a[i * lda + j] = dist(rng);
    for (int64_t i = 0; i < b_rows; ++i)
      for (int64_t j = 0; j < b_cols; ++j) b[i * ldb + j] = dist(rng);
    if (beta != 0.0f) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = dist(rng);
    }  // beta = 0: C stays NaN, which must not leak
  }
  float a_at(int64_t i, int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  float b_at(int64_t p, int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }

  /// alpha op(A) op(B) + beta C in f64, and the sum of |terms| for the error bound.
  void reference(std::vector<double>& value, std::vector<double>& magnitude) const {
    value.assign(static_cast<size_t>(m * n), 0.0);
    magnitude.assign(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double t = static_cast<double>(a_at(i, p)) * b_at(p, j);
          sum += t;
          mag += std::fabs(t);
        }
        double v = static_cast<double>(alpha) * sum;
        mag *= std::fabs(alpha);
        if (beta != 0.0f) {
          v += static_cast<double>(beta) * c[i * ldc + j];
          mag += std::fabs(static_cast<double>(beta) * c[i * ldc + j]);
        }
        value[i * n + j] = v;
        magnitude[i * n + j] = mag;
      }
    }
  }
};

using SgemmFn = void (*)(SgemmPath, int, bool, bool, int64_t, int64_t, int64_t, float,
                         const float*, int64_t, const float*, int64_t, float, float*, int64_t);

void base_sgemm(SgemmPath path, int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc) {
  deepx::cpu::sgemm_with(path, threads, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void v4_sgemm(SgemmPath path, int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
              float* c, int64_t ldc) {
  deepx_x86_64_v4::cpu::sgemm_with(static_cast<deepx_x86_64_v4::cpu::SgemmPath>(path), threads,
                                   ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// Runs `fn` on a copy of the case and checks every element against the f64 product (relative
/// to the sum of |terms|, f32 accumulation over k: a few k ulps at most) and that the padding
/// of C is untouched.
std::vector<float> run_and_check(SgemmFn fn, SgemmPath path, int threads, const Case& cs) {
  std::vector<float> c = cs.c;
  fn(path, threads, cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha, cs.a.data(), cs.lda, cs.b.data(),
     cs.ldb, cs.beta, c.data(), cs.ldc);
  std::vector<double> want, magnitude;
  cs.reference(want, magnitude);
  const double eps = std::numeric_limits<float>::epsilon();
  const std::string where = "ta=" + std::to_string(cs.ta) + " tb=" + std::to_string(cs.tb) +
                            " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) +
                            " k=" + std::to_string(cs.k) + " pad=" + std::to_string(cs.pad) +
                            " alpha=" + std::to_string(cs.alpha) +
                            " beta=" + std::to_string(cs.beta);
  int bad = 0;
  for (int64_t i = 0; i < cs.m && bad < 5; ++i) {
    for (int64_t j = 0; j < cs.ldc && bad < 5; ++j) {
      const float got = c[i * cs.ldc + j];
      if (j >= cs.n) {  // padding: untouched NaN (or the input value)
        if (!(std::isnan(got) || got == cs.c[i * cs.ldc + j])) {
          ADD_FAILURE() << where << ": padding of C written at " << i << "," << j;
          ++bad;
        }
        continue;
      }
      const double w = want[i * cs.n + j];
      const double tol = (2.0 * static_cast<double>(cs.k) + 4.0) * eps * magnitude[i * cs.n + j] + 1e-30;
      if (!(std::fabs(got - w) <= tol)) {
        ADD_FAILURE() << where << ": C(" << i << "," << j << ") = " << got << ", want " << w
                      << " (tolerance " << tol << ")";
        ++bad;
      }
    }
  }
  return c;
}

bool bit_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() &&
         std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

constexpr int64_t kEdgeDims[] = {1, 13, 31, 32, 33, 100, 255, 257};  // k also 1000 below

constexpr int64_t kEdgeDepths[] = {1, 13, 32, 33, 100, 257};

/// Every ta/tb and m, n, k from the lists, with alpha, beta and the leading-dim padding varied.
template <size_t M, size_t K>
void sweep(SgemmFn fn, SgemmPath path, const int64_t (&dims)[M], const int64_t (&depths)[K]) {
  uint32_t seed = 1;
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    for (int64_t m : dims) {
      for (int64_t n : dims) {
        for (int64_t k : depths) {
          // Vary the pad, alpha and beta with the shape so that every combination is hit.
          const int64_t pad = (m + n + k) % 3 == 0 ? 5 : 0;
          const float alpha = (m + k) % 2 == 0 ? 1.0f : ((m + n) % 5 == 0 ? 0.0f : 0.75f);
          const float beta = n % 3 == 0 ? 0.0f : (n % 3 == 1 ? 1.0f : -0.5f);
          const Case cs(ta, tb, m, n, k, pad, alpha, beta, seed++);
          run_and_check(fn, path, 0, cs);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(Sgemm, BaselineBuildMatchesF64Product) {
  EXPECT_FALSE(deepx::cpu::sgemm_kernel_available());
  // OpenBLAS itself: fewer shapes, the wrapper's handling of ld, alpha, beta and k is the point.
  constexpr int64_t kDims[] = {1, 13, 33, 100};
  constexpr int64_t kDepths[] = {1, 33};
  sweep(&base_sgemm, SgemmPath::kAuto, kDims, kDepths);
}

TEST(Sgemm, KernelMatchesF64ProductOnEveryEdge) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  ASSERT_TRUE(deepx_x86_64_v4::cpu::sgemm_kernel_available());
  sweep(&v4_sgemm, SgemmPath::kKernel, kEdgeDims, kEdgeDepths);
}

TEST(Sgemm, KernelLargeAndBlockedShapes) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  // k above the k block (several blocks accumulate in C), n above the n block, m and n odd.
  uint32_t seed = 100;
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    const Case cs(ta, tb, 100, 1000, 1000, 3, 1.0f, t == 3 ? 0.5f : 0.0f, seed++);
    run_and_check(&v4_sgemm, SgemmPath::kKernel, 0, cs);
  }
  const Case tall(false, true, 1000, 257, 255, 0, -2.0f, 1.0f, seed++);
  run_and_check(&v4_sgemm, SgemmPath::kKernel, 0, tall);
}

TEST(Sgemm, KernelResultDoesNotDependOnThreadCount) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  uint32_t seed = 200;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{257, 500, 700},
                         {1000, 100, 800}, {64, 3136, 576}, {33, 65, 1025},
                         // n split at 16-column steps: parts ending in 16/32-wide panels
                         {64, 80, 300}, {48, 272, 130}, {40, 112, 96}}) {
    for (int t = 0; t < 4; ++t) {
      const Case cs((t & 1) != 0, (t & 2) != 0, m, n, k, 0, 1.0f, 0.0f, seed++);
      const std::vector<float> one = run_and_check(&v4_sgemm, SgemmPath::kKernel, 1, cs);
      for (int threads : {2, 3, 4}) {
        std::vector<float> many = cs.c;
        v4_sgemm(SgemmPath::kKernel, threads, cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha,
                 cs.a.data(), cs.lda, cs.b.data(), cs.ldb, cs.beta, many.data(), cs.ldc);
        EXPECT_TRUE(bit_equal(one, many)) << "m=" << m << " n=" << n << " k=" << k << " t=" << t
                                          << ": " << threads << " threads differ from 1";
      }
    }
  }
}

TEST(Sgemm, EmptyProductsScaleC) {
  for (SgemmFn fn : {&base_sgemm, &v4_sgemm}) {
    if (fn != &base_sgemm && !cpu_has_avx512()) continue;
    std::vector<float> c = {1, 2, 3, 4, 5, 6};
    const float a = 7, b = 8;
    fn(SgemmPath::kKernel, 0, false, false, 2, 3, 0, 1.0f, &a, 1, &b, 3, 2.0f, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>{2, 4, 6, 8, 10, 12}));
    c.assign(6, std::numeric_limits<float>::quiet_NaN());
    fn(SgemmPath::kKernel, 0, false, false, 2, 3, 0, 1.0f, &a, 1, &b, 3, 0.0f, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>(6, 0.0f)));
    // m = 0 / n = 0: nothing is touched.
    fn(SgemmPath::kKernel, 0, false, false, 0, 3, 4, 1.0f, &a, 4, &b, 3, 0.0f, nullptr, 3);
    fn(SgemmPath::kKernel, 0, false, false, 3, 0, 4, 1.0f, &a, 4, &b, 1, 0.0f, nullptr, 1);
  }
}

TEST(Sgemm, KernelPropagatesNanAndInfLikeADotProduct) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const float inf = std::numeric_limits<float>::infinity();
  for (int t = 0; t < 4; ++t) {
    Case cs((t & 1) != 0, (t & 2) != 0, 40, 70, 600, 0, 1.0f, 0.0f, 300 + t);
    auto set_a = [&](int64_t i, int64_t p, float v) { (cs.ta ? cs.a[p * cs.lda + i] : cs.a[i * cs.lda + p]) = v; };
    auto set_b = [&](int64_t p, int64_t j, float v) { (cs.tb ? cs.b[j * cs.ldb + p] : cs.b[p * cs.ldb + j]) = v; };
    set_a(3, 500, std::numeric_limits<float>::quiet_NaN());  // row 3: NaN everywhere
    set_b(10, 20, inf);                                     // column 20: +-Inf (or NaN with the NaN row)
    set_a(7, 10, 0.0f);                                     // 0 * Inf = NaN in (7, 20)
    set_a(0, 100, 1.0f);                                    // (0, 30): Inf in the first k block
    set_b(100, 30, inf);
    set_a(0, 400, 1.0f);                                    // ... and -Inf in the second: NaN
    set_b(400, 30, -inf);
    std::vector<float> c = cs.c;
    v4_sgemm(SgemmPath::kKernel, 0, cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f,
                                     cs.a.data(), cs.lda, cs.b.data(), cs.ldb, 0.0f, c.data(),
                                     cs.ldc);
    for (int64_t i = 0; i < cs.m; ++i) {
      for (int64_t j = 0; j < cs.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < cs.k; ++p) sum += static_cast<double>(cs.a_at(i, p)) * cs.b_at(p, j);
        const float got = c[i * cs.ldc + j];
        if (std::isnan(sum)) {
          EXPECT_TRUE(std::isnan(got)) << "t=" << t << " (" << i << "," << j << ")";
        } else if (std::isinf(sum)) {
          EXPECT_EQ(got, static_cast<float>(sum)) << "t=" << t << " (" << i << "," << j << ")";
        } else {
          EXPECT_TRUE(std::isfinite(got)) << "t=" << t << " (" << i << "," << j << ")";
        }
      }
    }
    EXPECT_TRUE(std::isnan(c[3 * cs.ldc + 0]));
    EXPECT_TRUE(std::isnan(c[7 * cs.ldc + 20]));
    EXPECT_TRUE(std::isnan(c[0 * cs.ldc + 30]));
    EXPECT_TRUE(std::isinf(c[0 * cs.ldc + 20]));
  }
}

TEST(Sgemm, AutoChoiceMatchesF64ProductOnBenchShapes) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  // The bench's product shapes, scaled down to stay fast: linear (x W^T), attention (q k^T,
  // p v), the im2col GEMM of conv2d, a square product.
  uint32_t seed = 400;
  for (auto [ta, tb, m, n, k] : {std::tuple<bool, bool, int64_t, int64_t, int64_t>{false, true, 512, 256, 256},
                                 {false, true, 64, 512, 64},
                                 {false, false, 64, 64, 512},
                                 {false, false, 64, 784, 576},
                                 {true, false, 256, 64, 512},
                                 {false, false, 300, 300, 300}}) {
    const Case cs(ta, tb, m, n, k, 0, 1.0f, 0.0f, seed++);
    run_and_check(&v4_sgemm, SgemmPath::kAuto, 0, cs);
  }
}

}  // namespace
