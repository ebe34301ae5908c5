// Elementwise kernels through the ABI: hand-computed values per op and dtype, broadcasting
// (incl. explicit stride-0 inputs and rank 0), non-contiguous and offset views, integer wrap and
// division, single rounding for f16/bf16, errors, empty tensors, in-place.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "deepx/reference/half.hpp"
#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

class Elementwise : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
};

TEST_F(Elementwise, HandComputedFloatCasesForEveryFloatDtype) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor a = TestTensor::of(t, {2, 2}, {1.5, -2, 0.25, 8});
    const TestTensor b = TestTensor::of(t, {2, 2}, {0.5, 4, -0.75, -2});
    TestTensor out(t, {2, 2});
    ASSERT_TRUE(ref.call("dx.add", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{2, 2, -0.5, 6}));
    ASSERT_TRUE(ref.call("dx.sub", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{1, -6, 1, 10}));
    ASSERT_TRUE(ref.call("dx.mul", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{0.75, -8, -0.1875, -16}));
    ASSERT_TRUE(ref.call("dx.div", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.get(0), 3);
    EXPECT_EQ(out.get(1), -0.5);
    EXPECT_EQ(out.get(3), -4);
    EXPECT_NEAR(out.get(2), -1.0 / 3.0, 2e-3);  // bit patterns: DivisionRoundsOnceToEachDtype
    ASSERT_TRUE(ref.call("dx.neg", {&a}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{-1.5, 2, -0.25, -8}));
    ASSERT_TRUE(ref.call("dx.relu", {&a}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{1.5, 0, 0.25, 8}));
  }
}

TEST_F(Elementwise, DivisionRoundsOnceToEachDtype) {
  // 0.25 / -0.75 = -1/3, rounded once to each dtype (hand-derived bit patterns).
  const TestTensor a64 = TestTensor::of(DType::kF64, {}, {0.25});
  const TestTensor b64 = TestTensor::of(DType::kF64, {}, {-0.75});
  TestTensor o64(DType::kF64, {});
  ASSERT_TRUE(ref.call("dx.div", {&a64, &b64}, {&o64}).ok());
  EXPECT_EQ(o64.get(0), -1.0 / 3.0);
  const TestTensor a16 = TestTensor::of(DType::kF16, {}, {0.25});
  const TestTensor b16 = TestTensor::of(DType::kF16, {}, {-0.75});
  TestTensor o16(DType::kF16, {});
  ASSERT_TRUE(ref.call("dx.div", {&a16, &b16}, {&o16}).ok());
  EXPECT_EQ(o16.get_bits16(0), 0xB555);  // -(1365/4096): 1/3 = 1.0101010101|01.. * 2^-2
  const TestTensor abf = TestTensor::of(DType::kBF16, {}, {0.25});
  const TestTensor bbf = TestTensor::of(DType::kBF16, {}, {-0.75});
  TestTensor obf(DType::kBF16, {});
  ASSERT_TRUE(ref.call("dx.div", {&abf, &bbf}, {&obf}).ok());
  EXPECT_EQ(obf.get_bits16(0), 0xBEAB);  // 1/3 = 1.0101010|1010.. * 2^-2 rounds up
}

