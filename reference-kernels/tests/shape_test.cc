// Shape and data-movement ops (reshape, broadcast_to, concat, split, slice, index_select,
// gather, scatter_add, pad, tile) and dx.arange: hand-computed values, bit-exactness, views,
// errors, and the gradients through the finite-difference check.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "grad_check.hpp"

namespace deepx::ref::testing {
namespace {

using Shape = std::vector<std::int64_t>;
using Ints = std::vector<std::int64_t>;

class ShapeOps : public ::testing::Test {
 protected:
  Reference ref;
  std::mt19937_64 rng{5};
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  TestTensor rand(Shape s) { return random_tensor(rng, std::move(s), -2, 2); }
  // 0, 1, 2, ... in dtype t.
  static TestTensor iota(DType t, Shape s) {
    TestTensor x(t, std::move(s));
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      if (is_float(t)) x.set(i, static_cast<double>(i));
      else x.set_int(i, t == DType::kBool ? i % 2 : i);
    }
    return x;
  }
  static Ints as_ints(const TestTensor& t) {
    Ints v;
    for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(is_float(t.dtype()) ? static_cast<std::int64_t>(t.get(i)) : t.get_int(i));
    return v;
  }
};

TEST_F(ShapeOps, ReshapeAndBroadcastTo) {
  for (DType t : {DType::kF16, DType::kI8, DType::kBool, DType::kF64}) {
    // A transposed view read in its logical row-major order.
    TestTensor x(t, {3, 2}, {1, 3}, 0, 6);
    for (std::int64_t i = 0; i < 6; ++i) x.set_int(i, t == DType::kBool ? i % 2 : i);
    TestTensor y(t, {2, 3});
    ASSERT_TRUE(ref.call("dx.reshape", {&x}, {&y}).ok());
    EXPECT_EQ(as_ints(y), as_ints(x));
    TestTensor bad(t, {4});
    EXPECT_EQ(ref.call("dx.reshape", {&x}, {&bad}).code, DX_SHAPE_MISMATCH);
  }
  const TestTensor col = iota(DType::kI32, {3, 1});
  TestTensor b(DType::kI32, {2, 3, 2});
  const Shape target = {2, 3, 2};
  ASSERT_TRUE(ref.call("dx.broadcast_to", {&col}, {&b}, {attr_i64s("shape", target)}).ok());
  EXPECT_EQ(b.int_values(), (Ints{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
  const Shape other = {3, 2};
  EXPECT_EQ(ref.call("dx.broadcast_to", {&col}, {&b}, {attr_i64s("shape", other)}).code, DX_SHAPE_MISMATCH);
  TestTensor wrong(DType::kI32, {2, 2, 2});
  EXPECT_EQ(ref.call("dx.broadcast_to", {&col}, {&wrong}).code, DX_SHAPE_MISMATCH);

  const TestTensor g = rand({2, 3, 2});
  check_gradients(ref, "dx.reshape", {&g}, {{{3, 4}}}, {});
  const TestTensor gc = rand({3, 1});
  check_gradients(ref, "dx.broadcast_to", {&gc}, {{{2, 3, 4}}}, {});
}

TEST_F(ShapeOps, ConcatAndSplit) {
  const TestTensor a = iota(DType::kU8, {2, 1}), b = iota(DType::kU8, {2, 2});
  TestTensor y4(DType::kU8, {2, 4});
  ASSERT_TRUE(ref.call("dx.concat", {&a, &b, &a}, {&y4}, {attr_i64("axis", -1)}).ok());
  EXPECT_EQ(y4.int_values(), (Ints{0, 0, 1, 0, 1, 2, 3, 1}));
  ASSERT_TRUE(ref.call("dx.concat", {&b}, {&b}, {}).ok());  // one input, in place
  TestTensor y6(DType::kU8, {4, 2});
  ASSERT_TRUE(ref.call("dx.concat", {&b, &b}, {&y6}, {}).ok());  // axis defaults to 0
  EXPECT_EQ(y6.int_values(), (Ints{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(ref.call("dx.concat", {&a, &b}, {&y6}, {attr_i64("axis", 0)}).code, DX_SHAPE_MISMATCH);

  const TestTensor x = iota(DType::kI64, {2, 3});
  TestTensor p(DType::kI64, {2, 1}), q(DType::kI64, {2, 2});
  const Shape sizes = {1, 2};
  ASSERT_TRUE(ref.call("dx.split", {&x}, {&p, &q}, {attr_i64("axis", 1), attr_i64s("sizes", sizes)}).ok());
  EXPECT_EQ(p.int_values(), (Ints{0, 3}));
  EXPECT_EQ(q.int_values(), (Ints{1, 2, 4, 5}));
  TestTensor r0(DType::kI64, {1, 3}), r1(DType::kI64, {1, 3});
  ASSERT_TRUE(ref.call("dx.split", {&x}, {&r0, &r1}, {}).ok());  // equal parts along axis 0
  EXPECT_EQ(r1.int_values(), (Ints{3, 4, 5}));
  EXPECT_EQ(ref.call("dx.split", {&x}, {&p, &q}, {attr_i64("axis", 1)}).code, DX_SHAPE_MISMATCH);

  const TestTensor ga = rand({2, 1, 3}), gb = rand({2, 4, 3});
  check_gradients(ref, "dx.concat", {&ga, &gb, &ga}, {{{2, 6, 3}}}, {attr_i64("axis", 1)});
  const TestTensor gx = rand({2, 5});
  const Shape three = {2, 0, 3};
  check_gradients(ref, "dx.split", {&gx}, {{{2, 2}}, {{2, 0}}, {{2, 3}}}, {attr_i64("axis", 1), attr_i64s("sizes", three)});
}

TEST_F(ShapeOps, SliceAndPadAndTile) {
  const TestTensor x = iota(DType::kI16, {3, 5});
  TestTensor y(DType::kI16, {2, 2});
  const Shape starts = {1, -4}, stops = {100, 5}, steps = {1, 2};
  ASSERT_TRUE(ref.call("dx.slice", {&x}, {&y}, {attr_i64s("starts", starts), attr_i64s("stops", stops), attr_i64s("steps", steps)}).ok());
  EXPECT_EQ(y.int_values(), (Ints{6, 8, 11, 13}));
  TestTensor empty(DType::kI16, {0, 5});
  const Shape s2 = {2}, e2 = {1};
  ASSERT_TRUE(ref.call("dx.slice", {&x}, {&empty}, {attr_i64s("starts", s2), attr_i64s("stops", e2)}).ok());
  const Shape zero_step = {0};
  EXPECT_EQ(ref.call("dx.slice", {&x}, {&y}, {attr_none("starts"), attr_none("stops"), attr_i64s("steps", zero_step)}).code, DX_INVALID_ARGUMENT);

  const TestTensor small = iota(DType::kF32, {2, 2});
  TestTensor padded(DType::kF32, {3, 5});
  const Shape pads = {1, 0, 2, 1};
  ASSERT_TRUE(ref.call("dx.pad", {&small}, {&padded}, {attr_i64s("pads", pads), attr_f64("value", -1.5)}).ok());
  EXPECT_EQ(padded.values(), (std::vector<double>{-1.5, -1.5, -1.5, -1.5, -1.5, -1.5, -1.5, 0, 1, -1.5, -1.5, -1.5, 2, 3, -1.5}));
  const Shape negative = {-1, 0, 0, 0};
  EXPECT_EQ(ref.call("dx.pad", {&small}, {&padded}, {attr_i64s("pads", negative)}).code, DX_INVALID_ARGUMENT);

  const TestTensor row = iota(DType::kBool, {2});
  TestTensor tiled(DType::kBool, {2, 4});
  const Shape reps = {2, 2};
  ASSERT_TRUE(ref.call("dx.tile", {&row}, {&tiled}, {attr_i64s("repeats", reps)}).ok());
  EXPECT_EQ(tiled.int_values(), (Ints{0, 1, 0, 1, 0, 1, 0, 1}));

  const TestTensor g = rand({4, 5});
  const Shape gs = {-3, 1}, ge = {4, 5}, gst = {2, 3};
  check_gradients(ref, "dx.slice", {&g}, {{{2, 2}}}, {attr_i64s("starts", gs), attr_i64s("stops", ge), attr_i64s("steps", gst)});
  check_gradients(ref, "dx.pad", {&g}, {{{5, 8}}}, {attr_i64s("pads", Shape{0, 1, 2, 1})});
  const TestTensor gt = rand({2, 3});
  check_gradients(ref, "dx.tile", {&gt}, {{{2, 4, 6}}}, {attr_i64s("repeats", Shape{2, 2, 2})});
  check_gradients(ref, "dx.tile", {&gt}, {{{2, 6}}}, {attr_i64s("repeats", Shape{2})});
}

TEST_F(ShapeOps, IndexOps) {
  const TestTensor x = iota(DType::kI32, {3, 4});
  for (DType it : {DType::kI32, DType::kI64}) {
    const TestTensor idx = TestTensor::ints(it, {3}, {2, 0, 2});
    TestTensor y(DType::kI32, {3, 3});
    ASSERT_TRUE(ref.call("dx.index_select", {&x, &idx}, {&y}, {attr_i64("axis", 1)}).ok());
    EXPECT_EQ(y.int_values(), (Ints{2, 0, 2, 6, 4, 6, 10, 8, 10}));
    const TestTensor bad = TestTensor::ints(it, {3}, {0, 4, 1});
    EXPECT_EQ(ref.call("dx.index_select", {&x, &bad}, {&y}, {attr_i64("axis", 1)}).code, DX_OUT_OF_RANGE);
  }
  // torch.gather(x, 1, [[0, 0], [1, 0]]) on [[1, 2], [3, 4]] = [[1, 1], [4, 3]].
  const TestTensor m = TestTensor::of(DType::kBF16, {2, 2}, {1, 2, 3, 4});
  const TestTensor gi = TestTensor::ints(DType::kI64, {2, 2}, {0, 0, 1, 0});
  TestTensor gy(DType::kBF16, {2, 2});
  ASSERT_TRUE(ref.call("dx.gather", {&m, &gi}, {&gy}, {attr_i64("axis", 1)}).ok());
  EXPECT_EQ(gy.values(), (std::vector<double>{1, 1, 4, 3}));
  const TestTensor gbad = TestTensor::ints(DType::kI64, {2, 2}, {0, 2, 0, 0});
  EXPECT_EQ(ref.call("dx.gather", {&m, &gbad}, {&gy}, {attr_i64("axis", 1)}).code, DX_OUT_OF_RANGE);
  // scatter_add: y = x; y[idx[i][j]][j] += src[i][j] (axis 0), ints wrap.
  const TestTensor base = TestTensor::ints(DType::kI8, {2, 2}, {100, 0, 0, 0});
  const TestTensor si = TestTensor::ints(DType::kI64, {2, 2}, {0, 1, 0, 1});
  const TestTensor src = TestTensor::ints(DType::kI8, {2, 2}, {20, 5, 10, 6});
  TestTensor sy(DType::kI8, {2, 2});
  ASSERT_TRUE(ref.call("dx.scatter_add", {&base, &si, &src}, {&sy}, {attr_i64("axis", 0)}).ok());
  EXPECT_EQ(sy.int_values(), (Ints{-126, 0, 0, 11}));  // 130 wraps

  const TestTensor gx = rand({3, 4});
  const TestTensor iidx = TestTensor::ints(DType::kI64, {5}, {1, 1, 0, 2, 1});
  check_gradients(ref, "dx.index_select", {&gx, &iidx}, {{{5, 4}}}, {attr_i64("axis", 0)});
  const TestTensor gidx = TestTensor::ints(DType::kI64, {2, 3}, {3, 0, 3, 1, 1, 2});
  check_gradients(ref, "dx.gather", {&gx, &gidx}, {{{2, 3}}}, {attr_i64("axis", 1)});
  const TestTensor sidx = TestTensor::ints(DType::kI64, {2, 4}, {0, 2, 2, 1, 0, 0, 1, 2});
  const TestTensor gsrc = rand({3, 4});  // larger than the index: the extra part gets 0
  check_gradients(ref, "dx.scatter_add", {&gx, &sidx, &gsrc}, {{{3, 4}}}, {attr_i64("axis", 0)});
}

TEST_F(ShapeOps, Arange) {
  TestTensor f(DType::kF32, {4});
  ASSERT_TRUE(ref.call("dx.arange", {}, {&f}, {attr_f64("start", 0.5), attr_f64("step", 0.25)}).ok());
  EXPECT_EQ(f.values(), (std::vector<double>{0.5, 0.75, 1, 1.25}));
  TestTensor i(DType::kI32, {2, 2});
  ASSERT_TRUE(ref.call("dx.arange", {}, {&i}, {attr_i64("start", -3), attr_i64("step", 2)}).ok());
  EXPECT_EQ(i.int_values(), (Ints{-3, -1, 1, 3}));
  TestTensor w(DType::kI8, {3});
  ASSERT_TRUE(ref.call("dx.arange", {}, {&w}, {attr_i64("start", 126)}).ok());
  EXPECT_EQ(w.int_values(), (Ints{126, 127, -128}));  // wraps, step defaults to 1
  TestTensor t(DType::kI64, {3});
  ASSERT_TRUE(ref.call("dx.arange", {}, {&t}, {attr_f64("start", 0.5), attr_f64("step", 1.5)}).ok());
  EXPECT_EQ(t.int_values(), (Ints{0, 2, 3}));  // 0.5, 2, 3.5 truncated
  TestTensor e(DType::kF64, {0});
  EXPECT_TRUE(ref.call("dx.arange", {}, {&e}, {}).ok());
}

}  // namespace
}  // namespace deepx::ref::testing

namespace deepx::ref::testing {
namespace {

// Every data-movement op is bit-exact for every dtype: run it once on an i64 tensor holding
// 1 + each element's position (0 marks padding), then on each dtype with arbitrary element
// bytes (NaN payloads, non-canonical bools included), and check every output element is the
// byte copy of the input element the i64 run names.
TEST_F(ShapeOps, MovementIsBitExactForEveryDtype) {
  struct Case {
    const char* op;
    Shape out;
    std::vector<dx_attr_t> attrs;
  };
  const Shape perm = {1, 0}, target = {2, 3, 4}, starts = {1, 0}, stops = {3, 4}, steps = {1, 3};
  const Shape pads = {1, 0, 0, 2}, reps = {2, 1};
  const std::vector<Case> cases = {
      {"dx.transpose", {4, 3}, {attr_i64s("perm", perm)}},
      {"dx.copy", {3, 4}, {}},
      {"dx.reshape", {2, 6}, {}},
      {"dx.broadcast_to", {2, 3, 4}, {attr_i64s("shape", target)}},
      {"dx.slice", {2, 2}, {attr_i64s("starts", starts), attr_i64s("stops", stops), attr_i64s("steps", steps)}},
      {"dx.pad", {4, 6}, {attr_i64s("pads", pads)}},
      {"dx.tile", {6, 4}, {attr_i64s("repeats", reps)}},
  };
  TestTensor pos(DType::kI64, {3, 4});
  for (std::int64_t i = 0; i < 12; ++i) pos.set_int(i, i + 1);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    TestTensor names(DType::kI64, c.out);
    ASSERT_TRUE(ref.call(c.op, {&pos}, {&names}, c.attrs).ok());
    for (DType t : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32,
                    DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
      SCOPED_TRACE(name_of(t));
      const std::size_t n = size_of(t);
      TestTensor x(t, {3, 4});
      for (std::int64_t i = 0; i < 12; ++i) {
        for (std::size_t b = 0; b < n; ++b) x.flat(i)[b] = static_cast<std::byte>(0x7F ^ (i * 13 + b * 5));
      }
      TestTensor y(t, c.out);
      ASSERT_TRUE(ref.call(c.op, {&x}, {&y}, c.attrs).ok());
      for (std::int64_t k = 0; k < y.numel(); ++k) {
        const std::int64_t source = names.get_int(k) - 1;
        const std::vector<std::byte> got(y.flat(k), y.flat(k) + n);
        const std::vector<std::byte> want = source < 0 ? std::vector<std::byte>(n, std::byte{0})
                                                       : std::vector<std::byte>(x.flat(source), x.flat(source) + n);
        EXPECT_EQ(got, want) << "element " << k;
      }
    }
  }
}

}  // namespace
}  // namespace deepx::ref::testing
