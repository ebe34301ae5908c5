// Forward kernels of the second and third op groups: unary math, rounding, clamp, pow,
// maximum/minimum, comparisons, logic, where, cast, and the reductions mean, prod, min, argmax,
// argmin. Hand-computed values, identities and IEEE special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
using Shape = std::vector<std::int64_t>;

class Math : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  // Runs a unary F op on `values` (dtype t) and returns the outputs.
  std::vector<double> unary(const char* op, DType t, const std::vector<double>& values,
                            const std::vector<dx_attr_t>& attrs = {}) {
    const TestTensor in = TestTensor::of(t, {static_cast<std::int64_t>(values.size())}, values);
    TestTensor out(t, {static_cast<std::int64_t>(values.size())});
    const Status s = ref.call(op, {&in}, {&out}, attrs);
    EXPECT_TRUE(s.ok()) << op << ": " << s.message;
    return out.values();
  }
  std::vector<std::int64_t> unary_int(const char* op, DType t, const std::vector<std::int64_t>& values,
                                      const std::vector<dx_attr_t>& attrs = {}) {
    const TestTensor in = TestTensor::ints(t, {static_cast<std::int64_t>(values.size())}, values);
    TestTensor out(t, {static_cast<std::int64_t>(values.size())});
    const Status s = ref.call(op, {&in}, {&out}, attrs);
    EXPECT_TRUE(s.ok()) << op << ": " << s.message;
    return out.int_values();
  }
};

