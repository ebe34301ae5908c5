// The reference is the oracle every plugin is certified against, so it is checked here against
// something independent of it: dx.softmax, dx.log_softmax and dx.cross_entropy, forward and
// backward, on huge logits (where max + log(sum) rounds to max), near-ties, cancellations, tiny
// magnitudes and -Inf, compared with the same quantities computed in this file in long double
// from the values the kernels actually read. The bound on each element is what computing in f64
// and rounding once to the output dtype can cost (stated at `tolerance`), far below the errors of
// a formula that cancels (log 2 lost entirely for [1e17, 1e17, 0, 0]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

using Row = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 0x1p-52;  // f64 epsilon: the reference computes in f64

// Rows where a formula that adds the max back before subtracting cancels, or whose terms
// underflow, tie, or span the whole exponent range.
const std::vector<Row> kRows = {
    {1e17, 1e17, 0, 0},                  // the case: cross_entropy(label 0) = log 2
    {1e17, 1e17 + 16, 1e17 - 16, -1e17}, // huge near-ties one f64 ulp apart
    {-1e17, -1e17 + 32, -1e17, -1e17},   // huge negative, one element a few ulp above
    {4e15, 4e15 + 0.5, 4e15 + 1, 4e15},  // max + log(sum) keeps only one fractional bit
    {1e300, 1e300, -1e300, 1e300},       // x - max = -2e300, still finite
    {1, 1 + 0x1p-52, 1 - 0x1p-53, 1},    // near-ties at 1
    {0, -40, -40, -40},                  // log(sum) ~ 1e-17, below f64's resolution at 1
    {-1000, 0, 1000, 1000 - 1e-13},      // wide range with a near tie at the top
    {20, 20 + 1e-12, -20, 3},            // softmax - onehot cancels for the label
    {1e-300, -1e-300, 5e-324, 0},        // tiny magnitudes and a subnormal: uniform rows
    {0, -kInf, 1, -kInf},                // -Inf elements: softmax 0, log_softmax -Inf
    {60000, 60000, 0, -1000},            // f16-sized huge logits
    {65504, 65504, 65504, 65472},        // f16's largest values, ties and one ulp below
};
constexpr std::int64_t kLabels[] = {0, 1, 2};  // labels tried per row

// The same quantities in long double from the row's values (which must be finite or -Inf, with a
// finite max).
struct Oracle {
  std::vector<long double> x;
  long double max = 0, sum = 0;  // sum of exp(x - max)
  explicit Oracle(const Row& row) : x(row.begin(), row.end()) {
    max = *std::max_element(x.begin(), x.end());
    for (long double v : x) sum += expl(v - max);
  }
  long double softmax(std::size_t i) const { return expl(x[i] - max) / sum; }
  long double log_softmax(std::size_t i) const { return (x[i] - max) - logl(sum); }
  long double cross_entropy(std::size_t label) const { return logl(sum) - (x[label] - max); }
  // max - x of element i (0 for -Inf, whose softmax is exactly 0): one rounding of x - max moves
  // exp(x - max) by this many f64 epsilons, relative.
  double shift(std::size_t i) const { return std::isinf(static_cast<double>(x[i])) ? 0 : static_cast<double>(max - x[i]); }
};

int precision_bits(DType t) {
  switch (t) {
    case DType::kF64: return 53;
    case DType::kF32: return 24;
    case DType::kF16: return 11;
    default: return 8;
  }
}
double smallest_subnormal(DType t) {
  switch (t) {
    case DType::kF64: return 0x1p-1074;
    case DType::kF32: return 0x1p-149;
    case DType::kF16: return 0x1p-24;
    default: return 0x1p-133;
  }
}
double largest_finite(DType t) {
  switch (t) {
    case DType::kF64: return std::numeric_limits<double>::max();
    case DType::kF32: return std::numeric_limits<float>::max();
    case DType::kF16: return 65504;
    default: return 0x1.fep127;
  }
}

// The bound for one element: `f64_error` is what the f64 computation may cost (a few f64 ulps
// of each term it adds or subtracts, times the number of terms), then the one rounding to the
// output dtype (half an ulp: 2^-p relative) or to its smallest subnormal.
double tolerance(DType t, long double expected, double f64_error) {
  return f64_error + std::fabs(static_cast<double>(expected)) * std::ldexp(1.0, -precision_bits(t)) +
         smallest_subnormal(t);
}

void expect_near_oracle(double actual, long double expected, double bound, const std::string& what) {
  const double e = static_cast<double>(expected);
  if (std::isinf(e)) {
    EXPECT_EQ(actual, e) << what;
    return;
  }
  EXPECT_LE(std::fabs(actual - e), bound) << what << ": got " << actual << ", expected " << e << " (bound " << bound
                                          << ")";
}

std::string describe(DType t, std::size_t row) { return std::string(name_of(t)) + " row " + std::to_string(row); }

class Numerics : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
};

