// ULP checks of the vectorisable f32 functions in src/fast_math.h against the f64 libm result
// rounded once to f32 (what the reference computes), on a sampled sweep of every f32 bit
// pattern plus dense sweeps of the delicate ranges, and the forward kernels that use them
// (dx.tanh, dx.sigmoid, dx.silu on f32, f16, bf16) against the reference plugin. Conformance
// limits (CONFORMANCE.md): f32 <= 4 ulp (tanh <= 8), f16/bf16 <= 1 ulp of the output dtype.
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "../src/fast_math.h"
#include "differential.h"

namespace deepx::cpu::testing {
namespace {

/// Distance in representable f32 values (NaN matches NaN only; +0 and -0 are one apart).
int64_t ulp_distance(float a, float b) {
  if (a != a || b != b) return (a != a && b != b) ? 0 : int64_t{1} << 40;
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) - 1 : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

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

/// The forward kernels agree with the reference within the conformance limits.
TEST(FastMath, ForwardKernelsAgreeWithTheReference) {
  Differential diff;
  std::vector<double> xs;
  for (double x = -120; x <= 30; x += 0.0371) xs.push_back(x);
  for (double x : {0.0, -0.0, 1e-30, -1e-30, 1e-45, double(INFINITY), -double(INFINITY), double(NAN)}) xs.push_back(x);
  const std::vector<int64_t> shape = {static_cast<int64_t>(xs.size())};
  for (dx_dtype_t t : {DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16}) {
    for (const char* op : {"dx.tanh", "dx.sigmoid", "dx.silu"}) {
      const Result r = diff.run(op, {In::of(t, shape, xs)}, {Out(t, shape)});
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
      EXPECT_LE(worst, limit) << op << " dtype " << t;
    }
  }
}

}  // namespace
}  // namespace deepx::cpu::testing
