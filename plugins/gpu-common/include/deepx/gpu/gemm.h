// The portable tiled GEMM: C[b] = A[b] (M x K) * B[b] (K x N), any element strides (so
// transposes are free), batches broadcast through a Layout. HIP always uses it (Debian ships no
// rocBLAS); the CUDA plugin uses it for i8 x i8 -> i32 and when DEEPX_CUDA_GEMM=portable.
//
// A block of kThreads threads computes a BM x BN tile of C; each thread a TM x TN sub-tile.
// The K loop alternates two phases separated by barriers: `load` stages a BK slice of A and B
// in shared memory (converted to the accumulator type), `compute` multiplies it into the
// thread's registers; `store` writes the tile. The host-emulation test runs the phases thread
// by thread and compares with a naive product, so the tiling and edge logic is checked on CPUs.
#ifndef DEEPX_GPU_GEMM_H_
#define DEEPX_GPU_GEMM_H_

#include <stdint.h>

#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

/// Accumulator and product of one GEMM input type: f32 for f16/bf16/f32, f64 for f64,
/// wrapping i32 for i8.
template <class T>
struct GemmAcc {
  using type = typename Num<T>::C;
  static DXG_HD type load(T v) { return Num<T>::load(v); }
  static DXG_HD type mac(type acc, type a, type b) { return acc + a * b; }
};
template <>
struct GemmAcc<int8_t> {
  using type = int32_t;
  static DXG_HD int32_t load(int8_t v) { return v; }
  static DXG_HD int32_t mac(int32_t acc, int32_t a, int32_t b) {
    return static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(a * b));
  }
};

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  /// Element strides of the logical operands: A is M x K, B is K x N, C is M x N.
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, c_rs = 0, c_cs = 0;
  /// Batch positions -> element offsets: operand 0 = C, 1 = A, 2 = B.
  Layout batch;
};

template <class T, class Out>
struct GemmTile {
  static constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
  static constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
  static constexpr int kPad = 4;                          // spreads shared-memory banks
  using Acc = typename GemmAcc<T>::type;

  struct Shared {
    Acc a[BK][BM + kPad];
    Acc b[BK][BN + kPad];
  };
  struct Registers {
    Acc c[TM][TN];
  };

  GemmShape s;
  const T* a;
  const T* b;
  Out* c;

  DXG_HD void clear(Registers& r) const {
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) r.c[i][j] = Acc(0);
  }

  /// Thread t stages its share of A[tile_m.., k0..] and B[k0.., tile_n..]; out-of-range
  /// elements become 0. The faster-moving index follows the operand's unit stride, so
  /// neighbouring threads read neighbouring addresses (coalesced) in either layout.
  DXG_HD void load(Shared& sh, int64_t batch, int64_t tile_m, int64_t tile_n, int64_t k0,
                   int t) const {
    const int64_t a_base = layout_offset(s.batch, 1, batch);
    const int64_t b_base = layout_offset(s.batch, 2, batch);
    const bool a_k_fast = s.a_cs == 1;
    for (int e = t; e < BK * BM; e += kThreads) {
      const int kk = a_k_fast ? e % BK : e / BM;
      const int mm = a_k_fast ? e / BK : e % BM;
      const int64_t row = tile_m * BM + mm, col = k0 + kk;
      sh.a[kk][mm] = (row < s.m && col < s.k)
                         ? GemmAcc<T>::load(a[a_base + row * s.a_rs + col * s.a_cs])
                         : Acc(0);
    }
    const bool b_n_fast = s.b_cs == 1 || s.b_rs != 1;
    for (int e = t; e < BK * BN; e += kThreads) {
      const int kk = b_n_fast ? e / BN : e % BK;
      const int nn = b_n_fast ? e % BN : e / BK;
      const int64_t row = k0 + kk, col = tile_n * BN + nn;
      sh.b[kk][nn] = (row < s.k && col < s.n)
                         ? GemmAcc<T>::load(b[b_base + row * s.b_rs + col * s.b_cs])
                         : Acc(0);
    }
  }

  DXG_HD void compute(const Shared& sh, Registers& r, int t) const {
    const int ty = t / (BN / TN), tx = t % (BN / TN);
    for (int kk = 0; kk < BK; ++kk) {
      Acc af[TM], bf[TN];
      for (int i = 0; i < TM; ++i) af[i] = sh.a[kk][ty * TM + i];
      for (int j = 0; j < TN; ++j) bf[j] = sh.b[kk][tx + j * (BN / TN)];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) r.c[i][j] = GemmAcc<T>::mac(r.c[i][j], af[i], bf[j]);
    }
  }

  /// Rows ty*TM .. +TM of the tile; columns tx, tx + BN/TN, ... (interleaved, so a warp's
  /// stores to one row are contiguous).
  DXG_HD void store(const Registers& r, int64_t batch, int64_t tile_m, int64_t tile_n,
                    int t) const {
    const int64_t c_base = layout_offset(s.batch, 0, batch);
    const int ty = t / (BN / TN), tx = t % (BN / TN);
    for (int i = 0; i < TM; ++i) {
      const int64_t row = tile_m * BM + ty * TM + i;
      if (row >= s.m) continue;
      for (int j = 0; j < TN; ++j) {
        const int64_t col = tile_n * BN + tx + j * (BN / TN);
        if (col >= s.n) continue;
        c[c_base + row * s.c_rs + col * s.c_cs] = store_out(r.c[i][j]);
      }
    }
  }

  static DXG_HD Out store_out(Acc v) {
    if constexpr (sizeof(Out) == sizeof(int32_t) && static_cast<Acc>(0.5) == Acc(0)) {
      return static_cast<Out>(v);
    } else {
      return Num<Out>::store(static_cast<typename Num<Out>::C>(v));
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_GEMM_H_
