// dx.transpose, dx.copy and dx.fill: hand-computed layouts, transpose twice is the identity,
// bit-exact movement for every dtype (NaN payloads, -0, bool bytes), views, fill conversions
// (wrap, saturation, NaN, rounding once), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

class Movement : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  Status transpose(const TestTensor& in, const TestTensor& out, const std::vector<std::int64_t>* perm) {
    return ref.call("dx.transpose", {&in}, {&out}, {perm ? attr_i64s("perm", *perm) : attr_none("perm")});
  }
  Status fill(const TestTensor& out, dx_attr_t value) {
    return ref.call("dx.fill", {}, {&out}, {value});
  }
};

// Fills every byte of `t`'s elements with a recognisable pattern: element i gets bytes
// (i * 37 + k) & 0xFF, except bool which gets 0/1.
void fill_pattern(TestTensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::byte* p = t.flat(i);
    for (std::size_t k = 0; k < size_of(t.dtype()); ++k) {
      p[k] = static_cast<std::byte>(t.dtype() == DType::kBool ? (i % 3 == 0) : (i * 37 + static_cast<std::int64_t>(k) * 11 + 1) & 0xFF);
    }
  }
}

bool same_bytes(const TestTensor& a, std::int64_t i, const TestTensor& b, std::int64_t j) {
  return std::memcmp(a.flat(i), b.flat(j), size_of(a.dtype())) == 0;
}

TEST_F(Movement, TransposeHandComputed) {
  // [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]]
  const TestTensor m = TestTensor::ints(DType::kI32, {2, 3}, {1, 2, 3, 4, 5, 6});
  TestTensor t(DType::kI32, {3, 2});
  ASSERT_TRUE(transpose(m, t, nullptr).ok());  // unset perm: reversed axes
  EXPECT_EQ(t.int_values(), (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}));
  const std::vector<std::int64_t> perm10 = {1, 0};
  ASSERT_TRUE(transpose(m, t, &perm10).ok());
  EXPECT_EQ(t.int_values(), (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}));
  // (2,3,4) with perm (2,0,1): out[k][i][j] = in[i][j][k].
  std::vector<std::int64_t> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  const TestTensor x = TestTensor::ints(DType::kI64, {2, 3, 4}, v);
  TestTensor y(DType::kI64, {4, 2, 3});
  const std::vector<std::int64_t> perm201 = {2, 0, 1};
  ASSERT_TRUE(transpose(x, y, &perm201).ok());
  EXPECT_EQ(y.get_int(0), 0);
  EXPECT_EQ(y.get_int(1), 4);    // out[0][0][1] = in[0][1][0]
  EXPECT_EQ(y.get_int(3), 12);   // out[0][1][0] = in[1][0][0]
  EXPECT_EQ(y.get_int(6), 1);    // out[1][0][0] = in[0][0][1]
  EXPECT_EQ(y.get_int(23), 23);  // out[3][1][2] = in[1][2][3]
}

TEST_F(Movement, TransposeTwiceIsIdentityBitForBitInEveryDtype) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(name_of(t));
    TestTensor x(t, {2, 3, 5});
    fill_pattern(x);
    TestTensor y(t, {3, 5, 2});
    TestTensor z(t, {2, 3, 5});
    const std::vector<std::int64_t> perm = {1, 2, 0}, inverse = {2, 0, 1};
    ASSERT_TRUE(transpose(x, y, &perm).ok());
    ASSERT_TRUE(transpose(y, z, &inverse).ok());
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(same_bytes(x, i, z, i)) << i;
    // Negative perm entries count from the end, as in NumPy.
    const std::vector<std::int64_t> negative = {-2, -1, 0};
    ASSERT_TRUE(transpose(x, y, &negative).ok());
    ASSERT_TRUE(transpose(y, z, &inverse).ok());
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(same_bytes(x, i, z, i)) << i;
  }
}

