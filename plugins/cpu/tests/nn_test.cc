// Differential tests of the CPU plugin's neural-network kernels (nn.cc, nn_norm.cc) against the
// reference plugin: log_softmax, linear, layer_norm, rms_norm, batch_norm, embedding and
// cross_entropy, forward and backward, for every F dtype; shapes with empty and size-1 dims,
// non-default axes, optional inputs absent and present, every reduction, ignored labels, and the
// error statuses of bad calls. Besides the compact tensors of differential.h, every op also runs
// on strided views (every other element, offset by one) and on a stride-0 broadcast input, and
// batch_norm's running statistics are compared after the in-place update. Huge logits (where
// max + log(sum) rounds to max) keep cross_entropy's log 2 and log_softmax's -log 2.
#include <functional>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

/// Tolerances per dtype (relative, absolute), against the f64-computed reference.
struct Tol {
  double rtol, atol;
};
Tol tol_for(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: return {1e-9, 1e-9};
    case DX_DTYPE_F32: return {1e-5, 1e-5};
    case DX_DTYPE_F16: return {1e-2, 1e-2};
    default: return {2e-2, 2e-2};
  }
}

void close(const Result& r, dx_dtype_t d, const std::string& what, double scale = 1.0) {
  const Tol t = tol_for(d);
  expect_close(r, t.rtol * scale, t.atol * scale, what + " " + dtype_name(d));
}

// ---- views: strided and broadcast layouts -------------------------------------------------------

enum class Layout {
  kStrided,     // every tensor a view of every other element of a buffer, offset by one element
  kBroadcast0,  // input 0's first dim has stride 0 (its values are those of row 0); others compact
};

struct TensorDeleter {
  void operator()(dx_tensor_t* t) const { dx_error_destroy(dx_tensor_destroy(t)); }
};
using Owned = std::unique_ptr<dx_tensor_t, TensorDeleter>;

/// Runs `op` on one plugin with the tensors laid out as `layout` says; the result's outputs are
/// the op's outputs followed by every present input read back after the call.
PluginResult run_layout(Differential& diff, int32_t plugin, const char* op, std::vector<In> inputs,
                        const std::vector<Out>& outputs, const Attrs& attrs, bool backward, Layout layout) {
  std::vector<Owned> owned;
  std::vector<dx_tensor_t*> in_ptrs, out_ptrs;
  struct Readback {
    dx_tensor_t* base;
    dx_dtype_t dtype;
    int64_t count;
    int64_t step, offset;
  };
  std::vector<Readback> out_reads, in_reads;
  auto make = [&](dx_dtype_t dtype, const std::vector<int64_t>& shape, const std::vector<double>* values,
                  bool broadcast0, Readback& rb) -> dx_tensor_t* {
    const int64_t count = numel(shape);
    std::vector<int64_t> strides(shape.size());
    int64_t compact = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = compact;
      compact *= std::max<int64_t>(1, shape[d]);
    }
    dx_tensor_t* base = nullptr;
    if (broadcast0) {
      // Base holds one row; dim 0 has stride 0.
      std::vector<int64_t> row_shape(shape.begin() + 1, shape.end());
      const int64_t row = numel(row_shape);
      check(dx_tensor_create(diff.runtime(), diff.device(), dtype, row_shape.data(),
                             static_cast<int32_t>(row_shape.size()), &base), "create");
      owned.emplace_back(base);
      std::vector<double> first(values->begin(), values->begin() + (count > 0 ? row : 0));
      first.resize(static_cast<size_t>(row), 0.0);
      const auto bytes = to_bytes(dtype, first);
      if (!bytes.empty()) check(dx_tensor_write(base, bytes.data(), bytes.size()), "write");
      strides[0] = 0;
      rb = {base, dtype, row, 1, 0};
    } else {
      const int64_t n = 2 * count + 2;
      check(dx_tensor_create(diff.runtime(), diff.device(), dtype, &n, 1, &base), "create");
      owned.emplace_back(base);
      std::vector<double> all(static_cast<size_t>(n), 96.0);
      for (int64_t i = 0; i < count; ++i) all[1 + 2 * i] = values != nullptr ? (*values)[i] : 12345.0;
      const auto bytes = to_bytes(dtype, all);
      check(dx_tensor_write(base, bytes.data(), bytes.size()), "write");
      for (int64_t& s : strides) s *= 2;
      rb = {base, dtype, count, 2, 1};
    }
    dx_tensor_t* view = nullptr;
    check(dx_tensor_view(base, shape.data(), strides.data(), static_cast<int32_t>(shape.size()),
                         broadcast0 ? 0 : 1, &view), "dx_tensor_view");
    owned.emplace_back(view);
    return view;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].present) {
      in_ptrs.push_back(nullptr);
      continue;
    }
    const bool bc = layout == Layout::kBroadcast0 && i == 0 && !inputs[i].shape.empty();
    const bool strided = layout == Layout::kStrided;
    Readback rb{};
    if (bc || strided) {
      in_ptrs.push_back(make(inputs[i].dtype, inputs[i].shape, &inputs[i].values, bc, rb));
    } else {
      dx_tensor_t* t = nullptr;
      check(dx_tensor_create(diff.runtime(), diff.device(), inputs[i].dtype, inputs[i].shape.data(),
                             static_cast<int32_t>(inputs[i].shape.size()), &t), "create");
      owned.emplace_back(t);
      const auto bytes = to_bytes(inputs[i].dtype, inputs[i].values);
      if (!bytes.empty()) check(dx_tensor_write(t, bytes.data(), bytes.size()), "write");
      in_ptrs.push_back(t);
      rb = {t, inputs[i].dtype, numel(inputs[i].shape), 1, 0};
    }
    in_reads.push_back(rb);
  }
  for (const Out& out : outputs) {
    if (!out.present) {
      out_ptrs.push_back(nullptr);
      out_reads.push_back({nullptr, out.dtype, 0, 1, 0});
      continue;
    }
    Readback rb{};
    if (layout == Layout::kStrided) {
      out_ptrs.push_back(make(out.dtype, out.shape, nullptr, false, rb));
    } else {
      dx_tensor_t* t = nullptr;
      check(dx_tensor_create(diff.runtime(), diff.device(), out.dtype, out.shape.data(),
                             static_cast<int32_t>(out.shape.size()), &t), "create");
      owned.emplace_back(t);
      out_ptrs.push_back(t);
      rb = {t, out.dtype, numel(out.shape), 1, 0};
    }
    out_reads.push_back(rb);
  }
  dx_op_id_t id{};
  check(dx_runtime_op_lookup(diff.runtime(), op, &id), "lookup");
  dx_invoke_options_t options{};
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
  options.plugin_index = plugin;
  PluginResult result;
  result.status = take_status(dx_invoke_ex(diff.runtime(), id, in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()),
                                           out_ptrs.data(), static_cast<int32_t>(out_ptrs.size()), attrs.get(),
                                           &options),
                              &result.message);
  if (result.status != DX_OK) return result;
  auto read = [&](const Readback& rb) {
    std::vector<double> values;
    if (rb.base == nullptr) return values;
    int64_t total = 0;
    check(dx_tensor_numel(rb.base, &total), "numel");
    std::vector<uint8_t> bytes(static_cast<size_t>(total) * dtype_bytes(rb.dtype));
    if (!bytes.empty()) check(dx_tensor_read(rb.base, bytes.data(), bytes.size()), "read");
    const std::vector<double> all = from_bytes(rb.dtype, bytes);
    for (int64_t i = 0; i < rb.count; ++i) values.push_back(all[rb.offset + i * rb.step]);
    // The gaps of a strided output must be untouched.
    if (rb.step == 2) {
      for (int64_t i = 0; i < total; i += 2) {
        if (all[i] != 96.0) ADD_FAILURE() << "a kernel wrote outside its view at element " << i;
      }
    }
    return values;
  };
  for (const Readback& rb : out_reads) result.outputs.push_back(read(rb));
  for (const Readback& rb : in_reads) result.outputs.push_back(read(rb));
  return result;
}

