// Compute ceilings measured in the same run (peak.h). Each loop keeps its accumulators in
// registers and issues independent multiply-adds back to back, more chains than the FMA latency
// times the number of FMA pipes, so the only limit is how many the core retires per cycle. The
// loops are compiled for their ISA with target attributes and chosen at run time by what the CPU
// reports, as the CPU plugin chooses its ISA variant.
#include "peak.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace deepx::bench {
namespace {

// Enough independent chains for 2 FMA pipes of latency 4 (Intel and AMD Zen 4 alike), with room.
constexpr int kChains = 16;

volatile double g_sink = 0;  // keeps the loops' results alive

// One FMA loop per ISA and type: `chains` accumulators acc = acc * a + b, then their sum. The
// intrinsics differ per ISA and must be compiled under that ISA's target attribute (a template
// cannot carry one), so a macro writes the loop once. AVX2 has 16 ymm registers: 12 chains leave
// room for the two operands; AVX-512 has 32.
#define DEEPX_FMA_PEAK_LOOP(name, isa, vec, scalar, lanes, chains, set1, fmadd, add, storeu) \
  __attribute__((target(isa))) double name(int64_t iters) {                             \
    volatile scalar va = scalar(0.999999), vb = scalar(1e-7);                             \
    const vec a = set1(va), b = set1(vb);                                                 \
    vec acc[chains];                                                                      \
    for (int k = 0; k < chains; ++k) acc[k] = set1(static_cast<scalar>(k) * scalar(1e-3)); \
    for (int64_t i = 0; i < iters; ++i) {                                                 \
      _Pragma("GCC unroll 16") for (int k = 0; k < chains; ++k) acc[k] = fmadd(acc[k], a, b); \
    }                                                                                     \
    vec s = acc[0];                                                                       \
    for (int k = 1; k < chains; ++k) s = add(s, acc[k]);                                  \
    scalar out[lanes];                                                                    \
    storeu(out, s);                                                                       \
    return out[0];                                                                        \
  }

constexpr int kChainsAvx2 = 12;
DEEPX_FMA_PEAK_LOOP(loop_avx512_f32, "avx512f", __m512, float, 16, kChains, _mm512_set1_ps,
                    _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
DEEPX_FMA_PEAK_LOOP(loop_avx512_f64, "avx512f", __m512d, double, 8, kChains, _mm512_set1_pd,
                    _mm512_fmadd_pd, _mm512_add_pd, _mm512_storeu_pd)
DEEPX_FMA_PEAK_LOOP(loop_avx2_f32, "avx2,fma", __m256, float, 8, kChainsAvx2, _mm256_set1_ps,
                    _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)
DEEPX_FMA_PEAK_LOOP(loop_avx2_f64, "avx2,fma", __m256d, double, 4, kChainsAvx2, _mm256_set1_pd,
                    _mm256_fmadd_pd, _mm256_add_pd, _mm256_storeu_pd)
#undef DEEPX_FMA_PEAK_LOOP

// vdpbf16ps: 32 bf16 products summed pairwise into 16 f32 lanes, 64 FLOPs an instruction.
__attribute__((target("avx512f,avx512bf16"))) double loop_avx512bf16(int64_t iters) {
  volatile float va = 1e-3f;
  const __m512 x = _mm512_set1_ps(va);
  const __m512bh a = _mm512_cvtne2ps_pbh(x, x), b = _mm512_cvtne2ps_pbh(x, x);
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  }
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0];
}

// AMX: four 16x16 f32 accumulator tiles, each fed by a 16x32 bf16 A tile and a B tile of 16
// rows of 32 bf16 pairs: every tdpbf16ps is 16 * 16 * 32 * 2 = 16384 FLOPs.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);
constexpr double kAmxFlopsPerIteration = 4.0 * 16 * 16 * 32 * 2;

