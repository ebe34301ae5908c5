// dx.sum and dx.max: hand-computed cases, axes handling, keepdims, identities (sum over all axes
// equals the sum of partial sums), integer accumulation in i64, NaN, empty sets, rank 0, views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

class Reduce : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  Status reduce(const char* op, const TestTensor& in, const TestTensor& out,
                const std::vector<std::int64_t>* axes, bool keepdims) {
    std::vector<dx_attr_t> attrs = {axes ? attr_i64s("axes", *axes) : attr_none("axes"),
                                    attr_bool("keepdims", keepdims)};
    return ref.call(op, {&in}, {&out}, attrs);
  }
};

// [[1, 2, 3], [4, 5, 6]]
TEST_F(Reduce, SumHandComputed) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::of(t, {2, 3}, {1, 2, 3, 4, 5, 6});
    TestTensor all(t, {});
    ASSERT_TRUE(reduce("dx.sum", m, all, nullptr, false).ok());
    EXPECT_EQ(all.get(0), 21);
    const std::vector<std::int64_t> empty_axes;  // empty list = all axes
    ASSERT_TRUE(reduce("dx.sum", m, all, &empty_axes, false).ok());
    EXPECT_EQ(all.get(0), 21);
    TestTensor cols(t, {3});
    const std::vector<std::int64_t> axis0 = {0};
    ASSERT_TRUE(reduce("dx.sum", m, cols, &axis0, false).ok());
    EXPECT_EQ(cols.values(), (std::vector<double>{5, 7, 9}));
    TestTensor rows(t, {2, 1});
    const std::vector<std::int64_t> last = {-1};
    ASSERT_TRUE(reduce("dx.sum", m, rows, &last, true).ok());
    EXPECT_EQ(rows.values(), (std::vector<double>{6, 15}));
    TestTensor kept_all(t, {1, 1});
    ASSERT_TRUE(reduce("dx.sum", m, kept_all, nullptr, true).ok());
    EXPECT_EQ(kept_all.get(0), 21);
  }
}

TEST_F(Reduce, IntegerSumIsI64ForEveryIntDtype) {
  for (DType t : kI) {
    SCOPED_TRACE(name_of(t));
    // 120 * 3 = 360 exceeds i8 and u8: the i64 output holds it.
    const TestTensor m = TestTensor::ints(t, {3, 2}, {120, 1, 120, 2, 120, 3});
    TestTensor all(DType::kI64, {});
    ASSERT_TRUE(reduce("dx.sum", m, all, nullptr, false).ok());
    EXPECT_EQ(all.get_int(0), 366);
    TestTensor cols(DType::kI64, {2});
    const std::vector<std::int64_t> axis0 = {0};
    ASSERT_TRUE(reduce("dx.sum", m, cols, &axis0, false).ok());
    EXPECT_EQ(cols.int_values(), (std::vector<std::int64_t>{360, 6}));
    TestTensor same_type(t, {});
    EXPECT_EQ(reduce("dx.sum", m, same_type, nullptr, false).code,
              t == DType::kI64 ? DX_OK : DX_NOT_FOUND);  // only (I) -> (i64) exists
  }
  const TestTensor neg = TestTensor::ints(DType::kI8, {3}, {-128, -128, -1});
  TestTensor s(DType::kI64, {});
  ASSERT_TRUE(reduce("dx.sum", neg, s, nullptr, false).ok());
  EXPECT_EQ(s.get_int(0), -257);
  // i64 accumulation wraps.
  const TestTensor big = TestTensor::ints(DType::kI64, {2}, {std::numeric_limits<std::int64_t>::max(), 2});
  ASSERT_TRUE(reduce("dx.sum", big, s, nullptr, false).ok());
  EXPECT_EQ(s.get_int(0), std::numeric_limits<std::int64_t>::min() + 1);
}

