// The CPU plugin's one f32 GEMM entry point: row-major C = alpha op(A) op(B) + beta C.
//
// Where the instruction-set variant has AVX-512 (x86-64-v4, or -march=native on such a CPU)
// and the product is big enough to pay for packing, a GotoBLAS/BLIS-structured kernel of ours
// runs (sgemm.cc); everywhere else, and for small or skinny products, OpenBLAS's cblas_sgemm.
// Debian's OpenBLAS 0.3.21 does not recognise recent AVX-512 Xeons and runs its Haswell (AVX2)
// kernels there, at about a third of the FMA peak: hence a kernel of our own.
//
// Our kernel's results do not depend on the thread count: threads split C into disjoint
// blocks, and every element is summed over k in the same fixed order (kc blocks in sequence),
// so one and two threads give bit-identical results.
#ifndef DEEPX_PLUGINS_CPU_SGEMM_H_
#define DEEPX_PLUGINS_CPU_SGEMM_H_

#include <cstdint>
#include <type_traits>

namespace deepx::cpu {

/// Row-major C (m x n, leading dim ldc) = alpha op(A) op(B) + beta C, where op(A) is m x k
/// (A stored k x m when `ta`), op(B) is k x n (B stored n x k when `tb`). beta = 0 never reads
/// C (NaN there does not leak); k = 0 or alpha = 0 scale C by beta (0 when beta = 0), as BLAS.
/// m, n, k and the leading dims must stay below 2^31 (OpenBLAS's int).
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// Which implementation sgemm_with() uses. kAuto is sgemm()'s choice.
enum class SgemmPath { kAuto, kBlas, kKernel };

/// sgemm() with the implementation and thread count forced (threads <= 0: the default), for
/// tests and benchmarks. kKernel falls back to kBlas where the variant has no kernel
/// (sgemm_kernel_available() is false).
void sgemm_with(SgemmPath path, int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc);

/// True when this instruction-set variant was compiled with our AVX-512 kernel.
bool sgemm_kernel_available();

/// True when sgemm() of this shape runs our kernel: then its result does not depend on the
/// thread count, and several threads may call it at once (each with its own C).
bool sgemm_runs_kernel(int64_t m, int64_t n, int64_t k);

/// While one is alive, sgemm() on the constructing thread uses that thread alone (for callers
/// that already run independent products on several threads, e.g. batches of a matmul).
class SgemmSingleThreaded {
 public:
  SgemmSingleThreaded();
  ~SgemmSingleThreaded();
  SgemmSingleThreaded(const SgemmSingleThreaded&) = delete;
  SgemmSingleThreaded& operator=(const SgemmSingleThreaded&) = delete;

 private:
  int saved_;
};

/// The f64 product through OpenBLAS's cblas_dgemm, with sgemm()'s contract for empty products
/// (m = 0 or n = 0: nothing; k = 0: C = beta C, 0 when beta = 0).
void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

/// The plugin's one GEMM entry point (matmul, linear, conv2d, attention): sgemm() for f32,
/// dgemm() for f64.
template <class F>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, F alpha, const F* a, int64_t lda,
          const F* b, int64_t ldb, F beta, F* c, int64_t ldc) {
  static_assert(std::is_same_v<F, float> || std::is_same_v<F, double>, "f32 or f64");
  if constexpr (std::is_same_v<F, float>) {
    sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_SGEMM_H_