__attribute__((target("amx-tile,amx-bf16"))) double loop_amx(int64_t iters) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  alignas(64) uint16_t operand[16 * 32];
  std::fill(std::begin(operand), std::end(operand), uint16_t{0x3A83});  // bf16 ~1e-3
  alignas(64) float out[16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

bool cpu_flag(const char* flag) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) return (line + " ").find(std::string(" ") + flag + " ") != std::string::npos;
  }
  return false;
}

// Linux gates AMX tile data per process: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (18).
bool request_amx(std::string& why_not) {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return true;
  why_not = "the CPU has AMX but the kernel refused ARCH_REQ_XCOMP_PERM";
  return false;
}

// Best GFLOP/s of a loop on `threads` threads: each thread runs `iters` iterations of `loop`,
// worth `flops_per_iter` FLOPs; the time is the whole team's, barrier to barrier.
double best_gflops(int threads, double flops_per_iter, const std::function<double(int64_t)>& loop) {
  using Clock = std::chrono::steady_clock;
  auto timed = [&](int team, int64_t iters) {
    double seconds = 0;
#pragma omp parallel num_threads(team)
    {
#pragma omp barrier
      Clock::time_point t0;
#pragma omp master
      t0 = Clock::now();
      const double r = loop(iters);
#pragma omp barrier
#pragma omp master
      {
        seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        g_sink = g_sink + r;
      }
    }
    return seconds;
  };
  // Calibrated on one thread, where a busy machine disturbs the least: about 0.1 s a run.
  int64_t iters = 1 << 12;
  while (timed(1, iters) < 0.02 && iters < (int64_t{1} << 40)) iters *= 4;
  const double per_iter = std::max(timed(1, iters) / static_cast<double>(iters), 1e-15);
  iters = std::max<int64_t>(iters, static_cast<int64_t>(0.1 / per_iter));
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double s = timed(threads, iters);
    if (s > 0) best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / s / 1e9);
  }
  return best;
}

}  // namespace

ComputePeaks measure_compute_peaks(int threads) {
  ComputePeaks p;
  p.threads = threads;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    p.f32 = {best_gflops(threads, kChains * 16 * 2.0, loop_avx512_f32), "avx512f"};
    p.f64 = {best_gflops(threads, kChains * 8 * 2.0, loop_avx512_f64), "avx512f"};
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.f32 = {best_gflops(threads, kChainsAvx2 * 8 * 2.0, loop_avx2_f32), "avx2+fma"};
    p.f64 = {best_gflops(threads, kChainsAvx2 * 4 * 2.0, loop_avx2_f64), "avx2+fma"};
  }
  const bool has_amx = cpu_flag("amx_tile") && cpu_flag("amx_bf16");
  if (has_amx && request_amx(p.bf16_note)) {
    p.bf16 = {best_gflops(threads, kAmxFlopsPerIteration, loop_amx), "amx-bf16"};
  } else if (cpu_flag("avx512_bf16") && __builtin_cpu_supports("avx512f")) {
    p.bf16 = {best_gflops(threads, kChains * 64.0, loop_avx512bf16), "avx512_bf16"};
  }
  return p;
}

std::string describe_peaks(const ComputePeaks& one, const ComputePeaks& all) {
  auto line = [&](const char* what, const Peak& a, const Peak& b) {
    char buf[256];
    if (a.isa.empty()) {
      std::snprintf(buf, sizeof buf, "- %s peak: the CPU has no unit for it\n", what);
    } else {
      std::snprintf(buf, sizeof buf, "- %s peak (%s): %d thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n",
                    what, a.isa.c_str(), one.threads, a.gflops, all.threads, b.gflops);
    }
    return std::string(buf);
  };
  std::string s = line("f32 FMA", one.f32, all.f32) + line("f64 FMA", one.f64, all.f64) +
                  line("bf16 matrix", one.bf16, all.bf16);
  if (!one.bf16_note.empty()) s += "- (bf16: " + one.bf16_note + ")\n";
  return s;
}

}  // namespace deepx::bench
