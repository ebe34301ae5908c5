// ULP checks of the vectorisable functions in src/fast_math.h (f32 ones, the f32 -> f64 "wide"
// log/erf/gelu behind the f32/f16/bf16 kernels, exp_f64, exp_nonpositive_f32) against the f64 libm result
// rounded once to f32 (what the reference computes), on a sampled sweep of every f32 bit
// pattern plus dense sweeps of the delicate ranges, and the forward kernels that use them
// (dx.tanh, dx.sigmoid, dx.silu on f32, f16, bf16) against the reference plugin. Conformance
// limits (docs/tolerances.md): f32 <= 4 ulp (tanh <= 8), f16/bf16 <= 1 ulp of the output dtype.
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "../src/fast_math.h"
#include "../src/half.h"
#include "differential.h"

namespace deepx::cpu::testing {
namespace {

struct Worst {
  int64_t ulps = 0;
  float at = 0;
};

/// Largest distance of fast(x) from exact(x) rounded to f32 over every `step`-th bit pattern and
/// a dense sweep of [lo, hi].
Worst sweep(const std::function<float(float)>& fast, const std::function<double(double)>& exact,
            uint32_t step, float lo, float hi) {
  Worst w;
  auto one = [&](float x) {
    const int64_t d = ulp_distance(fast(x), static_cast<float>(exact(x)));
    if (d > w.ulps) w = {d, x};
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += step) one(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (float x = lo; x <= hi; x = std::nextafter(x, hi + 1.0f)) {
    one(x);
    // Dense near the ends, sparser in between.
    const float next = x + (hi - lo) * 1e-6f;
    if (std::fabs(x - lo) > 1e-3f && std::fabs(hi - x) > 1e-3f && next > x) x = next;
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f}) one(x);
  return w;
}

TEST(FastMath, TanhWithinEightUlp) {
  const Worst w = sweep([](float x) { return tanh_f32(x); }, [](double x) { return std::tanh(x); }, 4099, -10, 10);
  RecordProperty("tanh_f32_max_ulp", std::to_string(w.ulps));
  EXPECT_LE(w.ulps, 8) << "at " << w.at;
  EXPECT_EQ(std::signbit(tanh_f32(-0.0f)), true);
  EXPECT_EQ(tanh_f32(INFINITY), 1.0f);
  EXPECT_EQ(tanh_f32(-INFINITY), -1.0f);
}

TEST(FastMath, SigmoidWithinFourUlp) {
  const Worst w = sweep([](float x) { return sigmoid_f32(x); },
                        [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 4099, -110, 20);
  RecordProperty("sigmoid_f32_max_ulp", std::to_string(w.ulps));
  EXPECT_LE(w.ulps, 4) << "at " << w.at;
  EXPECT_EQ(sigmoid_f32(-INFINITY), 0.0f);
  EXPECT_EQ(sigmoid_f32(INFINITY), 1.0f);
}

TEST(FastMath, SiluWithinFourUlp) {
  const Worst w = sweep([](float x) { return silu_f32(x); },
                        [](double x) { return x == -INFINITY ? -0.0 : x / (1.0 + std::exp(-x)); }, 4099, -120,
                        20);
  RecordProperty("silu_f32_max_ulp", std::to_string(w.ulps));
  EXPECT_LE(w.ulps, 4) << "at " << w.at;
  EXPECT_TRUE(std::signbit(silu_f32(-INFINITY)) && silu_f32(-INFINITY) == 0.0f);
  EXPECT_EQ(silu_f32(INFINITY), INFINITY);
}

TEST(FastMath, ExpTimesScaleRoundsOnce) {
  // m * e^x with a subnormal result is rounded once, not the product of a rounded subnormal.
  Worst w;
  for (float x = -112.0f; x < -80.0f; x += 0.0009765625f) {
    for (float m : {1.0f, -1.5f, -100.0f, 127.0f}) {
      const int64_t d = ulp_distance(exp_mul_f32(x, m), static_cast<float>(m * std::exp(static_cast<double>(x))));
      if (d > w.ulps) w = {d, x};
    }
  }
  EXPECT_LE(w.ulps, 2) << "at " << w.at;
}

TEST(FastMath, LogWithinOneUlp) {
  const Worst w = sweep([](float x) { return log_f32(x); }, [](double x) { return std::log(x); }, 4099, 0.5f, 2.0f);
  RecordProperty("log_f32_max_ulp", std::to_string(w.ulps));
  EXPECT_LE(w.ulps, 1) << "at " << w.at;  // the contract is 4
  EXPECT_EQ(log_f32(0.0f), -INFINITY);
  EXPECT_EQ(log_f32(-0.0f), -INFINITY);
  EXPECT_EQ(log_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(log_f32(-INFINITY)));
  EXPECT_TRUE(std::isnan(log_f32(NAN)));
  EXPECT_EQ(log_f32(1.0f), 0.0f);
  EXPECT_EQ(log_f32(1e-45f), static_cast<float>(std::log(static_cast<double>(1e-45f))));  // subnormal
}

TEST(FastMath, ErfWithinOneUlp) {
  const Worst w = sweep([](float x) { return erf_f32(x); }, [](double x) { return std::erf(x); }, 4099, -4.5f, 4.5f);
  RecordProperty("erf_f32_max_ulp", std::to_string(w.ulps));
  EXPECT_LE(w.ulps, 1) << "at " << w.at;  // the contract is 8
  EXPECT_TRUE(std::signbit(erf_f32(-0.0f)) && erf_f32(-0.0f) == 0.0f);
  EXPECT_EQ(erf_f32(INFINITY), 1.0f);
  EXPECT_EQ(erf_f32(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(erf_f32(NAN)));
}

/// The wide gelu forms agree with the reference's f64 expression rounded to f32 wherever they
/// are used (x >= kGeluWideBelow; below it the kernels call the reference formula).
TEST(FastMath, GeluWideWithinOneUlp) {
  constexpr double kCubic = 0.044715, kSqrt2OverPi = 0.7978845608028654;
  auto erf_form = [](double x) { return 0.5 * x * std::erfc(-x / std::numbers::sqrt2); };
  auto tanh_form = [=](double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))); };
  auto head = [](float x) { return x < static_cast<float>(kGeluWideBelow) ? 0.0f : x; };
  const Worst we = sweep([&](float x) { return static_cast<float>(gelu_erf_wide(head(x))); },
                         [&](double x) { return erf_form(head(static_cast<float>(x))); }, 4099, -5.0f, 5.0f);
  const Worst wt = sweep([&](float x) { return static_cast<float>(gelu_tanh_wide(head(x))); },
                         [&](double x) { return tanh_form(head(static_cast<float>(x))); }, 4099, -5.0f, 5.0f);
  RecordProperty("gelu_erf_wide_max_ulp", std::to_string(we.ulps));
  RecordProperty("gelu_tanh_wide_max_ulp", std::to_string(wt.ulps));
  EXPECT_LE(we.ulps, 1) << "at " << we.at;  // the contract is 4
  EXPECT_LE(wt.ulps, 1) << "at " << wt.at;
  EXPECT_EQ(gelu_erf_wide(INFINITY), INFINITY);
  EXPECT_EQ(gelu_tanh_wide(INFINITY), INFINITY);
  EXPECT_TRUE(std::signbit(gelu_erf_wide(-0.0f)));
  EXPECT_TRUE(std::isnan(gelu_erf_wide(NAN)) && std::isnan(gelu_tanh_wide(NAN)));
}

/// The f32-lane gelu forms (the f32 kernels) against the reference's f64 expression rounded to
/// f32, for x >= kGeluWideBelow (below it the kernels call the reference formula): the sampled
/// sweep plus dense sweeps of the delicate ranges (around 0, the -5 cut, the ends of H's
/// intervals at multiples of 1/2, the 5.5 clamp). By hand (2026-11-21): erf form over every
/// f32 in [-5, +Inf] (3.2e9 values) in the x86-64-v4 build: max 2 ulp (96.0% exact, 4.0% at
/// 1 ulp, 126116 values at 2 ulp); every 97th value in the v3 build: max 2. Without FMA (this
/// test's baseline build) Horner's separate roundings add one: 3 ulp at a few values (e.g.
/// -2.50083). tanh form, every 997th value: max 2 ulp (v4, v3), 3 (baseline); the dense edge
/// sweeps here find 3 ulp with FMA too (-2.75014). The contract is 4.
TEST(FastMath, GeluF32WithinThreeUlp) {
  constexpr double kCubic = 0.044715, kSqrt2OverPi = 0.7978845608028654;
  auto erf_form = [](double x) { return 0.5 * x * std::erfc(-x / std::numbers::sqrt2); };
  auto tanh_form = [=](double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))); };
  auto head = [](float x) { return x < static_cast<float>(kGeluWideBelow) ? 0.0f : x; };
  // Through the row functions (what the kernels call), one element at a time and in rows.
  auto erf_row = [&](float x) {
    float in[3] = {head(x), 1.0f, -1.0f}, out[3];
    gelu_erf_row_f32(in, out, 3);
    return out[0];
  };
  auto tanh_row = [&](float x) {
    float in[1] = {head(x)}, out[1];
    gelu_tanh_row_f32(in, out, 1);
    return out[0];
  };
  const float lo = static_cast<float>(kGeluWideBelow);
  Worst we = sweep([&](float x) { return gelu_erf_f32(head(x)); },
                   [&](double x) { return erf_form(head(static_cast<float>(x))); }, 4099, lo, 6.0f);
  Worst wt = sweep([&](float x) { return gelu_tanh_f32(head(x)); },
                   [&](double x) { return tanh_form(head(static_cast<float>(x))); }, 4099, lo, 6.0f);
  for (float edge = -5.5f; edge <= 5.5f; edge += 0.5f) {
    if (edge == 0.0f) continue;  // around 0: the magnitude sweep below
    for (float x = edge - 1e-3f; x <= edge + 1e-3f; x = std::nextafter(x, 10.0f)) {
      if (x < lo) continue;
      const int64_t de = ulp_distance(erf_row(x), static_cast<float>(erf_form(x)));
      const int64_t dt = ulp_distance(tanh_row(x), static_cast<float>(tanh_form(x)));
      if (de > we.ulps) we = {de, x};
      if (dt > wt.ulps) wt = {dt, x};
    }
  }
  std::vector<float> around_zero;
  for (float m = 1e-3f; m > 1e-37f; m *= 0.999f) around_zero.push_back(m);
  for (float m : {1e-38f, 1e-40f, 3e-42f, 1e-44f, 1.4e-45f}) around_zero.push_back(m);  // subnormals
  for (const float m : around_zero) {
    for (const float x : {m, -m}) {
      const int64_t de = ulp_distance(erf_row(x), static_cast<float>(erf_form(x)));
      const int64_t dt = ulp_distance(tanh_row(x), static_cast<float>(tanh_form(x)));
      if (de > we.ulps) we = {de, x};
      if (dt > wt.ulps) wt = {dt, x};
    }
  }
  RecordProperty("gelu_erf_f32_max_ulp", std::to_string(we.ulps));
  RecordProperty("gelu_tanh_f32_max_ulp", std::to_string(wt.ulps));
