// Every reference backward kernel through the finite-difference inner-product check
// (grad_check.hpp), plus hand-computed gradients, broadcast reduction, strided and aliased
// gradient views, "not wanted" gradients and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "grad_check.hpp"

namespace deepx::ref::testing {
namespace {

using Shape = std::vector<std::int64_t>;

class Backward : public ::testing::Test {
 protected:
  Reference ref;
  std::mt19937_64 rng{20261121};
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  TestTensor rand(Shape s, double lo = -2, double hi = 2) { return random_tensor(rng, std::move(s), lo, hi); }
};

TEST_F(Backward, HandComputedMulWithBroadcast) {
  // y = a * b with b broadcast over rows: da = dy * b, db = sum over rows of dy * a.
  const TestTensor a = TestTensor::of(DType::kF64, {2, 2}, {1, 2, 3, 4});
  const TestTensor b = TestTensor::of(DType::kF64, {2}, {10, 20});
  const TestTensor y = TestTensor::of(DType::kF64, {2, 2}, {10, 40, 30, 80});
  const TestTensor dy = TestTensor::of(DType::kF64, {2, 2}, {1, 1, 2, 0.5});
  TestTensor da(DType::kF64, {2, 2}), db(DType::kF64, {2});
  ASSERT_TRUE(ref.call_backward("dx.mul", {&dy}, {&a, &b}, {&y}, {&da, &db}).ok());
  EXPECT_EQ(da.values(), (std::vector<double>{10, 20, 20, 10}));
  EXPECT_EQ(db.values(), (std::vector<double>{1 + 6, 2 + 2}));
  // Only db wanted.
  TestTensor db2(DType::kF64, {2});
  ASSERT_TRUE(ref.call_backward("dx.mul", {&dy}, {&a, &b}, {&y}, {nullptr, &db2}).ok());
  EXPECT_EQ(db2.values(), db.values());
}

TEST_F(Backward, HandComputedReductionsAndMatmul) {
  const TestTensor x = TestTensor::of(DType::kF32, {2, 3}, {1, 5, 5, 2, 0, 3});
  const TestTensor dy = TestTensor::of(DType::kF32, {2}, {1, 10});
  const Shape axes = {1};
  const std::vector<dx_attr_t> attrs = {attr_i64s("axes", axes), attr_bool("keepdims", false)};
  TestTensor y(DType::kF32, {2}), dx(DType::kF32, {2, 3});
  ASSERT_TRUE(ref.call("dx.max", {&x}, {&y}, attrs).ok());
  ASSERT_TRUE(ref.call_backward("dx.max", {&dy}, {&x}, {&y}, {&dx}, attrs).ok());
  EXPECT_EQ(dx.values(), (std::vector<double>{0, 1, 0, 0, 0, 10}));  // first of the tied 5s
  ASSERT_TRUE(ref.call("dx.prod", {&x}, {&y}, attrs).ok());
  ASSERT_TRUE(ref.call_backward("dx.prod", {&dy}, {&x}, {&y}, {&dx}, attrs).ok());
  EXPECT_EQ(dx.values(), (std::vector<double>{25, 5, 5, 0, 60, 0}));  // exact with a zero
  ASSERT_TRUE(ref.call("dx.mean", {&x}, {&y}, attrs).ok());
  ASSERT_TRUE(ref.call_backward("dx.mean", {&dy}, {&x}, {&y}, {&dx}, attrs).ok());
  EXPECT_NEAR(dx.get(0), 1.0 / 3, 1e-7);
  EXPECT_NEAR(dx.get(5), 10.0 / 3, 1e-6);

  // (1x2) @ (2x2): dA = dY B^T, dB = A^T dY.
  const TestTensor a = TestTensor::of(DType::kF64, {1, 2}, {1, 2});
  const TestTensor b = TestTensor::of(DType::kF64, {2, 2}, {3, 4, 5, 6});
  const TestTensor my = TestTensor::of(DType::kF64, {1, 2}, {13, 16});
  const TestTensor mdy = TestTensor::of(DType::kF64, {1, 2}, {1, -1});
  TestTensor da(DType::kF64, {1, 2}), db(DType::kF64, {2, 2});
  ASSERT_TRUE(ref.call_backward("dx.matmul", {&mdy}, {&a, &b}, {&my}, {&da, &db}).ok());
  EXPECT_EQ(da.values(), (std::vector<double>{-1, -1}));
  EXPECT_EQ(db.values(), (std::vector<double>{1, -1, 2, -2}));
}

TEST_F(Backward, BinaryOpsAndBroadcasting) {
  for (const auto& [sa, sb] : {std::pair<Shape, Shape>{{2, 3}, {3}}, {{2, 1, 3}, {4, 1}},
                               {{}, {2, 2}}, {{3}, {3}}}) {
    const TestTensor a = rand(sa);
    const TestTensor b = random_away_from(rng, sb, -2, 2, {0}, 0.3);
    Shape out;
    {
      const std::size_t r = std::max(sa.size(), sb.size());
      for (std::size_t k = 0; k < r; ++k) {
        const std::int64_t da = k < r - sa.size() ? 1 : sa[k - (r - sa.size())];
        const std::int64_t db = k < r - sb.size() ? 1 : sb[k - (r - sb.size())];
        out.push_back(std::max(da, db));
      }
    }
    for (const char* op : {"dx.add", "dx.sub", "dx.mul", "dx.div"}) {
      check_gradients(ref, op, {&a, &b}, {{out}}, {});
    }
    const TestTensor base = rand(sa, 0.5, 2);
    check_gradients(ref, "dx.pow", {&base, &b}, {{out}}, {});
  }
  // maximum / minimum: operands at least 0.2 apart, so no ties.
  const TestTensor a = rand({3, 4});
  TestTensor b(DType::kF64, {3, 4});
  std::uniform_real_distribution<double> gap(0.2, 1.0);
  for (std::int64_t i = 0; i < b.numel(); ++i) b.set(i, a.get(i) + (i % 2 ? gap(rng) : -gap(rng)));
  check_gradients(ref, "dx.maximum", {&a, &b}, {{{3, 4}}}, {});
  check_gradients(ref, "dx.minimum", {&a, &b}, {{{3, 4}}}, {});
  // where(cond, a, b) with broadcasting; cond gets a zero gradient.
  const TestTensor cond = TestTensor::ints(DType::kBool, {3, 1}, {1, 0, 1});
  const TestTensor wa = rand({3, 4}), wb = rand({4});
  check_gradients(ref, "dx.where", {&cond, &wa, &wb}, {{{3, 4}}}, {});
}

TEST_F(Backward, UnaryOps) {
  const Shape s = {3, 5};
  const TestTensor any = random_away_from(rng, s, -3, 3, {0}, 0.1);
  for (const char* op : {"dx.neg", "dx.exp", "dx.relu", "dx.abs", "dx.sign", "dx.sin", "dx.cos",
                         "dx.tanh", "dx.erf", "dx.sigmoid", "dx.silu", "dx.expm1", "dx.copy"}) {
    check_gradients(ref, op, {&any}, {{s}}, {});
  }
  const TestTensor nonzero = random_away_from(rng, s, -2, 2, {0}, 0.4);
  check_gradients(ref, "dx.reciprocal", {&nonzero}, {{s}}, {});
  const TestTensor positive = rand(s, 0.3, 4);
  for (const char* op : {"dx.sqrt", "dx.rsqrt", "dx.log", "dx.log1p"}) {
    check_gradients(ref, op, {&positive}, {{s}}, {});
  }
  const TestTensor small = rand(s, -1.2, 1.2);
  check_gradients(ref, "dx.tan", {&small}, {{s}}, {});
  const TestTensor above_minus_one = rand(s, -0.6, 2);
  check_gradients(ref, "dx.log1p", {&above_minus_one}, {{s}}, {});
  for (const char* mode : {"none", "tanh"}) {
    check_gradients(ref, "dx.gelu", {&any}, {{s}}, {attr_string("approximate", mode)});
  }
  // clamp: values at least 0.05 from the bounds; one bound absent.
  const TestTensor c = random_away_from(rng, s, -1, 1, {-0.5, 0.5}, 0.05);
  check_gradients(ref, "dx.clamp", {&c}, {{s}}, {attr_f64("min", -0.5), attr_f64("max", 0.5)});
  check_gradients(ref, "dx.clamp", {&c}, {{s}}, {attr_none("min"), attr_f64("max", 0.5)});
  check_gradients(ref, "dx.cast", {&any}, {{s}}, {});
  // Rank 0 and empty tensors.
  const TestTensor scalar = TestTensor::of(DType::kF64, {}, {0.7});
  check_gradients(ref, "dx.tanh", {&scalar}, {{{}}}, {});
  const TestTensor empty(DType::kF64, {0, 3});
  check_gradients(ref, "dx.exp", {&empty}, {{{0, 3}}}, {});
}

TEST_F(Backward, CastBetweenFloatDtypesConvertsTheGradient) {
  const TestTensor x = TestTensor::of(DType::kF64, {2}, {1, 2});
  const TestTensor y = TestTensor::of(DType::kBF16, {2}, {1, 2});
  const TestTensor dy = TestTensor::of(DType::kBF16, {2}, {0.5, -3});
  TestTensor dx(DType::kF64, {2});
  ASSERT_TRUE(ref.call_backward("dx.cast", {&dy}, {&x}, {&y}, {&dx}).ok());
  EXPECT_EQ(dx.values(), (std::vector<double>{0.5, -3}));
}

TEST_F(Backward, Reductions) {
  const TestTensor x = rand({2, 3, 4}, 0.5, 1.5);
  // Distinct values at least 0.01 apart for max/min (no ties): a shuffled ladder.
  TestTensor distinct(DType::kF64, {2, 3, 4});
  std::vector<double> ladder;
  for (int i = 0; i < 24; ++i) ladder.push_back(-1 + 0.08 * i);
  std::shuffle(ladder.begin(), ladder.end(), rng);
  for (int i = 0; i < 24; ++i) distinct.set(i, ladder[i]);
  const Shape axes1 = {1}, axes02 = {0, -1}, none = {};
  for (const char* op : {"dx.sum", "dx.mean", "dx.prod", "dx.max", "dx.min"}) {
    const TestTensor& in = (std::string(op) == "dx.max" || std::string(op) == "dx.min") ? distinct : x;
    check_gradients(ref, op, {&in}, {{{2, 4}}}, {attr_i64s("axes", axes1), attr_bool("keepdims", false)});
    check_gradients(ref, op, {&in}, {{{1, 3, 1}}}, {attr_i64s("axes", axes02), attr_bool("keepdims", true)});
    check_gradients(ref, op, {&in}, {{{}}}, {attr_i64s("axes", none), attr_bool("keepdims", false)});
  }
  // prod through a zero: the gradient is the product of the others.
  TestTensor with_zero = rand({5}, 0.5, 1.5);
  with_zero.set(2, 0.0);
  check_gradients(ref, "dx.prod", {&with_zero}, {{{}}}, {});
  // Empty reduction: sum and mean backward of an empty group write nothing, no error.
  const TestTensor empty(DType::kF64, {0, 3});
  check_gradients(ref, "dx.sum", {&empty}, {{{3}}}, {attr_i64s("axes", Shape{0})});
}

TEST_F(Backward, MatmulShapes) {
  struct Case { Shape a, b, out; bool ta, tb; };
  const std::vector<Case> cases = {
      {{2, 3}, {3, 4}, {2, 4}, false, false},
      {{3, 2}, {3, 4}, {2, 4}, true, false},
      {{2, 3}, {4, 3}, {2, 4}, false, true},
      {{2, 1, 2, 3}, {3, 3, 2}, {2, 3, 2, 2}, false, false},  // batch broadcast both ways
      {{3}, {3, 4}, {4}, false, false},
      {{2, 3}, {3}, {2}, false, false},
      {{3}, {3}, {}, false, false},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}, false, false},
  };
  for (const Case& c : cases) {
    const TestTensor a = rand(c.a), b = rand(c.b);
    check_gradients(ref, "dx.matmul", {&a, &b}, {{c.out}},
                    {attr_bool("transpose_a", c.ta), attr_bool("transpose_b", c.tb)});
  }
}

