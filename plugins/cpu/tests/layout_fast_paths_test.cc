// Differential tests of the CPU plugin's layout fast paths against the reference plugin:
// blocked (tiled) transposes and copies between transposed layouts for every element size
// (line-sized register tiles around their edges, streamed large outputs, unaligned outputs, the
// transpose backward's -0 -> +0), the vectorised interior of avg pooling and the separable max
// pool (its fast form and exact retry: NaN, +-Inf, +-0 ties, odd widths, padding, strided
// views; strides 1, 2 and generic), the direct
// depthwise convolution, wide stride-1 convolutions, and attention's f32 path (held to the
// certification's f32 tolerance) with its fallback to f64 for magnitudes where f32 scores would
// not be accurate enough.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

Differential& diff() {
  static Differential instance;
  return instance;
}


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
      const std::string what = "transpose case " + std::to_string(index) + " " + dtype_name(t);
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
PluginResult run_views(int32_t plugin, const char* op, const ViewOf& input, const ViewOf& output,
                       const Attrs& attrs = Attrs()) {
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
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN;
  options.plugin_index = plugin;
  PluginResult r;
  r.status = take_status(dx_invoke_ex(diff().runtime(), id, ins, 1, outs, 1, attrs.get(), &options),
                         &r.message);
  if (r.status == DX_OK) {
    std::vector<uint8_t> bytes(output.base.values.size() * dtype_bytes(output.base.dtype));
    if (!bytes.empty()) {
      check(dx_tensor_read(out_base, bytes.data(), bytes.size()), "dx_tensor_read");
    }
    r.outputs.push_back(from_bytes(output.base.dtype, bytes));
  }
  for (dx_tensor_t* t : owned) dx_error_destroy(dx_tensor_destroy(t));
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
                 "copy into a column-major view " + dtype_name(t));
    // A transposed, offset input view into a compact output.
    const ViewOf in_columns{values_of(t, {3000}, 6), {rows, cols}, {1, rows + 3}, 11};
    const ViewOf out_compact{poison, {rows, cols}, {cols, 1}, 0};
    expect_equal(Result{run_views(diff().cpu_plugin(), "dx.copy", in_columns, out_compact),
                        run_views(diff().reference_plugin(), "dx.copy", in_columns, out_compact)},
                 "copy of a column-major view " + dtype_name(t));
  }
}

/// Values of every sign, with +-0, +-Inf and NaN among them (F dtypes).
In special_values(dx_dtype_t t, const std::vector<int64_t>& shape, uint64_t seed) {
  In in = In::random(t, shape, -100, 100, seed);
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < in.values.size(); ++i) {
    if (i % 7 == 1) in.values[i] = -0.0;
    if (i % 11 == 2) in.values[i] = 0.0;
    if (i % 13 == 3) in.values[i] = std::numeric_limits<double>::quiet_NaN();
    if (i % 17 == 4) in.values[i] = (i % 2 == 0) ? inf : -inf;
  }
  return in;
}

TEST(LayoutFastPaths, TransposeLineTilesAroundTheirEdges) {
  // Around the 16x16 (4-byte) / 8x8 (8-byte) line tiles and the 256 / 128 cache tiles.
  const std::vector<TransposeCase> cases = {
      {{16, 16}, {1, 0}},   {{17, 15}, {1, 0}},   {{15, 17}, {1, 0}},   {{32, 48}, {1, 0}},
      {{33, 47}, {1, 0}},   {{255, 257}, {1, 0}}, {{256, 256}, {1, 0}}, {{129, 127}, {1, 0}},
      {{5, 16, 33}, {0, 2, 1}},                   {{2, 40, 3, 24}, {3, 1, 2, 0}},
  };
  const dx_dtype_t types[] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_I64, DX_DTYPE_I32,
                              DX_DTYPE_F16, DX_DTYPE_I8};
  int index = 0;
  for (const TransposeCase& c : cases) {
    for (dx_dtype_t t : types) {
      const std::string what = "line tile case " + std::to_string(index) + " " + dtype_name(t);
      expect_equal(diff().run("dx.transpose", {values_of(t, c.shape, 4)},
                              {Out(t, permuted(c.shape, c.perm))}, Attrs().i64s("perm", c.perm)),
                   what);
    }
    ++index;
  }
}