#if defined(__FMA__)
  constexpr int64_t kErfLimit = 2;
#else
  constexpr int64_t kErfLimit = 3;
#endif
  constexpr int64_t kTanhLimit = 3;
  EXPECT_LE(we.ulps, kErfLimit) << "at " << we.at;
  EXPECT_LE(wt.ulps, kTanhLimit) << "at " << wt.at;
  for (auto f : {&gelu_erf_f32, &gelu_tanh_f32}) {
    EXPECT_EQ(f(INFINITY), INFINITY);
    EXPECT_EQ(f(3.0e38f), 3.0e38f);
    EXPECT_EQ(f(7.0f), 7.0f);
    EXPECT_TRUE(std::signbit(f(-0.0f)) && f(-0.0f) == 0.0f);
    EXPECT_TRUE(!std::signbit(f(0.0f)) && f(0.0f) == 0.0f);
    EXPECT_TRUE(std::isnan(f(NAN)) && std::isnan(f(-NAN)));
  }
  // Rows of every length up to 40 (vector bodies and remainders) match the scalar function.
  std::vector<float> in(40), out(40);
  for (int n = 0; n <= 40; ++n) {
    for (int i = 0; i < n; ++i) in[i] = -4.9f + 0.37f * static_cast<float>(i * 7 % 29) + (i == 5 ? NAN : 0.0f);
    gelu_erf_row_f32(in.data(), out.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_LE(ulp_distance(out[i], gelu_erf_f32(in[i])), 1) << n << " " << i;
    gelu_tanh_row_f32(in.data(), out.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_LE(ulp_distance(out[i], gelu_tanh_f32(in[i])), 1) << n << " " << i;
  }
}

/// The marked row functions (what the f32 gelu kernel calls): the plain row function's bits for
/// inputs >= kGeluWideBelow (and NaN), the input itself below it (-Inf included), true exactly
/// when such an input was in the row; also in place and over every row length up to 40.
TEST(FastMath, GeluMarkedRowsMatchThePlainRows) {
  const float kBelow = static_cast<float>(kGeluWideBelow);
  std::vector<float> in(40), plain(40), marked(40);
  for (int n = 0; n <= 40; ++n) {
    for (int variant = 0; variant < 3; ++variant) {  // no tail, tail elements, -Inf and NaN
      for (int i = 0; i < n; ++i) {
        in[i] = -4.99f + 0.37f * static_cast<float>(i * 7 % 29);
        if (variant >= 1 && i % 11 == 3) in[i] = -5.0f - 0.25f * static_cast<float>(i);
        if (variant == 2 && i % 13 == 6) in[i] = -INFINITY;
        if (variant == 2 && i % 13 == 9) in[i] = NAN;
      }
      bool want_tail = false;
      for (int i = 0; i < n; ++i) want_tail = want_tail || in[i] < kBelow;
      using Plain = void (*)(const float*, float*, int64_t);
      using Marked = bool (*)(const float*, float*, int64_t);
      const std::pair<Plain, Marked> forms[] = {{&gelu_erf_row_f32, &gelu_erf_row_f32_marked},
                                                {&gelu_tanh_row_f32, &gelu_tanh_row_f32_marked}};
      for (const auto& [plain_fn, marked_fn] : forms) {
        plain_fn(in.data(), plain.data(), n);
        EXPECT_EQ(marked_fn(in.data(), marked.data(), n), want_tail) << n << " " << variant;
        std::vector<float> in_place(in.begin(), in.begin() + n);
        EXPECT_EQ(marked_fn(in_place.data(), in_place.data(), n), want_tail) << n << " in place";
        for (int i = 0; i < n; ++i) {
          const uint32_t want = std::bit_cast<uint32_t>(in[i] < kBelow ? in[i] : plain[i]);
          if (in[i] != in[i]) {
            EXPECT_TRUE(std::isnan(marked[i]) && std::isnan(in_place[i])) << n << " " << i;
            continue;
          }
          EXPECT_EQ(std::bit_cast<uint32_t>(marked[i]), want) << n << " " << i << " " << in[i];
          EXPECT_EQ(std::bit_cast<uint32_t>(in_place[i]), want) << n << " " << i << " in place";
          if (in[i] >= kBelow) EXPECT_GE(marked[i], kBelow);  // marks are told apart by value
        }
      }
    }
  }
}

/// float_to_half_row (F16C / AVX-512 conversion with NaN lanes canonicalised, or the select form)
/// is bit-identical to half.h's float_to_half: every 2^32 input when written (all three builds),
/// here a stride plus the edges, in rows of ragged lengths.
TEST(FastMath, FloatToHalfRowMatchesHalfH) {
  std::vector<float> in(4099);
  std::vector<uint16_t> out(4099);
  auto check_rows = [&](size_t n) {
    float_to_half_row(in.data(), out.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], float_to_half(in[i])) << std::hex << std::bit_cast<uint32_t>(in[i]);
    }
  };
  size_t n = 0, length = 4099;
  auto push = [&](uint32_t u) {
    in[n++] = std::bit_cast<float>(u);
    if (n == length) {
      check_rows(n);
      n = 0;
      length = length == 1 ? 4099 : length - 1;  // ragged row lengths
    }
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) push(static_cast<uint32_t>(u));
  for (uint32_t e : {0u, 102u, 112u, 113u, 142u, 143u, 255u}) {
    for (uint32_t m = 0; m < (1u << 23); m += 7) {
      push((e << 23) | m);
      push(0x80000000u | (e << 23) | m);
    }
  }
  for (uint32_t u : {0x7f800001u, 0x7fffffffu, 0xffc00001u, 0x7fa00000u, 0x477ff000u, 0x477fefffu, 0x33000000u,
                     0x33000001u, 0x387fe000u, 0x387fc000u}) {
    push(u);
  }
  check_rows(n);
}