TEST_F(Elementwise, F16AddRoundsOnceWithTiesToEven) {
  // 1 + 2^-11 is exactly half an ulp above 1: ties to even gives 1. (1 + 2^-10) + 2^-11 is half
  // an ulp above an odd value: rounds up to 1 + 2^-9.
  const TestTensor a = TestTensor::of(DType::kF16, {2}, {1.0, 1.0 + std::ldexp(1.0, -10)});
  const TestTensor b = TestTensor::of(DType::kF16, {2}, {std::ldexp(1.0, -11), std::ldexp(1.0, -11)});
  TestTensor out(DType::kF16, {2});
  ASSERT_TRUE(ref.call("dx.add", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.get_bits16(0), 0x3C00);
  EXPECT_EQ(out.get_bits16(1), 0x3C02);
}

TEST_F(Elementwise, FloatSpecialValues) {
  const TestTensor a = TestTensor::of(DType::kF32, {5}, {1, -1, 0, kInf, kNaN});
  const TestTensor b = TestTensor::of(DType::kF32, {5}, {0, 0, 0, kInf, 1});
  TestTensor out(DType::kF32, {5});
  ASSERT_TRUE(ref.call("dx.div", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.get(0), kInf);
  EXPECT_EQ(out.get(1), -kInf);
  EXPECT_TRUE(std::isnan(out.get(2)));
  EXPECT_TRUE(std::isnan(out.get(3)));
  EXPECT_TRUE(std::isnan(out.get(4)));
  ASSERT_TRUE(ref.call("dx.sub", {&a, &b}, {&out}).ok());
  EXPECT_TRUE(std::isnan(out.get(3)));  // Inf - Inf
}

TEST_F(Elementwise, ReluPropagatesNaNAndMapsNegativeZeroToPositiveZero) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor a = TestTensor::of(t, {6}, {-0.0, 0.0, -3, kNaN, -kInf, kInf});
    TestTensor out(t, {6});
    ASSERT_TRUE(ref.call("dx.relu", {&a}, {&out}).ok());
    EXPECT_EQ(out.get(0), 0.0);
    EXPECT_FALSE(std::signbit(out.get(0)));
    EXPECT_EQ(out.get(1), 0.0);
    EXPECT_EQ(out.get(2), 0.0);
    EXPECT_TRUE(std::isnan(out.get(3)));
    EXPECT_EQ(out.get(4), 0.0);
    EXPECT_EQ(out.get(5), kInf);
  }
}

TEST_F(Elementwise, ExpHandValues) {
  const TestTensor a = TestTensor::of(DType::kF64, {5}, {0, 1, -kInf, kInf, kNaN});
  TestTensor out(DType::kF64, {5});
  ASSERT_TRUE(ref.call("dx.exp", {&a}, {&out}).ok());
  EXPECT_EQ(out.get(0), 1.0);
  EXPECT_EQ(out.get(1), 2.718281828459045);  // e to 16 digits: the nearest double
  EXPECT_EQ(out.get(2), 0.0);
  EXPECT_EQ(out.get(3), kInf);
  EXPECT_TRUE(std::isnan(out.get(4)));
  // e rounded once: f32 0x402DF854, f16 0x4170 (2.71875), bf16 0x402E (2.71875).
  const TestTensor one32 = TestTensor::of(DType::kF32, {}, {1});
  TestTensor e32(DType::kF32, {});
  ASSERT_TRUE(ref.call("dx.exp", {&one32}, {&e32}).ok());
  EXPECT_EQ(static_cast<float>(e32.get(0)), std::bit_cast<float>(0x402DF854u));
  const TestTensor one16 = TestTensor::of(DType::kF16, {}, {1});
  TestTensor e16(DType::kF16, {});
  ASSERT_TRUE(ref.call("dx.exp", {&one16}, {&e16}).ok());
  EXPECT_EQ(e16.get_bits16(0), 0x4170);
  const TestTensor onebf = TestTensor::of(DType::kBF16, {}, {1});
  TestTensor ebf(DType::kBF16, {});
  ASSERT_TRUE(ref.call("dx.exp", {&onebf}, {&ebf}).ok());
  EXPECT_EQ(ebf.get_bits16(0), 0x402E);
  // Overflow to Inf in f16: exp(11.1) ~ 66171 > 65520.
  const TestTensor big = TestTensor::of(DType::kF16, {}, {11.1});
  ASSERT_TRUE(ref.call("dx.exp", {&big}, {&e16}).ok());
  EXPECT_EQ(e16.get_bits16(0), 0x7C00);
}