TEST_F(Math, UnaryHandComputed) {
  EXPECT_EQ(unary("dx.abs", DType::kF64, {-1.5, 2, -0.0})[0], 1.5);
  EXPECT_FALSE(std::signbit(unary("dx.abs", DType::kF64, {-0.0})[0]));
  EXPECT_EQ(unary("dx.sign", DType::kF32, {-3, 0, 2.5, -0.0}), (std::vector<double>{-1, 0, 1, 0}));
  EXPECT_EQ(unary("dx.reciprocal", DType::kF16, {4, -0.5}), (std::vector<double>{0.25, -2}));
  EXPECT_EQ(unary("dx.sqrt", DType::kBF16, {16, 0.25}), (std::vector<double>{4, 0.5}));
  EXPECT_EQ(unary("dx.rsqrt", DType::kF32, {16, 0.25}), (std::vector<double>{0.25, 2}));
  EXPECT_EQ(unary("dx.log", DType::kF64, {1})[0], 0);
  EXPECT_EQ(unary("dx.expm1", DType::kF64, {1e-20})[0], 1e-20);  // no cancellation
  EXPECT_EQ(unary("dx.log1p", DType::kF64, {1e-20})[0], 1e-20);
  EXPECT_EQ(unary("dx.sin", DType::kF64, {0})[0], 0);
  EXPECT_EQ(unary("dx.cos", DType::kF64, {0})[0], 1);
  EXPECT_EQ(unary("dx.tan", DType::kF64, {0})[0], 0);
  EXPECT_EQ(unary("dx.sigmoid", DType::kF64, {0})[0], 0.5);
  EXPECT_NEAR(unary("dx.silu", DType::kF64, {1})[0], 0.7310585786300049, 1e-15);
  EXPECT_NEAR(unary("dx.gelu", DType::kF64, {1})[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(unary("dx.gelu", DType::kF64, {1}, {attr_string("approximate", "none")})[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(unary("dx.gelu", DType::kF64, {1}, {attr_string("approximate", "tanh")})[0], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(unary("dx.erf", DType::kF64, {1})[0], 0.8427007929497149, 1e-15);
  // f16 rounds once: sqrt(2) = 1.41421.. -> 1.4140625 (0x3DA8).
  const TestTensor two = TestTensor::of(DType::kF16, {}, {2});
  TestTensor r(DType::kF16, {});
  ASSERT_TRUE(ref.call("dx.sqrt", {&two}, {&r}).ok());
  EXPECT_EQ(r.get_bits16(0), 0x3DA8);
}

TEST_F(Math, RoundingOps) {
  const std::vector<double> x = {0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 2.2};
  EXPECT_EQ(unary("dx.round", DType::kF64, x), (std::vector<double>{0, 2, 2, -0.0, -2, -3, 2}));
  EXPECT_TRUE(std::signbit(unary("dx.round", DType::kF64, {-0.5})[0]));
  EXPECT_EQ(unary("dx.floor", DType::kF32, x), (std::vector<double>{0, 1, 2, -1, -2, -3, 2}));
  EXPECT_EQ(unary("dx.ceil", DType::kBF16, {0.5, -1.5, 2.0}), (std::vector<double>{1, -1, 2}));
  EXPECT_EQ(unary("dx.round", DType::kF16, {kInf})[0], kInf);
  EXPECT_TRUE(std::isnan(unary("dx.floor", DType::kF32, {kNaN})[0]));
}

TEST_F(Math, Identities) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(-5, 5);
  std::vector<double> x;
  for (int i = 0; i < 64; ++i) x.push_back(dist(rng));
  std::vector<double> neg_x;
  for (double v : x) neg_x.push_back(-v);
  const auto sig = unary("dx.sigmoid", DType::kF64, x);
  const auto th = unary("dx.tanh", DType::kF64, x), th_neg = unary("dx.tanh", DType::kF64, neg_x);
  const auto er = unary("dx.erf", DType::kF64, x), er_neg = unary("dx.erf", DType::kF64, neg_x);
  const auto s = unary("dx.sin", DType::kF64, x), c = unary("dx.cos", DType::kF64, x);
  const auto silu = unary("dx.silu", DType::kF64, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(sig[i], 1 / (1 + std::exp(-x[i])), 1e-15);
    EXPECT_EQ(th_neg[i], -th[i]);  // odd
    EXPECT_EQ(er_neg[i], -er[i]);
    EXPECT_NEAR(s[i] * s[i] + c[i] * c[i], 1, 1e-15);
    EXPECT_NEAR(silu[i], x[i] * sig[i], 1e-14);
    EXPECT_NEAR(std::tanh(x[i]), 2 * (1 / (1 + std::exp(-2 * x[i]))) - 1, 1e-14);
  }
  std::vector<double> pos;
  for (double v : x) pos.push_back(std::fabs(v) + 0.1);
  const auto lg = unary("dx.log", DType::kF64, pos);
  const auto back = unary("dx.exp", DType::kF64, lg);
  const auto sq = unary("dx.sqrt", DType::kF64, pos), rs = unary("dx.rsqrt", DType::kF64, pos);
  for (std::size_t i = 0; i < pos.size(); ++i) {
    EXPECT_NEAR(back[i], pos[i], 1e-14 * pos[i]);
    EXPECT_NEAR(sq[i] * rs[i], 1, 1e-15);
  }
}

TEST_F(Math, IeeeSpecialValues) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    EXPECT_TRUE(std::isnan(unary("dx.sqrt", t, {-1})[0]));
    EXPECT_EQ(unary("dx.log", t, {0})[0], -kInf);
    EXPECT_TRUE(std::isnan(unary("dx.log", t, {-1})[0]));
    EXPECT_EQ(unary("dx.log1p", t, {-1})[0], -kInf);
    EXPECT_EQ(unary("dx.reciprocal", t, {0, -0.0}), (std::vector<double>{kInf, -kInf}));
    EXPECT_EQ(unary("dx.rsqrt", t, {0})[0], kInf);
    EXPECT_EQ(unary("dx.expm1", t, {-kInf})[0], -1);
    EXPECT_EQ(unary("dx.tanh", t, {kInf, -kInf}), (std::vector<double>{1, -1}));
    EXPECT_EQ(unary("dx.sigmoid", t, {kInf, -kInf}), (std::vector<double>{1, 0}));
    EXPECT_EQ(unary("dx.erf", t, {kInf, -kInf}), (std::vector<double>{1, -1}));
    EXPECT_EQ(unary("dx.silu", t, {kInf, -kInf}), (std::vector<double>{kInf, 0}));  // the limits
    EXPECT_TRUE(std::isnan(unary("dx.sin", t, {kInf})[0]));
    EXPECT_EQ(unary("dx.gelu", t, {kInf, -kInf}), (std::vector<double>{kInf, 0}));
    EXPECT_EQ(unary("dx.gelu", t, {kInf, -kInf}, {attr_string("approximate", "tanh")}),
              (std::vector<double>{kInf, 0}));
    EXPECT_TRUE(std::isnan(unary("dx.sign", t, {kNaN})[0]));
    for (const char* op : {"dx.abs", "dx.sign", "dx.reciprocal", "dx.sqrt", "dx.rsqrt", "dx.expm1",
                           "dx.log", "dx.log1p", "dx.sin", "dx.cos", "dx.tan", "dx.tanh", "dx.erf",
                           "dx.sigmoid", "dx.silu", "dx.gelu", "dx.floor", "dx.ceil", "dx.round",
                           "dx.clamp"}) {
      EXPECT_TRUE(std::isnan(unary(op, t, {kNaN})[0])) << op;
    }
  }
}

TEST_F(Math, IntegerUnary) {
  for (DType t : {DType::kI64, DType::kI32, DType::kI16, DType::kI8}) {
    SCOPED_TRACE(name_of(t));
    EXPECT_EQ(unary_int("dx.abs", t, {-5, 7, 0}), (std::vector<std::int64_t>{5, 7, 0}));
    EXPECT_EQ(unary_int("dx.sign", t, {-5, 7, 0}), (std::vector<std::int64_t>{-1, 1, 0}));
    EXPECT_EQ(unary_int("dx.bitwise_not", t, {5, -1}), (std::vector<std::int64_t>{-6, 0}));
  }
  EXPECT_EQ(unary_int("dx.abs", DType::kI8, {-128})[0], -128);  // wraps
  EXPECT_EQ(unary_int("dx.abs", DType::kI64, {std::numeric_limits<std::int64_t>::min()})[0],
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(unary_int("dx.bitwise_not", DType::kU8, {5})[0], 250);
  EXPECT_EQ(unary_int("dx.bitwise_not", DType::kBool, {0, 1}), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(unary_int("dx.logical_not", DType::kBool, {0, 1}), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(unary_int("dx.sign", DType::kU8, {0, 200}), (std::vector<std::int64_t>{0, 1}));
}

TEST_F(Math, Clamp) {
  const std::vector<double> x = {-3, -0.5, 0.25, 2, kNaN};
  auto y = unary("dx.clamp", DType::kF32, x, {attr_f64("min", -1), attr_f64("max", 1)});
  EXPECT_EQ(std::vector<double>(y.begin(), y.end() - 1), (std::vector<double>{-1, -0.5, 0.25, 1}));
  EXPECT_TRUE(std::isnan(y.back()));
  y = unary("dx.clamp", DType::kF64, {-3, 2}, {attr_none("min"), attr_i64("max", 1)});
  EXPECT_EQ(y, (std::vector<double>{-3, 1}));
  y = unary("dx.clamp", DType::kF64, {-3, 2}, {attr_f64("min", 0)});  // num_attrs < schema
  EXPECT_EQ(y, (std::vector<double>{0, 2}));
  y = unary("dx.clamp", DType::kF64, {-3, 2}, {attr_f64("min", 5), attr_f64("max", 1)});
  EXPECT_EQ(y, (std::vector<double>{1, 1}));  // min > max gives max (PyTorch)
  y = unary("dx.clamp", DType::kF64, {-3, 2}, {attr_f64("min", kNaN)});
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(unary("dx.clamp", DType::kF64, {1, 2}), (std::vector<double>{1, 2}));  // no bounds
  // Integers: i64 bounds exact, f64 bounds rounded inward, both saturated to the dtype.
  EXPECT_EQ(unary_int("dx.clamp", DType::kI8, {-100, 5, 100}, {attr_i64("min", -10), attr_i64("max", 300)}),
            (std::vector<std::int64_t>{-10, 5, 100}));
  EXPECT_EQ(unary_int("dx.clamp", DType::kI32, {-100, 5, 100}, {attr_f64("min", -9.5), attr_f64("max", 9.5)}),
            (std::vector<std::int64_t>{-9, 5, 9}));
  EXPECT_EQ(unary_int("dx.clamp", DType::kU8, {0, 200}, {attr_i64("min", -5), attr_i64("max", 100)}),
            (std::vector<std::int64_t>{0, 100}));
  const TestTensor in = TestTensor::ints(DType::kI32, {1}, {1});
  TestTensor out(DType::kI32, {1});
  EXPECT_EQ(ref.call("dx.clamp", {&in}, {&out}, {attr_f64("min", kNaN)}).code, DX_INVALID_ARGUMENT);
}

TEST_F(Math, BinaryPowMaximumMinimum) {
  const TestTensor a = TestTensor::of(DType::kF64, {5}, {2, -8, 0, kNaN, 1});
  const TestTensor b = TestTensor::of(DType::kF64, {5}, {3, 1.0 / 3, 0, 1, kNaN});
  TestTensor out(DType::kF64, {5});
  ASSERT_TRUE(ref.call("dx.pow", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.get(0), 8);
  EXPECT_TRUE(std::isnan(out.get(1)));
  EXPECT_EQ(out.get(2), 1);
  EXPECT_TRUE(std::isnan(out.get(3)));
  EXPECT_EQ(out.get(4), 1);  // pow(1, NaN) = 1 (IEEE, NumPy, PyTorch)
  for (const char* op : {"dx.maximum", "dx.minimum"}) {
    for (DType t : kF) {
      const TestTensor x = TestTensor::of(t, {2, 2}, {1, kNaN, -2, 4});
      const TestTensor y = TestTensor::of(t, {2}, {3, -1});
      TestTensor o(t, {2, 2});
      ASSERT_TRUE(ref.call(op, {&x, &y}, {&o}).ok());
      const bool is_max = std::string(op) == "dx.maximum";
      EXPECT_EQ(o.get(0), is_max ? 3 : 1);
      EXPECT_TRUE(std::isnan(o.get(1)));
      EXPECT_EQ(o.get(2), is_max ? 3 : -2);
      EXPECT_EQ(o.get(3), is_max ? 4 : -1);
      const TestTensor y_nan = TestTensor::of(t, {}, {kNaN});
      ASSERT_TRUE(ref.call(op, {&x, &y_nan}, {&o}).ok());
      for (double v : o.values()) EXPECT_TRUE(std::isnan(v));
    }
    for (DType t : kI) {
      const TestTensor x = TestTensor::ints(t, {3}, {1, 100, 7});
      const TestTensor y = TestTensor::ints(t, {3}, {5, 2, 7});
      TestTensor o(t, {3});
      ASSERT_TRUE(ref.call(op, {&x, &y}, {&o}).ok());
      EXPECT_EQ(o.int_values(), std::string(op) == "dx.maximum" ? (std::vector<std::int64_t>{5, 100, 7})
                                                                : (std::vector<std::int64_t>{1, 2, 7}));
    }
  }
}

TEST_F(Math, Comparisons) {
  const char* ops[] = {"dx.eq", "dx.ne", "dx.lt", "dx.le", "dx.gt", "dx.ge"};
  // a = [1, 2, NaN], b = 2 (broadcast): truth tables per op.
  const std::vector<std::vector<std::int64_t>> expected = {
      {0, 1, 0}, {1, 0, 1}, {1, 0, 0}, {1, 1, 0}, {0, 0, 0}, {0, 1, 0}};
  for (DType t : kF) {
    const TestTensor a = TestTensor::of(t, {3}, {1, 2, kNaN});
    const TestTensor b = TestTensor::of(t, {}, {2});
    TestTensor out(DType::kBool, {3});
    for (int k = 0; k < 6; ++k) {
      ASSERT_TRUE(ref.call(ops[k], {&a, &b}, {&out}).ok());
      EXPECT_EQ(out.int_values(), expected[k]) << ops[k] << " " << name_of(t);
    }
  }
  for (DType t : kI) {
    const TestTensor a = TestTensor::ints(t, {3}, {1, 2, 3});
    const TestTensor b = TestTensor::ints(t, {1}, {2});
    TestTensor out(DType::kBool, {3});
    ASSERT_TRUE(ref.call("dx.lt", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{1, 0, 0}));
    ASSERT_TRUE(ref.call("dx.ge", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 1, 1}));
  }
  const TestTensor p = TestTensor::ints(DType::kBool, {4}, {0, 0, 1, 1});
  const TestTensor q = TestTensor::ints(DType::kBool, {4}, {0, 1, 0, 1});
  TestTensor out(DType::kBool, {4});
  ASSERT_TRUE(ref.call("dx.lt", {&p, &q}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 1, 0, 0}));
  ASSERT_TRUE(ref.call("dx.logical_and", {&p, &q}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 0, 0, 1}));
  ASSERT_TRUE(ref.call("dx.logical_or", {&p, &q}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 1, 1, 1}));
  ASSERT_TRUE(ref.call("dx.logical_xor", {&p, &q}, {&out}).ok());
  EXPECT_EQ(out.int_values(), (std::vector<std::int64_t>{0, 1, 1, 0}));
  // A non-canonical bool byte (2) reads as true.
  TestTensor odd = TestTensor::ints(DType::kBool, {1}, {0});
  *odd.flat(0) = std::byte{2};
  const TestTensor one = TestTensor::ints(DType::kBool, {1}, {1});
  TestTensor o1(DType::kBool, {1});
  ASSERT_TRUE(ref.call("dx.logical_and", {&odd, &one}, {&o1}).ok());
  EXPECT_EQ(o1.get_int(0), 1);
  // Shape errors.
  TestTensor wrong(DType::kBool, {3});
  EXPECT_EQ(ref.call("dx.eq", {&p, &q}, {&wrong}).code, DX_SHAPE_MISMATCH);
}

TEST_F(Math, Where) {
  const TestTensor cond = TestTensor::ints(DType::kBool, {2, 1}, {1, 0});
  for (DType t : {DType::kF32, DType::kI16, DType::kBool}) {
    const TestTensor a = TestTensor::ints(t, {3}, {1, 0, 1});
    const TestTensor b = TestTensor::ints(t, {}, {0});
    TestTensor out(t, {2, 3});
    ASSERT_TRUE(ref.call("dx.where", {&cond, &a, &b}, {&out}).ok());
    std::vector<std::int64_t> got;
    for (std::int64_t i = 0; i < 6; ++i) got.push_back(is_float(t) ? static_cast<std::int64_t>(out.get(i)) : out.get_int(i));
    EXPECT_EQ(got, (std::vector<std::int64_t>{1, 0, 1, 0, 0, 0})) << name_of(t);
  }
  // Bit-exact: a NaN payload is copied unchanged.
  TestTensor a(DType::kF32, {1});
  const std::uint32_t payload = 0x7FC01234;
  std::memcpy(a.flat(0), &payload, 4);
  const TestTensor b = TestTensor::of(DType::kF32, {1}, {0});
  const TestTensor yes = TestTensor::ints(DType::kBool, {}, {1});
  TestTensor out(DType::kF32, {1});
  ASSERT_TRUE(ref.call("dx.where", {&yes, &a, &b}, {&out}).ok());
  std::uint32_t got;
  std::memcpy(&got, out.flat(0), 4);
  EXPECT_EQ(got, payload);
}

TEST_F(Math, Cast) {
  const auto cast = [&](const TestTensor& in, DType to, std::vector<dx_attr_t> attrs = {}) {
    TestTensor out(to, in.shape());
    const Status s = ref.call("dx.cast", {&in}, {&out}, attrs);
    EXPECT_TRUE(s.ok()) << s.message;
    return out;
  };
  const TestTensor f = TestTensor::of(DType::kF64, {7}, {300, -300, kNaN, -2.7, 2.7, kInf, -0.0});
  EXPECT_EQ(cast(f, DType::kI8).int_values(), (std::vector<std::int64_t>{127, -128, 0, -2, 2, 127, 0}));
  EXPECT_EQ(cast(f, DType::kU8).int_values(), (std::vector<std::int64_t>{255, 0, 0, 0, 2, 255, 0}));
  EXPECT_EQ(cast(f, DType::kI64).int_values()[5], std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(cast(f, DType::kBool).int_values(), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 0}));
  const TestTensor big = TestTensor::of(DType::kF64, {2}, {1e6, 65520});
  EXPECT_EQ(cast(big, DType::kF16).values(), (std::vector<double>{kInf, kInf}));  // f16 overflow
  const TestTensor ints = TestTensor::ints(DType::kI64, {3}, {2049, 2051, -300});
  EXPECT_EQ(cast(ints, DType::kF16).values(), (std::vector<double>{2048, 2052, -300}));  // ties to even
  EXPECT_EQ(cast(ints, DType::kI8).int_values(), (std::vector<std::int64_t>{1, 3, -44}));  // wraps
  const TestTensor bools = TestTensor::ints(DType::kBool, {2}, {1, 0});
  EXPECT_EQ(cast(bools, DType::kF32).values(), (std::vector<double>{1, 0}));
  EXPECT_EQ(cast(bools, DType::kI32).int_values(), (std::vector<std::int64_t>{1, 0}));
  const TestTensor halves = TestTensor::of(DType::kF32, {1}, {1.0 + std::ldexp(1.0, -9)});
  EXPECT_EQ(cast(halves, DType::kBF16).values()[0], 1.0);  // rounds once, to nearest even
  // The dtype attribute must agree with the output.
  const DLDataType f32 = to_dlpack(DType::kF32);
  const std::int64_t packed = f32.code | (f32.bits << 8) | (1 << 16);
  cast(ints, DType::kF32, {attr_i64("dtype", packed)});
  cast(ints, DType::kF32, {attr_string("dtype", "f32")});
  TestTensor out(DType::kF32, {3});
  EXPECT_EQ(ref.call("dx.cast", {&ints}, {&out}, {attr_string("dtype", "f16")}).code, DX_INVALID_ARGUMENT);
}

class NewReductions : public Math {
 protected:
  Status reduce(const char* op, const TestTensor& in, const TestTensor& out,
                const Shape* axes, bool keepdims) {
    std::vector<dx_attr_t> attrs = {axes ? attr_i64s("axes", *axes) : attr_none("axes"),
                                    attr_bool("keepdims", keepdims)};
    return ref.call(op, {&in}, {&out}, attrs);
  }
  Status arg(const char* op, const TestTensor& in, const TestTensor& out,
             std::optional<std::int64_t> axis, bool keepdims) {
    return ref.call(op, {&in}, {&out},
                    {axis ? attr_i64("axis", *axis) : attr_none("axis"), attr_bool("keepdims", keepdims)});
  }
};

TEST_F(NewReductions, MeanProdMin) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::of(t, {2, 3}, {1, 2, 3, 4, 5, 6});
    TestTensor all(t, {}), rows(t, {2});
    const Shape last = {-1};
    ASSERT_TRUE(reduce("dx.mean", m, all, nullptr, false).ok());
    EXPECT_EQ(all.get(0), 3.5);
    ASSERT_TRUE(reduce("dx.prod", m, rows, &last, false).ok());
    EXPECT_EQ(rows.values(), (std::vector<double>{6, 120}));
    ASSERT_TRUE(reduce("dx.min", m, rows, &last, false).ok());
    EXPECT_EQ(rows.values(), (std::vector<double>{1, 4}));
    const TestTensor nan = TestTensor::of(t, {3}, {1, kNaN, -1});
    ASSERT_TRUE(reduce("dx.min", nan, all, nullptr, false).ok());
    EXPECT_TRUE(std::isnan(all.get(0)));
    // Empty: mean NaN, prod 1, min an error.
    const TestTensor empty(t, {0, 2});
    TestTensor cols(t, {2});
    const Shape first = {0};
    ASSERT_TRUE(reduce("dx.mean", empty, cols, &first, false).ok());
    EXPECT_TRUE(std::isnan(cols.get(0)));
    ASSERT_TRUE(reduce("dx.prod", empty, cols, &first, false).ok());
    EXPECT_EQ(cols.values(), (std::vector<double>{1, 1}));
    EXPECT_EQ(reduce("dx.min", empty, cols, &first, false).code, DX_INVALID_ARGUMENT);
  }
  for (DType t : kI) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::ints(t, {2, 2}, {100, 3, 7, 2});
    TestTensor mean(DType::kF64, {}), prod(DType::kI64, {}), mn(t, {});
    ASSERT_TRUE(reduce("dx.mean", m, mean, nullptr, false).ok());
    EXPECT_EQ(mean.get(0), 28);
    ASSERT_TRUE(reduce("dx.prod", m, prod, nullptr, false).ok());
    EXPECT_EQ(prod.get_int(0), 4200);  // beyond i8/u8/i16... held in i64
    ASSERT_TRUE(reduce("dx.min", m, mn, nullptr, false).ok());
    EXPECT_EQ(mn.get_int(0), 2);
  }
  // The integer mean is exact even where an f64 running sum would not be.
  const std::int64_t big = (std::int64_t{1} << 62) + 1;
  const TestTensor m = TestTensor::ints(DType::kI64, {2}, {big, -big + 4});
  TestTensor mean(DType::kF64, {});
  ASSERT_TRUE(reduce("dx.mean", m, mean, nullptr, false).ok());
  EXPECT_EQ(mean.get(0), 2);  // an f64 running sum would give 0
  // Integer product wraps in i64.
  const TestTensor p = TestTensor::ints(DType::kI64, {2}, {std::int64_t{1} << 62, 4});
  TestTensor prod(DType::kI64, {});
  ASSERT_TRUE(reduce("dx.prod", p, prod, nullptr, false).ok());
  EXPECT_EQ(prod.get_int(0), 0);
}

