// Random ops: the Philox-4x32-10 known-answer vectors, the documented element -> counter
// mapping recomputed independently here, determinism, offsets, distribution sanity, dropout's
// mask and scaling, and dropout's gradient through the finite-difference check.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "grad_check.hpp"

namespace deepx::ref::testing {
namespace {

class Random : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
};

TEST_F(Random, PhiloxKnownAnswers) {
  // Random123 kat_vectors for philox4x32_10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The README's mapping, written out again: element i -> word i % 4 of block offset + i / 4.
double documented_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const std::uint64_t b = offset + i / 4;
  const auto words = philox4x32_10({static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32), 0, 0},
                                   {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return (words[i % 4] + 0.5) / 4294967296.0;
}

TEST_F(Random, UniformFollowsTheDocumentedMapping) {
  const std::uint64_t seed = 0x123456789abcdefULL;
  TestTensor y(DType::kF64, {3, 7}), y32(DType::kF32, {3, 7}), again(DType::kF64, {3, 7}), shifted(DType::kF64, {13});
  const std::vector<dx_attr_t> attrs = {attr_f64("low", -2), attr_f64("high", 3),
                                        attr_i64("seed", static_cast<std::int64_t>(seed)), attr_i64("offset", 5)};
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&y}, attrs).ok());
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&again}, attrs).ok());
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&y32}, attrs).ok());
  EXPECT_EQ(y.values(), again.values());  // deterministic
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double expected = -2 + 5 * documented_uniform(seed, 5, static_cast<std::uint64_t>(i));
    EXPECT_EQ(y.get(i), expected) << i;
    EXPECT_EQ(y32.get(i), static_cast<double>(static_cast<float>(expected))) << i;  // rounded once
    EXPECT_GE(y.get(i), -2);
    EXPECT_LT(y.get(i), 3);
  }
  // offset + 2 blocks = the same stream 8 elements later.
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&shifted}, {attr_f64("low", -2), attr_f64("high", 3),
                                                      attr_i64("seed", static_cast<std::int64_t>(seed)), attr_i64("offset", 7)}).ok());
  for (std::int64_t i = 0; i < 13; ++i) EXPECT_EQ(shifted.get(i), y.get(i + 8));
  // A different seed gives a different stream.
  TestTensor other(DType::kF64, {3, 7});
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&other}, {attr_f64("low", -2), attr_f64("high", 3), attr_i64("seed", 1), attr_i64("offset", 5)}).ok());
  EXPECT_NE(other.values(), y.values());
  // Defaults: [0, 1), seed 0, offset 0; a rough mean check.
  TestTensor big(DType::kF32, {4096});
  ASSERT_TRUE(ref.call("dx.uniform", {}, {&big}, {}).ok());
  double mean = 0;
  for (double v : big.values()) mean += v / 4096;
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_EQ(big.get(6), static_cast<double>(static_cast<float>(documented_uniform(0, 0, 6))));
}

TEST_F(Random, NormalFollowsTheDocumentedMapping) {
  TestTensor y(DType::kF64, {4096});
  ASSERT_TRUE(ref.call("dx.normal", {}, {&y}, {attr_f64("mean", 1), attr_f64("std", 2), attr_i64("seed", 42), attr_i64("offset", 3)}).ok());
  double mean = 0, var = 0;
  for (double v : y.values()) mean += v / 4096;
  for (double v : y.values()) var += (v - mean) * (v - mean) / 4096;
  EXPECT_NEAR(mean, 1, 0.1);
  EXPECT_NEAR(std::sqrt(var), 2, 0.1);
  // Element 5: words 2, 3 of block offset + 5 / 2.
  const auto words = philox4x32_10({3 + 2, 0, 0, 0}, {42, 0});
  const double u1 = (words[2] + 0.5) / 4294967296.0, u2 = (words[3] + 0.5) / 4294967296.0;
  EXPECT_EQ(y.get(5), 1 + 2 * (std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2)));
}

TEST_F(Random, Dropout) {
  TestTensor x(DType::kF32, {1000});
  for (std::int64_t i = 0; i < 1000; ++i) x.set(i, 1 + i % 7);
  TestTensor y(DType::kF32, {1000}), mask(DType::kBool, {1000});
  const std::vector<dx_attr_t> attrs = {attr_f64("p", 0.25), attr_i64("seed", 9), attr_i64("offset", 0), attr_bool("training", true)};
  ASSERT_TRUE(ref.call("dx.dropout", {&x}, {&y, &mask}, attrs).ok());
  int kept = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    const bool keep = documented_uniform(9, 0, static_cast<std::uint64_t>(i)) >= 0.25;
    EXPECT_EQ(mask.get_int(i), keep ? 1 : 0);
    EXPECT_EQ(y.get(i), keep ? static_cast<double>(static_cast<float>(x.get(i) / 0.75)) : 0.0);
    kept += keep;
  }
  EXPECT_NEAR(kept, 750, 60);
  ASSERT_TRUE(ref.call("dx.dropout", {&x}, {&y, &mask}, {attr_f64("p", 0.25), attr_none("seed"), attr_none("offset"), attr_bool("training", false)}).ok());
  EXPECT_EQ(y.values(), x.values());
  for (std::int64_t v : mask.int_values()) EXPECT_EQ(v, 1);
  ASSERT_TRUE(ref.call("dx.dropout", {&x}, {&y, &mask}, {attr_f64("p", 1.0)}).ok());
  for (double v : y.values()) EXPECT_EQ(v, 0);
  EXPECT_EQ(ref.call("dx.dropout", {&x}, {&y, &mask}, {attr_f64("p", 1.5)}).code, DX_INVALID_ARGUMENT);

  std::mt19937_64 rng(1);
  const TestTensor g = random_tensor(rng, {6, 5}, -2, 2);
  check_gradients(ref, "dx.dropout", {&g}, {{{6, 5}}, {{6, 5}, DType::kBool}}, attrs);
  check_gradients(ref, "dx.dropout", {&g}, {{{6, 5}}, {{6, 5}, DType::kBool}},
                  {attr_f64("p", 0.3), attr_i64("seed", 1), attr_i64("offset", 0), attr_bool("training", false)});
}

}  // namespace
}  // namespace deepx::ref::testing
