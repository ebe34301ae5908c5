// dx.conv2d, dx.max_pool2d, dx.avg_pool2d, dx.batch_norm, dx.scaled_dot_product_attention:
// hand-computed values, independent recomputation, masks, running statistics, errors, and the
// gradients through the finite-difference check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "grad_check.hpp"

namespace deepx::ref::testing {
namespace {

using Shape = std::vector<std::int64_t>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

class Conv : public ::testing::Test {
 protected:
  Reference ref;
  std::mt19937_64 rng{11};
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  TestTensor rand(Shape s, double lo = -2, double hi = 2) { return random_tensor(rng, std::move(s), lo, hi); }
};

TEST_F(Conv, Conv2dHandComputed) {
  // 1x1x3x3 input 1..9, 2x2 kernel of ones, padding 1, stride 2 -> 2x2 of window sums.
  TestTensor x(DType::kF32, {1, 1, 3, 3});
  for (int i = 0; i < 9; ++i) x.set(i, i + 1);
  const TestTensor w = TestTensor::of(DType::kF32, {1, 1, 2, 2}, {1, 1, 1, 1});
  const TestTensor b = TestTensor::of(DType::kF32, {1}, {0.5});
  TestTensor y(DType::kF32, {1, 1, 2, 2});
  ASSERT_TRUE(ref.call("dx.conv2d", {&x, &w, &b}, {&y}, {attr_i64("stride", 2), attr_i64("padding", 1)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{1.5, 5.5, 11.5, 28.5}));
  // Dilation 2 on the unpadded input: the four corners.
  TestTensor y1(DType::kF32, {1, 1, 1, 1});
  ASSERT_TRUE(ref.call("dx.conv2d", {&x, &w, nullptr}, {&y1}, {attr_none("stride"), attr_none("padding"), attr_i64("dilation", 2)}).ok());
  EXPECT_EQ(y1.get(0), 1 + 3 + 7 + 9);
  // Groups: 2 channels, each convolved with its own 1x1 kernel.
  const TestTensor x2 = TestTensor::of(DType::kF64, {1, 2, 1, 2}, {1, 2, 3, 4});
  const TestTensor w2 = TestTensor::of(DType::kF64, {2, 1, 1, 1}, {10, 100});
  TestTensor y2(DType::kF64, {1, 2, 1, 2});
  ASSERT_TRUE(ref.call("dx.conv2d", {&x2, &w2, nullptr}, {&y2}, {attr_none("stride"), attr_none("padding"), attr_none("dilation"), attr_i64("groups", 2)}).ok());
  EXPECT_EQ(y2.values(), (std::vector<double>{10, 20, 300, 400}));
  EXPECT_EQ(ref.call("dx.conv2d", {&x2, &w2, nullptr}, {&y2}, {}).code, DX_SHAPE_MISMATCH);  // groups 1
  EXPECT_EQ(ref.call("dx.conv2d", {&x, &w, &b}, {&y}, {attr_i64("stride", 0)}).code, DX_INVALID_ARGUMENT);

  const TestTensor gx = rand({2, 4, 5, 6}), gw = rand({6, 2, 3, 2}), gb = rand({6});
  const Shape stride = {2, 1}, padding = {1, 2}, dilation = {1, 2};  // attrs borrow these
  const std::vector<dx_attr_t> attrs = {attr_i64s("stride", stride), attr_i64s("padding", padding),
                                        attr_i64s("dilation", dilation), attr_i64("groups", 2)};
  // (5 + 2 - 2 - 1) / 2 + 1 = 3; (6 + 4 - 2 - 1) / 1 + 1 = 8.
  check_gradients(ref, "dx.conv2d", {&gx, &gw, &gb}, {{{2, 6, 3, 8}}}, attrs);
  check_gradients(ref, "dx.conv2d", {&gx, &gw, nullptr}, {{{2, 6, 3, 8}}}, attrs);
}

TEST_F(Conv, Pooling) {
  TestTensor x(DType::kF64, {1, 1, 3, 3});
  for (int i = 0; i < 9; ++i) x.set(i, i + 1);
  TestTensor y(DType::kF64, {1, 1, 2, 2});
  ASSERT_TRUE(ref.call("dx.max_pool2d", {&x}, {&y}, {attr_i64("kernel", 2), attr_i64("stride", 1)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{5, 6, 8, 9}));
  ASSERT_TRUE(ref.call("dx.avg_pool2d", {&x}, {&y}, {attr_i64("kernel", 2), attr_i64("stride", 2), attr_i64("padding", 1)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{1, 2.5, 5.5, 7}));  // padding excluded from the count
  x.set(4, kNaN);
  ASSERT_TRUE(ref.call("dx.max_pool2d", {&x}, {&y}, {attr_i64("kernel", 2), attr_i64("stride", 1)}).ok());
  for (double v : y.values()) EXPECT_TRUE(std::isnan(v));  // NaN propagates
  EXPECT_EQ(ref.call("dx.max_pool2d", {&x}, {&y}, {}).code, DX_INVALID_ARGUMENT);  // kernel required
  EXPECT_EQ(ref.call("dx.max_pool2d", {&x}, {&y}, {attr_i64("kernel", 2), attr_i64("stride", 1), attr_i64("padding", 2)}).code, DX_INVALID_ARGUMENT);

  // An empty input row with padding = kernel / 2: every window is padding alone. Max and mean
  // of nothing are NaN; the backward reads no input.
  TestTensor e(DType::kF64, {1, 1, 0, 2});
  TestTensor ey(DType::kF64, {1, 1, 1, 2});
  for (const char* op : {"dx.max_pool2d", "dx.avg_pool2d"}) {
    ASSERT_TRUE(ref.call(op, {&e}, {&ey}, {attr_i64s("kernel", {2, 1}), attr_i64s("stride", {1, 1}),
                                           attr_i64s("padding", {1, 0})}).ok()) << op;
    for (double v : ey.values()) EXPECT_TRUE(std::isnan(v)) << op;
  }

  // Distinct values (a shuffled ladder) so max windows have no ties.
  TestTensor d(DType::kF64, {2, 2, 5, 5});
  std::vector<double> ladder;
  for (int i = 0; i < 100; ++i) ladder.push_back(0.05 * i);
  std::shuffle(ladder.begin(), ladder.end(), rng);
  for (int i = 0; i < 100; ++i) d.set(i, ladder[i]);
  const std::vector<dx_attr_t> attrs = {attr_i64("kernel", 3), attr_i64("stride", 2), attr_i64("padding", 1)};
  check_gradients(ref, "dx.max_pool2d", {&d}, {{{2, 2, 3, 3}}}, attrs);
  check_gradients(ref, "dx.avg_pool2d", {&d}, {{{2, 2, 3, 3}}}, attrs);
}

TEST_F(Conv, BatchNorm) {
  // Channel 0: 1, 3 (mean 2, var 1); channel 1: 10, 10 (var 0).
  const TestTensor x = TestTensor::of(DType::kF64, {2, 2}, {1, 10, 3, 10});
  TestTensor rm = TestTensor::of(DType::kF64, {2}, {0, 0});
  TestTensor rv = TestTensor::of(DType::kF64, {2}, {1, 1});
  TestTensor y(DType::kF64, {2, 2});
  ASSERT_TRUE(ref.call("dx.batch_norm", {&x, nullptr, nullptr, &rm, &rv}, {&y},
                       {attr_bool("training", true), attr_f64("momentum", 0.5), attr_f64("eps", 0.0)}).ok());
  EXPECT_EQ(y.get(0), -1);
  EXPECT_EQ(y.get(2), 1);
  EXPECT_TRUE(std::isnan(y.get(1)));  // 0 / sqrt(0): eps 0 on a constant channel
  EXPECT_EQ(rm.values(), (std::vector<double>{1, 5}));
  EXPECT_EQ(rv.values(), (std::vector<double>{1.5, 0.5}));  // unbiased variance 2 and 0
  // Evaluation uses the running statistics.
  const TestTensor w = TestTensor::of(DType::kF64, {2}, {2, 1});
  const TestTensor b = TestTensor::of(DType::kF64, {2}, {0, 1});
  ASSERT_TRUE(ref.call("dx.batch_norm", {&x, &w, &b, &rm, &rv}, {&y},
                       {attr_bool("training", false), attr_none("momentum"), attr_f64("eps", 0.0)}).ok());
  EXPECT_NEAR(y.get(0), 2 * (1 - 1) / std::sqrt(1.5), 1e-15);
  EXPECT_NEAR(y.get(1), (10 - 5) / std::sqrt(0.5) + 1, 1e-13);
  EXPECT_EQ(ref.call("dx.batch_norm", {&x, &w, &b, nullptr, nullptr}, {&y}, {}).code, DX_INVALID_ARGUMENT);

  const TestTensor gx = rand({3, 2, 2, 2}), gw = rand({2}), gb = rand({2});
  const TestTensor grm = rand({2}), grv = rand({2}, 0.5, 2);
  check_gradients(ref, "dx.batch_norm", {&gx, &gw, &gb, nullptr, nullptr}, {{{3, 2, 2, 2}}},
                  {attr_bool("training", true), attr_f64("momentum", 0.1), attr_f64("eps", 1e-3)});
  check_gradients(ref, "dx.batch_norm", {&gx, &gw, &gb, &grm, &grv}, {{{3, 2, 2, 2}}},
                  {attr_bool("training", false), attr_f64("momentum", 0.1), attr_f64("eps", 1e-3)});
}

// softmax(scale q k^T + mask) v written out directly.
std::vector<double> naive_attention(const TestTensor& q, const TestTensor& k, const TestTensor& v,
                                    std::int64_t L, std::int64_t S, std::int64_t E, std::int64_t Ev,
                                    const std::vector<bool>& allowed, double scale) {
  std::vector<double> out(L * Ev, 0.0);
  for (std::int64_t i = 0; i < L; ++i) {
    std::vector<double> s(S);
    double mx = -INFINITY, total = 0;
    for (std::int64_t j = 0; j < S; ++j) {
      double dot = 0;
      for (std::int64_t d = 0; d < E; ++d) dot += q.get(i * E + d) * k.get(j * E + d);
      s[j] = dot * scale;
      if (allowed[i * S + j]) mx = std::max(mx, s[j]);
    }
    for (std::int64_t j = 0; j < S; ++j) total += s[j] = allowed[i * S + j] ? std::exp(s[j] - mx) : 0;
    for (std::int64_t d = 0; d < Ev; ++d) {
      for (std::int64_t j = 0; j < S; ++j) out[i * Ev + d] += s[j] / total * v.get(j * Ev + d);
    }
  }
  return out;
}

TEST_F(Conv, ScaledDotProductAttention) {
  const TestTensor q = rand({3, 4}), k = rand({5, 4}), v = rand({5, 2});
  TestTensor out(DType::kF64, {3, 2});
  ASSERT_TRUE(ref.call("dx.scaled_dot_product_attention", {&q, &k, &v, nullptr}, {&out}).ok());
  std::vector<bool> all(15, true), causal(15), masked(15);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      causal[i * 5 + j] = j <= i;
      masked[i * 5 + j] = (i + j) % 3 != 0;
    }
  }
  auto expect = naive_attention(q, k, v, 3, 5, 4, 2, all, 0.5);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out.get(i), expect[i], 1e-14);
  ASSERT_TRUE(ref.call("dx.scaled_dot_product_attention", {&q, &k, &v, nullptr}, {&out}, {attr_bool("causal", true), attr_f64("scale", 0.3)}).ok());
  expect = naive_attention(q, k, v, 3, 5, 4, 2, causal, 0.3);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out.get(i), expect[i], 1e-14);
  TestTensor bmask(DType::kBool, {3, 5});
  TestTensor fmask(DType::kF64, {3, 5});
  for (int i = 0; i < 15; ++i) {
    bmask.set_int(i, masked[i] ? 1 : 0);
    fmask.set(i, masked[i] ? 0.0 : -INFINITY);
  }
  expect = naive_attention(q, k, v, 3, 5, 4, 2, masked, 0.5);
  ASSERT_TRUE(ref.call("dx.scaled_dot_product_attention", {&q, &k, &v, &bmask}, {&out}).ok());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out.get(i), expect[i], 1e-14);
  ASSERT_TRUE(ref.call("dx.scaled_dot_product_attention", {&q, &k, &v, &fmask}, {&out}).ok());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out.get(i), expect[i], 1e-14);
  // A fully masked row is NaN.
  TestTensor none = TestTensor::ints(DType::kBool, {1, 5}, {0, 0, 0, 0, 0});
  ASSERT_TRUE(ref.call("dx.scaled_dot_product_attention", {&q, &k, &v, &none}, {&out}).ok());
  EXPECT_TRUE(std::isnan(out.get(0)));
  const TestTensor bad_v = rand({4, 2});
  EXPECT_EQ(ref.call("dx.scaled_dot_product_attention", {&q, &k, &bad_v, nullptr}, {&out}).code, DX_SHAPE_MISMATCH);

  const TestTensor bq = rand({2, 3, 4}), bk = rand({2, 5, 4}), bv = rand({2, 5, 3});
  check_gradients(ref, "dx.scaled_dot_product_attention", {&bq, &bk, &bv, nullptr}, {{{2, 3, 3}}}, {});
  check_gradients(ref, "dx.scaled_dot_product_attention", {&bq, &bk, &bv, nullptr}, {{{2, 3, 3}}},
                  {attr_bool("causal", true), attr_f64("scale", 0.7)});
  check_gradients(ref, "dx.scaled_dot_product_attention", {&bq, &bk, &bv, &bmask}, {{{2, 3, 3}}}, {});
  const TestTensor additive = rand({1, 5});
  check_gradients(ref, "dx.scaled_dot_product_attention", {&bq, &bk, &bv, &additive}, {{{2, 3, 3}}}, {});
}

}  // namespace
}  // namespace deepx::ref::testing