Result run_both(Differential& diff, const char* op, const std::vector<In>& inputs, const std::vector<Out>& outputs,
                const Attrs& attrs, bool backward, Layout layout) {
  return Result{run_layout(diff, diff.cpu_plugin(), op, inputs, outputs, attrs, backward, layout),
                run_layout(diff, diff.reference_plugin(), op, inputs, outputs, attrs, backward, layout)};
}

/// Runs a case compact, strided and (when input 0 has rank >= 1 and `broadcast`) with input 0
/// broadcast along its first dim, comparing each with the reference.
void check_all_layouts(Differential& diff, const char* op, const std::vector<In>& inputs,
                       const std::vector<Out>& outputs, std::function<Attrs()> attrs, bool backward,
                       dx_dtype_t dtype, const std::string& what, bool broadcast = true, double scale = 1.0) {
  close(diff.run(op, inputs, outputs, attrs(), backward), dtype, what + " compact", scale);
  close(run_both(diff, op, inputs, outputs, attrs(), backward, Layout::kStrided), dtype, what + " strided", scale);
  if (broadcast && !inputs.empty() && inputs[0].present && !inputs[0].shape.empty()) {
    close(run_both(diff, op, inputs, outputs, attrs(), backward, Layout::kBroadcast0), dtype,
          what + " broadcast", scale);
  }
}

Attrs no_attrs() { return Attrs(); }

// ---- log_softmax ---------------------------------------------------------------------------------

TEST(NnLogSoftmax, ForwardAndBackwardAgree) {
  Differential diff;
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  const Case cases[] = {{{5, 7}, -1}, {{3, 4, 5}, 1}, {{2, 3}, 0}, {{1, 1}, -1}, {{9}, 0},
                        {{0, 4}, -1}, {{4, 0}, -1}, {{6, 300}, -1}, {{2, 37, 3}, -2}};
  for (dx_dtype_t d : kFloatDtypes) {
    for (const Case& c : cases) {
      const std::string what = "log_softmax " + std::to_string(c.shape.size()) + "d axis " + std::to_string(c.axis);
      auto attrs = [&] { return Attrs().i64("axis", c.axis); };
      const In x = In::random(d, c.shape, -4, 4, 3);
      check_all_layouts(diff, "dx.log_softmax", {x}, {Out(d, c.shape)}, attrs, false, d, what);
      const In dy = In::random(d, c.shape, -1, 1, 4);
      check_all_layouts(diff, "dx.log_softmax", {dy, x, x}, {Out(d, c.shape)}, attrs, true, d, what + " backward");
    }
  }
}

