#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compare.hpp"

using namespace deepx::conformance;

namespace {
std::vector<uint8_t> f32s(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) store_double(DType::F32, v[i], b.data() + 4 * i);
  return b;
}
std::vector<uint8_t> f16s(std::vector<double> v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) store_double(DType::F16, v[i], b.data() + 2 * i);
  return b;
}
Comparison cmp(const Tolerance& t, DType d, const std::vector<uint8_t>& e, const std::vector<uint8_t>& a,
               const std::vector<double>* terms = nullptr, int64_t k = 1) {
  return compare_outputs(t, d, e.data(), a.data(), static_cast<int64_t>(e.size() / byte_size(d)), terms, k);
}
}  // namespace

TEST(CertifyToleranceTable, LookupFollowsTheClasses) {
  EXPECT_EQ(tolerance_for("dx.add", DType::F32, "real").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.add", DType::F16, "real").rule, Rule::Ulp);
  EXPECT_EQ(tolerance_for("dx.add", DType::F16, "exact").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.add", DType::I32, "real").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.exp", DType::F32, "real").ulps, 4);
  EXPECT_EQ(tolerance_for("dx.exp", DType::BF16, "exact").ulps, 1);
  EXPECT_EQ(tolerance_for("dx.sum", DType::F32, "real").rule, Rule::ErrorBound);
  EXPECT_EQ(tolerance_for("dx.sum", DType::F32, "exact").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.sum", DType::I64, "real").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.softmax", DType::BF16, "real").rtol, 1.6e-2);
  EXPECT_EQ(tolerance_for("dx.transpose", DType::F16, "special").rule, Rule::BitExact);
  EXPECT_TRUE(tolerance_for("dx.max", DType::F32, "special").ignore_zero_sign);
  EXPECT_FALSE(tolerance_for("dx.relu", DType::F32, "special").ignore_zero_sign);
}

TEST(CertifyToleranceTable, HashIsStableAndCoversTheTable) {
  EXPECT_EQ(tolerance_table_sha256().size(), 64u);
  EXPECT_EQ(tolerance_table_sha256(), tolerance_table_sha256());
  EXPECT_NE(tolerance_table_json().find("\"rule\":\"error_bound\""), std::string::npos);
}

TEST(CertifyComparator, BitExactDistinguishesZeroSignsAndMatchesNaN) {
  Tolerance t = tolerance_for("dx.relu", DType::F32, "special");
  auto e = f32s({0.0f, NAN, INFINITY, 1.5f});
  EXPECT_TRUE(cmp(t, DType::F32, e, f32s({0.0f, -NAN, INFINITY, 1.5f})).pass);
  auto c = cmp(t, DType::F32, e, f32s({-0.0f, NAN, INFINITY, 1.5f}));
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.worst_index, 0);
  EXPECT_FALSE(cmp(t, DType::F32, e, f32s({0.0f, 1.0f, INFINITY, 1.5f})).pass);   // NaN by position
  EXPECT_FALSE(cmp(t, DType::F32, e, f32s({0.0f, NAN, -INFINITY, 1.5f})).pass);   // Inf with sign
  Tolerance m = tolerance_for("dx.max", DType::F32, "special");
  EXPECT_TRUE(cmp(m, DType::F32, e, f32s({-0.0f, NAN, INFINITY, 1.5f})).pass);
}

TEST(CertifyComparator, UlpBound) {
  Tolerance t = tolerance_for("dx.exp", DType::F32, "real");  // 4 ulp
  const float x = 2.0f;
  float x4 = x, x5 = x;
  for (int i = 0; i < 4; ++i) x4 = std::nextafter(x4, 3.0f);
  for (int i = 0; i < 5; ++i) x5 = std::nextafter(x5, 3.0f);
  EXPECT_TRUE(cmp(t, DType::F32, f32s({x}), f32s({x4})).pass);
  auto c = cmp(t, DType::F32, f32s({x}), f32s({x5}));
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.max_ulp, 5u);
  EXPECT_NE(c.reason.find("5 ulp"), std::string::npos);
  // f16: 1 ulp
  Tolerance h = tolerance_for("dx.exp", DType::F16, "real");
  EXPECT_TRUE(cmp(h, DType::F16, f16s({1.0}), f16s({1.0 + std::ldexp(1.0, -10)})).pass);
  EXPECT_FALSE(cmp(h, DType::F16, f16s({1.0}), f16s({1.0 + std::ldexp(1.0, -9)})).pass);
  // finite vs Inf never passes, even one ulp apart
  EXPECT_FALSE(cmp(h, DType::F16, f16s({65504.0}), f16s({INFINITY})).pass);
}