TEST_F(Reduce, SumOverAllAxesEqualsSumOfPartialSums) {
  // A (3,4,5) tensor of exact small values: every order of summation is exact.
  std::vector<double> values;
  for (int i = 0; i < 60; ++i) values.push_back(static_cast<double>((i * 37) % 23) - 11);
  const TestTensor x = TestTensor::of(DType::kF64, {3, 4, 5}, values);
  TestTensor total(DType::kF64, {});
  ASSERT_TRUE(reduce("dx.sum", x, total, nullptr, false).ok());
  double expected = 0;
  for (double v : values) expected += v;
  EXPECT_EQ(total.get(0), expected);

  for (std::int64_t axis = 0; axis < 3; ++axis) {
    std::vector<std::int64_t> shape = {3, 4, 5};
    shape.erase(shape.begin() + axis);
    TestTensor partial(DType::kF64, shape);
    const std::vector<std::int64_t> axes = {axis};
    ASSERT_TRUE(reduce("dx.sum", x, partial, &axes, false).ok());
    TestTensor of_partial(DType::kF64, {});
    ASSERT_TRUE(reduce("dx.sum", partial, of_partial, nullptr, false).ok());
    EXPECT_EQ(of_partial.get(0), expected) << axis;
  }
  // Two axes at once, in either order and with negative spelling, agree.
  TestTensor a(DType::kF64, {4}), b(DType::kF64, {4});
  const std::vector<std::int64_t> axes02 = {0, 2}, axes_neg = {-1, -3};
  ASSERT_TRUE(reduce("dx.sum", x, a, &axes02, false).ok());
  ASSERT_TRUE(reduce("dx.sum", x, b, &axes_neg, false).ok());
  EXPECT_EQ(a.values(), b.values());
  double by_hand = 0;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) by_hand += values[i * 20 + 1 * 5 + k];
  EXPECT_EQ(a.get(1), by_hand);
}

TEST_F(Reduce, SumAccumulatesInF64AndRoundsOnce) {
  // In f32, 2^24 + 1 + 1 + ... accumulated in f32 stays 2^24; in f64 the four ones survive and
  // the result 2^24 + 4 is representable in f32.
  const TestTensor x = TestTensor::of(DType::kF32, {5}, {16777216, 1, 1, 1, 1});
  TestTensor s(DType::kF32, {});
  ASSERT_TRUE(reduce("dx.sum", x, s, nullptr, false).ok());
  EXPECT_EQ(s.get(0), 16777220);
  // f16: 2048 + 1 + 1 -> 2050 (representable; an f16 accumulator would stay at 2048).
  const TestTensor h = TestTensor::of(DType::kF16, {3}, {2048, 1, 1});
  TestTensor hs(DType::kF16, {});
  ASSERT_TRUE(reduce("dx.sum", h, hs, nullptr, false).ok());
  EXPECT_EQ(hs.get(0), 2050);
}

TEST_F(Reduce, MaxHandComputedAndNaN) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::of(t, {2, 3}, {1, 7, -3, 4, -5, 6});
    TestTensor all(t, {});
    ASSERT_TRUE(reduce("dx.max", m, all, nullptr, false).ok());
    EXPECT_EQ(all.get(0), 7);
    TestTensor cols(t, {1, 3});
    const std::vector<std::int64_t> axis0 = {0};
    ASSERT_TRUE(reduce("dx.max", m, cols, &axis0, true).ok());
    EXPECT_EQ(cols.values(), (std::vector<double>{4, 7, 6}));
    const TestTensor with_nan = TestTensor::of(t, {2, 3}, {1, kNaN, 3, -1, -2, -3});
    TestTensor rows(t, {2});
    const std::vector<std::int64_t> axis1 = {1};
    ASSERT_TRUE(reduce("dx.max", with_nan, rows, &axis1, false).ok());
    EXPECT_TRUE(std::isnan(rows.get(0)));
    EXPECT_EQ(rows.get(1), -1);
    const TestTensor nan_last = TestTensor::of(t, {3}, {5, 9, kNaN});
    ASSERT_TRUE(reduce("dx.max", nan_last, all, nullptr, false).ok());
    EXPECT_TRUE(std::isnan(all.get(0)));
    const TestTensor infs = TestTensor::of(t, {2}, {-INFINITY, -INFINITY});
    ASSERT_TRUE(reduce("dx.max", infs, all, nullptr, false).ok());
    EXPECT_EQ(all.get(0), -INFINITY);
  }
  for (DType t : kI) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::ints(t, {2, 3}, {1, 7, 0, 4, 2, 6});
    TestTensor rows(t, {2});
    const std::vector<std::int64_t> axis1 = {1};
    ASSERT_TRUE(reduce("dx.max", m, rows, &axis1, false).ok());
    EXPECT_EQ(rows.int_values(), (std::vector<std::int64_t>{7, 6}));
  }
  const TestTensor negatives = TestTensor::ints(DType::kI8, {3}, {-128, -5, -100});
  TestTensor m(DType::kI8, {});
  ASSERT_TRUE(reduce("dx.max", negatives, m, nullptr, false).ok());
  EXPECT_EQ(m.get_int(0), -5);
  const TestTensor high = TestTensor::ints(DType::kU8, {3}, {3, 255, 128});  // unsigned compare
  TestTensor mu(DType::kU8, {});
  ASSERT_TRUE(reduce("dx.max", high, mu, nullptr, false).ok());
  EXPECT_EQ(mu.get_int(0), 255);
}