TEST(NnLogSoftmax, SpecialValuesAndLargeInputs) {
  Differential diff;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const In x = In::of(DX_DTYPE_F32, {4, 3}, {1, nan, 2, -inf, -inf, -inf, inf, 1, 2, 1000, -1000, 0});
  for (dx_dtype_t d : {DX_DTYPE_F32, DX_DTYPE_F64}) {
    In xd = x;
    xd.dtype = d;
    close(diff.run("dx.log_softmax", {xd}, {Out(d, {4, 3})}), d, "log_softmax special");
    close(diff.run("dx.log_softmax", {In::random(d, {4, 3}), xd, xd}, {Out(d, {4, 3})}, Attrs(), true), d,
          "log_softmax special backward");
  }
  // Above the parallel threshold: many rows, and one long row.
  const In big = In::random(DX_DTYPE_F32, {512, 257}, -8, 8, 5);
  close(diff.run("dx.log_softmax", {big}, {Out(DX_DTYPE_F32, {512, 257})}), DX_DTYPE_F32, "log_softmax big");
  close(diff.run("dx.log_softmax", {big}, {Out(DX_DTYPE_F32, {512, 257})}, Attrs().i64("axis", 0)), DX_DTYPE_F32,
        "log_softmax big axis 0");
  close(diff.run("dx.log_softmax", {In::random(DX_DTYPE_F32, {512, 257}), big, big}, {Out(DX_DTYPE_F32, {512, 257})},
                 Attrs(), true),
        DX_DTYPE_F32, "log_softmax big backward");
  const In row = In::random(DX_DTYPE_BF16, {1, 70000}, -3, 3, 6);
  close(diff.run("dx.log_softmax", {row}, {Out(DX_DTYPE_BF16, {1, 70000})}), DX_DTYPE_BF16, "log_softmax long row");
}

TEST(NnLogSoftmax, Errors) {
  Differential diff;
  expect_same_error(diff.run("dx.log_softmax", {In::random(DX_DTYPE_F32, {2, 3})}, {Out(DX_DTYPE_F32, {2, 3})},
                             Attrs().i64("axis", 2)), "axis 2 of rank 2");
  const In x = In::random(DX_DTYPE_F32, {2, 3});
  expect_same_error(diff.run("dx.log_softmax", {x, x, x}, {Out(DX_DTYPE_F32, {2, 3})}, Attrs().i64("axis", -3), true),
                    "backward axis -3");
  expect_same_error(diff.run("dx.log_softmax", {In::random(DX_DTYPE_F32, {3, 3}), x, x}, {Out(DX_DTYPE_F32, {2, 3})},
                             Attrs(), true),
                    "backward dy shape");
}

// ---- linear ----------------------------------------------------------------------------------------

TEST(NnLinear, ForwardAndBackwardAgree) {
  Differential diff;
  struct Case {
    std::vector<int64_t> x;
    int64_t out;
    bool bias;
  };
  const Case cases[] = {{{4, 6}, 5, true}, {{4, 6}, 5, false}, {{2, 3, 6}, 4, true}, {{6}, 3, true},
                        {{0, 6}, 5, true}, {{3, 0}, 4, true}, {{3, 0}, 4, false}, {{3, 6}, 0, true},
                        {{1, 1}, 1, false}, {{2, 1, 33}, 17, true}};
  for (dx_dtype_t d : kFloatDtypes) {
    for (const Case& c : cases) {
      const int64_t in = c.x.back();
      const std::string what = "linear x" + std::to_string(c.x.size()) + "d in " + std::to_string(in) + " out " +
                               std::to_string(c.out) + (c.bias ? " bias" : "");
      std::vector<int64_t> y = c.x;
      y.back() = c.out;
      const In x = In::random(d, c.x, -2, 2, 7);
      const In w = In::random(d, {c.out, in}, -1, 1, 8);
      const In b = c.bias ? In::random(d, {c.out}, -1, 1, 9) : In::absent();
      const double scale = d == DX_DTYPE_F32 ? 4.0 : 1.0;  // f32 sgemm accumulation
      check_all_layouts(diff, "dx.linear", {x, w, b}, {Out(d, y)}, no_attrs, false, d, what, true, scale);
      const In dy = In::random(d, y, -1, 1, 10);
      const In yv = In::random(d, y, -1, 1, 11);
      check_all_layouts(diff, "dx.linear", {dy, x, w, b, yv},
                        {Out(d, c.x), Out(d, {c.out, in}), c.bias ? Out(d, {c.out}) : Out::absent()}, no_attrs, true,
                        d, what + " backward", true, scale);
      // Each gradient alone.
      close(diff.run("dx.linear", {dy, x, w, b, yv}, {Out::absent(), Out(d, {c.out, in}), Out::absent()}, Attrs(), true),
            d, what + " dw only", scale);
    }
  }
}

TEST(NnLinear, Errors) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  expect_same_error(diff.run("dx.linear", {In::random(d, {4, 7}), In::random(d, {5, 6}), In::absent()},
                             {Out(d, {4, 5})}), "in features differ");
  expect_same_error(diff.run("dx.linear", {In::random(d, {4, 6}), In::random(d, {5, 6}), In::random(d, {4})},
                             {Out(d, {4, 5})}), "bias shape");
  expect_same_error(diff.run("dx.linear", {In::random(d, {4, 6}), In::random(d, {5, 6}), In::absent()},
                             {Out(d, {4, 6})}), "output shape");
  expect_same_error(diff.run("dx.linear", {In::random(d, {4, 6}), In::random(d, {6}), In::absent()},
                             {Out(d, {4, 6})}), "rank-1 weight");
  expect_same_error(diff.run("dx.linear", {In::random(d, {4, 5}), In::random(d, {4, 6}), In::random(d, {5, 6}),
                                           In::absent(), In::random(d, {4, 5})},
                             {Out(d, {4, 6}), Out(d, {5, 6}), Out(d, {5})}, Attrs(), true),
                    "bias gradient without a bias");
}