TEST_F(Elementwise, ExpOverEveryF16AndBf16PatternIsStdExpRoundedOnce) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    TestTensor in(t, {65536});
    for (std::int64_t i = 0; i < 65536; ++i) {
      const auto bits = static_cast<std::uint16_t>(i);
      std::memcpy(in.flat(i), &bits, 2);
    }
    TestTensor out(t, {65536});
    ASSERT_TRUE(ref.call("dx.exp", {&in}, {&out}).ok());
    for (std::int64_t i = 0; i < 65536; ++i) {
      const auto bits = static_cast<std::uint16_t>(i);
      const double x = t == DType::kF16 ? f16_to_f64(bits) : bf16_to_f64(bits);
      const double y = std::exp(x);
      const double got = out.get(i);
      if (std::isnan(y)) {
        ASSERT_TRUE(std::isnan(got)) << i;
        continue;
      }
      // The result is the nearest representable value: no neighbour is closer.
      const std::uint16_t g = out.get_bits16(i);
      ASSERT_FALSE(std::signbit(got)) << i;
      const double below = g > 0 ? (t == DType::kF16 ? f16_to_f64(g - 1) : bf16_to_f64(g - 1)) : got;
      const double above_bits_max = t == DType::kF16 ? 0x7C00 : 0x7F80;
      const double above = g < above_bits_max ? (t == DType::kF16 ? f16_to_f64(g + 1) : bf16_to_f64(g + 1)) : got;
      if (!std::isinf(got)) {
        ASSERT_LE(std::fabs(got - y), std::fabs(below - y)) << i;
        ASSERT_LE(std::fabs(got - y), std::fabs(above - y)) << i;
      }
    }
  }
}

TEST_F(Elementwise, IntegerHandCasesForEveryIntDtype) {
  for (DType t : kI) {
    SCOPED_TRACE(name_of(t));
    const TestTensor a = TestTensor::ints(t, {4}, {7, 9, 100, 6});
    const TestTensor b = TestTensor::ints(t, {4}, {2, 3, 7, 6});
    TestTensor out(t, {4});
    ASSERT_TRUE(ref.call("dx.add", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{9, 12, 107, 12}));
    ASSERT_TRUE(ref.call("dx.sub", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{5, 6, 93, 0}));
    ASSERT_TRUE(ref.call("dx.mul", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{14, 27, t == DType::kI8 ? 700 - 768 : (t == DType::kU8 ? 700 - 512 : 700), 36}));
    ASSERT_TRUE(ref.call("dx.div", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{3, 3, 14, 1}));
  }
}

TEST_F(Elementwise, IntegerDivisionTruncatesTowardZero) {
  const TestTensor a = TestTensor::ints(DType::kI32, {4}, {-7, 7, -7, 7});
  const TestTensor b = TestTensor::ints(DType::kI32, {4}, {2, -2, -2, 2});
  TestTensor out(DType::kI32, {4});
  ASSERT_TRUE(ref.call("dx.div", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{-3, -3, 3, 3}));
}

