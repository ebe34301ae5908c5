// Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw ("Parallel
// random numbers: as easy as 1, 2, 3", SC'11), as Random123 defines it: ten rounds of two
// 32x32->64 multiplications with the key bumped by the Weyl constants between rounds. Written
// from the paper's definition for the CPU plugin (no code shared with the reference); checked
// against Random123's known-answer vectors in tests/movement_random_test.cc. Header-only and
// free of plugin dependencies so the tests can include it directly.
#ifndef DEEPX_PLUGINS_CPU_PHILOX_H_
#define DEEPX_PLUGINS_CPU_PHILOX_H_

#include <array>
#include <cstdint>

namespace deepx::cpu {

struct Philox4x32x10 {
  static constexpr uint32_t kMultiplierA = 0xD2511F53u;
  static constexpr uint32_t kMultiplierB = 0xCD9E8D57u;
  static constexpr uint32_t kWeylA = 0x9E3779B9u;  // golden ratio
  static constexpr uint32_t kWeylB = 0xBB67AE85u;  // sqrt(3) - 1

  using Counter = std::array<uint32_t, 4>;
  using Key = std::array<uint32_t, 2>;

  /// The 4 output words for `counter` under `key`.
  static Counter generate(Counter counter, Key key) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
      const uint64_t product_a = static_cast<uint64_t>(kMultiplierA) * c0;
      const uint64_t product_b = static_cast<uint64_t>(kMultiplierB) * c2;
      const uint32_t next0 = static_cast<uint32_t>(product_b >> 32) ^ c1 ^ k0;
      const uint32_t next1 = static_cast<uint32_t>(product_b);
      const uint32_t next2 = static_cast<uint32_t>(product_a >> 32) ^ c3 ^ k1;
      const uint32_t next3 = static_cast<uint32_t>(product_a);
      c0 = next0;
      c1 = next1;
      c2 = next2;
      c3 = next3;
      k0 += kWeylA;  // the bump after the last round is unused
      k1 += kWeylB;
    }
    return Counter{c0, c1, c2, c3};
  }
};

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_PHILOX_H_