// ---- layer_norm, rms_norm --------------------------------------------------------------------------

std::vector<int64_t> stats_shape(const std::vector<int64_t>& x, int64_t axis) {
  std::vector<int64_t> s = x;
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(x.size()) : axis;
  for (size_t d = static_cast<size_t>(a); d < s.size(); ++d) s[d] = 1;
  return s;
}
std::vector<int64_t> norm_shape(const std::vector<int64_t>& x, int64_t axis) {
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(x.size()) : axis;
  return std::vector<int64_t>(x.begin() + a, x.end());
}

struct NormCase {
  std::vector<int64_t> x;
  int64_t axis;
  bool w, b;
};
const NormCase kNormCases[] = {{{4, 8}, -1, true, true}, {{4, 8}, -1, false, false}, {{2, 3, 4}, 1, true, false},
                               {{2, 3, 4}, 0, false, true}, {{5}, 0, true, true}, {{0, 5}, -1, true, true},
                               {{3, 1}, -1, true, true}, {{3, 300}, -1, true, true}, {{1, 2, 1, 3}, 2, true, true}};

TEST(NnLayerNorm, ForwardAndBackwardAgree) {
  Differential diff;
  for (dx_dtype_t d : kFloatDtypes) {
    for (const NormCase& c : kNormCases) {
      const std::string what = "layer_norm " + std::to_string(c.x.size()) + "d axis " + std::to_string(c.axis) +
                               (c.w ? " w" : "") + (c.b ? " b" : "");
      const auto ps = norm_shape(c.x, c.axis), ss = stats_shape(c.x, c.axis);
      auto attrs = [&] { return Attrs().i64("axis", c.axis).f64("eps", 1e-3); };
      const In x = In::random(d, c.x, -3, 5, 12);
      const In w = c.w ? In::random(d, ps, 0.5, 1.5, 13) : In::absent();
      const In b = c.b ? In::random(d, ps, -1, 1, 14) : In::absent();
      // rstd of a row of one element is 1/sqrt(eps): large, so scale the tolerance.
      const double scale = numel(ps) == 1 ? 40.0 : 1.0;
      check_all_layouts(diff, "dx.layer_norm", {x, w, b}, {Out(d, c.x), Out(d, ss), Out(d, ss)}, attrs, false, d, what,
                        true, scale);
      const In dy = In::random(d, c.x, -1, 1, 15), dm = In::random(d, ss, -1, 1, 16), dr = In::random(d, ss, -1, 1, 17);
      const In yv = In::random(d, c.x, -1, 1, 18), mv = In::random(d, ss, -1, 1, 19), rv = In::random(d, ss, -1, 1, 20);
      check_all_layouts(diff, "dx.layer_norm", {dy, dm, dr, x, w, b, yv, mv, rv},
                        {Out(d, c.x), c.w ? Out(d, ps) : Out::absent(), c.b ? Out(d, ps) : Out::absent()}, attrs, true,
                        d, what + " backward", true, scale * 2);
    }
  }
}

TEST(NnLayerNorm, NoNormalisedElementsAndErrors) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  // A zero-size normalised dim: mean and rstd are NaN (0 / 0), as the reference.
  close(diff.run("dx.layer_norm", {In::random(d, {3, 0}), In::absent(), In::absent()},
                 {Out(d, {3, 0}), Out(d, {3, 1}), Out(d, {3, 1})}),
        d, "layer_norm empty rows");
  expect_same_error(diff.run("dx.layer_norm", {In::random(d, {3, 4}), In::absent(), In::absent()},
                             {Out(d, {3, 4}), Out(d, {3, 1}), Out(d, {3, 1})}, Attrs().i64("axis", 2)),
                    "axis out of range");
  expect_same_error(diff.run("dx.layer_norm", {In::random(d, {3, 4}), In::random(d, {3}), In::absent()},
                             {Out(d, {3, 4}), Out(d, {3, 1}), Out(d, {3, 1})}),
                    "weight shape");
  expect_same_error(diff.run("dx.layer_norm", {In::random(d, {3, 4}), In::absent(), In::absent()},
                             {Out(d, {3, 4}), Out(d, {3}), Out(d, {3, 1})}),
                    "mean shape");
  expect_same_error(diff.run("dx.layer_norm", {In::random(d, {3, 4}), In::absent(), In::absent()},
                             {Out(d, {3, 4}), Out(d, {3, 1}), Out(d, {3, 1})}, Attrs().str("eps", "x")),
                    "eps type");
  const In x = In::random(d, {3, 4}), s = In::random(d, {3, 1});
  expect_same_error(diff.run("dx.layer_norm", {x, s, s, x, In::absent(), In::absent(), x, s, s},
                             {Out(d, {3, 4}), Out(d, {4}), Out::absent()}, Attrs(), true),
                    "weight gradient without a weight");
  expect_same_error(diff.run("dx.layer_norm", {x, In::random(d, {3}), s, x, In::absent(), In::absent(), x, s, s},
                             {Out(d, {3, 4}), Out::absent(), Out::absent()}, Attrs(), true),
                    "dmean shape");
}