TEST_F(NewReductions, ArgmaxArgmin) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI16, DType::kU8}) {
    SCOPED_TRACE(name_of(t));
    const TestTensor m = TestTensor::of(t, {2, 3}, {1, 7, 7, 9, 0, 0});
    TestTensor flat(DType::kI64, {});
    ASSERT_TRUE(arg("dx.argmax", m, flat, std::nullopt, false).ok());
    EXPECT_EQ(flat.get_int(0), 3);
    ASSERT_TRUE(arg("dx.argmin", m, flat, std::nullopt, false).ok());
    EXPECT_EQ(flat.get_int(0), 4);  // first of the tied zeros
    TestTensor rows(DType::kI64, {2});
    ASSERT_TRUE(arg("dx.argmax", m, rows, 1, false).ok());
    EXPECT_EQ(rows.int_values(), (std::vector<std::int64_t>{1, 0}));  // first of the tied 7s
    TestTensor cols(DType::kI64, {1, 3});
    ASSERT_TRUE(arg("dx.argmin", m, cols, -2, true).ok());
    EXPECT_EQ(cols.int_values(), (std::vector<std::int64_t>{0, 1, 1}));
    TestTensor kept(DType::kI64, {1, 1});
    ASSERT_TRUE(arg("dx.argmax", m, kept, std::nullopt, true).ok());
    EXPECT_EQ(kept.get_int(0), 3);
  }
  // NaN counts as the extreme (first NaN), for argmax and argmin.
  const TestTensor nan = TestTensor::of(DType::kF64, {4}, {1, kNaN, 5, kNaN});
  TestTensor idx(DType::kI64, {});
  ASSERT_TRUE(arg("dx.argmax", nan, idx, std::nullopt, false).ok());
  EXPECT_EQ(idx.get_int(0), 1);
  ASSERT_TRUE(arg("dx.argmin", nan, idx, 0, false).ok());
  EXPECT_EQ(idx.get_int(0), 1);
  // Rank 0, empty, out-of-range axis.
  const TestTensor scalar = TestTensor::of(DType::kF32, {}, {3});
  ASSERT_TRUE(arg("dx.argmax", scalar, idx, std::nullopt, false).ok());
  EXPECT_EQ(idx.get_int(0), 0);
  ASSERT_TRUE(arg("dx.argmax", scalar, idx, -1, false).ok());
  const TestTensor empty(DType::kF32, {0, 3});
  EXPECT_EQ(arg("dx.argmax", empty, idx, std::nullopt, false).code, DX_INVALID_ARGUMENT);
  TestTensor three(DType::kI64, {3});
  EXPECT_EQ(arg("dx.argmin", empty, three, 0, false).code, DX_INVALID_ARGUMENT);
  TestTensor none(DType::kI64, {0});
  EXPECT_TRUE(arg("dx.argmin", empty, none, 1, false).ok());  // no groups: nothing to do
  EXPECT_EQ(arg("dx.argmax", nan, idx, 1, false).code, DX_OUT_OF_RANGE);
  // Identity: the value at argmax is the max, on random data with views.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> dist(-20, 20);
  TestTensor x(DType::kF32, {4, 5}, {1, 4}, 2, 30);  // transposed, offset view
  for (std::int64_t i = 0; i < 20; ++i) x.set(i, dist(rng));
  TestTensor am(DType::kI64, {4}), mx(DType::kF32, {4});
  ASSERT_TRUE(arg("dx.argmax", x, am, 1, false).ok());
  const Shape axis1 = {1};
  ASSERT_TRUE(reduce("dx.max", x, mx, &axis1, false).ok());
  for (std::int64_t r = 0; r < 4; ++r) EXPECT_EQ(x.get(r * 5 + am.get_int(r)), mx.get(r));
}

}  // namespace
}  // namespace deepx::ref::testing