TEST(FastMath, ExpF64WholeRange) {
  double worst = 0, at = 0;
  for (double a = -760; a <= 720; a += 0.0137) {
    const double want = std::exp(a), got = exp_f64(a);
    if (want == 0 || std::isinf(want)) {
      EXPECT_EQ(got, want) << a;
      continue;
    }
    // Relative error on normal results, error in units of the smallest subnormal below them.
    const double e = want >= 0x1p-1022 ? std::fabs(got - want) / want : std::fabs(got - want) / 0x1p-1074 * 0x1p-52;
    if (e > worst) worst = e, at = a;
  }
  RecordProperty("exp_f64_max_relative_error", std::to_string(worst));
  EXPECT_LE(worst, 1e-14) << "at " << at;
  EXPECT_EQ(exp_f64(-INFINITY), 0.0);
  EXPECT_EQ(exp_f64(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f64(NAN)));
}

TEST(FastMath, ExpNonPositive) {
  // Within 2 ulp of e^d for d in [-87, 0]; 0 below; -Inf -> 0; NaN stays NaN.
  Worst w;
  for (float d = -87.0f; d <= 0.0f; d += 0.000977f) {
    const int64_t u = ulp_distance(exp_nonpositive_f32(d), static_cast<float>(std::exp(static_cast<double>(d))));
    if (u > w.ulps) w = {u, d};
  }
  EXPECT_LE(w.ulps, 2) << "at " << w.at;
  EXPECT_EQ(exp_nonpositive_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_f32(-88.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive_f32(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(exp_nonpositive_f32(NAN)));
}

TEST(FastMath, SelectConversionsMatchHalfH) {
  // Every f32 bit pattern with a stride, plus every pattern around the f16 ranges' edges.
  auto check = [](uint32_t u) {
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(float_to_half_select(f), float_to_half(f)) << std::hex << u;
    ASSERT_EQ(float_to_bfloat16_select(f), float_to_bfloat16(f)) << std::hex << u;
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) check(static_cast<uint32_t>(u));
  for (uint32_t e : {102u, 112u, 113u, 142u, 143u, 255u}) {
    for (uint32_t m = 0; m < (1u << 23); m += 3) {
      check((e << 23) | m);
      check(0x80000000u | (e << 23) | m);
    }
  }
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float a = half_to_float_select(static_cast<uint16_t>(h)), b = half_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << std::hex << h;
  }
}

/// The forward kernels agree with the reference within the conformance limits.
TEST(FastMath, ForwardKernelsAgreeWithTheReference) {
  Differential diff;
  std::vector<double> xs;
  for (double x = -120; x <= 30; x += 0.0371) xs.push_back(x);
  for (double x : {0.0, -0.0, 1e-30, -1e-30, 1e-45, double(INFINITY), -double(INFINITY), double(NAN)}) xs.push_back(x);
  const std::vector<int64_t> shape = {static_cast<int64_t>(xs.size())};
  for (dx_dtype_t t : {DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16}) {
    struct Case {
      const char* op;
      bool tanh_attr;
    };
    for (const Case c : {Case{"dx.tanh", false}, Case{"dx.sigmoid", false}, Case{"dx.silu", false},
                         Case{"dx.erf", false}, Case{"dx.gelu", false}, Case{"dx.gelu", true},
                         Case{"dx.log", false}}) {
      const char* op = c.op;
      const Attrs attrs = c.tanh_attr ? Attrs().str("approximate", "tanh") : Attrs();
      const Result r = diff.run(op, {In::of(t, shape, xs)}, {Out(t, shape)}, attrs);
      ASSERT_EQ(r.cpu.status, DX_OK) << op;
      ASSERT_EQ(r.ref.status, DX_OK) << op;
      int64_t worst = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double a = r.cpu.outputs[0][i], b = r.ref.outputs[0][i];
        int64_t d;
        if (t == DX_DTYPE_F32) {
          d = ulp_distance(static_cast<float>(a), static_cast<float>(b));
        } else {
          // Both values are exact in f32; count steps of the narrow format between them.
          const uint16_t ka = t == DX_DTYPE_F16 ? float_to_half_bits(static_cast<float>(a))
                                                : float_to_bf16_bits(static_cast<float>(a));
          const uint16_t kb = t == DX_DTYPE_F16 ? float_to_half_bits(static_cast<float>(b))
                                                : float_to_bf16_bits(static_cast<float>(b));
          auto key = [](uint16_t h) { return (h & 0x8000) ? -static_cast<int64_t>(h & 0x7fff) - 1 : static_cast<int64_t>(h); };
          d = (a != a || b != b) ? ((a != a && b != b) ? 0 : 1 << 20) : std::abs(key(ka) - key(kb));
        }
        worst = std::max(worst, d);
      }
      const int64_t limit = t != DX_DTYPE_F32 ? 1 : (std::string(op) == "dx.tanh" ? 8 : 4);
      EXPECT_LE(worst, limit) << op << (c.tanh_attr ? " (tanh)" : "") << " dtype " << t;
    }
  }
}

}  // namespace
}  // namespace deepx::cpu::testing
