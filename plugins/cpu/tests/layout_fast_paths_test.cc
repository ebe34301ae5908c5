// Differential tests of the CPU plugin's layout fast paths against the reference plugin:
// blocked (tiled) transposes and copies between transposed layouts for every element size, the
// vectorised interior of max/avg pooling (strides 1, 2 and generic; NaN, ties, -Inf), the direct
// depthwise convolution, wide stride-1 convolutions, and attention's f32 path (held to the
// certification's f32 tolerance) with its fallback to f64 for magnitudes where f32 scores would
// not be accurate enough.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

Differential& diff() {
  static Differential instance;
  return instance;
}

std::string label(dx_dtype_t t) {
  switch (t) {
    case DX_DTYPE_F64: return "f64";
    case DX_DTYPE_F32: return "f32";
    case DX_DTYPE_F16: return "f16";
    case DX_DTYPE_BF16: return "bf16";
    case DX_DTYPE_I64: return "i64";
    case DX_DTYPE_I32: return "i32";
    case DX_DTYPE_I16: return "i16";
    case DX_DTYPE_I8: return "i8";
    case DX_DTYPE_BOOL: return "bool";
    default: return "?";
  }
}

const dx_dtype_t kFloatTypes[] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16};

// ---- transpose ----------------------------------------------------------------------------------

struct TransposeCase {
  std::vector<int64_t> shape, perm;
};

std::vector<int64_t> permuted(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out;
  for (int64_t p : perm) out.push_back(shape[static_cast<size_t>(p)]);
  return out;
}

In values_of(dx_dtype_t t, const std::vector<int64_t>& shape, uint64_t seed) {
  In in = In::random(t, shape, -100, 100, seed);
  if (t == DX_DTYPE_BOOL) {
    for (double& v : in.values) v = v > 0 ? 1 : 0;
  }
  return in;
}

TEST(LayoutFastPaths, TransposeEveryElementSizeAndEdge) {
  const std::vector<TransposeCase> cases = {
      {{67, 131}, {1, 0}},              // edges of tiles and micro-tiles on both sides
      {{8, 8}, {1, 0}},                 // exactly one micro-tile (AVX)
      {{5, 4}, {1, 0}},                 // smaller than a micro-tile
      {{3, 70, 45}, {2, 0, 1}},         // tiles under an outer dim
      {{3, 70, 45}, {0, 2, 1}},         // batched matrix transpose
      {{3, 70, 45}, {1, 2, 0}},
      {{2, 9, 5, 33}, {3, 1, 0, 2}},    // several outer dims
      {{300, 300}, {1, 0}},             // above the parallel threshold
      {{2, 3, 130, 260}, {0, 1, 3, 2}}, // parallel, batched
      {{70, 3}, {1, 0}},                // too thin for tiles: the row loop
  };
  const dx_dtype_t types[] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_I64,
                              DX_DTYPE_I32, DX_DTYPE_I16, DX_DTYPE_I8,  DX_DTYPE_BOOL};
  int index = 0;
  for (const TransposeCase& c : cases) {
    for (dx_dtype_t t : types) {
      const std::string what = "transpose case " + std::to_string(index) + " " + label(t);
      expect_equal(diff().run("dx.transpose", {values_of(t, c.shape, 3)},
                              {Out(t, permuted(c.shape, c.perm))}, Attrs().i64s("perm", c.perm)),
                   what);
    }
    ++index;
  }
}

/// A view (shape, strides, element offset) of a compact base tensor.
struct ViewOf {
  In base;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

/// Runs a one-input, one-output op with view operands on one plugin; returns the whole output
/// base (so writes outside the view are caught too).
PluginResult run_views(int32_t plugin, const char* op, const ViewOf& input, const ViewOf& output) {
  std::vector<dx_tensor_t*> owned;
  auto make = [&](const In& in) {
    dx_tensor_t* t = nullptr;
    check(dx_tensor_create(diff().runtime(), diff().device(), in.dtype, in.shape.data(),
                           static_cast<int32_t>(in.shape.size()), &t),
          "dx_tensor_create");
    owned.push_back(t);
    const auto bytes = to_bytes(in.dtype, in.values);
    if (!bytes.empty()) check(dx_tensor_write(t, bytes.data(), bytes.size()), "dx_tensor_write");
    return t;
  };
  auto view = [&](dx_tensor_t* base, const ViewOf& v) {
    dx_tensor_t* t = nullptr;
    check(dx_tensor_view(base, v.shape.data(), v.strides.data(),
                         static_cast<int32_t>(v.shape.size()), v.offset, &t),
          "dx_tensor_view");
    owned.push_back(t);
    return t;
  };
  dx_tensor_t* ins[1] = {view(make(input.base), input)};
  dx_tensor_t* out_base = make(output.base);
  dx_tensor_t* outs[1] = {view(out_base, output)};
  dx_op_id_t id{};
  check(dx_runtime_op_lookup(diff().runtime(), op, &id), op);
  dx_invoke_options_t options{};
  options.struct_size = DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index);
  options.flags = DX_INVOKE_FLAG_PLUGIN;
  options.plugin_index = plugin;
  PluginResult r;
  Attrs attrs;
  r.status = dx_invoke_ex(diff().runtime(), id, ins, 1, outs, 1, attrs.get(), &options);
  if (r.status != DX_OK) {
    r.message = dx_last_error_message();
  } else {
    std::vector<uint8_t> bytes(output.base.values.size() * dtype_bytes(output.base.dtype));
    if (!bytes.empty()) {
      check(dx_tensor_read(out_base, bytes.data(), bytes.size()), "dx_tensor_read");
    }
    r.outputs.push_back(from_bytes(output.base.dtype, bytes));
  }
  for (dx_tensor_t* t : owned) dx_tensor_destroy(t);
  return r;
}