// The rows that fit the dtype, as the kernels will read them (rounded once to the dtype).
std::vector<std::pair<std::size_t, Row>> rows_for(DType t) {
  std::vector<std::pair<std::size_t, Row>> out;
  for (std::size_t r = 0; r < kRows.size(); ++r) {
    bool fits = true;
    for (double v : kRows[r]) fits = fits && (std::isinf(v) || std::fabs(v) <= largest_finite(t));
    if (!fits) continue;
    const TestTensor x = TestTensor::of(t, {static_cast<std::int64_t>(kRows[r].size())}, kRows[r]);
    out.emplace_back(r, x.values());
  }
  return out;
}

TEST_F(Numerics, SoftmaxAndLogSoftmaxAgainstLongDouble) {
  for (DType t : kF) {
    for (const auto& [r, row] : rows_for(t)) {
      const auto n = static_cast<std::int64_t>(row.size());
      const TestTensor x = TestTensor::of(t, {n}, row);
      TestTensor s(t, {n}), ls(t, {n});
      ASSERT_TRUE(ref.call("dx.softmax", {&x}, {&s}).ok());
      ASSERT_TRUE(ref.call("dx.log_softmax", {&x}, {&ls}).ok());
      const Oracle o(row);
      const double terms = static_cast<double>(n) + 2;
      for (std::size_t i = 0; i < row.size(); ++i) {
        const std::string what = describe(t, r) + " element " + std::to_string(i);
        const long double sm = o.softmax(i), lsm = o.log_softmax(i);
        const double shift = o.shift(i);
        // softmax: exp of (x - max), rounded (relative error shift * eps), over an n-term sum.
        expect_near_oracle(s.get(static_cast<std::int64_t>(i)), sm,
                           tolerance(t, sm, 4 * kEps * static_cast<double>(sm) * (shift + terms)), "softmax " + what);
        // log_softmax: (x - max) - log(sum), each term with a few ulps.
        expect_near_oracle(ls.get(static_cast<std::int64_t>(i)), lsm,
                           tolerance(t, lsm, 4 * kEps * (shift + static_cast<double>(logl(o.sum)) + terms)),
                           "log_softmax " + what);
      }
    }
  }
}

TEST_F(Numerics, CrossEntropyAgainstLongDouble) {
  for (DType t : kF) {
    for (const auto& [r, row] : rows_for(t)) {
      const auto n = static_cast<std::int64_t>(row.size());
      const Oracle o(row);
      for (std::int64_t label : kLabels) {
        if (std::isinf(row[static_cast<std::size_t>(label)])) continue;  // an infinite loss: other tests
        const std::string what = describe(t, r) + " label " + std::to_string(label);
        const TestTensor x = TestTensor::of(t, {1, n}, row);
        const TestTensor labels = TestTensor::ints(DType::kI64, {1}, {label});
        TestTensor loss(t, {1});
        ASSERT_TRUE(ref.call("dx.cross_entropy", {&x, &labels}, {&loss}, {attr_string("reduction", "none")}).ok());
        const long double expected = o.cross_entropy(static_cast<std::size_t>(label));
        const double shift = o.shift(static_cast<std::size_t>(label));
        const double terms = static_cast<double>(n) + 2;
        expect_near_oracle(loss.get(0), expected,
                           tolerance(t, expected, 4 * kEps * (shift + static_cast<double>(logl(o.sum)) + terms)),
                           "cross_entropy " + what);

        // Backward with dy = 0.75: dlogits = 0.75 (softmax - onehot).
        const TestTensor dy = TestTensor::of(t, {1}, {0.75});
        TestTensor dlogits(t, {1, n});
        ASSERT_TRUE(ref.call_backward("dx.cross_entropy", {&dy}, {&x, &labels}, {&loss}, {&dlogits, nullptr},
                                      {attr_string("reduction", "none")})
                        .ok());
        for (std::size_t c = 0; c < row.size(); ++c) {
          const long double sm = o.softmax(c);
          const long double g = 0.75L * (sm - (static_cast<std::int64_t>(c) == label ? 1.0L : 0.0L));
          const double shift_c = o.shift(c);
          expect_near_oracle(dlogits.get(static_cast<std::int64_t>(c)), g,
                             tolerance(t, g, 4 * kEps * (static_cast<double>(sm) * (shift_c + terms) + 1)),
                             "cross_entropy backward " + what + " class " + std::to_string(c));
        }
      }
    }
  }
}

