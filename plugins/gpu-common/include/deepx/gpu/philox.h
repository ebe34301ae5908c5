// Philox-4x32-10 and the element -> counter mapping of the random ops, identical to the
// reference (docs/ops.md, "Random ops"), so every GPU produces the reference's
// streams bit for bit:
//   key = (seed lo, seed hi); block(b) = Philox(counter = (b lo, b hi, 0, 0), key)
//   uniform/dropout: element i uses word i % 4 of block offset + i / 4
//   normal:          element i uses words 2(i % 2), 2(i % 2) + 1 of block offset + i / 2
//   u = (w + 0.5) * 2^-32, computed and combined in f64, rounded once to the output dtype.
#ifndef DEEPX_GPU_PHILOX_H_
#define DEEPX_GPU_PHILOX_H_

#include <math.h>
#include <stdint.h>

#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

struct Philox4 {
  uint32_t w[4];
};

/// High 32 bits of a 32x32 product, portably (both compilers turn this into one mul.hi).
DXG_HD uint32_t mul_hi32(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}

DXG_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                             uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint32_t hi0 = mul_hi32(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = mul_hi32(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// A random stream: the key from `seed`, the first block from `offset` (attrs as u64).
struct PhiloxStream {
  uint32_t k0 = 0, k1 = 0;
  uint64_t offset = 0;

  static PhiloxStream make(uint64_t seed, uint64_t offset) {
    PhiloxStream s;
    s.k0 = static_cast<uint32_t>(seed);
    s.k1 = static_cast<uint32_t>(seed >> 32);
    s.offset = offset;
    return s;
  }
  DXG_HD Philox4 block(uint64_t b) const {
    return philox4x32_10(static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0, 0, k0, k1);
  }
  /// u in (0, 1) of element i for uniform and dropout.
  DXG_HD double uniform(uint64_t i) const { return unit(block(offset + i / 4).w[i % 4]); }
  /// Standard normal z of element i (Box-Muller, cosine branch), in f64.
  DXG_HD double normal(uint64_t i) const {
    const Philox4 words = block(offset + i / 2);
    const unsigned first = 2u * static_cast<unsigned>(i % 2);
    const double u1 = unit(words.w[first]), u2 = unit(words.w[first + 1]);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.141592653589793238462643383279502884 * u2);
  }
  static DXG_HD double unit(uint32_t w) { return (static_cast<double>(w) + 0.5) * 0x1p-32; }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_PHILOX_H_
