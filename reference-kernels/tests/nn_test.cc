// dx.log_softmax, dx.linear, dx.layer_norm, dx.rms_norm, dx.embedding, dx.cross_entropy:
// hand-computed values, identities, optional inputs, errors, and their gradients through the
// finite-difference check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "grad_check.hpp"

namespace deepx::ref::testing {
namespace {

using Shape = std::vector<std::int64_t>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class Nn : public ::testing::Test {
 protected:
  Reference ref;
  std::mt19937_64 rng{99};
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  TestTensor rand(Shape s, double lo = -2, double hi = 2) { return random_tensor(rng, std::move(s), lo, hi); }
};

TEST_F(Nn, LogSoftmax) {
  for (DType t : kF) {
    const TestTensor x = TestTensor::of(t, {2, 3}, {1, 2, 3, 1000, 1000, kNaN});
    TestTensor y(t, {2, 3}), s(t, {2, 3});
    ASSERT_TRUE(ref.call("dx.log_softmax", {&x}, {&y}, {attr_i64("axis", -1)}).ok());
    ASSERT_TRUE(ref.call("dx.softmax", {&x}, {&s}, {attr_i64("axis", -1)}).ok());
    const double lse = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
    EXPECT_NEAR(y.get(0), -2 - lse, t == DType::kF64 ? 1e-15 : 2e-2);
    EXPECT_NEAR(std::exp(y.get(1)), s.get(1), t == DType::kF64 ? 1e-15 : 1e-2);
    for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(y.get(i)));  // NaN poisons its line
  }
  const TestTensor big = TestTensor::of(DType::kF64, {2}, {-1000, 0});
  TestTensor y(DType::kF64, {2});
  ASSERT_TRUE(ref.call("dx.log_softmax", {&big}, {&y}, {}).ok());
  EXPECT_EQ(y.get(0), -1000);  // no underflow to -Inf
  const TestTensor x = rand({3, 4});
  check_gradients(ref, "dx.log_softmax", {&x}, {{{3, 4}}}, {attr_i64("axis", 0)});
  check_gradients(ref, "dx.log_softmax", {&x}, {{{3, 4}}}, {});
}

TEST_F(Nn, Linear) {
  const TestTensor x = TestTensor::of(DType::kF32, {2}, {1, 2});
  const TestTensor w = TestTensor::of(DType::kF32, {3, 2}, {1, 0, 0, 1, 1, 1});
  const TestTensor b = TestTensor::of(DType::kF32, {3}, {10, 20, 30});
  TestTensor y(DType::kF32, {3});
  ASSERT_TRUE(ref.call("dx.linear", {&x, &w, &b}, {&y}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{11, 22, 33}));
  ASSERT_TRUE(ref.call("dx.linear", {&x, &w, nullptr}, {&y}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{1, 2, 3}));
  TestTensor wrong(DType::kF32, {2});
  EXPECT_EQ(ref.call("dx.linear", {&x, &w, &b}, {&wrong}).code, DX_SHAPE_MISMATCH);
  const TestTensor bad_b = TestTensor::of(DType::kF32, {2}, {1, 2});
  EXPECT_EQ(ref.call("dx.linear", {&x, &w, &bad_b}, {&y}).code, DX_SHAPE_MISMATCH);

  const TestTensor bx = rand({2, 3, 4}), bw = rand({5, 4}), bb = rand({5});
  check_gradients(ref, "dx.linear", {&bx, &bw, &bb}, {{{2, 3, 5}}}, {});
  check_gradients(ref, "dx.linear", {&bx, &bw, nullptr}, {{{2, 3, 5}}}, {});
  // A bias gradient without a bias is refused.
  TestTensor y2(DType::kF64, {2, 3, 5}), gb(DType::kF64, {5});
  ASSERT_TRUE(ref.call("dx.linear", {&bx, &bw, nullptr}, {&y2}).ok());
  EXPECT_EQ(ref.call_backward("dx.linear", {&y2}, {&bx, &bw, nullptr}, {&y2}, {nullptr, nullptr, &gb}).code,
            DX_INVALID_ARGUMENT);
}

TEST_F(Nn, LayerNorm) {
  const TestTensor x = TestTensor::of(DType::kF64, {2, 3}, {1, 2, 3, 1e8 + 1, 1e8 + 2, 1e8 + 3});
  TestTensor y(DType::kF64, {2, 3}), mean(DType::kF64, {2, 1}), rstd(DType::kF64, {2, 1});
  const std::vector<dx_attr_t> attrs = {attr_i64("axis", -1), attr_f64("eps", 0.0)};
  ASSERT_TRUE(ref.call("dx.layer_norm", {&x, nullptr, nullptr}, {&y, &mean, &rstd}, attrs).ok());
  EXPECT_EQ(mean.values(), (std::vector<double>{2, 1e8 + 2}));
  EXPECT_NEAR(rstd.get(0), std::sqrt(1.5), 1e-15);
  EXPECT_NEAR(rstd.get(1), std::sqrt(1.5), 1e-15);  // two-pass: the 1e8 offset costs nothing
  EXPECT_NEAR(y.get(0), -std::sqrt(1.5), 1e-15);
  EXPECT_NEAR(y.get(5), std::sqrt(1.5), 1e-15);
  const TestTensor w = TestTensor::of(DType::kF64, {3}, {2, 2, 2});
  const TestTensor b = TestTensor::of(DType::kF64, {3}, {1, 1, 1});
  ASSERT_TRUE(ref.call("dx.layer_norm", {&x, &w, &b}, {&y, &mean, &rstd}, attrs).ok());
  EXPECT_NEAR(y.get(2), 2 * std::sqrt(1.5) + 1, 1e-14);
  TestTensor bad_stats(DType::kF64, {2});
  EXPECT_EQ(ref.call("dx.layer_norm", {&x, &w, &b}, {&y, &bad_stats, &rstd}, attrs).code, DX_SHAPE_MISMATCH);

  // Gradients of all three outputs (mean and rstd too), with and without weight/bias, over the
  // last one and the last two dims.
  const TestTensor gx = rand({2, 3, 4}, -2, 2), gw = rand({4}), gbias = rand({4});
  const std::vector<dx_attr_t> eps = {attr_i64("axis", -1), attr_f64("eps", 1e-3)};
  check_gradients(ref, "dx.layer_norm", {&gx, &gw, &gbias}, {{{2, 3, 4}}, {{2, 3, 1}}, {{2, 3, 1}}}, eps);
  check_gradients(ref, "dx.layer_norm", {&gx, nullptr, nullptr}, {{{2, 3, 4}}, {{2, 3, 1}}, {{2, 3, 1}}}, eps);
  const TestTensor gw2 = rand({3, 4}), gb2 = rand({3, 4});
  check_gradients(ref, "dx.layer_norm", {&gx, &gw2, &gb2}, {{{2, 3, 4}}, {{2, 1, 1}}, {{2, 1, 1}}},
                  {attr_i64("axis", 1), attr_f64("eps", 1e-3)});
}

TEST_F(Nn, RmsNorm) {
  const TestTensor x = TestTensor::of(DType::kF64, {1, 2}, {3, 4});
  TestTensor y(DType::kF64, {1, 2});
  ASSERT_TRUE(ref.call("dx.rms_norm", {&x, nullptr}, {&y}, {attr_i64("axis", -1), attr_f64("eps", 0.0)}).ok());
  const double rms = std::sqrt(12.5);
  EXPECT_NEAR(y.get(0), 3 / rms, 1e-15);
  EXPECT_NEAR(y.get(1), 4 / rms, 1e-15);
  const TestTensor gx = rand({3, 5}), gw = rand({5});
  check_gradients(ref, "dx.rms_norm", {&gx, &gw}, {{{3, 5}}}, {attr_i64("axis", -1), attr_f64("eps", 1e-3)});
  check_gradients(ref, "dx.rms_norm", {&gx, nullptr}, {{{3, 5}}}, {});
}

TEST_F(Nn, Embedding) {
  const TestTensor w = TestTensor::of(DType::kF32, {3, 2}, {0, 1, 10, 11, 20, 21});
  for (DType it : {DType::kI32, DType::kI64}) {
    const TestTensor idx = TestTensor::ints(it, {2, 2}, {2, 0, 1, 2});
    TestTensor out(DType::kF32, {2, 2, 2});
    ASSERT_TRUE(ref.call("dx.embedding", {&w, &idx}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{20, 21, 0, 1, 10, 11, 20, 21}));
    const TestTensor bad = TestTensor::ints(it, {2}, {1, 3});
    TestTensor out2(DType::kF32, {2, 2});
    const auto before = out2.values();
    EXPECT_EQ(ref.call("dx.embedding", {&w, &bad}, {&out2}).code, DX_OUT_OF_RANGE);
    EXPECT_EQ(out2.values(), before);  // nothing written
    const TestTensor negative = TestTensor::ints(it, {2}, {-1, 0});
    EXPECT_EQ(ref.call("dx.embedding", {&w, &negative}, {&out2}).code, DX_OUT_OF_RANGE);
  }
  const TestTensor gw = rand({4, 3});
  const TestTensor idx = TestTensor::ints(DType::kI64, {5}, {3, 0, 3, 1, 3});  // repeats sum
  check_gradients(ref, "dx.embedding", {&gw, &idx}, {{{5, 3}}}, {});
}

TEST_F(Nn, CrossEntropy) {
  const TestTensor logits = TestTensor::of(DType::kF64, {3, 3}, {1, 2, 3, 0, 0, 0, 5, -5, 0});
  const TestTensor labels = TestTensor::ints(DType::kI64, {3}, {2, 0, -100});
  TestTensor none(DType::kF64, {3}), scalar(DType::kF64, {}), ls(DType::kF64, {3, 3});
  ASSERT_TRUE(ref.call("dx.log_softmax", {&logits}, {&ls}, {}).ok());
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&logits, &labels}, {&none}, {attr_string("reduction", "none")}).ok());
  EXPECT_NEAR(none.get(0), -ls.get(2), 1e-15);  // identity with log_softmax
  EXPECT_NEAR(none.get(1), std::log(3.0), 1e-15);
  EXPECT_EQ(none.get(2), 0);  // ignored
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&logits, &labels}, {&scalar}, {}).ok());  // mean
  EXPECT_NEAR(scalar.get(0), (none.get(0) + none.get(1)) / 2, 1e-15);
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&logits, &labels}, {&scalar}, {attr_string("reduction", "sum")}).ok());
  EXPECT_NEAR(scalar.get(0), none.get(0) + none.get(1), 1e-15);
  const TestTensor all_ignored = TestTensor::ints(DType::kI64, {3}, {7, 7, 7});
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&logits, &all_ignored}, {&scalar}, {attr_none("reduction"), attr_i64("ignore_index", 7)}).ok());
  EXPECT_TRUE(std::isnan(scalar.get(0)));
  const TestTensor bad = TestTensor::ints(DType::kI64, {3}, {0, 3, 1});
  EXPECT_EQ(ref.call("dx.cross_entropy", {&logits, &bad}, {&scalar}, {}).code, DX_OUT_OF_RANGE);
  EXPECT_EQ(ref.call("dx.cross_entropy", {&logits, &labels}, {&scalar}, {attr_string("reduction", "avg")}).code,
            DX_INVALID_ARGUMENT);
  // Unbatched (C,) with a scalar label; extreme logits stay finite.
  const TestTensor one = TestTensor::of(DType::kF32, {2}, {1000, -1000});
  const TestTensor label = TestTensor::ints(DType::kI64, {}, {1});
  TestTensor l32(DType::kF32, {});
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&one, &label}, {&l32}, {}).ok());
  EXPECT_EQ(l32.get(0), 2000);

  const TestTensor gl = rand({4, 5});
  const TestTensor glabels = TestTensor::ints(DType::kI64, {4}, {1, -100, 4, 0});
  for (const char* r : {"none", "mean", "sum"}) {
    const Shape out = std::string(r) == "none" ? Shape{4} : Shape{};
    check_gradients(ref, "dx.cross_entropy", {&gl, &glabels}, {{out}}, {attr_string("reduction", r)});
  }
  const TestTensor g1 = rand({5});
  const TestTensor l1 = TestTensor::ints(DType::kI64, {}, {3});
  check_gradients(ref, "dx.cross_entropy", {&g1, &l1}, {{{}}}, {});
}

}  // namespace
}  // namespace deepx::ref::testing
