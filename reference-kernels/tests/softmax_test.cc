// dx.softmax: hand values, rows summing to 1, stability for huge and all-negative logits,
// axes, NaN, rank 0, empty, in-place, strided views, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

class Softmax : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  Status softmax(const TestTensor& in, const TestTensor& out, std::int64_t axis) {
    return ref.call("dx.softmax", {&in}, {&out}, {attr_i64("axis", axis)});
  }
};

TEST_F(Softmax, HandComputedValues) {
  // softmax([0, ln 2]) = [1/3, 2/3]; softmax([x, x, x, x]) = 1/4 each.
  const TestTensor x = TestTensor::of(DType::kF64, {2, 4}, {0, std::log(2.0), 0, std::log(2.0), 5, 5, 5, 5});
  TestTensor y(DType::kF64, {2, 4});
  ASSERT_TRUE(softmax(x, y, -1).ok());
  EXPECT_NEAR(y.get(0), 1.0 / 6, 1e-15);  // [1, 2, 1, 2] / 6
  EXPECT_NEAR(y.get(1), 2.0 / 6, 1e-15);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(y.get(i), 0.25);
  // Along axis 0: columns [0, 5]: e^0 / (e^0 + e^5).
  ASSERT_TRUE(softmax(x, y, 0).ok());
  EXPECT_NEAR(y.get(0), 1 / (1 + std::exp(5.0)), 1e-16);
  EXPECT_NEAR(y.get(4), std::exp(5.0) / (1 + std::exp(5.0)), 1e-15);
}

TEST_F(Softmax, RowsSumToOneInEveryDtype) {
  std::vector<double> values;
  for (int i = 0; i < 3 * 7; ++i) values.push_back(std::sin(i * 1.7) * 8);
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor x = TestTensor::of(t, {3, 7}, values);
    TestTensor y(t, {3, 7});
    ASSERT_TRUE(softmax(x, y, 1).ok());
    const double tolerance = t == DType::kF64 ? 1e-15 : t == DType::kF32 ? 1e-6 : t == DType::kF16 ? 4e-3 : 3e-2;
    for (int r = 0; r < 3; ++r) {
      double s = 0;
      for (int c = 0; c < 7; ++c) {
        EXPECT_GE(y.get(r * 7 + c), 0);
        s += y.get(r * 7 + c);
      }
      EXPECT_NEAR(s, 1.0, tolerance);
    }
  }
}

TEST_F(Softmax, NumericallyStableForHugeAndAllNegativeLogits) {
  const TestTensor x = TestTensor::of(DType::kF32, {3, 2}, {1000, 1000, -1000, -1001, 88, 89});
  TestTensor y(DType::kF32, {3, 2});
  ASSERT_TRUE(softmax(x, y, -1).ok());
  EXPECT_EQ(y.get(0), 0.5);
  EXPECT_EQ(y.get(1), 0.5);
  EXPECT_FLOAT_EQ(static_cast<float>(y.get(2)), static_cast<float>(1 / (1 + std::exp(-1.0))));
  EXPECT_FLOAT_EQ(static_cast<float>(y.get(4)), static_cast<float>(1 / (1 + std::exp(1.0))));
  const TestTensor h = TestTensor::of(DType::kF16, {2}, {60000, -60000});
  TestTensor hy(DType::kF16, {2});
  ASSERT_TRUE(softmax(h, hy, 0).ok());
  EXPECT_EQ(hy.get(0), 1.0);
  EXPECT_EQ(hy.get(1), 0.0);
}

TEST_F(Softmax, NaNAndInfinities) {
  const TestTensor x = TestTensor::of(DType::kF64, {3, 3}, {1, kNaN, 2, -kInf, 0, 0, -kInf, -kInf, -kInf});
  TestTensor y(DType::kF64, {3, 3});
  ASSERT_TRUE(softmax(x, y, 1).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(y.get(i)));  // a NaN poisons its row
  EXPECT_EQ(y.get(3), 0.0);                                       // -inf -> 0
  EXPECT_EQ(y.get(4), 0.5);
  for (int i = 6; i < 9; ++i) EXPECT_TRUE(std::isnan(y.get(i)));  // all -inf: 0/0, as PyTorch
}

