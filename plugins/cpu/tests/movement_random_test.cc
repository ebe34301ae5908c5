// Differential tests of the CPU plugin's data-movement, indexing, creation and random kernels
// (movement.cc, indexing.cc, random.cc) against the reference plugin: forward results must be
// bit-identical for every dtype, gradients bit-identical too (both sum in f64 in the same order
// and round once), random streams bit-identical for any seed/offset, and bad calls refused with
// the reference's status. Strided, offset and broadcast (stride-0) views are built with
// dx_tensor_view. The Philox generator is checked against Random123's known-answer vectors.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../src/philox.h"
#include "differential.h"

namespace deepx::cpu::testing {
namespace {

const std::vector<dx_dtype_t> kAll = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16,
                                      DX_DTYPE_I64, DX_DTYPE_I32, DX_DTYPE_I16, DX_DTYPE_I8,
                                      DX_DTYPE_U8,  DX_DTYPE_BOOL};
const std::vector<dx_dtype_t> kFloat = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16};
const std::vector<dx_dtype_t> kInt = {DX_DTYPE_I64, DX_DTYPE_I32, DX_DTYPE_I16, DX_DTYPE_I8,
                                      DX_DTYPE_U8};

bool is_float(dx_dtype_t d) {
  return d == DX_DTYPE_F64 || d == DX_DTYPE_F32 || d == DX_DTYPE_F16 || d == DX_DTYPE_BF16;
}

/// Distinct-ish values valid for the dtype (u8 non-negative, bool 0/1, floats non-integral).
In data(dx_dtype_t d, std::vector<int64_t> shape, uint64_t seed = 1) {
  if (d == DX_DTYPE_U8) return In::random(d, shape, 0, 250, seed);
  if (d == DX_DTYPE_BOOL) return In::random(d, shape, 0, 2, seed);
  if (is_float(d)) return In::random(d, shape, -100, 100, seed);
  return In::random(d, shape, -120, 120, seed);
}

/// Indices in [0, limit) (values stored as doubles, converted by the harness).
In indices(dx_dtype_t d, std::vector<int64_t> shape, int64_t limit, uint64_t seed = 3) {
  In in = In::random(d, shape, 0, static_cast<double>(limit), seed);
  for (double& v : in.values) v = std::min(v, static_cast<double>(limit - 1));
  return in;
}

// ---- Philox known answers -----------------------------------------------------------------------