TEST(NnRmsNorm, ForwardAndBackwardAgree) {
  Differential diff;
  for (dx_dtype_t d : kFloatDtypes) {
    for (const NormCase& c : kNormCases) {
      const std::string what = "rms_norm " + std::to_string(c.x.size()) + "d axis " + std::to_string(c.axis) +
                               (c.w ? " w" : "");
      const auto ps = norm_shape(c.x, c.axis);
      auto attrs = [&] { return Attrs().i64("axis", c.axis).f64("eps", 1e-4); };
      const In x = In::random(d, c.x, -3, 3, 21);
      const In w = c.w ? In::random(d, ps, 0.5, 1.5, 22) : In::absent();
      check_all_layouts(diff, "dx.rms_norm", {x, w}, {Out(d, c.x)}, attrs, false, d, what);
      const In dy = In::random(d, c.x, -1, 1, 23);
      check_all_layouts(diff, "dx.rms_norm", {dy, x, w, x}, {Out(d, c.x), c.w ? Out(d, ps) : Out::absent()}, attrs,
                        true, d, what + " backward", true, 2.0);
    }
  }
  const dx_dtype_t d = DX_DTYPE_F32;
  const In x = In::random(d, {3, 4});
  expect_same_error(diff.run("dx.rms_norm", {x, x, In::absent(), x}, {Out(d, {3, 4}), Out(d, {4})}, Attrs(), true),
                    "rms weight gradient without a weight");
  expect_same_error(diff.run("dx.rms_norm", {x, In::random(d, {3})}, {Out(d, {3, 4})}), "rms weight shape");
  expect_same_error(diff.run("dx.rms_norm", {x, In::absent()}, {Out(d, {3, 4})}, Attrs().i64("axis", -3)),
                    "rms axis");
}

TEST(NnNorm, LargeInputsUseTheParallelPath) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  const std::vector<int64_t> shape = {300, 512};
  const In x = In::random(d, shape, -2, 6, 24), w = In::random(d, {512}, 0.5, 1.5, 25), b = In::random(d, {512}, -1, 1, 26);
  const In dy = In::random(d, shape, -1, 1, 27), s = In::random(d, {300, 1}, -1, 1, 28);
  close(diff.run("dx.layer_norm", {x, w, b}, {Out(d, shape), Out(d, {300, 1}), Out(d, {300, 1})}), d, "layer_norm big");
  close(diff.run("dx.layer_norm", {dy, s, s, x, w, b, x, s, s}, {Out(d, shape), Out(d, {512}), Out(d, {512})},
                 Attrs(), true),
        d, "layer_norm big backward", 4.0);
  close(diff.run("dx.rms_norm", {x, w}, {Out(d, shape)}), d, "rms_norm big");
  close(diff.run("dx.rms_norm", {dy, x, w, x}, {Out(d, shape), Out(d, {512})}, Attrs(), true), d,
        "rms_norm big backward", 4.0);
}

TEST(NnNorm, LargeOffsetsAndHugeValues) {
  Differential diff;
  // Row 0: a large common offset (a one-pass variance loses it); row 1: values whose squares
  // overflow f32 (the statistics must be formed in f64); row 2: Inf; row 3: ordinary.
  const double big = 3.0e38, inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {1000.5, 1001.25, 999.75, 1000.0, 1002.0, 998.5,
                                      big, -big, 1.0, 2.0, 0.5, -1.0,
                                      1.0, inf, 2.0, 3.0, 4.0, 5.0,
                                      0.1, -0.2, 0.3, -0.4, 0.5, -0.6};
  for (dx_dtype_t d : {DX_DTYPE_F32, DX_DTYPE_BF16, DX_DTYPE_F64}) {
    const In x = In::of(d, {4, 6}, values);
    const In w = In::random(d, {6}, 0.5, 1.5, 40), b = In::random(d, {6}, -1, 1, 41);
    close(diff.run("dx.layer_norm", {x, w, b}, {Out(d, {4, 6}), Out(d, {4, 1}), Out(d, {4, 1})}), d,
          "layer_norm extreme");
    close(diff.run("dx.rms_norm", {x, w}, {Out(d, {4, 6})}), d, "rms_norm extreme");
    const In dy = In::random(d, {4, 6}, -1, 1, 42), s = In::random(d, {4, 1}, -1, 1, 43);
    close(diff.run("dx.layer_norm", {dy, s, s, x, w, b, x, s, s}, {Out(d, {4, 6}), Out(d, {6}), Out(d, {6})},
                   Attrs(), true),
          d, "layer_norm extreme backward", 4.0);
    close(diff.run("dx.rms_norm", {dy, x, w, x}, {Out(d, {4, 6}), Out(d, {6})}, Attrs(), true), d,
          "rms_norm extreme backward", 4.0);
    // batch_norm: channels along dim 1 of (6, 4) = the transpose's rows.
    std::vector<double> t(24);
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 6; ++c) t[c * 4 + r] = values[r * 6 + c];
    }
    const In xt = In::of(d, {6, 4}, t);
    const In c4 = In::random(d, {4}, 0.5, 1.5, 44);
    close(diff.run("dx.batch_norm", {xt, c4, c4, c4, c4}, {Out(d, {6, 4})}, Attrs().boolean("training", true)), d,
          "batch_norm extreme");
    close(diff.run("dx.batch_norm", {In::random(d, {6, 4}, -1, 1, 45), xt, c4, c4, c4, c4, xt},
                   {Out(d, {6, 4}), Out(d, {4}), Out(d, {4}), Out::absent(), Out::absent()},
                   Attrs().boolean("training", true), true),
          d, "batch_norm extreme backward", 4.0);
  }
}

// ---- batch_norm ------------------------------------------------------------------------------------

