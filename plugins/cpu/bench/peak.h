// Compute ceilings of the machine the bench runs on, measured in the same run: the FMA peak of
// the widest vector ISA the CPU has (a register-resident loop of independent FMAs, f32 and f64)
// and the bf16 peak of its matrix units (AMX tiles where the CPU and the kernel allow them,
// AVX512_BF16 dot products where not). Each is measured on a given number of OpenMP threads, so
// a bench row compares with the ceiling of its own thread count (docs/performance-method.md).
#pragma once

#include <string>

namespace deepx::bench {

/// One compute ceiling: GFLOP/s and the instructions that reached it ("" when the CPU has none).
struct Peak {
  double gflops = 0;
  std::string isa;
};

/// The ceilings at one thread count.
struct ComputePeaks {
  int threads = 0;
  Peak f32;   ///< f32 FMA (avx512f zmm, else avx2+fma ymm, else none)
  Peak f64;   ///< f64 FMA, same ISA
  Peak bf16;  ///< bf16 products with f32 accumulation: AMX tiles, else AVX512_BF16, else none
  std::string bf16_note;  ///< why a faster bf16 unit was not used (e.g. AMX refused by the kernel)
};

/// Measures every ceiling on `threads` OpenMP threads, taking the best of five short runs
/// (about 0.1 s each; a peak is a best case by definition). Runs on the calling thread's OpenMP
/// team; never throws.
ComputePeaks measure_compute_peaks(int threads);

/// One line per ceiling, for the bench header: "f32 FMA peak (avx512f): 1 thread 117.2 GFLOP/s...".
std::string describe_peaks(const ComputePeaks& one, const ComputePeaks& all);

}  // namespace deepx::bench