TEST(MovementRandom, PhiloxKnownAnswers) {
  // Random123's kat_vectors, philox4x32 with 10 rounds: counter, key -> output.
  using P = Philox4x32x10;
  EXPECT_EQ(P::generate({0, 0, 0, 0}, {0, 0}),
            (P::Counter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(P::generate({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (P::Counter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(P::generate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (P::Counter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// ---- forward, every dtype -----------------------------------------------------------------------

TEST(MovementRandom, ReshapeBroadcastSliceAllDtypes) {
  Differential diff;
  for (dx_dtype_t d : kAll) {
    const std::string n = dtype_name(d);
    expect_equal(diff.run("dx.reshape", {data(d, {2, 3, 4})}, {Out(d, {4, 6})}), "reshape " + n);
    expect_equal(diff.run("dx.reshape", {data(d, {})}, {Out(d, {1, 1})}), "reshape rank0 " + n);
    expect_equal(diff.run("dx.reshape", {data(d, {0, 3})}, {Out(d, {3, 0})}), "reshape empty " + n);
    expect_equal(diff.run("dx.broadcast_to", {data(d, {3, 1})}, {Out(d, {2, 3, 5})},
                          Attrs().i64s("shape", {2, 3, 5})), "broadcast_to " + n);
    expect_equal(diff.run("dx.broadcast_to", {data(d, {})}, {Out(d, {4, 2})}), "broadcast scalar " + n);
    expect_equal(diff.run("dx.slice", {data(d, {5, 7, 3})}, {Out(d, {2, 3, 3})},
                          Attrs().i64s("starts", {1, -6}).i64s("stops", {100, 7}).i64s("steps", {2, 2})),
                 "slice " + n);
    expect_equal(diff.run("dx.slice", {data(d, {4, 4})}, {Out(d, {0, 4})},
                          Attrs().i64s("starts", {3}).i64s("stops", {1})), "slice empty " + n);
  }
}

TEST(MovementRandom, ConcatSplitAllDtypes) {
  Differential diff;
  for (dx_dtype_t d : kAll) {
    const std::string n = dtype_name(d);
    expect_equal(diff.run("dx.concat", {data(d, {2, 3, 4}, 1), data(d, {2, 1, 4}, 2), data(d, {2, 0, 4}, 3), data(d, {2, 5, 4}, 4)},
                          {Out(d, {2, 9, 4})}, Attrs().i64("axis", -2)), "concat " + n);
    expect_equal(diff.run("dx.concat", {data(d, {3})}, {Out(d, {3})}), "concat one " + n);
    expect_equal(diff.run("dx.concat", {data(d, {2, 3}, 1), data(d, {4, 3}, 2)}, {Out(d, {6, 3})}),
                 "concat axis 0 " + n);
    expect_equal(diff.run("dx.split", {data(d, {6, 5})}, {Out(d, {6, 1}), Out(d, {6, 0}), Out(d, {6, 4})},
                          Attrs().i64("axis", 1).i64s("sizes", {1, 0, 4})), "split sizes " + n);
    expect_equal(diff.run("dx.split", {data(d, {6, 2})}, {Out(d, {2, 2}), Out(d, {2, 2}), Out(d, {2, 2})}),
                 "split equal " + n);
    std::vector<Out> eight;
    for (int i = 0; i < 8; ++i) eight.emplace_back(d, std::vector<int64_t>{1, 3});
    expect_equal(diff.run("dx.split", {data(d, {8, 3})}, eight), "split 8 " + n);
  }
}

TEST(MovementRandom, PadTileAllDtypes) {
  Differential diff;
  for (dx_dtype_t d : kAll) {
    const std::string n = dtype_name(d);
    expect_equal(diff.run("dx.pad", {data(d, {3, 4})}, {Out(d, {6, 5})},
                          Attrs().i64s("pads", {1, 2, 0, 1}).i64("value", 7)), "pad i64 value " + n);
    expect_equal(diff.run("dx.pad", {data(d, {2, 2, 3})}, {Out(d, {3, 2, 7})},
                          Attrs().i64s("pads", {0, 1, 0, 0, 2, 2}).f64("value", -2.75)), "pad f64 value " + n);
    expect_equal(diff.run("dx.pad", {data(d, {2, 0})}, {Out(d, {3, 2})}, Attrs().i64s("pads", {1, 0, 1, 1})),
                 "pad empty input " + n);
    expect_equal(diff.run("dx.pad", {data(d, {})}, {Out(d, {})}), "pad rank 0 " + n);
    expect_equal(diff.run("dx.tile", {data(d, {2, 3})}, {Out(d, {4, 9})}, Attrs().i64s("repeats", {2, 3})),
                 "tile " + n);
    expect_equal(diff.run("dx.tile", {data(d, {2, 1})}, {Out(d, {3, 2, 4})}, Attrs().i64s("repeats", {3, 1, 4})),
                 "tile longer repeats " + n);
    expect_equal(diff.run("dx.tile", {data(d, {2, 3, 2})}, {Out(d, {2, 3, 4})}, Attrs().i64s("repeats", {2})),
                 "tile shorter repeats " + n);
    expect_equal(diff.run("dx.tile", {data(d, {2, 3})}, {Out(d, {0, 3})}, Attrs().i64s("repeats", {0, 1})),
                 "tile zero " + n);
  }
  // Fill values that need care: i64 -> bf16/f16 rounds once, huge and NaN f64 -> ints saturate.
  for (dx_dtype_t d : kAll) {
    for (int64_t v : {int64_t{1152921504606846977} + (int64_t{1} << 52), int64_t{-300}, int64_t{65519}}) {
      expect_equal(diff.run("dx.pad", {data(d, {1})}, {Out(d, {3})}, Attrs().i64s("pads", {1, 1}).i64("value", v)),
                   "pad exotic i64 " + dtype_name(d));
    }
    for (double v : {1e300, -1e300, std::nan(""), -0.0, 65520.0, 3.999}) {
      expect_equal(diff.run("dx.pad", {data(d, {1})}, {Out(d, {3})}, Attrs().i64s("pads", {1, 1}).f64("value", v)),
                   "pad exotic f64 " + dtype_name(d));
    }
  }
}

TEST(MovementRandom, IndexingAllDtypes) {
  Differential diff;
  for (dx_dtype_t d : kAll) {
    const std::string n = dtype_name(d);
    for (dx_dtype_t it : {DX_DTYPE_I32, DX_DTYPE_I64}) {
      expect_equal(diff.run("dx.index_select", {data(d, {4, 5, 3}), indices(it, {7}, 5)}, {Out(d, {4, 7, 3})},
                            Attrs().i64("axis", 1)), "index_select axis 1 " + n);
      expect_equal(diff.run("dx.index_select", {data(d, {6, 2}), indices(it, {9}, 6)}, {Out(d, {9, 2})}),
                   "index_select axis 0 " + n);
      expect_equal(diff.run("dx.index_select", {data(d, {3, 6}), indices(it, {0}, 6)}, {Out(d, {3, 0})},
                            Attrs().i64("axis", -1)), "index_select empty " + n);
    }
    expect_equal(diff.run("dx.gather", {data(d, {4, 5}), indices(DX_DTYPE_I64, {3, 6}, 5)}, {Out(d, {3, 6})},
                          Attrs().i64("axis", 1)), "gather axis 1 " + n);
    expect_equal(diff.run("dx.gather", {data(d, {4, 5, 2}), indices(DX_DTYPE_I64, {7, 2, 1}, 4)}, {Out(d, {7, 2, 1})}),
                 "gather axis 0 " + n);
    if (d != DX_DTYPE_BOOL) {
      expect_equal(diff.run("dx.scatter_add", {data(d, {4, 5}), indices(DX_DTYPE_I64, {3, 4}, 5), data(d, {3, 6}, 9)},
                            {Out(d, {4, 5})}, Attrs().i64("axis", 1)), "scatter_add axis 1 " + n);
      expect_equal(diff.run("dx.scatter_add", {data(d, {3, 4}), indices(DX_DTYPE_I64, {8, 4}, 3), data(d, {8, 4}, 9)},
                            {Out(d, {3, 4})}), "scatter_add axis 0 " + n);
    }
  }
  // f16 scatter sums that would round differently if rounded per addition.
  expect_equal(diff.run("dx.scatter_add", {In::of(DX_DTYPE_F16, {1}, {2048}), In::of(DX_DTYPE_I64, {4}, {0, 0, 0, 0}),
                                           In::of(DX_DTYPE_F16, {4}, {1, 1, 0.5, 0.5})},
                        {Out(DX_DTYPE_F16, {1})}), "scatter_add f16 rounds once");
  // Integer scatter wraps.
  expect_equal(diff.run("dx.scatter_add", {In::of(DX_DTYPE_I8, {2}, {120, -120}), In::of(DX_DTYPE_I64, {2}, {0, 1}),
                                           In::of(DX_DTYPE_I8, {2}, {100, -100})},
                        {Out(DX_DTYPE_I8, {2})}), "scatter_add i8 wraps");
}

TEST(MovementRandom, Arange) {
  Differential diff;
  for (dx_dtype_t d : kFloat) {
    expect_equal(diff.run("dx.arange", {}, {Out(d, {17})}), "arange default " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {3, 5})}, Attrs().f64("start", -1.3).f64("step", 0.1)),
                 "arange f64 attrs " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {9})}, Attrs().i64("start", 5).i64("step", -3)),
                 "arange i64 attrs " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {})}, Attrs().f64("start", 2.5)), "arange rank 0 " + dtype_name(d));
  }
  for (dx_dtype_t d : kInt) {
    expect_equal(diff.run("dx.arange", {}, {Out(d, {2, 11})}), "arange default " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {40})}, Attrs().i64("start", 100).i64("step", 7)),
                 "arange wraps " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {40})}, Attrs().f64("start", -3.5).f64("step", 9.75)),
                 "arange f64 saturates " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {5})}, Attrs().i64("start", 1).f64("step", 0.5)),
                 "arange mixed " + dtype_name(d));
    expect_equal(diff.run("dx.arange", {}, {Out(d, {0})}), "arange empty " + dtype_name(d));
  }
  expect_equal(diff.run("dx.arange", {}, {Out(DX_DTYPE_I64, {3})},
                        Attrs().i64("start", INT64_MAX - 1).i64("step", INT64_MAX)), "arange i64 overflow");
}