TEST(NnBatchNorm, ForwardAndBackwardAgree) {
  Differential diff;
  struct Case {
    std::vector<int64_t> x;
    bool training, params, running;
  };
  const Case cases[] = {{{4, 3, 5}, true, true, true},   {{4, 3, 5}, false, true, true}, {{4, 3, 5}, true, false, false},
                        {{2, 3}, true, true, true},      {{5, 2, 3, 4}, true, true, true}, {{5, 2, 3, 4}, false, false, true},
                        {{1, 2, 1}, true, true, true},   {{0, 3, 4}, true, true, true},  {{3, 0, 2}, true, true, true},
                        {{2, 4, 0}, false, true, true}};
  for (dx_dtype_t d : kFloatDtypes) {
    for (const Case& c : cases) {
      const std::string what = "batch_norm " + std::to_string(c.x.size()) + "d" + (c.training ? " training" : " eval") +
                               (c.params ? " params" : "") + (c.running ? " running" : "");
      const int64_t channels = c.x[1];
      auto attrs = [&] { return Attrs().boolean("training", c.training).f64("momentum", 0.25).f64("eps", 1e-3); };
      const In x = In::random(d, c.x, -2, 4, 29);
      const In w = c.params ? In::random(d, {channels}, 0.5, 1.5, 30) : In::absent();
      const In b = c.params ? In::random(d, {channels}, -1, 1, 31) : In::absent();
      const In rm = c.running ? In::random(d, {channels}, -1, 1, 32) : In::absent();
      const In rv = c.running ? In::random(d, {channels}, 0.5, 2, 33) : In::absent();
      // run_layout reads the inputs back after the call: the running stats are updated in place.
      // A batch of one element per channel has an unbiased variance of NaN.
      const bool broadcast = c.x[0] > 1 && !c.training;  // equal rows would make the batch variance 0
      check_all_layouts(diff, "dx.batch_norm", {x, w, b, rm, rv}, {Out(d, c.x)}, attrs, false, d, what, broadcast, 4.0);
      const In dy = In::random(d, c.x, -1, 1, 34);
      check_all_layouts(diff, "dx.batch_norm", {dy, x, w, b, rm, rv, x},
                        {Out(d, c.x), c.params ? Out(d, {channels}) : Out::absent(),
                         c.params ? Out(d, {channels}) : Out::absent(), c.running ? Out(d, {channels}) : Out::absent(),
                         c.running ? Out(d, {channels}) : Out::absent()},
                        attrs, true, d, what + " backward", broadcast, 4.0);
    }
  }
}

TEST(NnBatchNorm, Errors) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  const In x = In::random(d, {4, 3, 2}), c3 = In::random(d, {3}, 0.5, 1);
  expect_same_error(diff.run("dx.batch_norm", {x, c3, c3, In::absent(), In::absent()}, {Out(d, {4, 3, 2})}),
                    "evaluation without running stats");
  expect_same_error(diff.run("dx.batch_norm", {x, In::random(d, {4}), c3, c3, c3}, {Out(d, {4, 3, 2})}),
                    "weight shape");
  expect_same_error(diff.run("dx.batch_norm", {In::random(d, {4}), In::absent(), In::absent(), In::absent(), In::absent()},
                             {Out(d, {4})}, Attrs().boolean("training", true)),
                    "rank 1");
  expect_same_error(diff.run("dx.batch_norm", {x, x, In::absent(), c3, c3, c3, x},
                             {Out(d, {4, 3, 2}), Out(d, {3}), Out::absent(), Out::absent(), Out::absent()},
                             Attrs().boolean("training", true), true),
                    "weight gradient without a weight");
  expect_same_error(diff.run("dx.batch_norm", {x, c3, c3, c3, c3}, {Out(d, {4, 3, 2})}, Attrs().str("momentum", "x")),
                    "momentum type");
}

// ---- embedding --------------------------------------------------------------------------------------

TEST(NnEmbedding, ForwardAndBackwardAgree) {
  Differential diff;
  struct Case {
    std::vector<int64_t> idx;
    std::vector<double> values;
  };
  const Case cases[] = {{{3, 5}, {0, 9, 3, 3, 1, 2, 9, 9, 0, 4, 5, 6, 7, 8, 3}},
                        {{}, {7}},
                        {{0}, {}},
                        {{4}, {2, 2, 2, 2}},
                        {{2, 0, 3}, {}}};
  for (dx_dtype_t d : kFloatDtypes) {
    for (dx_dtype_t index : {DX_DTYPE_I32, DX_DTYPE_I64}) {
      for (int64_t dim : {4, 1, 0, 70}) {
        for (const Case& c : cases) {
          const std::string what = "embedding idx " + std::to_string(c.idx.size()) + "d dim " + std::to_string(dim) +
                                   (index == DX_DTYPE_I32 ? " i32" : " i64");
          std::vector<int64_t> y = c.idx;
          y.push_back(dim);
          const In w = In::random(d, {10, dim}, -2, 2, 35);
          const In idx = In::of(index, c.idx, c.values);
          check_all_layouts(diff, "dx.embedding", {w, idx}, {Out(d, y)}, no_attrs, false, d, what, false);
          const In dy = In::random(d, y, -1, 1, 36);
          check_all_layouts(diff, "dx.embedding", {dy, w, idx, dy}, {Out(d, {10, dim}), Out(index, c.idx)}, no_attrs,
                            true, d, what + " backward", true);
        }
      }
    }
  }
}