TEST_F(Elementwise, IntegerOverflowWraps) {
  struct Case { DType t; std::int64_t a, b, add, sub, mul; };
  const Case cases[] = {
      {DType::kI8, 127, 1, -128, 126, 127},
      {DType::kI8, -128, -1, 127, -127, -128},
      {DType::kU8, 255, 1, 0, 254, 255},
      {DType::kU8, 0, 1, 1, 255, 0},
      {DType::kU8, 16, 16, 32, 0, 0},
      {DType::kI16, 32767, 2, -32767, 32765, -2},
      {DType::kI32, 2147483647, 1, -2147483648LL, 2147483646, 2147483647},
      {DType::kI32, 65536, 65536, 131072, 0, 0},
      {DType::kI64, std::numeric_limits<std::int64_t>::max(), 1,
       std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max() - 1,
       std::numeric_limits<std::int64_t>::max()},
      {DType::kI64, std::int64_t{1} << 62, 4, std::int64_t{1} << 62 | 4, (std::int64_t{1} << 62) - 4, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(name_of(c.t)) + " " + std::to_string(c.a) + " " + std::to_string(c.b));
    const TestTensor a = TestTensor::ints(c.t, {}, {c.a});
    const TestTensor b = TestTensor::ints(c.t, {}, {c.b});
    TestTensor out(c.t, {});
    ASSERT_TRUE(ref.call("dx.add", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.get_int(0), c.add);
    ASSERT_TRUE(ref.call("dx.sub", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.get_int(0), c.sub);
    ASSERT_TRUE(ref.call("dx.mul", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.get_int(0), c.mul);
  }
}

TEST_F(Elementwise, IntMinDividedByMinusOneWrapsAndNegWraps) {
  struct Case { DType t; std::int64_t min; };
  for (const Case c : {Case{DType::kI8, -128}, Case{DType::kI16, -32768},
                       Case{DType::kI32, -2147483648LL},
                       Case{DType::kI64, std::numeric_limits<std::int64_t>::min()}}) {
    SCOPED_TRACE(name_of(c.t));
    const TestTensor a = TestTensor::ints(c.t, {2}, {c.min, 5});
    const TestTensor b = TestTensor::ints(c.t, {2}, {-1, -1});
    TestTensor out(c.t, {2});
    ASSERT_TRUE(ref.call("dx.div", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{c.min, -5}));
    ASSERT_TRUE(ref.call("dx.neg", {&a}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{c.min, -5}));
  }
  const TestTensor u = TestTensor::ints(DType::kU8, {3}, {0, 1, 200});
  TestTensor out(DType::kU8, {3});
  ASSERT_TRUE(ref.call("dx.neg", {&u}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 255, 56}));
}

TEST_F(Elementwise, IntegerDivisionByZeroIsAnArithmeticErrorAndWritesNothing) {
  for (DType t : kI) {
    SCOPED_TRACE(name_of(t));
    const TestTensor a = TestTensor::ints(t, {3}, {1, 2, 3});
    const TestTensor b = TestTensor::ints(t, {3}, {1, 0, 1});
    TestTensor out = TestTensor::ints(t, {3}, {42, 42, 42});
    const Status s = ref.call("dx.div", {&a, &b}, {&out});
    EXPECT_EQ(s.code, DX_ARITHMETIC_ERROR) << s.message;
    EXPECT_NE(s.message.find("zero"), std::string::npos);
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{42, 42, 42}));
  }
  // A broadcast zero divisor too.
  const TestTensor a = TestTensor::ints(DType::kI32, {2, 2}, {1, 2, 3, 4});
  const TestTensor zero = TestTensor::ints(DType::kI32, {}, {0});
  TestTensor out(DType::kI32, {2, 2});
  EXPECT_EQ(ref.call("dx.div", {&a, &zero}, {&out}).code, DX_ARITHMETIC_ERROR);
}

TEST_F(Elementwise, BroadcastingPatterns) {
  // (3,1) + (1,4) -> (3,4); (4,) + (3,4); rank-0 scalar + (2,3); (2,1,3) + (4,1).
  const TestTensor col = TestTensor::of(DType::kF32, {3, 1}, {10, 20, 30});
  const TestTensor row = TestTensor::of(DType::kF32, {1, 4}, {1, 2, 3, 4});
  TestTensor out(DType::kF32, {3, 4});
  ASSERT_TRUE(ref.call("dx.add", {&col, &row}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34}));

  const TestTensor vec = TestTensor::of(DType::kF32, {4}, {1, 2, 3, 4});
  const TestTensor mat = TestTensor::of(DType::kF32, {3, 4}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  ASSERT_TRUE(ref.call("dx.mul", {&mat, &vec}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{0, 0, 0, 0, 1, 2, 3, 4, 2, 4, 6, 8}));

  const TestTensor scalar = TestTensor::of(DType::kF64, {}, {2});
  const TestTensor m23 = TestTensor::of(DType::kF64, {2, 3}, {1, 2, 3, 4, 5, 6});
  TestTensor o23(DType::kF64, {2, 3});
  ASSERT_TRUE(ref.call("dx.sub", {&scalar, &m23}, {&o23}).ok());
  EXPECT_EQ(o23.values(), (std::vector<double>{1, 0, -1, -2, -3, -4}));
  ASSERT_TRUE(ref.call("dx.div", {&m23, &scalar}, {&o23}).ok());
  EXPECT_EQ(o23.values(), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));

  const TestTensor x = TestTensor::ints(DType::kI16, {2, 1, 3}, {1, 2, 3, 4, 5, 6});
  const TestTensor y = TestTensor::ints(DType::kI16, {4, 1}, {0, 10, 20, 30});
  TestTensor o(DType::kI16, {2, 4, 3});
  ASSERT_TRUE(ref.call("dx.add", {&x, &y}, {&o}).ok());
  std::vector<std::int64_t> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) expected.push_back(1 + 3 * i + k + 10 * j);
  EXPECT_EQ(o.int_values(), expected);
}