TEST_F(Numerics, SoftmaxAndLogSoftmaxBackwardAgainstLongDouble) {
  const Row dy_values = {0.75, -0.5, 0.25, 1};
  for (DType t : kF) {
    for (const auto& [r, row] : rows_for(t)) {
      const auto n = static_cast<std::int64_t>(row.size());
      const TestTensor x = TestTensor::of(t, {n}, row);
      const TestTensor dy = TestTensor::of(t, {n}, dy_values);
      TestTensor y(t, {n}), dx(t, {n}), ly(t, {n}), ldx(t, {n});
      ASSERT_TRUE(ref.call("dx.softmax", {&x}, {&y}).ok());
      ASSERT_TRUE(ref.call("dx.log_softmax", {&x}, {&ly}).ok());
      ASSERT_TRUE(ref.call_backward("dx.softmax", {&dy}, {&x}, {&y}, {&dx}).ok());
      ASSERT_TRUE(ref.call_backward("dx.log_softmax", {&dy}, {&x}, {&ly}, {&ldx}).ok());
      const Oracle o(row);
      const double terms = static_cast<double>(n) + 2;
      // sum(dy s) and sum(dy), with the magnitudes their f64 evaluation may cost.
      long double dot = 0, dot_error = 0, total = 0, total_abs = 0;
      for (std::size_t j = 0; j < row.size(); ++j) {
        const long double g = dy.get(static_cast<std::int64_t>(j));
        dot += g * o.softmax(j);
        dot_error += fabsl(g) * o.softmax(j) * (o.shift(j) + terms);
        total += g;
        total_abs += fabsl(g);
      }
      for (std::size_t i = 0; i < row.size(); ++i) {
        const std::string what = describe(t, r) + " element " + std::to_string(i);
        const long double s = o.softmax(i), g = dy.get(static_cast<std::int64_t>(i));
        const long double s_error = s * (o.shift(i) + terms);  // of s, in f64 epsilons
        // softmax: dx = s (dy - sum(dy s)).
        const long double d_softmax = s * (g - dot);
        expect_near_oracle(dx.get(static_cast<std::int64_t>(i)), d_softmax,
                           tolerance(t, d_softmax,
                                     4 * kEps * static_cast<double>(s_error * (fabsl(g) + fabsl(dot)) + s * dot_error + fabsl(d_softmax))),
                           "softmax backward " + what);
        // log_softmax: dx = dy - s sum(dy).
        const long double d_log = g - s * total;
        expect_near_oracle(ldx.get(static_cast<std::int64_t>(i)), d_log,
                           tolerance(t, d_log, 4 * kEps * static_cast<double>(fabsl(g) + s_error * total_abs * terms)),
                           "log_softmax backward " + what);
      }
    }
  }
}

// The exact cases, by value: f64 logits [[1e17, 1e17, 0, 0]] with label 0 lose log 2
// entirely when log-sum-exp is formed before x[label] is subtracted, and log_softmax gives 0
// for the two largest when max + log(sum) is formed before x is subtracted.
TEST_F(Numerics, HugeLogitsKeepLogTwo) {
  const double log2 = std::log(2.0);
  const double ulp = std::nextafter(log2, 1.0) - log2;
  const TestTensor x = TestTensor::of(DType::kF64, {1, 4}, {1e17, 1e17, 0, 0});
  const TestTensor labels = TestTensor::ints(DType::kI64, {1}, {0});
  for (const char* reduction : {"none", "mean", "sum"}) {
    const bool none = std::string(reduction) == "none";
    TestTensor loss(DType::kF64, none ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{});
    ASSERT_TRUE(ref.call("dx.cross_entropy", {&x, &labels}, {&loss}, {attr_string("reduction", reduction)}).ok());
    EXPECT_NEAR(loss.get(0), log2, 2 * ulp) << reduction;
  }
  TestTensor ls(DType::kF64, {1, 4});
  ASSERT_TRUE(ref.call("dx.log_softmax", {&x}, {&ls}).ok());
  EXPECT_NEAR(ls.get(0), -log2, 2 * ulp);
  EXPECT_NEAR(ls.get(1), -log2, 2 * ulp);
  EXPECT_EQ(ls.get(2), -1e17);  // -1e17 - log 2 rounds to -1e17
  // The gradient of the mean loss: softmax - onehot = [-0.5, 0.5, 0, 0].
  TestTensor loss(DType::kF64, {}), dlogits(DType::kF64, {1, 4});
  ASSERT_TRUE(ref.call("dx.cross_entropy", {&x, &labels}, {&loss}).ok());
  const TestTensor dy = TestTensor::of(DType::kF64, {}, {1});
  ASSERT_TRUE(ref.call_backward("dx.cross_entropy", {&dy}, {&x, &labels}, {&loss}, {&dlogits, nullptr}).ok());
  EXPECT_EQ(dlogits.values(), (std::vector<double>{-0.5, 0.5, 0, 0}));
  // The same in f32 and bf16 (the reference computes in f64, where 1e17 + log 2 is 1e17).
  for (DType t : {DType::kF32, DType::kBF16}) {
    const TestTensor xt = TestTensor::of(t, {1, 4}, {1e17, 1e17, 0, 0});
    TestTensor lt(t, {});
    ASSERT_TRUE(ref.call("dx.cross_entropy", {&xt, &labels}, {&lt}).ok());
    const TestTensor rounded = TestTensor::of(t, {}, {log2});
    EXPECT_EQ(lt.get(0), rounded.get(0)) << name_of(t);
  }
}

}  // namespace
}  // namespace deepx::ref::testing