TEST(LayoutFastPaths, LargeTransposeStreamsItsOutput) {
  // 8 MiB and more of output: whole lines go out as non-temporal stores (when aligned).
  expect_equal(diff().run("dx.transpose", {values_of(DX_DTYPE_F32, {1040, 2064}, 7)},
                          {Out(DX_DTYPE_F32, {2064, 1040})}, Attrs().i64s("perm", {1, 0})),
               "f32 1040x2064");
  expect_equal(diff().run("dx.transpose", {values_of(DX_DTYPE_F64, {1024, 1032}, 8)},
                          {Out(DX_DTYPE_F64, {1032, 1024})}, Attrs().i64s("perm", {1, 0})),
               "f64 1024x1032");
  expect_equal(diff().run("dx.transpose", {values_of(DX_DTYPE_I32, {2, 1024, 1056}, 9)},
                          {Out(DX_DTYPE_I32, {2, 1056, 1024})}, Attrs().i64s("perm", {0, 2, 1})),
               "i32 batched");
  // Outputs that are not 64-byte aligned (an element offset) or whose pitch is not whole lines.
  for (const auto& [pitch, offset] : std::vector<std::pair<int64_t, int64_t>>{{2064, 3}, {2056, 0}}) {
    const int64_t rows = 2048, cols = 1030;  // output rows x cols, input cols x rows
    const ViewOf input{values_of(DX_DTYPE_F32, {cols, rows}, 10), {rows, cols}, {1, rows}, 0};
    const In poison = In::of(DX_DTYPE_F32, {rows * pitch + offset},
                             std::vector<double>(static_cast<size_t>(rows * pitch + offset), 5));
    const ViewOf output{poison, {rows, cols}, {pitch, 1}, offset};
    expect_equal(Result{run_views(diff().cpu_plugin(), "dx.copy", input, output),
                        run_views(diff().reference_plugin(), "dx.copy", input, output)},
                 "copy of a transposed view, output pitch " + std::to_string(pitch) + " offset " +
                     std::to_string(offset));
  }
}