// ---- strided, offset and broadcast views ----------------------------------------------------------

/// An input or output given as a view of a larger compact base tensor.
struct ViewIn {
  In base;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

/// Runs op on one plugin with view inputs and a view output; returns the whole output base
/// tensor (so writes outside the view are caught too).
PluginResult run_views(Differential& diff, int32_t plugin, const char* op, const std::vector<ViewIn>& inputs,
                       const ViewIn& output, const Attrs& attrs, bool backward = false) {
  std::vector<dx_tensor_t*> owned;
  auto make = [&](const In& in) {
    dx_tensor_t* t = nullptr;
    check(dx_tensor_create(diff.runtime(), diff.device(), in.dtype, in.shape.data(),
                           static_cast<int32_t>(in.shape.size()), &t), "dx_tensor_create");
    owned.push_back(t);
    const auto bytes = to_bytes(in.dtype, in.values);
    if (!bytes.empty()) check(dx_tensor_write(t, bytes.data(), bytes.size()), "dx_tensor_write");
    return t;
  };
  auto view = [&](dx_tensor_t* base, const ViewIn& v) {
    dx_tensor_t* t = nullptr;
    check(dx_tensor_view(base, v.shape.data(), v.strides.data(), static_cast<int32_t>(v.shape.size()), v.offset, &t),
          "dx_tensor_view");
    owned.push_back(t);
    return t;
  };
  std::vector<dx_tensor_t*> ins;
  for (const ViewIn& v : inputs) ins.push_back(view(make(v.base), v));
  dx_tensor_t* out_base = make(output.base);
  dx_tensor_t* outs[1] = {view(out_base, output)};
  dx_op_id_t id{};
  check(dx_runtime_op_lookup(diff.runtime(), op, &id), op);
  dx_invoke_options_t options{};
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
  options.plugin_index = plugin;
  PluginResult r;
  r.status = take_status(
      dx_invoke_ex(diff.runtime(), id, ins.data(), static_cast<int32_t>(ins.size()), outs, 1, attrs.get(), &options),
      &r.message);
  if (r.status == DX_OK) {
    std::vector<uint8_t> bytes(output.base.values.size() * dtype_bytes(output.base.dtype));
    if (!bytes.empty()) check(dx_tensor_read(out_base, bytes.data(), bytes.size()), "dx_tensor_read");
    r.outputs.push_back(from_bytes(output.base.dtype, bytes));
  }
  for (dx_tensor_t* t : owned) dx_error_destroy(dx_tensor_destroy(t));
  return r;
}

Result both_views(Differential& diff, const char* op, const std::vector<ViewIn>& inputs, const ViewIn& output,
                  const Attrs& attrs = Attrs(), bool backward = false) {
  return Result{run_views(diff, diff.cpu_plugin(), op, inputs, output, attrs, backward),
                run_views(diff, diff.reference_plugin(), op, inputs, output, attrs, backward)};
}

/// A poisoned output base of `count` elements.
In poison(dx_dtype_t d, int64_t count) { return In::of(d, {count}, std::vector<double>(static_cast<size_t>(count), 1)); }

TEST(MovementRandom, StridedAndOffsetViews) {
  Differential diff;
  for (dx_dtype_t d : kAll) {
    const std::string n = dtype_name(d);
    // x: a transposed, offset view (3, 4) of a (5, 6) base; y: every other element of a base.
    const ViewIn x{data(d, {5, 6}), {3, 4}, {1, 6}, 7};
    const ViewIn y12{poison(d, 30), {12}, {2}, 3};
    expect_equal(both_views(diff, "dx.reshape", {x}, y12), "reshape strided " + n);
    const ViewIn y34{poison(d, 40), {3, 4}, {1, 3}, 2};  // column-major output
    expect_equal(both_views(diff, "dx.slice", {ViewIn{data(d, {5, 6}), {5, 4}, {6, 1}, 1}}, y34,
                            Attrs().i64s("starts", {1, 0}).i64s("stops", {4, 4})), "slice strided " + n);
    // A stride-0 (broadcast) input view.
    const ViewIn bcast{data(d, {4}), {3, 4}, {0, 1}, 0};
    expect_equal(both_views(diff, "dx.reshape", {bcast}, y12), "reshape of a broadcast view " + n);
    expect_equal(both_views(diff, "dx.concat", {x, bcast}, ViewIn{poison(d, 60), {3, 8}, {1, 3}, 5},
                            Attrs().i64("axis", 1)), "concat strided " + n);
    expect_equal(both_views(diff, "dx.pad", {x}, ViewIn{poison(d, 80), {5, 5}, {10, 1}, 3},
                            Attrs().i64s("pads", {1, 1, 0, 1}).i64("value", 1)), "pad strided " + n);
    expect_equal(both_views(diff, "dx.tile", {x}, ViewIn{poison(d, 200), {6, 8}, {1, 6}, 50},
                            Attrs().i64s("repeats", {2, 2})), "tile strided " + n);
    expect_equal(both_views(diff, "dx.broadcast_to", {ViewIn{data(d, {6}), {3, 1}, {2, 1}, 1}},
                            ViewIn{poison(d, 40), {2, 3, 4}, {12, 1, 3}, 4}), "broadcast_to strided " + n);
    expect_equal(both_views(diff, "dx.index_select", {x, ViewIn{indices(DX_DTYPE_I64, {10}, 3), {5}, {2}, 0}},
                            ViewIn{poison(d, 60), {5, 4}, {1, 5}, 2}), "index_select strided " + n);
    expect_equal(both_views(diff, "dx.gather", {x, ViewIn{indices(DX_DTYPE_I64, {20}, 4), {3, 2}, {1, 3}, 1}},
                            ViewIn{poison(d, 20), {3, 2}, {3, 1}, 1}, Attrs().i64("axis", 1)), "gather strided " + n);
    if (d != DX_DTYPE_BOOL) {
      expect_equal(both_views(diff, "dx.scatter_add", {x, ViewIn{indices(DX_DTYPE_I64, {20}, 4), {3, 2}, {1, 3}, 1}, x},
                              ViewIn{poison(d, 30), {3, 4}, {1, 3}, 0}, Attrs().i64("axis", 1)),
                   "scatter_add strided " + n);
    }
  }
  for (dx_dtype_t d : kFloat) {
    expect_equal(both_views(diff, "dx.arange", {}, ViewIn{poison(d, 40), {3, 4}, {1, 5}, 3},
                            Attrs().f64("start", 0.25).f64("step", 1.5)), "arange strided " + dtype_name(d));
    expect_equal(both_views(diff, "dx.uniform", {}, ViewIn{poison(d, 40), {3, 5}, {1, 3}, 2},
                            Attrs().i64("seed", 99).i64("offset", 3)), "uniform strided " + dtype_name(d));
    expect_equal(both_views(diff, "dx.normal", {}, ViewIn{poison(d, 40), {3, 5}, {1, 3}, 2},
                            Attrs().i64("seed", 99)), "normal strided " + dtype_name(d));
  }
}

TEST(MovementRandom, LargeParallelCopiesAgree) {
  // Above the OpenMP threshold: the parallel paths of concat, tile, slice, index_select.
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  expect_equal(diff.run("dx.concat", {data(d, {256, 300}, 1), data(d, {256, 200}, 2)}, {Out(d, {256, 500})},
                        Attrs().i64("axis", 1)), "large concat");
  expect_equal(diff.run("dx.tile", {data(d, {100, 37})}, {Out(d, {300, 74})}, Attrs().i64s("repeats", {3, 2})),
               "large tile");
  expect_equal(diff.run("dx.slice", {data(d, {400, 401})}, {Out(d, {200, 133})},
                        Attrs().i64s("starts", {1, 2}).i64s("steps", {2, 3})), "large slice");
  expect_equal(diff.run("dx.index_select", {data(d, {1000, 128}), indices(DX_DTYPE_I64, {900}, 1000)},
                        {Out(d, {900, 128})}), "large index_select");
  expect_equal(diff.run("dx.gather", {data(d, {300, 300}), indices(DX_DTYPE_I64, {300, 300}, 300)},
                        {Out(d, {300, 300})}, Attrs().i64("axis", 0)), "large gather");
}

// ---- backward -----------------------------------------------------------------------------------

TEST(MovementRandom, BackwardBitExact) {
  Differential diff;
  for (dx_dtype_t d : kFloat) {
    const std::string n = dtype_name(d);
    In dy = data(d, {4, 6}, 5);
    dy.values[0] = -0.0;  // gradients are 0.0 + dy: -0 comes back as +0
    expect_equal(diff.run("dx.reshape", {dy, data(d, {2, 3, 4}), data(d, {4, 6})}, {Out(d, {2, 3, 4})}, Attrs(), true),
                 "reshape backward " + n);
    expect_equal(diff.run("dx.broadcast_to", {data(d, {2, 3, 5}, 5), data(d, {3, 1}), data(d, {2, 3, 5})},
                          {Out(d, {3, 1})}, Attrs(), true), "broadcast_to backward " + n);
    expect_equal(diff.run("dx.concat", {data(d, {2, 7}, 5), data(d, {2, 3}, 1), data(d, {2, 4}, 2), data(d, {2, 7})},
                          {Out(d, {2, 3}), Out(d, {2, 4})}, Attrs().i64("axis", 1), true), "concat backward " + n);
    expect_equal(diff.run("dx.concat", {data(d, {2, 7}, 5), data(d, {2, 3}, 1), data(d, {2, 4}, 2), data(d, {2, 7})},
                          {Out::absent(), Out(d, {2, 4})}, Attrs().i64("axis", 1), true), "concat backward one " + n);
    expect_equal(diff.run("dx.split", {data(d, {2, 1}, 5), data(d, {2, 4}, 6), data(d, {2, 5}), data(d, {2, 1}), data(d, {2, 4})},
                          {Out(d, {2, 5})}, Attrs().i64("axis", 1).i64s("sizes", {1, 4}), true), "split backward " + n);
    expect_equal(diff.run("dx.slice", {data(d, {2, 3}, 5), data(d, {5, 7}), data(d, {2, 3})}, {Out(d, {5, 7})},
                          Attrs().i64s("starts", {1, 1}).i64s("steps", {2, 2}).i64s("stops", {5, 6}), true),
                 "slice backward " + n);
    expect_equal(diff.run("dx.pad", {data(d, {5, 6}, 5), data(d, {3, 4}), data(d, {5, 6})}, {Out(d, {3, 4})},
                          Attrs().i64s("pads", {1, 1, 0, 2}), true), "pad backward " + n);
    expect_equal(diff.run("dx.tile", {data(d, {3, 4, 9}, 5), data(d, {2, 3}), data(d, {3, 4, 9})}, {Out(d, {2, 3})},
                          Attrs().i64s("repeats", {3, 2, 3}), true), "tile backward " + n);
    for (dx_dtype_t it : {DX_DTYPE_I32, DX_DTYPE_I64}) {
      const In idx = In::of(it, {6}, {1, 3, 1, 0, 3, 1});
      expect_equal(diff.run("dx.index_select", {data(d, {2, 6, 3}, 5), data(d, {2, 4, 3}), idx, data(d, {2, 6, 3})},
                            {Out(d, {2, 4, 3}), Out(it, {6})}, Attrs().i64("axis", 1), true),
                   "index_select backward " + n);
    }
    const In gidx = indices(DX_DTYPE_I64, {5, 3}, 4);
    expect_equal(diff.run("dx.gather", {data(d, {5, 3}, 5), data(d, {4, 3}), gidx, data(d, {5, 3})},
                          {Out(d, {4, 3}), Out(DX_DTYPE_I64, {5, 3})}, Attrs(), true), "gather backward " + n);
    const In sidx = indices(DX_DTYPE_I64, {3, 2}, 4);
    expect_equal(diff.run("dx.scatter_add", {data(d, {3, 4}, 5), data(d, {3, 4}), sidx, data(d, {3, 3}), data(d, {3, 4})},
                          {Out(d, {3, 4}), Out(DX_DTYPE_I64, {3, 2}), Out(d, {3, 3})}, Attrs().i64("axis", 1), true),
                 "scatter_add backward " + n);
    expect_equal(diff.run("dx.dropout", {data(d, {5, 7}, 5), data(DX_DTYPE_BOOL, {5, 7}), data(d, {5, 7}),
                                         data(d, {5, 7}), data(DX_DTYPE_BOOL, {5, 7}, 8)},
                          {Out(d, {5, 7})}, Attrs().f64("p", 0.3), true), "dropout backward " + n);
    expect_equal(diff.run("dx.dropout", {data(d, {5, 7}, 5), data(DX_DTYPE_BOOL, {5, 7}), data(d, {5, 7}),
                                         data(d, {5, 7}), data(DX_DTYPE_BOOL, {5, 7}, 8)},
                          {Out(d, {5, 7})}, Attrs().f64("p", 0.3).boolean("training", false), true),
                 "dropout backward eval " + n);
  }
  // Many contributions per element in f16: the f64 sum must be rounded once, as the reference.
  std::vector<double> many(64, 0.0009765625 * 0.75);
  many[0] = 1.0;
  expect_equal(diff.run("dx.broadcast_to", {In::of(DX_DTYPE_F16, {64}, many), In::of(DX_DTYPE_F16, {1}, {0}),
                                            In::of(DX_DTYPE_F16, {64}, many)},
                        {Out(DX_DTYPE_F16, {1})}, Attrs(), true), "broadcast_to backward f16 sum");
}

TEST(MovementRandom, StridedBackward) {
  Differential diff;
  for (dx_dtype_t d : kFloat) {
    const ViewIn dy{data(d, {5, 6}, 5), {3, 4}, {1, 6}, 7};
    const ViewIn x{data(d, {12}), {12}, {1}, 0};
    const ViewIn y{data(d, {12}), {12}, {1}, 0};
    expect_equal(both_views(diff, "dx.reshape", {dy, x, y}, ViewIn{poison(d, 30), {12}, {2}, 3}, Attrs(), true),
                 "reshape backward strided " + dtype_name(d));
    const ViewIn x31{data(d, {3}), {3, 1}, {1, 1}, 0};
    expect_equal(both_views(diff, "dx.broadcast_to", {dy, x31, dy}, ViewIn{poison(d, 10), {3, 1}, {3, 1}, 1}, Attrs(), true),
                 "broadcast_to backward strided " + dtype_name(d));
  }
}

// ---- random -------------------------------------------------------------------------------------

TEST(MovementRandom, RandomStreamsBitExact) {
  Differential diff;
  const std::vector<std::vector<int64_t>> shapes = {{1}, {3}, {7}, {2, 5}, {3, 3, 3}, {}, {0, 4}};
  for (dx_dtype_t d : kFloat) {
    for (const auto& shape : shapes) {
      for (int64_t seed : {int64_t{0}, int64_t{42}, int64_t{-1}, int64_t{0x123456789abcdef}}) {
        for (int64_t offset : {int64_t{0}, int64_t{5}, int64_t{-2}}) {
          const std::string what = dtype_name(d) + " seed " + std::to_string(seed) + " offset " + std::to_string(offset) +
                                   " numel " + std::to_string(numel(shape));
          expect_equal(diff.run("dx.uniform", {}, {Out(d, shape)}, Attrs().i64("seed", seed).i64("offset", offset)),
                       "uniform " + what);
          expect_equal(diff.run("dx.uniform", {}, {Out(d, shape)},
                                Attrs().f64("low", -3).f64("high", 0.5).i64("seed", seed).i64("offset", offset)),
                       "uniform low/high " + what);
          expect_equal(diff.run("dx.normal", {}, {Out(d, shape)}, Attrs().i64("seed", seed).i64("offset", offset)),
                       "normal " + what);
          expect_equal(diff.run("dx.normal", {}, {Out(d, shape)},
                                Attrs().f64("mean", 3).f64("std", 0.25).i64("seed", seed).i64("offset", offset)),
                       "normal mean/std " + what);
          for (double p : {0.0, 0.3, 1.0}) {
            expect_equal(diff.run("dx.dropout", {data(d, shape, 4)}, {Out(d, shape), Out(DX_DTYPE_BOOL, shape)},
                                  Attrs().f64("p", p).i64("seed", seed).i64("offset", offset)),
                         "dropout p " + std::to_string(p) + " " + what);
          }
        }
      }
    }
    // Large enough to run on every OpenMP thread (ranges start mid-block).
    const std::vector<int64_t> large = {1000, 67};
    const Attrs seeded = Attrs().i64("seed", 1234567).i64("offset", 11);
    expect_equal(diff.run("dx.uniform", {}, {Out(d, large)}, seeded), "uniform large " + dtype_name(d));
    expect_equal(diff.run("dx.normal", {}, {Out(d, large)}, seeded), "normal large " + dtype_name(d));
    expect_equal(diff.run("dx.dropout", {data(d, large, 4)}, {Out(d, large), Out(DX_DTYPE_BOOL, large)},
                          Attrs().f64("p", 0.25).i64("seed", 99)), "dropout large " + dtype_name(d));
    expect_equal(diff.run("dx.uniform", {}, {Out(d, {13})}), "uniform unset attrs " + dtype_name(d));
    expect_equal(diff.run("dx.dropout", {data(d, {9})}, {Out(d, {9}), Out(DX_DTYPE_BOOL, {9})},
                          Attrs().f64("p", 0.5).boolean("training", false)), "dropout eval " + dtype_name(d));
    expect_equal(diff.run("dx.dropout", {data(d, {9})}, {Out(d, {9}), Out(DX_DTYPE_BOOL, {9})}),
                 "dropout defaults " + dtype_name(d));
  }
}

TEST(MovementRandom, OffsetSkipsBlocks) {
  // offset + k skips 4k uniforms: the tail of a stream equals the stream at a later offset.
  Differential diff;
  const Result whole = diff.run("dx.uniform", {}, {Out(DX_DTYPE_F64, {40})}, Attrs().i64("seed", 7).i64("offset", 2));
  const Result tail = diff.run("dx.uniform", {}, {Out(DX_DTYPE_F64, {20})}, Attrs().i64("seed", 7).i64("offset", 7));
  ASSERT_EQ(whole.cpu.status, DX_OK);
  ASSERT_EQ(tail.cpu.status, DX_OK);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(whole.cpu.outputs[0][20 + static_cast<size_t>(i)], tail.cpu.outputs[0][static_cast<size_t>(i)]);
}

// ---- bad calls ----------------------------------------------------------------------------------

TEST(MovementRandom, BadCallsRefusedLikeTheReference) {
  Differential diff;
  const dx_dtype_t f = DX_DTYPE_F32;
  expect_same_error(diff.run("dx.reshape", {data(f, {2, 3})}, {Out(f, {5})}), "reshape size");
  expect_same_error(diff.run("dx.broadcast_to", {data(f, {3})}, {Out(f, {2, 4})}), "broadcast_to incompatible");
  expect_same_error(diff.run("dx.broadcast_to", {data(f, {3})}, {Out(f, {2, 3})}, Attrs().i64s("shape", {3, 3})),
                    "broadcast_to shape attr");
  expect_same_error(diff.run("dx.concat", {data(f, {2, 3}), data(f, {3, 3})}, {Out(f, {5, 3})}, Attrs().i64("axis", 1)),
                    "concat off-axis mismatch");
  expect_same_error(diff.run("dx.concat", {data(f, {2, 3})}, {Out(f, {2, 3})}, Attrs().i64("axis", 2)),
                    "concat axis out of range");
  expect_same_error(diff.run("dx.concat", {data(f, {2, 3})}, {Out(f, {2, 4})}), "concat output");
  expect_same_error(diff.run("dx.split", {data(f, {5})}, {Out(f, {2}), Out(f, {3})}), "split unequal");
  expect_same_error(diff.run("dx.split", {data(f, {5})}, {Out(f, {2}), Out(f, {3})}, Attrs().i64s("sizes", {-1, 6})),
                    "split negative");
  expect_same_error(diff.run("dx.split", {data(f, {5})}, {Out(f, {2}), Out(f, {3})}, Attrs().i64s("sizes", {2, 2})),
                    "split sizes sum");
  expect_same_error(diff.run("dx.split", {data(f, {5})}, {Out(f, {2}), Out(f, {3})}, Attrs().i64("axis", -2)),
                    "split axis");
  expect_same_error(diff.run("dx.slice", {data(f, {5})}, {Out(f, {5})}, Attrs().i64s("steps", {0})), "slice step 0");
  expect_same_error(diff.run("dx.slice", {data(f, {5})}, {Out(f, {5})}, Attrs().i64s("starts", {0, 0})),
                    "slice too many starts");
  expect_same_error(diff.run("dx.slice", {data(f, {5})}, {Out(f, {4})}), "slice output shape");
  expect_same_error(diff.run("dx.slice", {data(f, {5})}, {Out(f, {5})}, Attrs().str("starts", "x")), "slice attr type");
  expect_same_error(diff.run("dx.index_select", {data(f, {4, 2}), In::of(DX_DTYPE_I64, {2}, {0, 4})}, {Out(f, {2, 2})}),
                    "index_select out of range");
  expect_same_error(diff.run("dx.index_select", {data(f, {4, 2}), In::of(DX_DTYPE_I32, {2}, {-1, 0})}, {Out(f, {2, 2})}),
                    "index_select negative");
  expect_same_error(diff.run("dx.index_select", {data(f, {4, 2}), In::of(DX_DTYPE_I64, {1, 2}, {0, 1})}, {Out(f, {2, 2})}),
                    "index_select 2-D indices");
  expect_same_error(diff.run("dx.gather", {data(f, {4, 2}), In::of(DX_DTYPE_I64, {1, 2}, {0, 2})}, {Out(f, {1, 2})},
                             Attrs().i64("axis", 1)), "gather out of range");
  expect_same_error(diff.run("dx.gather", {data(f, {4, 2}), In::of(DX_DTYPE_I64, {1, 3}, {0, 1, 0})}, {Out(f, {1, 3})}),
                    "gather index too wide");
  expect_same_error(diff.run("dx.scatter_add", {data(f, {4}), In::of(DX_DTYPE_I64, {2}, {0, 9}), data(f, {2})},
                             {Out(f, {4})}), "scatter_add out of range");
  expect_same_error(diff.run("dx.scatter_add", {data(f, {4}), In::of(DX_DTYPE_I64, {2}, {0, 1}), data(f, {1})},
                             {Out(f, {4})}), "scatter_add small src");
  expect_same_error(diff.run("dx.pad", {data(f, {3})}, {Out(f, {4})}, Attrs().i64s("pads", {-1, 2})), "pad negative");
  expect_same_error(diff.run("dx.pad", {data(f, {3})}, {Out(f, {4})}, Attrs().i64s("pads", {1})), "pad count");
  expect_same_error(diff.run("dx.pad", {data(f, {3})}, {Out(f, {4})}, Attrs().i64s("pads", {1, 1})), "pad output shape");
  expect_same_error(diff.run("dx.pad", {data(f, {3})}, {Out(f, {4})}, Attrs().i64s("pads", {1, 0}).str("value", "x")),
                    "pad value type");
  expect_same_error(diff.run("dx.tile", {data(f, {3})}, {Out(f, {3})}, Attrs().i64s("repeats", {-1})), "tile negative");
  expect_same_error(diff.run("dx.tile", {data(f, {3})}, {Out(f, {3})}, Attrs().i64s("repeats", {2})), "tile output shape");
  expect_same_error(diff.run("dx.arange", {}, {Out(f, {3})}, Attrs().str("start", "x")), "arange start type");
  expect_same_error(diff.run("dx.uniform", {}, {Out(f, {3})}, Attrs().f64("seed", 1.5)), "uniform seed type");
  expect_same_error(diff.run("dx.dropout", {data(f, {3})}, {Out(f, {3}), Out(DX_DTYPE_BOOL, {3})}, Attrs().f64("p", 1.5)),
                    "dropout p");
  expect_same_error(diff.run("dx.dropout", {data(f, {3})}, {Out(f, {3}), Out(DX_DTYPE_BOOL, {3})}, Attrs().f64("p", std::nan(""))),
                    "dropout p NaN");
  expect_same_error(diff.run("dx.dropout", {data(f, {3})}, {Out(f, {2}), Out(DX_DTYPE_BOOL, {3})}), "dropout shape");
  // Backward refusals.
  expect_same_error(diff.run("dx.reshape", {data(f, {5}), data(f, {2, 3}), data(f, {5})}, {Out(f, {2, 3})}, Attrs(), true),
                    "reshape backward size");
  expect_same_error(diff.run("dx.index_select", {data(f, {2, 2}), data(f, {4, 2}), In::of(DX_DTYPE_I64, {2}, {0, 7}),
                                                 data(f, {2, 2})},
                             {Out(f, {4, 2}), Out::absent()}, Attrs(), true), "index_select backward out of range");
  expect_same_error(diff.run("dx.concat", {data(f, {2, 6}), data(f, {2, 3}), data(f, {2, 4}), data(f, {2, 6})},
                             {Out(f, {2, 3}), Out(f, {2, 4})}, Attrs().i64("axis", 1), true), "concat backward sizes");
  expect_same_error(diff.run("dx.pad", {data(f, {5}), data(f, {3}), data(f, {5})}, {Out(f, {4})},
                             Attrs().i64s("pads", {1, 1}), true), "pad backward gradient shape");
}

}  // namespace
}  // namespace deepx::cpu::testing