TEST_F(Movement, TransposeErrorsRankZeroAndEmpty) {
  const TestTensor m(DType::kF32, {2, 3});
  TestTensor t(DType::kF32, {3, 2});
  const std::vector<std::int64_t> too_short = {0}, repeated = {0, 0}, out_of_range = {0, 2};
  EXPECT_EQ(transpose(m, t, &too_short).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(transpose(m, t, &repeated).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(transpose(m, t, &out_of_range).code, DX_INVALID_ARGUMENT);
  TestTensor same(DType::kF32, {2, 3});
  EXPECT_EQ(transpose(m, same, nullptr).code, DX_SHAPE_MISMATCH);
  const TestTensor s = TestTensor::of(DType::kF16, {}, {1.5});
  TestTensor so(DType::kF16, {});
  ASSERT_TRUE(transpose(s, so, nullptr).ok());
  EXPECT_EQ(so.get(0), 1.5);
  const TestTensor e(DType::kU8, {0, 5});
  TestTensor eo(DType::kU8, {5, 0});
  EXPECT_TRUE(transpose(e, eo, nullptr).ok());
}

TEST_F(Movement, CopyIsBitExactForEveryDtypeAndAnyLayout) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(name_of(t));
    // Source: a transposed, offset view; destination: a strided view with gaps.
    TestTensor src(t, {3, 4}, {1, 3}, 2, 14);
    fill_pattern(src);
    TestTensor dst(t, {3, 4}, {8, 2}, 1, 24);
    ASSERT_TRUE(ref.call("dx.copy", {&src}, {&dst}).ok());
    for (std::int64_t i = 0; i < 12; ++i) ASSERT_TRUE(same_bytes(src, i, dst, i)) << i;
    const auto bytes = dst.storage_bytes();
    EXPECT_EQ(bytes[0], std::byte{0xAB});  // before the offset
    EXPECT_EQ(bytes[2 * size_of(t)], std::byte{0xAB});  // a gap
    // And back into a compact tensor.
    TestTensor compact(t, {3, 4});
    ASSERT_TRUE(ref.call("dx.copy", {&dst}, {&compact}).ok());
    for (std::int64_t i = 0; i < 12; ++i) ASSERT_TRUE(same_bytes(src, i, compact, i)) << i;
  }
  // Special float bit patterns survive: -0, a signalling NaN payload, a subnormal.
  TestTensor f(DType::kF32, {3});
  const std::uint32_t bits[] = {0x80000000u, 0x7F800001u, 0x00000001u};
  for (int i = 0; i < 3; ++i) std::memcpy(f.flat(i), &bits[i], 4);
  TestTensor g(DType::kF32, {3});
  ASSERT_TRUE(ref.call("dx.copy", {&f}, {&g}).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bytes(f, i, g, i));
  // A broadcast (stride-0) source materialises.
  TestTensor row(DType::kI16, {2, 3}, {0, 1}, 0, 3);
  for (int j = 0; j < 3; ++j) row.set_int(j, 10 * (j + 1));
  TestTensor out(DType::kI16, {2, 3});
  ASSERT_TRUE(ref.call("dx.copy", {&row}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{10, 20, 30, 10, 20, 30}));
  // Errors, rank 0, empty.
  TestTensor wrong(DType::kI16, {3, 2});
  EXPECT_EQ(ref.call("dx.copy", {&row}, {&wrong}).code, DX_SHAPE_MISMATCH);
  const TestTensor s = TestTensor::ints(DType::kBool, {}, {1});
  TestTensor so(DType::kBool, {});
  ASSERT_TRUE(ref.call("dx.copy", {&s}, {&so}).ok());
  EXPECT_EQ(so.get_int(0), 1);
  const TestTensor e(DType::kF64, {2, 0, 3});
  TestTensor eo(DType::kF64, {2, 0, 3});
  EXPECT_TRUE(ref.call("dx.copy", {&e}, {&eo}).ok());
  EXPECT_EQ(ref.find("dx.copy", {DType::kF32}, {DType::kF16}), nullptr);  // no dtype change
}

TEST_F(Movement, FillIntegersFromI64WrapAndFromF64TruncateSaturate) {
  struct Case { DType t; std::int64_t from_i64; std::int64_t want; };
  for (const Case& c : {Case{DType::kI8, 300, 44}, Case{DType::kI8, -129, 127},
                        Case{DType::kU8, -1, 255}, Case{DType::kI16, 70000, 4464},
                        Case{DType::kI32, std::int64_t{1} << 32, 0},
                        Case{DType::kI64, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::min()},
                        Case{DType::kBool, 2, 1}, Case{DType::kBool, 0, 0}}) {
    SCOPED_TRACE(std::string(name_of(c.t)) + " " + std::to_string(c.from_i64));
    TestTensor out(c.t, {2, 2});
    ASSERT_TRUE(fill(out, attr_i64("value", c.from_i64)).ok());
    EXPECT_EQ(out.int_values(), std::vector<std::int64_t>(4, c.want));
  }
  struct FCase { DType t; double from_f64; std::int64_t want; };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const FCase& c : {FCase{DType::kI32, 2.9, 2}, FCase{DType::kI32, -2.9, -2},
                         FCase{DType::kI8, 1000.0, 127}, FCase{DType::kI8, -1000.0, -128},
                         FCase{DType::kU8, -5.0, 0}, FCase{DType::kU8, 255.9, 255},
                         FCase{DType::kI64, 1e19, std::numeric_limits<std::int64_t>::max()},
                         FCase{DType::kI64, -1e19, std::numeric_limits<std::int64_t>::min()},
                         FCase{DType::kI64, 9007199254740993.0, 9007199254740992},
                         FCase{DType::kI16, nan, 0}, FCase{DType::kI32, INFINITY, 2147483647},
                         FCase{DType::kBool, 0.5, 1}, FCase{DType::kBool, -0.0, 0},
                         FCase{DType::kBool, nan, 1}}) {
    SCOPED_TRACE(std::string(name_of(c.t)) + " " + std::to_string(c.from_f64));
    TestTensor out(c.t, {3});
    ASSERT_TRUE(fill(out, attr_f64("value", c.from_f64)).ok());
    EXPECT_EQ(out.int_values(), std::vector<std::int64_t>(3, c.want));
  }
}