TEST_F(Reduce, EmptySets) {
  const TestTensor empty(DType::kF32, {0, 3});
  TestTensor s(DType::kF32, {3});
  const std::vector<std::int64_t> axis0 = {0};
  TestTensor filled = TestTensor::of(DType::kF32, {3}, {9, 9, 9});
  ASSERT_TRUE(reduce("dx.sum", empty, filled, &axis0, false).ok());
  EXPECT_EQ(filled.values(), (std::vector<double>{0, 0, 0}));  // sum of nothing is 0
  const Status st = reduce("dx.max", empty, s, &axis0, false);
  EXPECT_EQ(st.code, DX_INVALID_ARGUMENT) << st.message;
  TestTensor all(DType::kF32, {});
  EXPECT_EQ(reduce("dx.max", empty, all, nullptr, false).code, DX_INVALID_ARGUMENT);
  TestTensor si(DType::kI64, {});
  const TestTensor empty_i(DType::kI32, {2, 0});
  ASSERT_TRUE(reduce("dx.sum", empty_i, si, nullptr, false).ok());
  EXPECT_EQ(si.get_int(0), 0);
  // Reducing the non-empty axis of an empty tensor: an empty output, nothing to do.
  TestTensor none(DType::kF32, {0});
  const std::vector<std::int64_t> axis1 = {1};
  EXPECT_TRUE(reduce("dx.max", empty, none, &axis1, false).ok());
  EXPECT_TRUE(reduce("dx.sum", empty, none, &axis1, false).ok());
}

TEST_F(Reduce, RankZeroInputReducesToItself) {
  const TestTensor x = TestTensor::of(DType::kBF16, {}, {-2.5});
  TestTensor out(DType::kBF16, {});
  ASSERT_TRUE(reduce("dx.sum", x, out, nullptr, false).ok());
  EXPECT_EQ(out.get(0), -2.5);
  ASSERT_TRUE(reduce("dx.max", x, out, nullptr, true).ok());
  EXPECT_EQ(out.get(0), -2.5);
  const std::vector<std::int64_t> axis0 = {0};
  EXPECT_EQ(reduce("dx.sum", x, out, &axis0, false).code, DX_OUT_OF_RANGE);
}