TEST(NnEmbedding, Errors) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  const In w = In::random(d, {10, 4});
  for (double bad : {10.0, -1.0}) {
    for (dx_dtype_t index : {DX_DTYPE_I32, DX_DTYPE_I64}) {
      const In idx = In::of(index, {3}, {1, bad, 2});
      expect_same_error(diff.run("dx.embedding", {w, idx}, {Out(d, {3, 4})}), "bad index");
      expect_same_error(diff.run("dx.embedding", {In::random(d, {3, 4}), w, idx, In::random(d, {3, 4})},
                                 {Out(d, {10, 4}), Out::absent()}, Attrs(), true),
                        "bad index backward");
    }
  }
  expect_same_error(diff.run("dx.embedding", {In::random(d, {10}), In::of(DX_DTYPE_I64, {1}, {0})}, {Out(d, {1, 10})}),
                    "rank-1 weight");
  expect_same_error(diff.run("dx.embedding", {w, In::of(DX_DTYPE_I64, {2}, {0, 1})}, {Out(d, {2, 5})}), "output shape");
}

// ---- cross_entropy -------------------------------------------------------------------------------------

TEST(NnCrossEntropy, ForwardAndBackwardAgree) {
  Differential diff;
  struct Case {
    std::vector<int64_t> logits;
    std::vector<double> labels;
    int64_t ignore;
  };
  const Case cases[] = {{{6, 5}, {0, 4, -100, 2, 2, 1}, -100},
                        {{6, 5}, {0, 4, 3, 2, 3, 1}, 3},
                        {{4, 3}, {-100, -100, -100, -100}, -100},  // everything ignored: mean is NaN
                        {{5}, {2}, -100},
                        {{5}, {-100}, -100},
                        {{0, 5}, {}, -100},
                        {{3, 1}, {0, 0, 0}, -100},
                        {{40, 300}, {}, -100}};
  for (dx_dtype_t d : kFloatDtypes) {
    for (const Case& c : cases) {
      for (const char* reduction : {"none", "mean", "sum"}) {
        const bool batched = c.logits.size() == 2;
        std::vector<double> labels = c.labels;
        if (batched && labels.empty() && c.logits[0] > 0) {
          for (int64_t r = 0; r < c.logits[0]; ++r) labels.push_back(static_cast<double>((r * 7) % c.logits[1]));
        }
        const std::vector<int64_t> label_shape = batched ? std::vector<int64_t>{c.logits[0]} : std::vector<int64_t>{};
        const std::vector<int64_t> out_shape =
            (std::string(reduction) == "none" && batched) ? label_shape : std::vector<int64_t>{};
        const std::string what = std::string("cross_entropy ") + reduction + " " + std::to_string(c.logits.size()) +
                                 "d ignore " + std::to_string(c.ignore);
        auto attrs = [&] { return Attrs().str("reduction", reduction).i64("ignore_index", c.ignore); };
        const In logits = In::random(d, c.logits, -3, 3, 37);
        const In lab = In::of(DX_DTYPE_I64, label_shape, labels);
        check_all_layouts(diff, "dx.cross_entropy", {logits, lab}, {Out(d, out_shape)}, attrs, false, d, what, true, 2.0);
        const In dy = In::random(d, out_shape, -1, 1, 38);
        check_all_layouts(diff, "dx.cross_entropy", {dy, logits, lab, dy}, {Out(d, c.logits), Out(DX_DTYPE_I64, label_shape)},
                          attrs, true, d, what + " backward", true, 2.0);
      }
    }
  }
}

TEST(NnCrossEntropy, DefaultsSpecialValuesAndErrors) {
  Differential diff;
  const dx_dtype_t d = DX_DTYPE_F32;
  const double inf = std::numeric_limits<double>::infinity();
  const In logits = In::of(d, {3, 3}, {1, -inf, 2, -inf, -inf, -inf, std::nan(""), 0, 1});
  const In labels = In::of(DX_DTYPE_I64, {3}, {1, 0, 2});
  close(diff.run("dx.cross_entropy", {logits, labels}, {Out(d, {3})}, Attrs().str("reduction", "none")), d,
        "cross_entropy special values");
  close(diff.run("dx.cross_entropy", {In::random(d, {3}), logits, labels, In::random(d, {3})}, {Out(d, {3, 3}), Out::absent()},
                 Attrs().str("reduction", "none"), true),
        d, "cross_entropy special values backward");
  // Defaults: mean, ignore_index -100.
  const In x = In::random(d, {4, 6});
  close(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {4}, {1, -100, 5, 0})}, {Out(d, {})}), d,
        "cross_entropy defaults");
  expect_same_error(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {4}, {1, 6, 5, 0})}, {Out(d, {})}),
                    "label out of range");
  expect_same_error(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {4}, {1, -1, 5, 0})}, {Out(d, {})}),
                    "negative label");
  expect_same_error(diff.run("dx.cross_entropy", {In::random(d, {}), x, In::of(DX_DTYPE_I64, {4}, {1, 7, 5, 0}), In::random(d, {})},
                             {Out(d, {4, 6}), Out::absent()}, Attrs(), true),
                    "label out of range backward");
  expect_same_error(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {4}, {1, 1, 5, 0})}, {Out(d, {})},
                             Attrs().str("reduction", "avg")),
                    "bad reduction");
  expect_same_error(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {3}, {1, 1, 5})}, {Out(d, {})}),
                    "labels shape");
  expect_same_error(diff.run("dx.cross_entropy", {x, In::of(DX_DTYPE_I64, {4}, {1, 1, 5, 0})}, {Out(d, {4})}),
                    "output shape of a mean");
}