TEST_F(Movement, FillFloatsRoundOnce) {
  TestTensor f16(DType::kF16, {2});
  ASSERT_TRUE(fill(f16, attr_f64("value", 1.0 + std::ldexp(1.0, -11))).ok());
  EXPECT_EQ(f16.get_bits16(0), 0x3C00);  // tie to even
  ASSERT_TRUE(fill(f16, attr_i64("value", 65520)).ok());
  EXPECT_EQ(f16.get_bits16(1), 0x7C00);  // i64 65520 is the overflow midpoint: Inf
  ASSERT_TRUE(fill(f16, attr_i64("value", 2049)).ok());
  EXPECT_EQ(f16.get(0), 2048);           // tie between 2048 and 2050: even
  // bf16 from a large i64, where converting to f64 first would round twice:
  // 2^60 + 2^52 + 1 lies just above the bf16 midpoint 2^60 + 2^52 (ulp 2^53), so it rounds up
  // to 2^60 + 2^53; via f64 (ulp 2^8 there) it would first become the midpoint and then tie to
  // even, down to 2^60.
  TestTensor bf(DType::kBF16, {1});
  const std::int64_t v = (std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1;
  ASSERT_TRUE(fill(bf, attr_i64("value", v)).ok());
  EXPECT_EQ(bf.get(0), std::ldexp(1.0, 60) + std::ldexp(1.0, 53));
  TestTensor f32(DType::kF32, {1});
  ASSERT_TRUE(fill(f32, attr_i64("value", (std::int64_t{1} << 40) + (std::int64_t{1} << 16) + 1)).ok());
  EXPECT_EQ(f32.get(0), std::ldexp(1.0, 40) + std::ldexp(1.0, 17));
  TestTensor f64(DType::kF64, {1});
  ASSERT_TRUE(fill(f64, attr_f64("value", -0.0)).ok());
  EXPECT_TRUE(std::signbit(f64.get(0)));
  ASSERT_TRUE(fill(f64, attr_i64("value", -7)).ok());
  EXPECT_EQ(f64.get(0), -7);
  TestTensor nan16(DType::kF16, {1});
  ASSERT_TRUE(fill(nan16, attr_f64("value", std::numeric_limits<double>::quiet_NaN())).ok());
  EXPECT_TRUE(std::isnan(nan16.get(0)));
}

TEST_F(Movement, FillUnsetViewsEmptyRankZeroAndErrors) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(name_of(t));
    TestTensor out(t, {2, 3});
    fill_pattern(out);
    ASSERT_TRUE(ref.call("dx.fill", {}, {&out}).ok());  // no attrs at all: 0
    for (std::int64_t i = 0; i < 6; ++i) {
      for (std::size_t k = 0; k < size_of(t); ++k) ASSERT_EQ(out.flat(i)[k], std::byte{0});
    }
    TestTensor s(t, {});
    ASSERT_TRUE(fill(s, attr_none("value")).ok());
    TestTensor e(t, {0});
    ASSERT_TRUE(fill(e, attr_i64("value", 1)).ok());
  }
  TestTensor strided(DType::kI32, {2, 2}, {4, 2}, 1, 8);
  ASSERT_TRUE(fill(strided, attr_i64("value", 7)).ok());
  EXPECT_EQ(strided.int_values(), (std::vector<std::int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(strided.storage_bytes()[0], std::byte{0xAB});
  EXPECT_EQ(strided.storage_bytes()[2 * 4], std::byte{0xAB});
  TestTensor out(DType::kF32, {2});
  static const char text[] = "one";
  dx_attr_t string_value{};
  string_value.name = "value";
  string_value.type = DX_ATTR_STRING;
  string_value.count = 3;
  string_value.value.str = text;
  EXPECT_EQ(fill(out, string_value).code, DX_INVALID_ARGUMENT);
  const RegisteredKernel* k = ref.find("dx.fill", {}, {DType::kF32});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->desc.num_inputs, 0);
  EXPECT_EQ(ref.call_raw(*k, {out.dl()}, {out.dl()}, {}).code, DX_INVALID_ARGUMENT);  // arity
}

}  // namespace
}  // namespace deepx::ref::testing
