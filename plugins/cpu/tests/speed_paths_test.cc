// Differential tests of the large-tensor fast paths of fast_math.h, elementwise_math.cc and nn.cc
// against the reference plugin: the f32-lane gelu (both forms) above the parallel threshold with
// elements below -5 (the reference-formula tail) in some blocks, also in place and through strided
// views (the row function marks the tail, patched afterwards), the F16C cast f32 -> f16, and
// dx.embedding's non-temporal-store path (outputs of at least 8 MiB, rows aligned or not).
#include <algorithm>
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

/// dx.gelu (f32) on the cpu plugin with the input a view (shape {n}, `stride`, `offset`) of a
/// tensor holding `base`, written in place (the output is the input tensor itself) or into a
/// compact output; returns the n results.
std::vector<double> cpu_gelu_view(Differential& diff, const std::vector<double>& base, int64_t n,
                                  int64_t stride, int64_t offset, bool in_place, const Attrs& attrs) {
  std::vector<dx_tensor_t*> owned;
  auto tensor = [&](int64_t count) {
    dx_tensor_t* t = nullptr;
    check(dx_tensor_create(diff.runtime(), diff.device(), DX_DTYPE_F32, &count, 1, &t), "dx_tensor_create");
    owned.push_back(t);
    return t;
  };
  dx_tensor_t* whole = tensor(static_cast<int64_t>(base.size()));
  const std::vector<uint8_t> bytes = to_bytes(DX_DTYPE_F32, base);
  check(dx_tensor_write(whole, bytes.data(), bytes.size()), "dx_tensor_write");
  dx_tensor_t* x = nullptr;
  check(dx_tensor_view(whole, &n, &stride, 1, offset, &x), "dx_tensor_view");
  owned.push_back(x);
  dx_tensor_t* y = in_place ? x : tensor(n);
  dx_op_id_t id{};
  check(dx_runtime_op_lookup(diff.runtime(), "dx.gelu", &id), "dx.gelu");
  dx_invoke_options_t options{};
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN;
  options.plugin_index = diff.cpu_plugin();
  dx_tensor_t* ins[1] = {x};
  dx_tensor_t* outs[1] = {y};
  check(dx_invoke_ex(diff.runtime(), id, ins, 1, outs, 1, attrs.get(), &options), "dx.gelu");
  std::vector<double> result(static_cast<size_t>(n));
  if (in_place) {
    std::vector<uint8_t> all(bytes.size());
    check(dx_tensor_read(whole, all.data(), all.size()), "dx_tensor_read");
    const std::vector<double> values = from_bytes(DX_DTYPE_F32, all);
    for (int64_t i = 0; i < n; ++i) result[static_cast<size_t>(i)] = values[static_cast<size_t>(offset + i * stride)];
  } else {
    std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
    check(dx_tensor_read(y, out.data(), out.size()), "dx_tensor_read");
    result = from_bytes(DX_DTYPE_F32, out);
  }
  for (dx_tensor_t* t : owned) dx_error_destroy(dx_tensor_destroy(t));
  return result;
}

TEST(SpeedPaths, GeluF32InPlaceAndStridedViewsPatchTheirTail) {
  // The fused tail check: marked elements (below -5) patched in the output itself, in place
  // (the input is gone by then) and through the strided path's block copies.
  Differential diff;
  const std::vector<double> xs = gelu_inputs();
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<int64_t> shape = {n};
  for (const bool tanh_form : {false, true}) {
    const Attrs attrs = tanh_form ? Attrs().str("approximate", "tanh") : Attrs();
    const Result want = diff.run("dx.gelu", {In::of(DX_DTYPE_F32, shape, xs)}, {Out(DX_DTYPE_F32, shape)}, attrs);
    ASSERT_EQ(want.ref.status, DX_OK) << want.ref.message;
    std::vector<double> spread(static_cast<size_t>(2 * n + 3), 0.5);  // every other element, offset 3
    for (int64_t i = 0; i < n; ++i) spread[static_cast<size_t>(3 + 2 * i)] = xs[static_cast<size_t>(i)];
    const std::vector<double> shifted_base = [&] {  // in place at an offset of one element
      std::vector<double> b(xs);
      b.insert(b.begin(), 1.0);
      return b;
    }();
    struct Way {
      const char* what;
      std::vector<double> got;
    };
    const Way ways[] = {
        {"in place", cpu_gelu_view(diff, xs, n, 1, 0, true, attrs)},
        {"in place, offset", cpu_gelu_view(diff, shifted_base, n, 1, 1, true, attrs)},
        {"strided input", cpu_gelu_view(diff, spread, n, 2, 3, false, attrs)},
        {"strided, in place", cpu_gelu_view(diff, spread, n, 2, 3, true, attrs)},
    };
    for (const Way& way : ways) {
      int64_t worst = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const float got = static_cast<float>(way.got[i]), ref = static_cast<float>(want.ref.outputs[0][i]);
        if (std::isnan(ref)) {
          ASSERT_TRUE(std::isnan(got)) << way.what << " at " << xs[i];
          continue;
        }
        if (xs[i] < -5.0) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(ref)) << way.what << " at " << xs[i];
        }
        worst = std::max(worst, ulp_distance(got, ref));
      }
      EXPECT_LE(worst, tanh_form ? 3 : 2) << way.what << (tanh_form ? " tanh" : " erf");
    }
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