// Huge logits, where max + log(sum) rounds to max: f64 logits [[1e17, 1e17, 0, 0]] with label 0
// have loss log 2 (not 0), log_softmax -log 2 for the two largest, and gradient
// softmax - onehot = [-0.5, 0.5, 0, 0]; the same in f32 and bf16, whose compute type also adds
// log(sum) to the max in f64. Near-ties one ulp apart and huge negative rows then agree with the
// (independently checked) reference.
TEST(NnCrossEntropy, HugeLogitsKeepLogTwo) {
  Differential diff;
  const double log2 = std::log(2.0);
  const In labels = In::of(DX_DTYPE_I64, {1}, {0});
  for (dx_dtype_t d : {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_BF16}) {
    SCOPED_TRACE(dtype_name(d));
    const In x = In::of(d, {1, 4}, {1e17, 1e17, 0, 0});
    const double expected = from_bytes(d, to_bytes(d, {log2}))[0];  // log 2 rounded to d
    const double ulp = d == DX_DTYPE_F64 ? 0x1p-53 : d == DX_DTYPE_F32 ? 0x1p-24 : 0x1p-8;
    for (const char* reduction : {"none", "mean", "sum"}) {
      const bool none = std::string(reduction) == "none";
      const PluginResult loss = diff.run_on(diff.cpu_plugin(), "dx.cross_entropy", {x, labels},
                                            {Out(d, none ? std::vector<int64_t>{1} : std::vector<int64_t>{})},
                                            Attrs().str("reduction", reduction), false);
      ASSERT_EQ(loss.status, DX_OK) << loss.message;
      EXPECT_NEAR(loss.outputs[0][0], expected, 4 * ulp) << reduction;
    }
    const PluginResult ls = diff.run_on(diff.cpu_plugin(), "dx.log_softmax", {x}, {Out(d, {1, 4})}, Attrs(), false);
    ASSERT_EQ(ls.status, DX_OK) << ls.message;
    EXPECT_NEAR(ls.outputs[0][0], -expected, 4 * ulp);
    EXPECT_NEAR(ls.outputs[0][1], -expected, 4 * ulp);
    const In dy = In::of(d, {}, {1});
    const PluginResult grad = diff.run_on(diff.cpu_plugin(), "dx.cross_entropy", {dy, x, labels, dy},
                                          {Out(d, {1, 4}), Out::absent()}, Attrs(), true);
    ASSERT_EQ(grad.status, DX_OK) << grad.message;
    EXPECT_EQ(grad.outputs[0], (std::vector<double>{-0.5, 0.5, 0, 0}));
  }
  // Rows with huge near-ties, huge negatives and near-ties at 1, against the reference.
  const std::vector<double> rows = {1e17, 1e17 + 16, 1e17 - 16, -1e17,  //
                                    -1e17, -1e17 + 32, -1e17, -1e17,    //
                                    4e15, 4e15 + 0.5, 4e15 + 1, 4e15,   //
                                    1, 1 + 0x1p-52, 1 - 0x1p-53, 1};
  for (dx_dtype_t d : {DX_DTYPE_F64, DX_DTYPE_F32}) {
    const In x = In::of(d, {4, 4}, rows);
    const In lab = In::of(DX_DTYPE_I64, {4}, {0, 1, 2, 3});
    close(diff.run("dx.cross_entropy", {x, lab}, {Out(d, {4})}, Attrs().str("reduction", "none")), d,
          "cross_entropy huge logits");
    const In dy = In::of(d, {4}, {1, -0.5, 0.25, 2});
    close(diff.run("dx.cross_entropy", {dy, x, lab, dy}, {Out(d, {4, 4}), Out::absent()}, Attrs().str("reduction", "none"),
                   true),
          d, "cross_entropy huge logits backward");
    close(diff.run("dx.log_softmax", {x}, {Out(d, {4, 4})}), d, "log_softmax huge logits");
    close(diff.run("dx.softmax", {x}, {Out(d, {4, 4})}), d, "softmax huge logits");
    const In g = In::random(d, {4, 4}, -1, 1, 5);
    close(diff.run("dx.log_softmax", {g, x, x}, {Out(d, {4, 4})}, Attrs(), true), d, "log_softmax huge logits backward");
  }
  // A NaN poisons its row even when the row's max (of the other elements) is +Inf.
  const double inf = std::numeric_limits<double>::infinity();
  const In special = In::of(DX_DTYPE_F64, {2, 4}, {std::nan(""), inf, 0, 1e17, inf, 1e17, 1e17, 0});
  const PluginResult nan_row = diff.run_on(diff.cpu_plugin(), "dx.cross_entropy",
                                           {special, In::of(DX_DTYPE_I64, {2}, {1, 1})}, {Out(DX_DTYPE_F64, {2})},
                                           Attrs().str("reduction", "none"), false);
  ASSERT_EQ(nan_row.status, DX_OK) << nan_row.message;
  EXPECT_TRUE(std::isnan(nan_row.outputs[0][0]));
  EXPECT_EQ(nan_row.outputs[0][1], inf);  // Inf - 1e17
  close(diff.run("dx.cross_entropy", {special, In::of(DX_DTYPE_I64, {2}, {1, 1})}, {Out(DX_DTYPE_F64, {2})},
                 Attrs().str("reduction", "none")),
        DX_DTYPE_F64, "cross_entropy NaN with +Inf");
}

}  // namespace
}  // namespace deepx::cpu::testing
