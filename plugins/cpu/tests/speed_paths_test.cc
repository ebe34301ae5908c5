// Differential tests of the large-tensor fast paths of fast_math.h, math.cc and nn.cc against the
// reference plugin: the f32-lane gelu (both forms) above the parallel threshold with elements
// below -5 (the reference-formula tail) in some blocks, the F16C cast f32 -> f16, and
// dx.embedding's non-temporal-store path (outputs of at least 8 MiB, rows aligned or not).
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

/// 2^20 + 37 values over [-9, 9) in a scrambled order, with specials at fixed places.
std::vector<double> gelu_inputs() {
  const size_t n = (size_t{1} << 20) + 37;
  std::vector<double> xs(n);
  for (size_t i = 0; i < n; ++i) xs[i] = -9.0 + 18.0 * static_cast<double>((i * 2654435761u) % n) / static_cast<double>(n);
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-45, -1e-45, 3e38, -3e38, -5.0, -5.000001};
  for (size_t k = 0; k < std::size(specials); ++k) xs[k * 7919] = specials[k];
  return xs;
}

TEST(SpeedPaths, GeluF32LargeAgreesWithTheReference) {
  Differential diff;
  const std::vector<double> xs = gelu_inputs();
  const std::vector<int64_t> shape = {static_cast<int64_t>(xs.size())};
  for (const bool tanh_form : {false, true}) {
    const Attrs attrs = tanh_form ? Attrs().str("approximate", "tanh") : Attrs();
    const Result r = diff.run("dx.gelu", {In::of(DX_DTYPE_F32, shape, xs)}, {Out(DX_DTYPE_F32, shape)}, attrs);
    ASSERT_EQ(r.cpu.status, DX_OK) << r.cpu.message;
    ASSERT_EQ(r.ref.status, DX_OK) << r.ref.message;
    int64_t worst = 0;
    double at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const int64_t d = ulp_distance(static_cast<float>(r.cpu.outputs[0][i]), static_cast<float>(r.ref.outputs[0][i]));
      if (d > worst) worst = d, at = xs[i];
      if (xs[i] < -5.0) {  // the reference's own formula: bit for bit
        ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(r.cpu.outputs[0][i])),
                  std::bit_cast<uint32_t>(static_cast<float>(r.ref.outputs[0][i])))
            << xs[i];
      }
    }
    EXPECT_LE(worst, tanh_form ? 3 : 2) << (tanh_form ? "tanh" : "erf") << " form at " << at;
  }
}

TEST(SpeedPaths, CastF32ToF16LargeIsBitExact) {
  Differential diff;
  std::vector<double> xs = gelu_inputs();
  for (size_t i = 0; i < xs.size(); i += 5) xs[i] *= 1e4 * static_cast<double>(i % 13);  // overflow, large
  for (size_t i = 3; i < xs.size(); i += 11) xs[i] *= 1e-6;                             // f16 subnormals
  const std::vector<int64_t> shape = {static_cast<int64_t>(xs.size())};
  expect_equal(diff.run("dx.cast", {In::of(DX_DTYPE_F32, shape, xs)}, {Out(DX_DTYPE_F16, shape)}), "f32 -> f16");
  // An odd length below the parallel threshold (the vector loop's remainder).
  const std::vector<double> few(xs.begin(), xs.begin() + 1001);
  expect_equal(diff.run("dx.cast", {In::of(DX_DTYPE_F32, {1001}, few)}, {Out(DX_DTYPE_F16, {1001})}), "f32 -> f16, 1001");
}

TEST(SpeedPaths, EmbeddingLargeOutputsStream) {
  Differential diff;
  // dim 2051 (rows not 64-byte multiples: unaligned heads and tails) and 1024; outputs > 8 MiB.
  for (const int64_t dim : {int64_t{2051}, int64_t{1024}}) {
    const int64_t vocab = 300, tokens = (int64_t{9} << 20) / (dim * 4) + 3;
    const In w = In::random(DX_DTYPE_F32, {vocab, dim}, -2, 2, 11);
    std::vector<double> idx(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) idx[static_cast<size_t>(i)] = static_cast<double>((i * 37 + i / 5) % vocab);
    for (const dx_dtype_t index_type : {DX_DTYPE_I64, DX_DTYPE_I32}) {
      expect_equal(diff.run("dx.embedding", {w, In::of(index_type, {tokens}, idx)}, {Out(DX_DTYPE_F32, {tokens, dim})}),
                   "embedding dim " + std::to_string(dim));
    }
  }
}

}  // namespace
}  // namespace deepx::cpu::testing