TEST_F(Reduce, BadAxesAndShapes) {
  const TestTensor m = TestTensor::of(DType::kF64, {2, 3}, {1, 2, 3, 4, 5, 6});
  TestTensor out(DType::kF64, {3});
  const std::vector<std::int64_t> out_of_range = {2}, too_negative = {-3}, repeated = {0, -2};
  EXPECT_EQ(reduce("dx.sum", m, out, &out_of_range, false).code, DX_OUT_OF_RANGE);
  EXPECT_EQ(reduce("dx.max", m, out, &too_negative, false).code, DX_OUT_OF_RANGE);
  TestTensor scalar(DType::kF64, {});
  EXPECT_EQ(reduce("dx.sum", m, scalar, &repeated, false).code, DX_OUT_OF_RANGE);
  const std::vector<std::int64_t> axis0 = {0};
  TestTensor wrong(DType::kF64, {2});
  EXPECT_EQ(reduce("dx.sum", m, wrong, &axis0, false).code, DX_SHAPE_MISMATCH);
  EXPECT_EQ(reduce("dx.sum", m, out, &axis0, true).code, DX_SHAPE_MISMATCH);  // wants (1, 3)
  // A wrongly typed attribute is an invalid argument.
  EXPECT_EQ(ref.call("dx.sum", {&m}, {&scalar}, {attr_f64("axes", 0.0)}).code, DX_INVALID_ARGUMENT);
  // Missing attribute slots mean unset; a scalar i64 axis is accepted as a one-axis list.
  EXPECT_TRUE(ref.call("dx.sum", {&m}, {&scalar}).ok());
  EXPECT_EQ(scalar.get(0), 21);
  ASSERT_TRUE(ref.call("dx.sum", {&m}, {&out}, {attr_i64("axes", 0)}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{5, 7, 9}));
}

TEST_F(Reduce, AttributeSlotsShorterOrOutOfSchemaOrder) {
  const TestTensor m = TestTensor::of(DType::kF64, {2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<std::int64_t> axis1 = {1};
  // Fewer slots than the schema: keepdims is unset (false).
  TestTensor rows(DType::kF64, {2});
  ASSERT_TRUE(ref.call("dx.sum", {&m}, {&rows}, {attr_i64s("axes", axis1)}).ok());
  EXPECT_EQ(rows.values(), (std::vector<double>{6, 15}));
  // Names that do not match the slot are found by name instead.
  TestTensor kept(DType::kF64, {2, 1});
  ASSERT_TRUE(ref.call("dx.max", {&m}, {&kept},
                       {attr_bool("keepdims", true), attr_i64s("axes", axis1)}).ok());
  EXPECT_EQ(kept.values(), (std::vector<double>{3, 6}));
}

TEST_F(Reduce, StridedAndOffsetInputsMatchCompact) {
  // The transpose of [[1,2,3],[4,5,6]] as a (3,2) view with strides (1,3) at offset 2.
  TestTensor view(DType::kF32, {3, 2}, {1, 3}, 2, 8);
  const double data[] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(data[i]);
    std::memcpy(static_cast<std::byte*>(view.mutable_dl()->data) + (2 + i) * 4, &f, 4);
  }
  const TestTensor compact = TestTensor::of(DType::kF32, {3, 2}, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(view.values(), compact.values());
  const std::vector<std::int64_t> axis1 = {1};
  TestTensor a(DType::kF32, {3}), b(DType::kF32, {3});
  ASSERT_TRUE(reduce("dx.sum", view, a, &axis1, false).ok());
  ASSERT_TRUE(reduce("dx.sum", compact, b, &axis1, false).ok());
  EXPECT_EQ(a.values(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(a.values(), b.values());
  ASSERT_TRUE(reduce("dx.max", view, a, &axis1, false).ok());
  EXPECT_EQ(a.values(), (std::vector<double>{4, 5, 6}));
  // A stride-0 (broadcast) input: 4 copies of the same row.
  TestTensor rows(DType::kI32, {4, 3}, {0, 1}, 0, 3);
  for (int j = 0; j < 3; ++j) rows.set_int(j, j + 1);
  TestTensor col_sums(DType::kI64, {3});
  const std::vector<std::int64_t> axis0 = {0};
  ASSERT_TRUE(reduce("dx.sum", rows, col_sums, &axis0, false).ok());
  EXPECT_EQ(col_sums.int_values(), (std::vector<std::int64_t>{4, 8, 12}));
  // A strided output.
  TestTensor strided_out(DType::kF32, {3}, {2}, 1, 7);
  ASSERT_TRUE(reduce("dx.sum", compact, strided_out, &axis1, false).ok());
  EXPECT_EQ(strided_out.values(), (std::vector<double>{5, 7, 9}));
}

}  // namespace
}  // namespace deepx::ref::testing