TEST(LayoutFastPaths, TransposeBackwardTurnsNegativeZeroPositive) {
  // dx = 0.0 + dy through the transpose tiles: -0 becomes +0, NaN and Inf pass.
  const std::vector<TransposeCase> cases = {
      {{67, 131}, {1, 0}},       {{16, 16}, {1, 0}},  {{3, 70, 45}, {2, 0, 1}},
      {{20, 33}, {0, 1}},        // identity permutation: the row loop
      {{300, 260}, {1, 0}},      // parallel
      {{4, 1}, {1, 0}},          // too thin for tiles
  };
  int index = 0;
  for (const TransposeCase& c : cases) {
    for (dx_dtype_t t : kFloatDtypes) {
      const std::vector<int64_t> out_shape = permuted(c.shape, c.perm);
      const std::string what = "transpose backward case " + std::to_string(index) + " " + dtype_name(t);
      const In dy = special_values(t, out_shape, 11);
      const In x = values_of(t, c.shape, 12);
      const In y = values_of(t, out_shape, 13);
      expect_equal(diff().run("dx.transpose", {dy, x, y}, {Out(t, c.shape)},
                              Attrs().i64s("perm", c.perm), true),
                   what);
    }
    ++index;
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
    for (dx_dtype_t t : kFloatDtypes) {
      for (bool with_nan : {false, true}) {
        const std::string what =
            "pool case " + std::to_string(index) + " " + dtype_name(t) + (with_nan ? " nan" : "");
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

/// Pool inputs of +-0, +-1 and +-2 (ties of either zero everywhere), optionally with NaN and
/// +-Inf among them.
In tie_input(dx_dtype_t t, const std::vector<int64_t>& shape, uint64_t seed, bool with_nan,
             bool with_inf) {
  In in = In::random(t, shape, 0, 6, seed);
  const double choices[] = {-0.0, 0.0, -1.0, 1.0, -0.0, 0.0};
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < in.values.size(); ++i) {
    in.values[i] = choices[static_cast<size_t>(in.values[i]) % 6];
    if (with_inf && i % 31 == 9) in.values[i] = (i % 2 == 0 ? 1 : -1) * inf;
    if (with_nan && i % 37 == 5) in.values[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return in;
}

TEST(LayoutFastPaths, MaxPoolSeparablePasses) {
  const std::vector<PoolCase> cases = {
      {{1, 2, 15, 16}, {3, 3}, {2, 2}, {1, 1}},   // even width: the centred flat pass
      {{2, 3, 9, 112}, {3, 3}, {2, 2}, {1, 1}},   // ResNet width: whole 16-lane vectors
      {{1, 2, 15, 17}, {3, 3}, {2, 2}, {1, 1}},   // odd width: row by row
      {{1, 2, 14, 66}, {3, 3}, {2, 2}, {0, 0}},   // stride 2 without padding
      {{1, 2, 16, 40}, {3, 3}, {1, 1}, {1, 1}},   // stride 1: flat rows and flat vertical pass
      {{1, 2, 13, 35}, {2, 2}, {1, 1}, {1, 1}},   // 2x2, stride 1
      {{1, 2, 12, 34}, {2, 2}, {2, 2}, {0, 0}},   // 2x2, stride 2
      {{1, 2, 17, 38}, {4, 4}, {1, 1}, {2, 2}},   // kernel 4 (runtime width), padding 2
      {{1, 2, 19, 23}, {5, 3}, {3, 2}, {2, 1}},   // unequal kernel and strides
      {{1, 1, 2, 3}, {3, 3}, {2, 2}, {1, 1}},     // smaller than the kernel
      {{4, 16, 40, 48}, {3, 3}, {2, 2}, {1, 1}},  // parallel over planes
  };
  int index = 0;
  for (const PoolCase& c : cases) {
    for (dx_dtype_t t : kFloatDtypes) {
      for (int special = 0; special < 3; ++special) {  // none, +-Inf, NaN and +-Inf
        const std::string what = "separable max case " + std::to_string(index) + " " +
                                 dtype_name(t) + " special " + std::to_string(special);
        const In x = tie_input(t, c.shape, 30 + static_cast<uint64_t>(index), special == 2,
                               special >= 1);
        expect_equal(diff().run("dx.max_pool2d", {x}, {Out(t, pool_out(c))},
                                Attrs()
                                    .i64s("kernel", c.kernel)
                                    .i64s("stride", c.stride)
                                    .i64s("padding", c.padding)),
                     what);
      }
    }
    ++index;
  }
}

TEST(LayoutFastPaths, MaxPoolOneNaNPlaneAmongCleanOnes) {
  // Only one plane holds a NaN (the exact retry for that plane alone); one NaN at a vector's
  // first lane, one at the last column, one in a padded corner window.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 4, 10, 64},
                                            std::vector<int64_t>{1, 3, 7, 32}}) {
    In x = tie_input(DX_DTYPE_F32, shape, 40, false, false);
    const int64_t plane = shape[2] * shape[3];
    const double nan = std::numeric_limits<double>::quiet_NaN();
    x.values[static_cast<size_t>(plane + 32)] = nan;
    x.values[static_cast<size_t>(2 * plane + shape[3] - 1)] = nan;
    x.values[static_cast<size_t>(2 * plane + 2 * shape[3])] = nan;
    const PoolCase c{shape, {3, 3}, {2, 2}, {1, 1}};
    expect_equal(diff().run("dx.max_pool2d", {x}, {Out(DX_DTYPE_F32, pool_out(c))},
                            Attrs().i64s("kernel", {3, 3}).i64s("stride", {2, 2}).i64s("padding", {1, 1})),
                 "one NaN plane " + std::to_string(shape[3]));
  }
}

TEST(LayoutFastPaths, MaxPoolBandsWithALateSpecial) {
  // Planes tall and wide enough for several bands of output rows (a band's horizontal pass,
  // then its vertical pass), with a NaN or an infinity only in a late band of one plane: the
  // fast form has then already written the plane's first bands, which the exact retry redoes.
  const std::vector<PoolCase> cases = {
      {{1, 3, 64, 112}, {3, 3}, {2, 2}, {1, 1}},  // the stem pool: 9-row bands
      {{1, 3, 61, 113}, {3, 3}, {2, 2}, {1, 1}},  // odd width: row-by-row horizontal pass
      {{1, 3, 47, 200}, {3, 3}, {1, 1}, {1, 1}},  // stride 1: bands of 10 overlapping rows
      {{1, 3, 40, 300}, {2, 2}, {2, 2}, {0, 0}},  // 2x2 stride 2: 3-row bands
      {{1, 3, 45, 260}, {4, 4}, {1, 1}, {2, 2}},  // runtime kernel width
      {{1, 3, 50, 180}, {5, 3}, {3, 2}, {2, 1}},  // unequal kernel and strides
  };
  int index = 0;
  for (const PoolCase& c : cases) {
    for (dx_dtype_t t : kFloatDtypes) {
      for (int special = 0; special < 3; ++special) {  // none, a NaN, +Inf
        In x = tie_input(t, c.shape, 60 + static_cast<uint64_t>(index), false, false);
        const int64_t h = c.shape[2], w = c.shape[3];
        if (special > 0) {
          // Plane 1, three quarters down, one column in from the right.
          const size_t at = static_cast<size_t>(h * w + (3 * h / 4) * w + w - 2);
          x.values[at] = special == 1 ? std::numeric_limits<double>::quiet_NaN()
                                      : std::numeric_limits<double>::infinity();
        }
        expect_equal(diff().run("dx.max_pool2d", {x}, {Out(t, pool_out(c))},
                                Attrs()
                                    .i64s("kernel", c.kernel)
                                    .i64s("stride", c.stride)
                                    .i64s("padding", c.padding)),
                     "banded max case " + std::to_string(index) + " " + dtype_name(t) + " special " +
                         std::to_string(special));
      }
    }
    ++index;
  }
}

TEST(LayoutFastPaths, MaxPoolStridedInputView) {
  // A non-compact input (every other column of a wider base, at an offset) and an offset output.
  for (dx_dtype_t t : {DX_DTYPE_F32, DX_DTYPE_F64}) {
    const int64_t n = 2, ch = 3, h = 11, w = 32, base_w = 2 * w + 1;
    const ViewOf input{tie_input(t, {n * ch * h * base_w + 5}, 50, true, true),
                       {n, ch, h, w},
                       {ch * h * base_w, h * base_w, base_w, 2},
                       5};
    const int64_t ho = 6, wo = 16;
    const In poison = In::of(t, {n * ch * ho * wo + 3},
                             std::vector<double>(static_cast<size_t>(n * ch * ho * wo + 3), 7));
    const ViewOf output{poison, {n, ch, ho, wo}, {ch * ho * wo, ho * wo, wo, 1}, 3};
    auto attrs = [] {
      return Attrs().i64s("kernel", {3, 3}).i64s("stride", {2, 2}).i64s("padding", {1, 1});
    };
    expect_equal(Result{run_views(diff().cpu_plugin(), "dx.max_pool2d", input, output, attrs()),
                        run_views(diff().reference_plugin(), "dx.max_pool2d", input, output,
                                  attrs())},
                 "max pool of a strided view " + dtype_name(t));
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
    for (dx_dtype_t t : kFloatDtypes) {
      const std::string what = "depthwise case " + std::to_string(index) + " " + dtype_name(t);
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
    for (dx_dtype_t t : kFloatDtypes) {
      const std::string what = "stride-1 conv case " + std::to_string(index) + " " + dtype_name(t);
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