TEST(LayoutFastPaths, CopyBetweenTransposedViews) {
  for (dx_dtype_t t : {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_I8}) {
    const int64_t rows = 37, cols = 53;
    const In poison = In::of(t, {3000}, std::vector<double>(3000, 1));
    // Compact input into a column-major, offset output (the output's unit stride is dim 0).
    const ViewOf in_compact{values_of(t, {rows, cols}, 5), {rows, cols}, {cols, 1}, 0};
    const ViewOf out_columns{poison, {rows, cols}, {1, rows + 2}, 7};
    expect_equal(Result{run_views(diff().cpu_plugin(), "dx.copy", in_compact, out_columns),
                        run_views(diff().reference_plugin(), "dx.copy", in_compact, out_columns)},
                 "copy into a column-major view " + label(t));
    // A transposed, offset input view into a compact output.
    const ViewOf in_columns{values_of(t, {3000}, 6), {rows, cols}, {1, rows + 3}, 11};
    const ViewOf out_compact{poison, {rows, cols}, {cols, 1}, 0};
    expect_equal(Result{run_views(diff().cpu_plugin(), "dx.copy", in_columns, out_compact),
                        run_views(diff().reference_plugin(), "dx.copy", in_columns, out_compact)},
                 "copy of a column-major view " + label(t));
  }
}

// ---- pooling ------------------------------------------------------------------------------------

struct PoolCase {
  std::vector<int64_t> shape;  // NCHW
  std::vector<int64_t> kernel, stride, padding;
};

int64_t extent(int64_t in, int64_t pad, int64_t k, int64_t stride) {
  return (in + 2 * pad - k) / stride + 1;
}

std::vector<int64_t> pool_out(const PoolCase& c) {
  return {c.shape[0], c.shape[1], extent(c.shape[2], c.padding[0], c.kernel[0], c.stride[0]),
          extent(c.shape[3], c.padding[1], c.kernel[1], c.stride[1])};
}