namespace deepx::ref::testing {
namespace {

// Deterministic test values for any dtype: a spread of signs and magnitudes (F), small ints
// (I, never 0 when `nonzero`), alternating bools.
void fill_pattern(TestTensor& t, bool nonzero) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (is_float(t.dtype())) t.set(i, (static_cast<double>(i % 9) - 4) * 0.37 + 0.11);
    else if (t.dtype() == DType::kBool) t.set_int(i, i % 2);
    else t.set_int(i, nonzero ? (i % 5) + 1 : (i * 7 % 11) - 5);
  }
}

std::vector<std::byte> element_bytes(const TestTensor& t) {
  std::vector<std::byte> out;
  const std::size_t n = size_of(t.dtype());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::byte* p = t.flat(i);
    out.insert(out.end(), p, p + n);
  }
  return out;
}

const std::set<std::string> kElementwiseUnary = {
    "dx.abs", "dx.neg", "dx.sign", "dx.reciprocal", "dx.sqrt", "dx.rsqrt", "dx.exp", "dx.expm1",
    "dx.log", "dx.log1p", "dx.sin", "dx.cos", "dx.tan", "dx.tanh", "dx.erf", "dx.sigmoid",
    "dx.relu", "dx.silu", "dx.gelu", "dx.floor", "dx.ceil", "dx.round", "dx.clamp", "dx.cast",
    "dx.logical_not", "dx.bitwise_not"};