TEST_F(Elementwise, ExplicitStrideZeroInputEqualsMaterialisedInput) {
  // A (3,4) view with strides (0,1) over 4 stored values: every row is the same.
  TestTensor broadcast_view(DType::kF32, {3, 4}, {0, 1}, 0, 4);
  for (int j = 0; j < 4; ++j) broadcast_view.set(j, j + 1);
  const TestTensor materialised = TestTensor::of(DType::kF32, {3, 4}, {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
  const TestTensor other = TestTensor::of(DType::kF32, {3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  TestTensor got(DType::kF32, {3, 4});
  TestTensor want(DType::kF32, {3, 4});
  ASSERT_TRUE(ref.call("dx.mul", {&broadcast_view, &other}, {&got}).ok());
  ASSERT_TRUE(ref.call("dx.mul", {&materialised, &other}, {&want}).ok());
  EXPECT_EQ(got.values(), want.values());
  // A scalar broadcast by all-zero strides.
  TestTensor all_zero(DType::kI32, {2, 3}, {0, 0}, 0, 1);
  all_zero.set_int(0, 5);
  const TestTensor m = TestTensor::ints(DType::kI32, {2, 3}, {1, 2, 3, 4, 5, 6});
  TestTensor o(DType::kI32, {2, 3});
  ASSERT_TRUE(ref.call("dx.sub", {&m, &all_zero}, {&o}).ok());
  EXPECT_EQ(o.int_values(), (std::vector<std::int64_t>{-4, -3, -2, -1, 0, 1}));
}

TEST_F(Elementwise, TransposedSlicedAndOffsetViewsMatchCompactCopies) {
  // Storage of 5x6 f64 values; views into it:
  //  - a transposed (3,2) view: strides (1, 6) starting at element 7;
  //  - a sliced (2,3) view with step 2 along the last axis: strides (6, 2), offset 13.
  TestTensor transposed(DType::kF64, {3, 2}, {1, 6}, 7, 30);
  TestTensor sliced(DType::kF64, {2, 3}, {6, 2}, 13, 30);
  // Fill the storage through the transposed view's base: element s = storage index.
  for (std::int64_t s = 0; s < 30; ++s) {
    double v = static_cast<double>(s) * 0.5 - 3;
    std::memcpy(static_cast<std::byte*>(transposed.mutable_dl()->data) + s * 8, &v, 8);
    std::memcpy(static_cast<std::byte*>(sliced.mutable_dl()->data) + s * 8, &v, 8);
  }
  // Compact copies, hand-indexed: transposed[i][j] = storage[7 + i + 6j];
  // sliced[i][j] = storage[13 + 6i + 2j].
  std::vector<double> t_values, s_values;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) t_values.push_back((7 + i + 6 * j) * 0.5 - 3);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) s_values.push_back((13 + 6 * i + 2 * j) * 0.5 - 3);
  EXPECT_EQ(transposed.values(), t_values);
  const TestTensor t_compact = TestTensor::of(DType::kF64, {3, 2}, t_values);
  const TestTensor s_compact = TestTensor::of(DType::kF64, {2, 3}, s_values);
  // (3,2) x (2,3) has no broadcast; use sliced^T-shaped pairs: add transposed to itself, and
  // sub sliced from a compact row broadcast.
  TestTensor from_view(DType::kF64, {3, 2}), from_compact(DType::kF64, {3, 2});
  ASSERT_TRUE(ref.call("dx.add", {&transposed, &t_compact}, {&from_view}).ok());
  ASSERT_TRUE(ref.call("dx.add", {&t_compact, &t_compact}, {&from_compact}).ok());
  EXPECT_EQ(from_view.values(), from_compact.values());
  const TestTensor row = TestTensor::of(DType::kF64, {3}, {1, 2, 3});
  TestTensor sv(DType::kF64, {2, 3}), sc(DType::kF64, {2, 3});
  ASSERT_TRUE(ref.call("dx.sub", {&sliced, &row}, {&sv}).ok());
  ASSERT_TRUE(ref.call("dx.sub", {&s_compact, &row}, {&sc}).ok());
  EXPECT_EQ(sv.values(), sc.values());
  // A strided output: write into every other element of a buffer; the gaps stay untouched.
  TestTensor strided_out(DType::kF64, {2, 3}, {6, 2}, 1, 12);
  ASSERT_TRUE(ref.call("dx.exp", {&s_compact}, {&strided_out}).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(strided_out.get(i), std::exp(s_values[i]));
  const auto bytes = strided_out.storage_bytes();
  EXPECT_EQ(bytes[0], std::byte{0xAB});       // element 0 (before the offset) untouched
  EXPECT_EQ(bytes[2 * 8], std::byte{0xAB});   // element 2 (a gap) untouched
}

TEST_F(Elementwise, InPlaceOutputAliasingAnInput) {
  TestTensor a = TestTensor::of(DType::kF32, {2, 2}, {1, 2, 3, 4});
  const TestTensor b = TestTensor::of(DType::kF32, {2}, {10, 20});
  ASSERT_TRUE(ref.call("dx.add", {&a, &b}, {&a}).ok());
  EXPECT_EQ(a.values(), (std::vector<double>{11, 22, 13, 24}));
  ASSERT_TRUE(ref.call("dx.neg", {&a}, {&a}).ok());
  EXPECT_EQ(a.values(), (std::vector<double>{-11, -22, -13, -24}));
  EXPECT_TRUE(ref.find("dx.add", {DType::kF32, DType::kF32}, {DType::kF32})->desc.flags &
              DX_KERNEL_FLAG_INPLACE);
}

TEST_F(Elementwise, EmptyAndRankZeroTensors) {
  const TestTensor e1(DType::kF32, {0, 3});
  const TestTensor e2(DType::kF32, {1, 3});
  TestTensor eo(DType::kF32, {0, 3});
  EXPECT_TRUE(ref.call("dx.add", {&e1, &e2}, {&eo}).ok());
  EXPECT_TRUE(ref.call("dx.exp", {&e1}, {&eo}).ok());
  // Empty tensors may have null data.
  TestTensor null_data(DType::kI32, {4, 0});
  null_data.mutable_dl()->data = nullptr;
  TestTensor null_out(DType::kI32, {4, 0});
  null_out.mutable_dl()->data = nullptr;
  EXPECT_TRUE(ref.call("dx.div", {&null_data, &null_data}, {&null_out}).ok());
  const TestTensor s = TestTensor::of(DType::kBF16, {}, {3});
  TestTensor so(DType::kBF16, {});
  ASSERT_TRUE(ref.call("dx.mul", {&s, &s}, {&so}).ok());
  EXPECT_EQ(so.get(0), 9);
}

TEST_F(Elementwise, ShapeAndDtypeErrors) {
  const TestTensor a = TestTensor::of(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const TestTensor b = TestTensor::of(DType::kF32, {2, 2}, {1, 2, 3, 4});
  TestTensor out(DType::kF32, {2, 3});
  EXPECT_EQ(ref.call("dx.add", {&a, &b}, {&out}).code, DX_SHAPE_MISMATCH);  // no broadcast
  TestTensor wrong_out(DType::kF32, {3, 2});
  EXPECT_EQ(ref.call("dx.add", {&a, &a}, {&wrong_out}).code, DX_SHAPE_MISMATCH);
  TestTensor bigger_out(DType::kF32, {1, 2, 3});  // the output must be exactly the broadcast shape
  EXPECT_EQ(ref.call("dx.add", {&a, &a}, {&bigger_out}).code, DX_SHAPE_MISMATCH);
  EXPECT_EQ(ref.call("dx.neg", {&a}, {&wrong_out}).code, DX_SHAPE_MISMATCH);

  // Wrong dtype or arity through the raw calling convention of a registered kernel.
  const RegisteredKernel* add = ref.find("dx.add", {DType::kF32, DType::kF32}, {DType::kF32});
  ASSERT_NE(add, nullptr);
  const TestTensor i = TestTensor::ints(DType::kI32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(ref.call_raw(*add, {a.dl(), i.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(ref.call_raw(*add, {a.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(ref.call_raw(*add, {a.dl(), nullptr}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);
  TestTensor gpu = TestTensor::of(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  gpu.mutable_dl()->device.device_type = kDLCUDA;
  EXPECT_EQ(ref.call_raw(*add, {a.dl(), gpu.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);
  TestTensor null_data = TestTensor::of(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  null_data.mutable_dl()->data = nullptr;
  EXPECT_EQ(ref.call_raw(*add, {a.dl(), null_data.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);

  // No kernel exists for mixed dtypes or integer exp.
  EXPECT_EQ(ref.find("dx.add", {DType::kF32, DType::kF16}, {DType::kF32}), nullptr);
  EXPECT_EQ(ref.find("dx.exp", {DType::kI32}, {DType::kI32}), nullptr);
  EXPECT_EQ(ref.find("dx.relu", {DType::kI32}, {DType::kI32}), nullptr);
}

TEST_F(Elementwise, MalformedCallsAreErrorsNotCrashes) {
  const RegisteredKernel* neg = ref.find("dx.neg", {DType::kF32}, {DType::kF32});
  ASSERT_NE(neg, nullptr);
  const TestTensor a = TestTensor::of(DType::kF32, {2}, {1, 2});
  TestTensor out(DType::kF32, {2});
  const DLTensor* ins[] = {a.dl()};
  const DLTensor* outs[] = {out.dl()};
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.kernel_data = neg->desc.kernel_data;
  call.inputs = ins;
  call.outputs = outs;
  call.num_inputs = 1;
  call.num_outputs = 1;
  call.host = ref.fake().host();
  EXPECT_TRUE(take(call.host, neg->desc.forward(&call)).ok());

  dx_kernel_call_t small = call;
  small.struct_size = 8;
  EXPECT_EQ(take(call.host, neg->desc.forward(&small)).code, DX_INVALID_ARGUMENT);
  dx_kernel_call_t no_inputs = call;
  no_inputs.inputs = nullptr;
  EXPECT_EQ(take(call.host, neg->desc.forward(&no_inputs)).code, DX_INVALID_ARGUMENT);
  dx_kernel_call_t no_host = call;  // reported through the host that registered the kernel
  no_host.host = nullptr;
  no_host.num_outputs = 0;
  EXPECT_EQ(take(call.host, neg->desc.forward(&no_host)).code, DX_INVALID_ARGUMENT);

  TestTensor negative_dim(DType::kF32, {2});
  static std::int64_t bad_shape[] = {-2};
  negative_dim.mutable_dl()->shape = bad_shape;
  EXPECT_EQ(ref.call("dx.neg", {&negative_dim}, {&out}).code, DX_INVALID_ARGUMENT);
  TestTensor vector_lanes(DType::kF32, {2});
  vector_lanes.mutable_dl()->dtype.lanes = 4;
  EXPECT_EQ(ref.call_raw(*neg, {vector_lanes.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace deepx::ref::testing