/// Pool inputs with ties (values on a coarse grid), some -Inf and, optionally, NaNs.
In pool_input(dx_dtype_t t, const std::vector<int64_t>& shape, bool with_nan) {
  In in = In::random(t, shape, -3, 3, 21);
  for (size_t i = 0; i < in.values.size(); ++i) {
    in.values[i] = std::floor(in.values[i] * 2) * 0.25;
    if (i % 23 == 4) in.values[i] = -std::numeric_limits<double>::infinity();
    if (with_nan && i % 29 == 7) in.values[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return in;
}

TEST(LayoutFastPaths, PoolInteriorPaths) {
  const std::vector<PoolCase> cases = {
      {{1, 3, 20, 37}, {3, 3}, {1, 1}, {1, 1}},  // stride 1
      {{2, 3, 23, 30}, {3, 3}, {2, 2}, {1, 1}},  // stride 2 (ResNet stem)
      {{1, 2, 18, 18}, {2, 2}, {2, 2}, {0, 0}},  // stride 2, no padding
      {{1, 2, 17, 20}, {3, 3}, {3, 3}, {1, 1}},  // generic stride
      {{2, 2, 9, 14}, {2, 3}, {1, 2}, {1, 1}},   // unequal kernel and strides
      {{1, 1, 4, 3}, {3, 3}, {1, 1}, {1, 1}},    // narrower than the kernel: borders only
      {{2, 16, 64, 64}, {3, 3}, {2, 2}, {1, 1}}, // parallel over planes
  };
  int index = 0;
  for (const PoolCase& c : cases) {
    for (dx_dtype_t t : kFloatTypes) {
      for (bool with_nan : {false, true}) {
        const std::string what =
            "pool case " + std::to_string(index) + " " + label(t) + (with_nan ? " nan" : "");
        auto make_attrs = [&] {
          return Attrs()
              .i64s("kernel", c.kernel)
              .i64s("stride", c.stride)
              .i64s("padding", c.padding);
        };
        const In x = pool_input(t, c.shape, with_nan);
        expect_equal(diff().run("dx.max_pool2d", {x}, {Out(t, pool_out(c))}, make_attrs()),
                     "max " + what);
        // avg sums in f64 in the reference's order and rounds once (f16/bf16: through f32, so
        // within an ulp); gradients accumulate in f64, max in the reference's order.
        const double tol = (t == DX_DTYPE_F64 || t == DX_DTYPE_F32) ? 0 : 1e-2;
        const In xa = In::random(t, c.shape, -2, 2, 22);
        expect_close(diff().run("dx.avg_pool2d", {xa}, {Out(t, pool_out(c))}, make_attrs()), tol,
                     tol, "avg " + what);
        const In dy = In::random(t, pool_out(c), -1, 1, 23);
        const In y = In::random(t, pool_out(c), -1, 1, 24);
        expect_close(diff().run("dx.max_pool2d", {dy, x, y}, {Out(t, c.shape)}, make_attrs(), true),
                     tol, tol, "max backward " + what);
        // (avg's interior adds a window's shares in another order than the reference: f64
        // sums that can differ in their last bit before the rounding.)
        const double avg_tol = t == DX_DTYPE_F64 ? 1e-15 : t == DX_DTYPE_F32 ? 1e-6 : tol;
        expect_close(
            diff().run("dx.avg_pool2d", {dy, xa, y}, {Out(t, c.shape)}, make_attrs(), true),
            avg_tol, avg_tol, "avg backward " + what);
      }
    }
    ++index;
  }
}

// ---- depthwise conv2d ---------------------------------------------------------------------------

struct DepthwiseCase {
  int64_t n, c, multiplier, h, w, k;
  int64_t stride, padding, dilation;
  bool bias;
};

TEST(LayoutFastPaths, DepthwiseConvDirect) {
  const std::vector<DepthwiseCase> cases = {
      {2, 4, 1, 11, 13, 3, 1, 1, 1, true},
      {1, 3, 2, 12, 9, 3, 2, 1, 1, false},   // channel multiplier 2, stride 2
      {2, 2, 1, 15, 16, 5, 3, 2, 1, true},   // generic stride
      {1, 3, 1, 14, 14, 3, 1, 2, 2, true},   // dilation
      {1, 2, 1, 3, 2, 3, 1, 1, 1, false},    // smaller than the kernel
      {2, 32, 1, 40, 40, 3, 1, 1, 1, true},  // parallel over planes
  };
  int index = 0;
  for (const DepthwiseCase& c : cases) {
    for (dx_dtype_t t : kFloatTypes) {
      const std::string what = "depthwise case " + std::to_string(index) + " " + label(t);
      const int64_t co = c.c * c.multiplier;
      const int64_t ho = (c.h + 2 * c.padding - c.dilation * (c.k - 1) - 1) / c.stride + 1;
      const int64_t wo = (c.w + 2 * c.padding - c.dilation * (c.k - 1) - 1) / c.stride + 1;
      auto attrs = [&] {
        return Attrs()
            .i64("stride", c.stride)
            .i64s("padding", {c.padding, c.padding})
            .i64s("dilation", {c.dilation, c.dilation})
            .i64("groups", c.c);
      };
      const std::vector<In> in = {In::random(t, {c.n, c.c, c.h, c.w}, -2, 2, 61),
                                  In::random(t, {co, 1, c.k, c.k}, -1, 1, 62),
                                  c.bias ? In::random(t, {co}, -1, 1, 63) : In::absent()};
      const double tol = t == DX_DTYPE_F64 ? 1e-12 : t == DX_DTYPE_F32 ? 1e-5 : 1e-2;
      expect_close(diff().run("dx.conv2d", in, {Out(t, {c.n, co, ho, wo})}, attrs()), tol, tol,
                   what);
      // Exact-tier data (small integers): every partial sum is exact, so the result is too.
      std::vector<In> exact = in;
      for (In& x : exact) {
        for (double& v : x.values) v = std::floor(v * 3);
      }
      expect_equal(diff().run("dx.conv2d", exact, {Out(t, {c.n, co, ho, wo})}, attrs()),
                   what + " exact");
    }
    ++index;
  }
}

// ---- stride-1 conv2d with many channels (the im2col GEMM path at larger K) ------------------

struct WideConvCase {
  int64_t n, c, h, w, co, kh, kw, pad_h, pad_w, groups;
  bool bias;
};

TEST(LayoutFastPaths, Stride1ConvManyChannels) {
  // >= 32 input channels per group, padding, groups, several images per GEMM.
  const std::vector<WideConvCase> cases = {
      {2, 32, 20, 20, 4, 3, 3, 1, 1, 1, true},
      {1, 64, 24, 22, 6, 3, 3, 1, 1, 2, false},   // two groups of 32
      {1, 32, 32, 32, 2, 5, 3, 0, 0, 1, true},    // no padding, unequal kernel
      {3, 32, 20, 20, 5, 3, 3, 0, 0, 1, true},    // several images per GEMM
  };
  int index = 0;
  for (const WideConvCase& c : cases) {
    for (dx_dtype_t t : kFloatTypes) {
      const std::string what = "stride-1 conv case " + std::to_string(index) + " " + label(t);
      const int64_t ho = c.h + 2 * c.pad_h - c.kh + 1, wo = c.w + 2 * c.pad_w - c.kw + 1;
      auto attrs = [&] {
        return Attrs().i64s("padding", {c.pad_h, c.pad_w}).i64("groups", c.groups);
      };
      const std::vector<In> in = {In::random(t, {c.n, c.c, c.h, c.w}, -2, 2, 91),
                                  In::random(t, {c.co, c.c / c.groups, c.kh, c.kw}, -1, 1, 92),
                                  c.bias ? In::random(t, {c.co}, -1, 1, 93) : In::absent()};
      const double tol = t == DX_DTYPE_F64 ? 1e-12 : t == DX_DTYPE_F32 ? 1e-4 : 2e-2;
      expect_close(diff().run("dx.conv2d", in, {Out(t, {c.n, c.co, ho, wo})}, attrs()), tol, tol,
                   what);
      std::vector<In> exact = in;
      for (In& x : exact) {
        for (double& v : x.values) v = std::floor(v * 2);
      }
      expect_equal(diff().run("dx.conv2d", exact, {Out(t, {c.n, c.co, ho, wo})}, attrs()),
                   what + " exact");
    }
    ++index;
  }
}

// ---- attention ----------------------------------------------------------------------------------

/// The certification's rule for f32 normalising ops: |got - expected| <= 1e-5 + 1.3e-6 |expected|.
constexpr double kF32Rtol = 1.3e-6, kF32Atol = 1e-5;

TEST(LayoutFastPaths, AttentionF32MeetsTheCertificationTolerance) {
  const dx_dtype_t t = DX_DTYPE_F32;
  for (bool causal : {false, true}) {
    const std::vector<int64_t> shape = {2, 2, 96, 64};
    const std::vector<In> in = {In::random(t, shape, -2, 2, 71), In::random(t, shape, -2, 2, 72),
                                In::random(t, shape, -2, 2, 73), In::absent()};
    const std::string what = causal ? "causal" : "plain";
    expect_close(diff().run("dx.scaled_dot_product_attention", in, {Out(t, shape)},
                            Attrs().boolean("causal", causal)),
                 kF32Rtol, kF32Atol, "attention f32 " + what);
  }
}

TEST(LayoutFastPaths, AttentionLargeScoresFallBackToF64) {
  // Scores of several hundred: f32 rounding of q.k (about 1e-5 relative) would move the
  // probabilities by more than the tolerance; the kernel must notice and compute in f64.
  const dx_dtype_t t = DX_DTYPE_F32;
  const std::vector<int64_t> shape = {1, 2, 40, 32};
  const std::vector<In> in = {In::random(t, shape, -30, 30, 81), In::random(t, shape, -30, 30, 82),
                              In::random(t, shape, -2, 2, 83), In::absent()};
  expect_close(diff().run("dx.scaled_dot_product_attention", in, {Out(t, shape)}, Attrs()),
               kF32Rtol, kF32Atol, "attention large scores");
  std::vector<In> bin = {In::random(t, shape, -1, 1, 84)};
  for (const In& x : in) bin.push_back(x);
  bin.push_back(In::random(t, shape, -1, 1, 85));
  expect_close(diff().run("dx.scaled_dot_product_attention", bin,
                          {Out(t, shape), Out(t, shape), Out(t, shape), Out::absent()}, Attrs(),
                          true),
               kF32Rtol, kF32Atol, "attention large scores backward");
}

}  // namespace
}  // namespace deepx::cpu::testing