const std::set<std::string> kElementwiseBinary = {
    "dx.add", "dx.sub", "dx.mul", "dx.div", "dx.pow", "dx.maximum", "dx.minimum", "dx.eq",
    "dx.ne", "dx.lt", "dx.le", "dx.gt", "dx.ge", "dx.logical_and", "dx.logical_or",
    "dx.logical_xor"};

// Every registered elementwise kernel: a transposed input view and a strided, offset output
// view give the same bytes as compact tensors; empty and rank-0 tensors work; binary ops agree
// under an explicit stride-0 broadcast view.
TEST_F(Math, EveryElementwiseKernelHonoursViewsEmptyAndRank0) {
  int checked = 0;
  for (const auto& [key, kernel] : ref.fake().kernels) {
    const bool unary = kElementwiseUnary.count(kernel.op) && kernel.desc.num_inputs == 1;
    const bool binary = kElementwiseBinary.count(kernel.op) && kernel.desc.num_inputs == 2;
    if (!unary && !binary) continue;
    SCOPED_TRACE(key);
    std::vector<DType> types;
    for (const DLDataType& d : kernel.dtypes) types.push_back(*from_dlpack(d));
    const DType in_t = types[0], out_t = types.back();
    const bool nonzero = kernel.op == "dx.div";
    std::vector<const DLTensor*> ins;

    // Compact reference result on (3, 4).
    TestTensor a(in_t, {3, 4}), b(in_t, {3, 4}), expected(out_t, {3, 4});
    fill_pattern(a, false);
    fill_pattern(b, nonzero);
    if (binary) {  // b's rows all equal, so a stride-0 view can stand in for it
      for (std::int64_t i = 4; i < 12; ++i) {
        if (is_float(in_t)) b.set(i, b.get(i % 4));
        else b.set_int(i, b.get_int(i % 4));
      }
    }
    ins = {a.dl()};
    if (binary) ins.push_back(b.dl());
    ASSERT_TRUE(ref.call_raw(kernel, ins, {expected.dl()}, {}).ok());

    // Views: a transposed (column-major) input, a broadcast b, a strided offset output.
    TestTensor av(in_t, {3, 4}, {1, 3}, 2, 14);
    for (std::int64_t i = 0; i < 12; ++i) {
      if (is_float(in_t)) av.set(i, a.get(i));
      else av.set_int(i, a.get_int(i));
    }
    TestTensor bv(in_t, {3, 4}, {0, 1}, 1, 5);
    for (std::int64_t i = 0; i < 4; ++i) {
      if (is_float(in_t)) bv.set(i, b.get(i));
      else bv.set_int(i, b.get_int(i));
    }
    TestTensor out(out_t, {3, 4}, {9, 2}, 3, 30);
    ins = {av.dl()};
    if (binary) ins.push_back(bv.dl());
    ASSERT_TRUE(ref.call_raw(kernel, ins, {out.dl()}, {}).ok());
    EXPECT_EQ(element_bytes(out), element_bytes(expected));

    // Empty and rank 0.
    TestTensor e_in(in_t, {0, 3}), e_out(out_t, {0, 3});
    ins = {e_in.dl()};
    if (binary) ins.push_back(e_in.dl());
    EXPECT_TRUE(ref.call_raw(kernel, ins, {e_out.dl()}, {}).ok());
    TestTensor s_in(in_t, {}), s_b(in_t, {}), s_out(out_t, {});
    fill_pattern(s_in, false);
    fill_pattern(s_b, true);
    ins = {s_in.dl()};
    if (binary) ins.push_back(s_b.dl());
    EXPECT_TRUE(ref.call_raw(kernel, ins, {s_out.dl()}, {}).ok());
    // A wrong output shape is an error status.
    TestTensor bad(out_t, {4, 3});
    ins = {a.dl()};
    if (binary) ins.push_back(b.dl());
    EXPECT_EQ(ref.call_raw(kernel, ins, {bad.dl()}, {}).code, DX_SHAPE_MISMATCH);
    ++checked;
  }
  EXPECT_EQ(checked, 219 + 121);  // every unary (219) and binary (121) elementwise signature
}

}  // namespace
}  // namespace deepx::ref::testing