TEST_F(Backward, SoftmaxAndTranspose) {
  const TestTensor x = rand({3, 4}, -3, 3);
  check_gradients(ref, "dx.softmax", {&x}, {{{3, 4}}}, {attr_i64("axis", -1)});
  check_gradients(ref, "dx.softmax", {&x}, {{{3, 4}}}, {attr_i64("axis", 0)});
  const TestTensor t = rand({2, 3, 4});
  const Shape perm = {2, 0, 1};
  check_gradients(ref, "dx.transpose", {&t}, {{{4, 2, 3}}}, {attr_i64s("perm", perm)});
  check_gradients(ref, "dx.transpose", {&t}, {{{4, 3, 2}}}, {});
}

TEST_F(Backward, StridedOffsetAndAliasedGradients) {
  // dy is a transposed, offset view; da is a strided view; the results match compact ones.
  const TestTensor a = rand({2, 3}), b = rand({2, 3});
  TestTensor y(DType::kF64, {2, 3});
  ASSERT_TRUE(ref.call("dx.mul", {&a, &b}, {&y}).ok());
  TestTensor dy_view(DType::kF64, {2, 3}, {1, 2}, 3, 10);  // column-major, offset 3
  const TestTensor dy = rand({2, 3});
  for (std::int64_t i = 0; i < 6; ++i) dy_view.set(i, dy.get(i));
  TestTensor da_view(DType::kF64, {2, 3}, {6, 2}, 1, 13);
  TestTensor da(DType::kF64, {2, 3});
  ASSERT_TRUE(ref.call_backward("dx.mul", {&dy}, {&a, &b}, {&y}, {&da, nullptr}).ok());
  ASSERT_TRUE(ref.call_backward("dx.mul", {&dy_view}, {&a, &b}, {&y}, {&da_view, nullptr}).ok());
  EXPECT_EQ(da_view.values(), da.values());
  // In place: the gradient overwrites dy.
  TestTensor g = converted(dy, DType::kF64);
  ASSERT_TRUE(ref.call_backward("dx.mul", {&g}, {&a, &b}, {&y}, {&g, nullptr}).ok());
  EXPECT_EQ(g.values(), da.values());
  // A stride-0 (broadcast) forward input.
  TestTensor b0(DType::kF64, {2, 3}, {0, 1}, 0, 3);
  for (std::int64_t i = 0; i < 3; ++i) b0.set(i, b.get(i));
  check_gradients(ref, "dx.mul", {&a, &b0}, {{{2, 3}}}, {});
}