TEST(CertifyComparator, ErrorBoundUsesSumOfAbsoluteTerms) {
  Tolerance t = tolerance_for("dx.sum", DType::F32, "real");  // 2*K*2^-24*sum|terms| + 1 ulp
  std::vector<double> terms = {1000.0};
  const int64_t k = 100;
  // bound = 2*100*2^-24*1000 + ulp(1) ~ 0.0119
  EXPECT_TRUE(cmp(t, DType::F32, f32s({1.0f}), f32s({1.011f}), &terms, k).pass);
  EXPECT_FALSE(cmp(t, DType::F32, f32s({1.0f}), f32s({1.013f}), &terms, k).pass);
  // An accumulator overflow makes the element unconstrained.
  std::vector<double> huge = {1e39};
  auto c = cmp(t, DType::F32, f32s({1.0f}), f32s({INFINITY}), &huge, 3);
  EXPECT_TRUE(c.pass);
  EXPECT_EQ(c.unconstrained, 1);
}

TEST(CertifyComparator, RtolAtol) {
  Tolerance t = tolerance_for("dx.softmax", DType::F32, "real");
  EXPECT_TRUE(cmp(t, DType::F32, f32s({0.5f}), f32s({0.5f + 1e-5f})).pass);
  EXPECT_FALSE(cmp(t, DType::F32, f32s({0.5f}), f32s({0.5f + 3e-5f})).pass);
}

TEST(CertifyComparator, IntegersAreExact) {
  Tolerance t = tolerance_for("dx.add", DType::I64, "real");
  std::vector<uint8_t> e(16), a(16);
  store_int(DType::I64, std::numeric_limits<int64_t>::min(), e.data());
  store_int(DType::I64, 5, e.data() + 8);
  a = e;
  EXPECT_TRUE(cmp(t, DType::I64, e, a).pass);
  store_int(DType::I64, 6, a.data() + 8);
  auto c = cmp(t, DType::I64, e, a);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.worst_index, 1);
  EXPECT_EQ(c.mismatches, 1);
}

TEST(CertifyComparator, WorstElementPrefersFailures) {
  Tolerance t = tolerance_for("dx.add", DType::F16, "real");  // 1 ulp
  // element 0 is 1 ulp off (passes), element 1 is 2 ulp off (fails)
  auto e = f16s({1.0, 2.0});
  auto a = f16s({1.0 + std::ldexp(1.0, -10), 2.0 + std::ldexp(1.0, -8)});
  auto c = cmp(t, DType::F16, e, a);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.worst_index, 1);
}

TEST(CertifyComparator, MostlyConstant) {
  std::vector<uint8_t> zeros(4 * 100, 0);
  EXPECT_TRUE(mostly_constant(DType::F32, zeros.data(), 100));
  auto some = f32s(std::vector<float>(100, 0.0f));
  for (int i = 0; i < 20; ++i) store_double(DType::F32, i + 1.0, some.data() + 4 * i);
  EXPECT_FALSE(mostly_constant(DType::F32, some.data(), 100));
  EXPECT_FALSE(mostly_constant(DType::F32, zeros.data(), 8));  // too small to judge
}

TEST(CertifyComparator, WorstValuesOfWideIntegersAreExact) {
  Tolerance t = tolerance_for("dx.add", DType::I64, "real");
  std::vector<uint8_t> e(8), a(8);
  store_int(DType::I64, 9007199254740993, e.data());  // 2^53 + 1: not a double
  store_int(DType::I64, 9007199254740992, a.data());
  auto c = cmp(t, DType::I64, e, a);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.worst_expected_text, "9007199254740993");
  EXPECT_EQ(c.worst_actual_text, "9007199254740992");
}