TEST_F(Softmax, RankZeroEmptyInPlaceAndViews) {
  const TestTensor s = TestTensor::of(DType::kBF16, {}, {3.5});
  TestTensor so(DType::kBF16, {});
  ASSERT_TRUE(softmax(s, so, -1).ok());
  EXPECT_EQ(so.get(0), 1.0);
  ASSERT_TRUE(softmax(s, so, 0).ok());
  EXPECT_EQ(softmax(s, so, 1).code, DX_OUT_OF_RANGE);

  const TestTensor e(DType::kF32, {0, 4});
  TestTensor eo(DType::kF32, {0, 4});
  EXPECT_TRUE(softmax(e, eo, 1).ok());
  EXPECT_TRUE(softmax(e, eo, 0).ok());

  TestTensor inplace = TestTensor::of(DType::kF64, {1, 2}, {0, std::log(3.0)});
  ASSERT_TRUE(softmax(inplace, inplace, 1).ok());
  EXPECT_NEAR(inplace.get(0), 0.25, 1e-16);
  EXPECT_NEAR(inplace.get(1), 0.75, 1e-16);

  // A transposed view gives the compact copy's result.
  TestTensor view(DType::kF64, {2, 3}, {1, 2}, 1, 7);  // element (i,j) at 1 + i + 2j
  const std::vector<double> compact_values = {0.5, -1, 2, 3, 0, -2};
  for (int i = 0; i < 6; ++i) view.set(i, compact_values[i]);
  const TestTensor compact = TestTensor::of(DType::kF64, {2, 3}, compact_values);
  TestTensor a(DType::kF64, {2, 3}), b(DType::kF64, {2, 3});
  ASSERT_TRUE(softmax(view, a, 1).ok());
  ASSERT_TRUE(softmax(compact, b, 1).ok());
  EXPECT_EQ(a.values(), b.values());
  ASSERT_TRUE(softmax(view, a, 0).ok());
  ASSERT_TRUE(softmax(compact, b, 0).ok());
  EXPECT_EQ(a.values(), b.values());
}

TEST_F(Softmax, DefaultAxisAndErrors) {
  const TestTensor x = TestTensor::of(DType::kF32, {2, 2}, {0, 0, 1, 1});
  TestTensor y(DType::kF32, {2, 2});
  ASSERT_TRUE(ref.call("dx.softmax", {&x}, {&y}).ok());  // axis unset: -1
  EXPECT_EQ(y.values(), (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  EXPECT_EQ(softmax(x, y, 2).code, DX_OUT_OF_RANGE);
  EXPECT_EQ(softmax(x, y, -3).code, DX_OUT_OF_RANGE);
  TestTensor wrong(DType::kF32, {4});
  EXPECT_EQ(softmax(x, wrong, 0).code, DX_SHAPE_MISMATCH);
  EXPECT_EQ(ref.call("dx.softmax", {&x}, {&y}, {attr_f64("axis", 1.0)}).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(ref.find("dx.softmax", {DType::kI32}, {DType::kI32}), nullptr);
}

TEST_F(Softmax, AllocationFailureIsOutOfMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator aborts on a 128 TiB allocation instead of failing it";
#endif
  // A line of 2^44 elements (a stride-0 view of one stored value, also for the output): the
  // reference's f64 line buffer cannot be allocated, which must surface as DX_OUT_OF_MEMORY.
  TestTensor huge_in(DType::kF32, {std::int64_t{1} << 44}, {0}, 0, 1);
  TestTensor huge_out(DType::kF32, {std::int64_t{1} << 44}, {0}, 0, 1);
  EXPECT_EQ(softmax(huge_in, huge_out, 0).code, DX_OUT_OF_MEMORY);
}

}  // namespace
}  // namespace deepx::ref::testing