TEST_F(Backward, Errors) {
  const TestTensor x = rand({2, 3});
  TestTensor y(DType::kF64, {2, 3}), dx(DType::kF64, {3, 2}), ok(DType::kF64, {2, 3});
  ASSERT_TRUE(ref.call("dx.exp", {&x}, {&y}).ok());
  EXPECT_EQ(ref.call_backward("dx.exp", {&y}, {&x}, {&y}, {&dx}).code, DX_SHAPE_MISMATCH);
  const TestTensor wrong_dy = rand({3});
  EXPECT_EQ(ref.call_backward("dx.exp", {&wrong_dy}, {&x}, {&y}, {&ok}).code, DX_SHAPE_MISMATCH);
  // Wrong arity through the raw call.
  const RegisteredKernel* k = ref.find("dx.exp", {DType::kF64}, {DType::kF64});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(ref.call_raw(*k, {y.dl(), x.dl()}, {ok.dl()}, {}, true).code, DX_INVALID_ARGUMENT);
  // A gradient of the wrong dtype.
  TestTensor g32(DType::kF32, {2, 3});
  EXPECT_EQ(ref.call_raw(*k, {y.dl(), x.dl(), y.dl()}, {g32.dl()}, {}, true).code, DX_INVALID_ARGUMENT);
  // Nothing wanted: a no-op success.
  EXPECT_TRUE(ref.call_raw(*k, {y.dl(), x.dl(), y.dl()}, {nullptr}, {}, true).ok());
  // Integer and non-differentiable kernels register no backward.
  EXPECT_EQ(ref.find("dx.add", {DType::kI32, DType::kI32}, {DType::kI32})->desc.backward, nullptr);
  EXPECT_EQ(ref.find("dx.floor", {DType::kF32}, {DType::kF32})->desc.backward, nullptr);
  EXPECT_EQ(ref.find("dx.argmax", {DType::kF32}, {DType::kI64})->desc.backward, nullptr);
  EXPECT_EQ(ref.find("dx.cast", {DType::kF32}, {DType::kI32})->desc.backward, nullptr);
  EXPECT_NE(ref.find("dx.cast", {DType::kF32}, {DType::kF16})->desc.backward, nullptr);
}

}  // namespace
}  // namespace deepx::ref::testing
