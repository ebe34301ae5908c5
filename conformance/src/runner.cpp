#include "runner.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <algorithm>
#include <memory>
#include <set>

#include "data_gen.hpp"
#include "deepx/plugin.h"  // DX_KERNEL_FLAG_* (the client API reports kernel flags with these bits)
#include "dtype.hpp"
#include "shape_rules.hpp"

namespace deepx::conformance {

const char* status_name(Status s) {
  switch (s) {
    case Status::Pass: return "PASS";
    case Status::Fail: return "FAIL";
    case Status::NotSupported: return "NOT_SUPPORTED";
    case Status::Unimplemented: return "UNIMPLEMENTED";
    case Status::Mistrusted: return "MISTRUSTED";
    case Status::HarnessError: return "HARNESS_ERROR";
    case Status::Crash: return "CRASH";
    case Status::Timeout: return "TIMEOUT";
  }
  return "?";
}

std::string device_type_name(int32_t t) {
  switch (t) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 12: return "ext_dev";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    default: return "device" + std::to_string(t);
  }
}

dx_status_t take_status(dx_error_t* error, std::string* message) {
  if (error == nullptr) return DX_OK;
  const dx_status_t status = dx_error_code(error);
  if (message != nullptr) {
    try {
      *message = dx_error_message(error, nullptr);
    } catch (...) {
      dx_error_destroy(error);
      throw;
    }
  }
  dx_error_destroy(error);
  return status;
}

bool Environment::discover(std::string& error) {
  int32_t op_count = 0;
  std::string message;
  if (take_status(dx_runtime_op_count(runtime, &op_count), &message) != DX_OK) {
    error = "dx_runtime_op_count: " + message;
    return false;
  }
  std::vector<std::pair<Claim, std::pair<bool, bool>>> all;  // claim, (mine, reference)
  for (int32_t id = 0; id < op_count; ++id) {
    const char* name = nullptr;
    int32_t kernels = 0;
    if (take_status(dx_runtime_op_name(runtime, static_cast<dx_op_id_t>(id), &name), &message) != DX_OK ||
        take_status(dx_runtime_kernel_count(runtime, static_cast<dx_op_id_t>(id), &kernels), &message) != DX_OK) {
      error = "reading op " + std::to_string(id) + ": " + message;
      return false;
    }
    for (int32_t k = 0; k < kernels; ++k) {
      dx_kernel_info_t ki{};
      ki.struct_size = DX_KERNEL_INFO_SIZE_1_0;
      if (take_status(dx_runtime_kernel_info(runtime, static_cast<dx_op_id_t>(id), k, &ki), &message) != DX_OK) {
        error = "dx_runtime_kernel_info: " + message;
        return false;
      }
      const bool mine = ki.plugin_index == plugin_index, reference = ki.plugin_index == reference_index;
      if (!mine && !reference) continue;
      Claim c;
      c.op = name;
      c.device_type = ki.device_type;
      c.flags = ki.flags;
      c.has_supports = ki.has_supports != 0;
      c.has_backward = ki.has_backward != 0;
      c.device = device_type_name(ki.device_type);
      c.signature.assign(ki.dtypes, ki.dtypes + ki.num_dtypes);
      // The dtype signature as the suite writes it: inputs then outputs.
      Signature sig;
      bool known = ki.num_inputs >= 0 && ki.num_inputs <= ki.num_dtypes;
      for (int32_t i = 0; known && i < ki.num_dtypes; ++i) {
        auto d = dtype_from_packed(ki.dtypes[i]);
        if (!d) known = false;
        else if (i < ki.num_inputs) sig.inputs.push_back(*d);
        else sig.outputs.push_back(*d);
      }
      if (known && !sig.outputs.empty()) c.sig = format_signature(sig);
      const DType key = !sig.inputs.empty() ? sig.inputs[0] : (!sig.outputs.empty() ? sig.outputs[0] : DType::F32);
      c.dtype = c.signature.empty() || !known ? (c.signature.empty() ? "none" : packed_name(c.signature[0])) : std::string(deepx::conformance::name(key));
      all.push_back({c, {mine, reference}});
    }
  }
  // The suite certifies a plugin's kernel when it knows the op and the reference registers the
  // same signature (what the reference does not have, the suite cannot compare against).
  std::set<std::string> reference_sigs;
  for (const auto& [c, who] : all)
    if (who.second && !c.sig.empty() && find_op_rule(c.op)) reference_sigs.insert(c.op + " " + c.sig);
  for (const auto& [c, who] : all) {
    const bool covered = !c.sig.empty() && reference_sigs.count(c.op + " " + c.sig) != 0;
    if (who.first) {
      if (covered) plugin_claims[c.op].push_back(c);
      else uncovered_claims.push_back(c);
    }
    if (who.second && covered) reference_claims[c.op].push_back(c);
  }
  return true;
}

const Claim* Environment::find_claim(bool reference, const std::string& op, const std::string& sig,
                                     const std::string& device) const {
  const auto& map = reference ? reference_claims : plugin_claims;
  auto it = map.find(op);
  if (it == map.end()) return nullptr;
  for (const auto& c : it->second)
    if (c.sig == sig && c.device == device) return &c;
  return nullptr;
}

int32_t Environment::device_for(int32_t plugin, int32_t device_type) const {
  int32_t count = 0;
  if (take_status(dx_runtime_device_count(runtime, &count)) != DX_OK) return -1;
  int32_t fallback = -1;
  for (int32_t i = 0; i < count; ++i) {
    dx_device_info_t di{};
    di.struct_size = DX_DEVICE_INFO_SIZE_1_0;
    if (take_status(dx_runtime_device_info(runtime, i, &di)) != DX_OK) continue;
    if (di.device_type != device_type) continue;
    if (di.plugin_index == plugin) return i;
    if (fallback < 0) fallback = i;
  }
  return fallback;
}

uint64_t case_data_key(uint64_t seed, const Case& c) {
  Case keyed = c;
  keyed.device = "*";
  keyed.source.clear();
  return splitmix64(seed ^ 0xd1b54a32d192ed03ull) ^ fnv1a64(keyed.line());
}

namespace {

Shape compact_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

}  // namespace

LayoutPlan plan_layout(const Shape& logical, const std::string& layout) {
  LayoutPlan p;
  p.base_shape = logical;
  const size_t rank = logical.size();
  if (layout == "transposed" && rank >= 2) {
    std::swap(p.base_shape[rank - 1], p.base_shape[rank - 2]);
    p.view_strides = compact_strides(p.base_shape);
    std::swap(p.view_strides[rank - 1], p.view_strides[rank - 2]);
    p.is_view = true;
  } else if (layout == "sliced" && rank >= 1) {
    // Every other element of the last dim, starting at element 1: strided and offset.
    p.base_shape[rank - 1] = 2 * logical[rank - 1] + 1;
    p.view_strides = compact_strides(p.base_shape);
    p.view_strides[rank - 1] = 2;
    p.elem_offset = 1;
    p.is_view = true;
  } else if (layout == "offset") {
    p.base_shape = {numel(logical) + 7};
    p.view_strides = compact_strides(logical);
    p.elem_offset = 7;
    p.is_view = true;
  } else if (layout == "broadcast0" && rank >= 1) {
    p.base_shape[0] = 1;
    p.view_strides = compact_strides(p.base_shape);
    p.view_strides[0] = 0;
    p.is_view = true;
  } else if (layout == "broadcastlast" && rank >= 1) {
    p.base_shape[rank - 1] = 1;
    p.view_strides = compact_strides(p.base_shape);
    p.view_strides[rank - 1] = 0;
    p.is_view = true;
  }
  return p;
}

namespace {

struct TensorDeleter {
  void operator()(dx_tensor_t* t) const { dx_error_destroy(dx_tensor_destroy(t)); }
};
using TensorPtr = std::unique_ptr<dx_tensor_t, TensorDeleter>;
struct AttrsDeleter {
  void operator()(dx_attrs_t* a) const { dx_error_destroy(dx_attrs_destroy(a)); }
};
using AttrsPtr = std::unique_ptr<dx_attrs_t, AttrsDeleter>;

struct HostCallError {
  std::string message;
};

// Throws a HostCallError naming `what` when the host call failed (and frees its error).
void check(dx_error_t* error, const char* what) {
  std::string message;
  const dx_status_t status = take_status(error, &message);
  if (status != DX_OK)
    throw HostCallError{std::string(what) + " failed: " + dx_status_string(status) + ": " + message};
}

struct TensorSpec {
  Shape logical;
  LayoutPlan plan;
  DType dtype;
  std::vector<uint8_t> base_bytes;  // inputs: the data; outputs: the sentinel
};

// A base tensor and the view the kernel sees.
struct Placed {
  TensorPtr base;
  TensorPtr view;
  dx_tensor_t* kernel_tensor() const { return view ? view.get() : base.get(); }
};

Placed place(dx_runtime_t* rt, int32_t device, const TensorSpec& spec) {
  Placed p;
  dx_tensor_t* raw = nullptr;
  const Shape& bs = spec.plan.base_shape;
  check(dx_tensor_create(rt, device, info(spec.dtype).packed, bs.empty() ? nullptr : bs.data(),
                         static_cast<int32_t>(bs.size()), &raw),
        "dx_tensor_create");
  p.base.reset(raw);
  check(dx_tensor_write(raw, spec.base_bytes.data(), spec.base_bytes.size()), "dx_tensor_write");
  if (spec.plan.is_view) {
    dx_tensor_t* view = nullptr;
    check(dx_tensor_view(raw, spec.logical.empty() ? nullptr : spec.logical.data(),
                         spec.plan.view_strides.empty() ? nullptr : spec.plan.view_strides.data(),
                         static_cast<int32_t>(spec.logical.size()), spec.plan.elem_offset, &view),
          "dx_tensor_view");
    p.view.reset(view);
  }
  return p;
}

AttrsPtr make_attrs(const std::vector<Attr>& attrs) {
  dx_attrs_t* raw = nullptr;
  check(dx_attrs_create(&raw), "dx_attrs_create");
  AttrsPtr a(raw);
  for (const auto& at : attrs) {
    const auto& v = at.value;
    const char* n = at.name.c_str();
    switch (v.kind) {
      case AttrValue::Kind::I64: check(dx_attrs_set_i64(raw, n, v.i64), "dx_attrs_set_i64"); break;
      case AttrValue::Kind::F64: check(dx_attrs_set_f64(raw, n, v.f64), "dx_attrs_set_f64"); break;
      case AttrValue::Kind::Bool: check(dx_attrs_set_bool(raw, n, static_cast<int32_t>(v.i64)), "dx_attrs_set_bool"); break;
      case AttrValue::Kind::I64Array:
        check(dx_attrs_set_i64_array(raw, n, v.i64s.data(), static_cast<int64_t>(v.i64s.size())), "dx_attrs_set_i64_array");
        break;
      case AttrValue::Kind::F64Array:
        check(dx_attrs_set_f64_array(raw, n, v.f64s.data(), static_cast<int64_t>(v.f64s.size())), "dx_attrs_set_f64_array");
        break;
      case AttrValue::Kind::String: check(dx_attrs_set_string(raw, n, v.str.data(), static_cast<int64_t>(v.str.size())), "dx_attrs_set_string"); break;
    }
  }
  return a;
}

struct SideOutcome {
  dx_status_t status = DX_OK;
  std::string message;
  std::string violation;  // the kernel wrote an input or outside its output view
  std::vector<std::vector<uint8_t>> outputs;  // logical row-major bytes; empty for null outputs
  std::vector<std::vector<uint8_t>> mutated;  // final logical bytes of the inputs it may update
  double seconds = 0;
};

using SpecPtrs = std::vector<const TensorSpec*>;  // null: an absent input / an unwanted output

std::vector<uint8_t> read_logical(dx_tensor_t* t, const TensorSpec& spec, const char* what) {
  std::vector<uint8_t> bytes(static_cast<size_t>(numel(spec.logical)) * static_cast<size_t>(byte_size(spec.dtype)));
  check(dx_tensor_read(t, bytes.data(), bytes.size()), what);
  return bytes;
}

// Guard regions: every output (contiguous ones included) is a view into a larger base tensor
// with kGuardBytes of sentinel before and after the elements its layout reaches, so a kernel that
// writes before element 0 or past the last one hits the sentinel, and check_outside_view()
// reports it (FAIL) instead of the write corrupting the process unseen. 64 bytes keep the view as
// aligned as the base.
constexpr int64_t kGuardBytes = 64;
LayoutPlan guarded(const LayoutPlan& plan, const Shape& logical, DType dtype) {
  const int64_t guard = std::max<int64_t>(1, kGuardBytes / byte_size(dtype));
  LayoutPlan p = plan;
  if (!p.is_view) {
    p.view_strides = compact_strides(logical);
    p.elem_offset = 0;
  }
  p.base_shape = {numel(plan.base_shape) + 2 * guard};  // the layout's base, flattened, plus guards
  p.elem_offset += guard;
  p.is_view = true;
  return p;
}

// Checks that the kernel wrote nothing of the output's base tensor outside the view.
std::string check_outside_view(dx_tensor_t* base_tensor, const TensorSpec& output) {
  std::vector<uint8_t> base(output.base_bytes.size());
  check(dx_tensor_read(base_tensor, base.data(), base.size()), "dx_tensor_read (output base)");
  const size_t width = static_cast<size_t>(byte_size(output.dtype));
  std::vector<bool> covered(base.size() / width, false);
  const Shape& shape = output.logical;
  const int64_t n = numel(shape);
  Shape idx(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rem = flat, offset = output.plan.elem_offset;
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
      offset += idx[d] * output.plan.view_strides[d];
    }
    if (offset >= 0 && static_cast<size_t>(offset) < covered.size()) covered[static_cast<size_t>(offset)] = true;
  }
  size_t first = covered.size(), last = 0;  // the view's extent in the base
  for (size_t e = 0; e < covered.size(); ++e)
    if (covered[e]) {
      first = std::min(first, e);
      last = e;
    }
  for (size_t e = 0; e < covered.size(); ++e)
    if (!covered[e])
      for (size_t b = 0; b < width; ++b)
        if (base[e * width + b] != output.base_bytes[e * width + b]) {
          const char* where = first == covered.size() ? " (the output is empty: out of bounds)"
                              : e < first                 ? " (before its first element: out of bounds)"
                              : e > last                  ? " (past its last element: out of bounds)"
                                                          : "";
          return "the kernel wrote base element " + std::to_string(e) + ", outside its output view" + where;
        }
  return "";
}

// Places every present spec but the one at `skip` (null specs stay null); `ptrs` gets the
// tensors a kernel sees (the view where there is one).
void place_all(dx_runtime_t* rt, int32_t device, const SpecPtrs& specs, std::vector<Placed>& placed,
               std::vector<dx_tensor_t*>& ptrs, size_t skip = SIZE_MAX) {
  placed.resize(specs.size());
  ptrs.assign(specs.size(), nullptr);
  for (size_t i = 0; i < specs.size(); ++i)
    if (i != skip && specs[i]) {
      placed[i] = place(rt, device, *specs[i]);
      ptrs[i] = placed[i].kernel_tensor();
    }
}

// dx_invoke_ex on `plugin` alone (its backward kernel when `backward`): the status, its message
// into `message`, the time the call took into `seconds`.
dx_status_t invoke_on(dx_runtime_t* rt, dx_op_id_t op, int32_t plugin, const std::vector<dx_tensor_t*>& in_ptrs,
                      const std::vector<dx_tensor_t*>& out_ptrs, const dx_attrs_t* attrs, bool backward,
                      std::string& message, double& seconds) {
  dx_invoke_options_t opts{};
  opts.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  opts.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
  opts.plugin_index = plugin;
  const auto start = std::chrono::steady_clock::now();
  dx_error_t* const error =
      dx_invoke_ex(rt, op, in_ptrs.empty() ? nullptr : in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()),
                   out_ptrs.empty() ? nullptr : out_ptrs.data(), static_cast<int32_t>(out_ptrs.size()), attrs, &opts);
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return take_status(error, &message);
}

SideOutcome run_side(dx_runtime_t* rt, dx_op_id_t op, int32_t plugin, int32_t device, const SpecPtrs& inputs,
                     const SpecPtrs& outputs, const dx_attrs_t* attrs, bool backward,
                     const std::vector<int>& mutable_inputs = {}) {
  SideOutcome o;
  std::vector<Placed> placed_inputs, placed_outputs;
  std::vector<dx_tensor_t*> in_ptrs, out_ptrs;
  place_all(rt, device, inputs, placed_inputs, in_ptrs);
  place_all(rt, device, outputs, placed_outputs, out_ptrs);
  o.status = invoke_on(rt, op, plugin, in_ptrs, out_ptrs, attrs, backward, o.message, o.seconds);
  if (o.status != DX_OK) return o;
  o.outputs.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i]) o.outputs[i] = read_logical(out_ptrs[i], *outputs[i], "dx_tensor_read (output)");
  // "The kernel writes their elements and nothing else": inputs keep their bytes (but those it
  // may update in place), and each output's base keeps the sentinel where its view does not reach.
  for (size_t i = 0; i < inputs.size() && o.violation.empty(); ++i) {
    if (!inputs[i]) continue;
    if (std::find(mutable_inputs.begin(), mutable_inputs.end(), static_cast<int>(i)) != mutable_inputs.end()) {
      o.mutated.push_back(read_logical(in_ptrs[i], *inputs[i], "dx_tensor_read (updated input)"));
      continue;
    }
    std::vector<uint8_t> now(inputs[i]->base_bytes.size());
    check(dx_tensor_read(placed_inputs[i].base.get(), now.data(), now.size()), "dx_tensor_read (input base)");
    if (now != inputs[i]->base_bytes) o.violation = "the kernel modified input " + std::to_string(i);
  }
  for (size_t i = 0; i < outputs.size() && o.violation.empty(); ++i)
    if (outputs[i] && outputs[i]->plan.is_view) o.violation = check_outside_view(placed_outputs[i].base.get(), *outputs[i]);
  return o;
}

// Runs the plugin with output `alias_output` being input `alias_input` itself (same tensor:
// data, shape and strides), as DX_KERNEL_FLAG_INPLACE allows; the other outputs are placed as
// usual (null ones stay null). Returns every output's final contents (the aliased one read back
// through the input tensor).
SideOutcome run_aliased(dx_runtime_t* rt, dx_op_id_t op, int32_t plugin, int32_t device, const SpecPtrs& inputs,
                        const SpecPtrs& outputs, size_t alias_output, size_t alias_input, const dx_attrs_t* attrs,
                        bool backward) {
  SideOutcome o;
  std::vector<Placed> placed_inputs, placed_outputs;
  std::vector<dx_tensor_t*> in_ptrs, out_ptrs;
  place_all(rt, device, inputs, placed_inputs, in_ptrs);
  place_all(rt, device, outputs, placed_outputs, out_ptrs, alias_output);
  out_ptrs[alias_output] = in_ptrs[alias_input];
  double seconds = 0;
  o.status = invoke_on(rt, op, plugin, in_ptrs, out_ptrs, attrs, backward, o.message, seconds);
  if (o.status != DX_OK) return o;
  o.outputs.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i == alias_output) o.outputs[i] = read_logical(out_ptrs[i], *inputs[alias_input], "dx_tensor_read (in-place output)");
    else if (outputs[i]) o.outputs[i] = read_logical(out_ptrs[i], *outputs[i], "dx_tensor_read (output)");
  }
  return o;
}

std::string status_text(dx_status_t s, const std::string& message) {
  std::string t = dx_status_string(s);
  if (!message.empty()) t += " (" + message + ")";
  return t;
}

// The same tensor with every float element replaced by its magnitude in f64 (non-finite: 0):
// running the reference's f64 kernel of an op whose terms are products of its inputs on such
// inputs gives, per output element, the sum of |terms| it accumulates (the error bound's Σ|terms|).
TensorSpec magnitudes(const TensorSpec& t, bool index, bool keep_sign = false) {
  if (index || t.dtype == DType::Bool) return t;
  TensorSpec m = t;
  m.dtype = DType::F64;
  const size_t n = t.base_bytes.size() / static_cast<size_t>(byte_size(t.dtype));
  m.base_bytes.assign(n * 8, 0);
  for (size_t i = 0; i < n; ++i) {
    const double v = load_double(t.dtype, t.base_bytes.data() + i * static_cast<size_t>(byte_size(t.dtype)));
    store_double(DType::F64, std::isfinite(v) ? (keep_sign ? v : std::fabs(v)) : 0.0, m.base_bytes.data() + i * 8);
  }
  return m;
}

TensorSpec contiguous_output(const Shape& shape, DType dtype) {
  TensorSpec t;
  t.logical = shape;
  t.plan = plan_layout(shape, "contig");
  t.dtype = dtype;
  t.base_bytes.assign(static_cast<size_t>(numel(shape)) * static_cast<size_t>(byte_size(dtype)), 0xA5);
  return t;
}

TensorSpec contiguous_input(const Shape& shape, DType dtype, std::vector<uint8_t> bytes) {
  TensorSpec t;
  t.logical = shape;
  t.plan = plan_layout(shape, "contig");
  t.dtype = dtype;
  t.base_bytes = std::move(bytes);
  return t;
}

// Σ|terms| per element of each output of a call: the reference's f64 kernel on magnitudes.
// Empty vectors where it cannot be computed (then the comparator falls back to 1 ulp).
std::vector<std::vector<double>> term_sums(const Environment& env, dx_op_id_t op, int32_t ref_device,
                                           const std::string& op_name, const Signature& sig,
                                           const std::vector<std::optional<TensorSpec>>& inputs,
                                           const std::vector<std::optional<TensorSpec>>& outputs, const dx_attrs_t* attrs,
                                           bool backward) {
  std::vector<std::vector<double>> sums(outputs.size());
  // Integer data inputs (an integer mean) become f64 magnitudes too; index inputs stay.
  const size_t forward_first = backward ? (inputs.size() - outputs.size()) / 2 : 0;  // 2m + n inputs, n outputs
  auto is_index = [&](size_t i) {
    if (i < forward_first) return false;
    const size_t f = i - forward_first;
    const bool index_op = op_name == "dx.embedding" || op_name == "dx.index_select" || op_name == "dx.gather" ||
                          op_name == "dx.scatter_add" || op_name == "dx.cross_entropy";
    return index_op && f == 1 && inputs[i] && is_integer(inputs[i]->dtype);
  };
  Signature wide_sig = widened_to_f64(sig);
  if (!backward)
    for (size_t i = 0; i < wide_sig.inputs.size(); ++i)
      if (is_integer(wide_sig.inputs[i]) && !is_index(i)) wide_sig.inputs[i] = DType::F64;
  const Claim* wide = env.find_claim(true, op_name, format_signature(wide_sig), "cpu");
  if (!wide || (backward && !wide->has_backward)) return sums;
  std::vector<TensorSpec> in_specs, out_specs;
  in_specs.reserve(inputs.size());
  out_specs.reserve(outputs.size());
  SpecPtrs in_ptrs, out_ptrs;
  // Where the forward values route the gradient (max_pool2d, maximum, minimum), only the output
  // gradients become magnitudes: the routing must stay the real one.
  const bool routed = backward && (op_name == "dx.max_pool2d" || op_name == "dx.maximum" || op_name == "dx.minimum");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    if (t) in_specs.push_back(magnitudes(*t, is_index(i), routed && i >= forward_first));
    in_ptrs.push_back(t ? &in_specs.back() : nullptr);
  }
  for (const auto& t : outputs) {
    if (t) out_specs.push_back(contiguous_output(t->logical, is_float(t->dtype) ? DType::F64 : t->dtype));
    out_ptrs.push_back(t ? &out_specs.back() : nullptr);
  }
  SideOutcome o = run_side(env.runtime, op, env.reference_index, ref_device, in_ptrs, out_ptrs, attrs, backward);
  if (o.status != DX_OK) return sums;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k] || !is_float(outputs[k]->dtype)) continue;
    const auto& bytes = o.outputs[k];
    sums[k].resize(bytes.size() / 8);
    for (size_t j = 0; j < sums[k].size(); ++j) {
      const double v = load_double(DType::F64, bytes.data() + j * 8);
      // Backward formulas carry signs (d(a - b)/db = -1): the magnitude is what bounds the error.
      sums[k][j] = std::isfinite(v) ? std::fabs(v) : std::numeric_limits<double>::max();
    }
  }
  return sums;
}

// Folds the comparison of one more output into the case's comparison.
void merge(Comparison& into, const Comparison& next, const std::string& label, bool first) {
  if (first) {
    into = next;
    if (!next.pass && !label.empty()) into.reason = label + ": " + next.reason;
    return;
  }
  into.elements += next.elements;
  into.mismatches += next.mismatches;
  into.unconstrained += next.unconstrained;
  into.max_abs = std::max(into.max_abs, next.max_abs);
  into.max_rel = std::max(into.max_rel, next.max_rel);
  into.max_ulp = std::max(into.max_ulp, next.max_ulp);
  if (into.pass && !next.pass) {
    into.worst_index = next.worst_index;
    into.worst_expected = next.worst_expected;
    into.worst_actual = next.worst_actual;
    into.worst_threshold = next.worst_threshold;
    into.worst_expected_text = next.worst_expected_text;
    into.worst_actual_text = next.worst_actual_text;
    into.reason = label + ": " + next.reason;
  }
  into.pass = into.pass && next.pass;
}

struct Prepared {
  const OpRule* rule = nullptr;
  Signature sig;
  const Claim* claim = nullptr;
  const Claim* ref_claim = nullptr;
  dx_op_id_t op_id = 0;
  std::vector<std::optional<TensorSpec>> inputs;
  std::vector<std::optional<TensorSpec>> outputs;  // forward outputs (shapes from the rule)
  bool valid = true;                                // the shape rule accepts the call
  AttrsPtr attrs;
  int32_t ref_device = -1, plugin_device = -1;
};

std::vector<std::optional<TensorSpec>> make_inputs(const Case& c, const Signature& sig, uint64_t key, bool contiguous,
                                                   bool widen) {
  std::vector<std::optional<TensorSpec>> inputs;
  const OpRule* rule = find_op_rule(c.op);
  const size_t n = rule->inputs == 0 ? 0 : c.shapes.size();
  const int64_t k_hint = accumulation_length(c.op, c.shapes, c.attrs);
  const Attr* ignore = find_attr(c.attrs, "ignore_index");
  for (size_t i = 0; i < n; ++i) {
    if (is_absent(c.shapes[i])) {
      inputs.emplace_back(std::nullopt);
      continue;
    }
    TensorSpec t;
    t.logical = c.shapes[i];
    t.plan = plan_layout(t.logical, contiguous ? "contig" : c.layouts[i]);
    t.dtype = sig.input(i);
    if (widen && is_float(t.dtype)) t.dtype = DType::F64;
    // Overflow-range tiers offset the data a norm normalises (x), not its parameters: a weight
    // and bias of 100 would make y = xhat * w + b cancel, judging rounding instead of the kernel.
    const bool norm_param = i > 0 && (c.op == "dx.layer_norm" || c.op == "dx.rms_norm" || c.op == "dx.batch_norm");
    const std::string tier = norm_param && (c.tier == "large" || c.tier == "negative") ? "real" : c.tier;
    GenRequest g{c.op, t.dtype, tier, static_cast<int>(i), key, numel(t.plan.base_shape), k_hint};
    if (is_integer(t.dtype)) g.index_limit = index_limit(c.op, static_cast<int>(i), c.shapes, c.attrs);
    if (c.op == "dx.cross_entropy" && i == 1 && c.tier == "real") {
      g.plant_ignore = true;
      g.ignore_index = ignore && ignore->value.kind == AttrValue::Kind::I64 ? ignore->value.i64 : -100;
    }
    g.positive = c.op == "dx.batch_norm" && i == 4;
    t.base_bytes = generate(g);
    inputs.emplace_back(std::move(t));
  }
  return inputs;
}

SpecPtrs ptrs(const std::vector<std::optional<TensorSpec>>& v) {
  SpecPtrs p;
  for (const auto& t : v) p.push_back(t ? &*t : nullptr);
  return p;
}

// Σ|terms| of a call, computed once and reused by the reruns of the same call (in place).
struct TermsCache {
  bool done = false;
  std::vector<std::vector<double>> terms;
};

Comparison compare_spec_outputs(const Environment& env, const Prepared& p, const Case& c,
                                 const std::vector<std::optional<TensorSpec>>& call_inputs,
                                 const std::vector<std::optional<TensorSpec>>& call_outputs, const SideOutcome& ref,
                                 const SideOutcome& got, bool backward, int64_t k, Tolerance& shown,
                                 TermsCache& cache) {
  Comparison all;
  bool first = true;
  for (size_t o = 0; o < call_outputs.size(); ++o) {
    if (!call_outputs[o]) continue;
    const DType dt = call_outputs[o]->dtype;
    const Tolerance tol = tolerance_for(c.op, dt, c.tier, backward);
    if (first || tol.relaxed) shown = tol;
    const std::vector<double>* t = nullptr;
    if (tol.rule == Rule::ErrorBound) {
      if (!cache.done) {
        cache.terms = term_sums(env, p.op_id, p.ref_device, c.op, p.sig, call_inputs, call_outputs, p.attrs.get(), backward);
        cache.done = true;
      }
      if (!cache.terms[o].empty()) t = &cache.terms[o];
    }
    // A mean's terms are x / K but its accumulator holds the plain sum.
    const double overflow_scale = !backward && (c.op == "dx.mean" || c.op == "dx.avg_pool2d") ? static_cast<double>(k) : 1.0;
    const Comparison cmp = compare_outputs(tol, dt, ref.outputs[o].data(), got.outputs[o].data(),
                                           numel(call_outputs[o]->logical), t, k, overflow_scale);
    const std::string label = call_outputs.size() > 1 ? (backward ? "gradient of input " : "output ") + std::to_string(o) : "";
    merge(all, cmp, label, first);
    first = false;
  }
  return all;
}

// Shared status handling when a side fails. Returns true when the result is decided.
bool decide_errors(const Case& c, const Claim* claim, const SideOutcome& ref, const SideOutcome& got, CaseResult& r) {
  if (ref.status != DX_OK) {
    if (ref.status == DX_UNSUPPORTED) {
      r.reason = "the reference does not support this case: " + status_text(ref.status, ref.message);
    } else if (!c.expect.empty() && c.expect != dx_status_string(ref.status)) {
      r.reason = "the manifest expects " + c.expect + " but the reference returned " + status_text(ref.status, ref.message);
    } else if (got.status == ref.status) {
      r.status = Status::Pass;
      r.reason = std::string("both returned ") + dx_status_string(ref.status) + " as expected";
    } else {
      r.status = Status::Fail;
      r.reason = "the reference returned " + status_text(ref.status, ref.message) + ", the plugin " +
                 status_text(got.status, got.message);
    }
    return true;
  }
  if (!c.expect.empty()) {
    r.reason = "the manifest expects " + c.expect + " but the reference succeeded";
    return true;
  }
  if (got.status == DX_UNSUPPORTED && claim->has_supports) {
    r.status = Status::NotSupported;
    r.reason = "the kernel's supports() declined: " + status_text(got.status, got.message);
    return true;
  }
  if (got.status == DX_UNSUPPORTED) {
    r.status = Status::Unimplemented;
    r.reason = "claimed kernel returned " + status_text(got.status, got.message);
    return true;
  }
  if (got.status != DX_OK) {
    r.status = Status::Fail;
    r.reason = "the reference succeeded, the plugin returned " + status_text(got.status, got.message);
    return true;
  }
  if (!ref.violation.empty()) {
    r.reason = "reference: " + ref.violation;
    return true;
  }
  if (!got.violation.empty()) {
    r.status = Status::Fail;
    r.reason = got.violation;
    return true;
  }
  return false;
}

void finish(CaseResult& r, const Case& c, DType dt, const std::vector<uint8_t>& expected, int64_t n) {
  if (!r.comparison.pass) {
    r.status = Status::Fail;
    r.reason = r.comparison.reason;
  } else if (c.op != "dx.fill" && c.op != "dx.arange" && mostly_constant(dt, expected.data(), n)) {
    r.status = Status::Mistrusted;
    r.reason = "matches, but >= 90% of the expected output is one value: the case proves little";
  } else {
    r.status = Status::Pass;
  }
}

CaseResult run_forward(const Environment& env, const Case& c, Prepared& p) {
  CaseResult r;
  const auto& out0 = p.outputs.at(0);
  r.out_dtype = name(out0->dtype);
  r.out_shape = out0->logical;
  // Outputs in the case's output layout; the sentinel shows elements a kernel forgets to write.
  std::vector<std::optional<TensorSpec>> outputs;
  for (const auto& o : p.outputs) {
    TensorSpec t = *o;
    t.plan = guarded(plan_layout(t.logical, c.out_layout), t.logical, t.dtype);
    t.base_bytes.assign(static_cast<size_t>(numel(t.plan.base_shape)) * static_cast<size_t>(byte_size(t.dtype)), 0xA5);
    outputs.emplace_back(std::move(t));
  }
  const std::vector<int> mutable_inputs = mutated_inputs(c.op, c.shapes, c.attrs);
  SideOutcome ref = run_side(env.runtime, p.op_id, env.reference_index, p.ref_device, ptrs(p.inputs), ptrs(outputs),
                             p.attrs.get(), false, mutable_inputs);
  SideOutcome got = run_side(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(p.inputs), ptrs(outputs),
                             p.attrs.get(), false, mutable_inputs);
  r.reference_status = ref.status;
  r.plugin_status = got.status;
  r.reference_seconds = ref.seconds;
  r.plugin_seconds = got.seconds;
  if (decide_errors(c, p.claim, ref, got, r)) return r;

  // A kernel that claims determinism must give the same bits on a second run.
  if (p.claim->flags & DX_KERNEL_FLAG_DETERMINISTIC) {
    SideOutcome again = run_side(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(p.inputs),
                                 ptrs(outputs), p.attrs.get(), false, mutable_inputs);
    r.determinism_checked = true;
    if (again.status != DX_OK || again.outputs != got.outputs || again.mutated != got.mutated) {
      r.status = Status::Fail;
      r.reason = again.status != DX_OK
                     ? "a second run returned " + status_text(again.status, again.message)
                     : std::string("a second run gave different bits, but the kernel claims DX_KERNEL_FLAG_DETERMINISTIC");
      return r;
    }
  }

  const int64_t k = accumulation_length(c.op, c.shapes, c.attrs);
  TermsCache terms;
  r.comparison = compare_spec_outputs(env, p, c, p.inputs, outputs, ref, got, false, k, r.tolerance, terms);
  // Inputs updated in place (batch_norm's running stats) must end the same on both sides.
  for (size_t m = 0; m < mutable_inputs.size() && m < ref.mutated.size() && m < got.mutated.size(); ++m) {
    const TensorSpec& in = *p.inputs[static_cast<size_t>(mutable_inputs[m])];
    const Tolerance tol = tolerance_for(c.op, in.dtype, c.tier, false);
    Comparison cmp = compare_outputs(tol, in.dtype, ref.mutated[m].data(), got.mutated[m].data(), numel(in.logical),
                                     nullptr, k);
    merge(r.comparison, cmp, "input " + std::to_string(mutable_inputs[m]) + " updated in place", false);
  }
  r.compared = true;
  // A kernel that allows an output to alias an input must also be right when it does: rerun
  // with the output being input 0 itself (not through stride-0 views, where aliasing races).
  const auto& in0 = p.inputs.empty() ? std::optional<TensorSpec>{} : p.inputs[0];
  if (r.comparison.pass && (p.claim->flags & DX_KERNEL_FLAG_INPLACE) && outputs.size() == 1 && in0 &&
      out0->dtype == in0->dtype && out0->logical == in0->logical && c.layouts[0].rfind("broadcast", 0) != 0) {
    SideOutcome alias = run_aliased(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(p.inputs),
                                    ptrs(outputs), 0, 0, p.attrs.get(), false);
    r.in_place_checked = true;
    if (alias.status != DX_OK) {
      r.status = Status::Fail;
      r.reason = "in place (output aliasing input 0, DX_KERNEL_FLAG_INPLACE): " + status_text(alias.status, alias.message);
      return r;
    }
    SideOutcome as_got;
    as_got.outputs = alias.outputs;
    Tolerance ignored;
    Comparison in_place = compare_spec_outputs(env, p, c, p.inputs, outputs, ref, as_got, false, k, ignored, terms);
    if (!in_place.pass) {
      r.comparison = in_place;
      r.status = Status::Fail;
      r.reason = "in place (output aliasing input 0, DX_KERNEL_FLAG_INPLACE): " + in_place.reason;
      return r;
    }
  }
  finish(r, c, out0->dtype, ref.outputs[0], numel(out0->logical));
  return r;
}

// Gradients of the outputs: real-tier data of each output's dtype, streams 200+.
std::vector<std::optional<TensorSpec>> make_output_grads(const Case& c, const std::vector<std::optional<TensorSpec>>& outs,
                                                         uint64_t key, bool widen) {
  std::vector<std::optional<TensorSpec>> grads;
  for (size_t k = 0; k < outs.size(); ++k) {
    DType dt = outs[k]->dtype;
    if (widen && is_float(dt)) dt = DType::F64;
    GenRequest g{"dx.grad", dt, "real", static_cast<int>(200 + k), key, numel(outs[k]->logical), 1};
    grads.emplace_back(contiguous_input(outs[k]->logical, dt, generate(g)));
  }
  (void)c;
  return grads;
}

int64_t backward_accumulation(const Case& c, const std::vector<std::optional<TensorSpec>>& outs) {
  int64_t k = accumulation_length(c.op, c.shapes, c.attrs);
  int64_t smallest = INT64_MAX, largest_out = 0;
  for (const auto& s : c.shapes) {
    if (is_absent(s)) continue;
    for (auto d : s) k = std::max(k, d);
    smallest = std::min(smallest, std::max<int64_t>(numel(s), 1));
  }
  for (const auto& o : outs) {
    for (auto d : o->logical) k = std::max(k, d);
    largest_out = std::max(largest_out, numel(o->logical));
  }
  if (smallest != INT64_MAX) k = std::max(k, largest_out / smallest + 1);
  return k;
}

CaseResult run_backward(const Environment& env, const Case& c, Prepared& p) {
  CaseResult r;
  if (!p.claim->has_backward) {
    r.status = Status::NotSupported;
    r.reason = "the plugin registers no backward for " + c.op + " " + c.sig;
    return r;
  }
  if (!p.ref_claim->has_backward) {
    r.reason = "the reference has no backward for " + c.op + " " + c.sig;
    return r;
  }
  // The forward outputs, as the reference computes them.
  std::vector<std::optional<TensorSpec>> fwd_out;
  for (const auto& o : p.outputs) fwd_out.emplace_back(contiguous_output(o->logical, o->dtype));
  SideOutcome fwd = run_side(env.runtime, p.op_id, env.reference_index, p.ref_device, ptrs(p.inputs), ptrs(fwd_out),
                             p.attrs.get(), false, mutated_inputs(c.op, c.shapes, c.attrs));
  if (fwd.status != DX_OK) {
    // A call the reference refuses (an attribute value the shape rules do not judge): the
    // backward case checks that the plugin's forward refuses it too.
    SideOutcome mine = run_side(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(p.inputs), ptrs(fwd_out),
                                p.attrs.get(), false, mutated_inputs(c.op, c.shapes, c.attrs));
    r.reference_status = fwd.status;
    r.plugin_status = mine.status;
    if (mine.status == fwd.status) {
      r.status = Status::Pass;
      r.reason = std::string("both refused the forward call with ") + dx_status_string(fwd.status);
    } else {
      r.status = Status::Fail;
      r.reason = "the reference refused the forward call with " + status_text(fwd.status, fwd.message) +
                 ", the plugin returned " + status_text(mine.status, mine.message);
    }
    return r;
  }
  const uint64_t key = case_data_key(env.seed, c);
  std::vector<std::optional<TensorSpec>> call_inputs = make_output_grads(c, p.outputs, key, false);
  for (const auto& in : p.inputs) call_inputs.push_back(in);
  for (size_t k = 0; k < fwd_out.size(); ++k)
    call_inputs.emplace_back(contiguous_input(fwd_out[k]->logical, fwd_out[k]->dtype, fwd.outputs[k]));
  // Input gradients: in the case's output layout; null for unwanted ones and absent inputs.
  const std::string mask = c.mode.size() > 9 ? c.mode.substr(9) : "";
  std::vector<std::optional<TensorSpec>> grads;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const bool wanted = p.inputs[i] && (i >= mask.size() || mask[i] == '1');
    if (!wanted) {
      grads.emplace_back(std::nullopt);
      continue;
    }
    TensorSpec t = contiguous_output(p.inputs[i]->logical, p.inputs[i]->dtype);
    t.plan = guarded(plan_layout(t.logical, c.out_layout), t.logical, t.dtype);
    t.base_bytes.assign(static_cast<size_t>(numel(t.plan.base_shape)) * static_cast<size_t>(byte_size(t.dtype)), 0xA5);
    grads.emplace_back(std::move(t));
  }
  size_t first_grad = grads.size();
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] && first_grad == grads.size()) first_grad = i;
  if (first_grad == grads.size()) {
    r.reason = "no input gradient is wanted";
    return r;
  }
  r.out_dtype = name(grads[first_grad]->dtype);
  r.out_shape = grads[first_grad]->logical;
  SideOutcome ref = run_side(env.runtime, p.op_id, env.reference_index, p.ref_device, ptrs(call_inputs), ptrs(grads),
                             p.attrs.get(), true);
  SideOutcome got = run_side(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(call_inputs), ptrs(grads),
                             p.attrs.get(), true);
  r.reference_status = ref.status;
  r.plugin_status = got.status;
  r.reference_seconds = ref.seconds;
  r.plugin_seconds = got.seconds;
  if (decide_errors(c, p.claim, ref, got, r)) return r;

  // The flags describe the kernel, backward included: a backward that claims determinism must
  // give the same bits on a second run.
  if (p.claim->flags & DX_KERNEL_FLAG_DETERMINISTIC) {
    SideOutcome again = run_side(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(call_inputs),
                                 ptrs(grads), p.attrs.get(), true);
    r.determinism_checked = true;
    if (again.status != DX_OK || again.outputs != got.outputs) {
      r.status = Status::Fail;
      r.reason = again.status != DX_OK ? "backward: a second run returned " + status_text(again.status, again.message)
                                       : std::string("backward: a second run gave different bits, but the kernel "
                                                     "claims DX_KERNEL_FLAG_DETERMINISTIC");
      return r;
    }
  }

  const int64_t k = backward_accumulation(c, p.outputs);
  TermsCache terms;
  r.comparison = compare_spec_outputs(env, p, c, call_inputs, grads, ref, got, true, k, r.tolerance, terms);
  r.compared = true;

  // A kernel that lets an output alias an input must be right when a gradient does so. The
  // first wanted floating-point gradient runs aliasing (1) the first output gradient dy when
  // dtype and shape match (an elementwise backward overwriting dy) and (2) its own forward input
  // (a gradient overwriting what it differentiates), unless that input is a stride-0 view
  // (aliasing a broadcast view races). Every wanted gradient must still match the reference.
  size_t aliased = grads.size();
  for (size_t i = 0; i < grads.size() && aliased == grads.size(); ++i)
    if (grads[i] && is_float(grads[i]->dtype)) aliased = i;
  if (r.comparison.pass && (p.claim->flags & DX_KERNEL_FLAG_INPLACE) && aliased < grads.size()) {
    const TensorSpec& grad = *grads[aliased];
    const size_t own_input = p.outputs.size() + aliased;  // call inputs: dy..., x..., y...
    std::vector<std::pair<size_t, std::string>> aliases;
    if (call_inputs[0] && call_inputs[0]->dtype == grad.dtype && call_inputs[0]->logical == grad.logical)
      aliases.emplace_back(0, "the output gradient dy (input 0 of the backward call)");
    if (own_input < call_inputs.size() && call_inputs[own_input] && call_inputs[own_input]->dtype == grad.dtype &&
        call_inputs[own_input]->logical == grad.logical && c.layouts[aliased].rfind("broadcast", 0) != 0)
      aliases.emplace_back(own_input, "its forward input " + std::to_string(aliased));
    for (const auto& [input, what] : aliases) {
      SideOutcome alias = run_aliased(env.runtime, p.op_id, env.plugin_index, p.plugin_device, ptrs(call_inputs),
                                      ptrs(grads), aliased, input, p.attrs.get(), true);
      r.in_place_checked = true;
      const std::string label = "backward in place (gradient of input " + std::to_string(aliased) + " aliasing " +
                                what + ", DX_KERNEL_FLAG_INPLACE): ";
      if (alias.status != DX_OK) {
        r.status = Status::Fail;
        r.reason = label + status_text(alias.status, alias.message);
        return r;
      }
      Tolerance ignored;
      const Comparison in_place = compare_spec_outputs(env, p, c, call_inputs, grads, ref, alias, true, k, ignored, terms);
      if (!in_place.pass) {
        r.comparison = in_place;
        r.status = Status::Fail;
        r.reason = label + in_place.reason;
        return r;
      }
    }
  }
  finish(r, c, grads[first_grad]->dtype, ref.outputs[first_grad], numel(grads[first_grad]->logical));
  return r;
}

double dot_f64(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, bool absolute) {
  double s = 0;
  for (size_t i = 0; i + 8 <= a.size() && i + 8 <= b.size(); i += 8) {
    const double x = load_double(DType::F64, a.data() + i), y = load_double(DType::F64, b.data() + i);
    s += absolute ? std::fabs(x * y) : x * y;
  }
  return s;
}

// The reference's f64 backward against central finite differences of its f64 forward along a
// random direction v: <v, J^T u> = (F(x + h v) - F(x - h v)) / 2h with F(x) = <u, f(x)>.
CaseResult run_fdcheck(const Environment& env, const Case& c, Prepared& p) {
  CaseResult r;
  const Signature wide = widened_to_f64(p.sig);
  const Claim* ref = env.find_claim(true, c.op, format_signature(wide), "cpu");
  if (!ref || !ref->has_backward) {
    r.status = Status::NotSupported;
    r.reason = "the reference has no f64 backward for " + c.op;
    return r;
  }
  const uint64_t key = case_data_key(env.seed, c);
  auto inputs = make_inputs(c, wide, key, true, true);
  std::vector<std::optional<TensorSpec>> outs;
  for (const auto& o : p.outputs) outs.emplace_back(contiguous_output(o->logical, is_float(o->dtype) ? DType::F64 : o->dtype));
  auto forward = [&](const std::vector<std::optional<TensorSpec>>& x, SideOutcome& o) {
    o = run_side(env.runtime, p.op_id, env.reference_index, p.ref_device, ptrs(x), ptrs(outs), p.attrs.get(), false,
                 mutated_inputs(c.op, c.shapes, c.attrs));
    return o.status == DX_OK;
  };
  SideOutcome y;
  if (!forward(inputs, y)) {
    r.status = Status::Mistrusted;
    r.reason = "the forward refuses this call (" + status_text(y.status, y.message) + "): nothing to differentiate";
    return r;
  }
  auto u = make_output_grads(c, outs, key, true);
  std::vector<std::optional<TensorSpec>> call_inputs = u;
  for (const auto& in : inputs) call_inputs.push_back(in);
  for (size_t k = 0; k < outs.size(); ++k) call_inputs.emplace_back(contiguous_input(outs[k]->logical, outs[k]->dtype, y.outputs[k]));
  std::vector<std::optional<TensorSpec>> grads;
  for (const auto& in : inputs)
    grads.emplace_back(in && is_float(in->dtype) ? std::optional<TensorSpec>(contiguous_output(in->logical, DType::F64))
                                                 : std::nullopt);
  SideOutcome g = run_side(env.runtime, p.op_id, env.reference_index, p.ref_device, ptrs(call_inputs), ptrs(grads),
                           p.attrs.get(), true);
  r.reference_status = g.status;
  if (g.status != DX_OK) {
    r.status = Status::Fail;
    r.reason = "the reference backward failed: " + status_text(g.status, g.message);
    return r;
  }
  // Direction v (streams 300+): a relative perturbation, v_i = r_i * max(|x_i|, 1e-3) with r_i
  // in [-1, 1], so that x_i +- h v_i stays inside the domain (log, sqrt of small x).
  double lhs = 0, scale = 0;
  std::vector<std::vector<uint8_t>> v(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i]) continue;
    GenRequest q{"dx.direction", DType::F64, "real", static_cast<int>(300 + i), key, numel(inputs[i]->logical), 1};
    v[i] = generate(q);
    for (size_t j = 0; j + 8 <= v[i].size(); j += 8) {
      const double x = std::fabs(load_double(DType::F64, inputs[i]->base_bytes.data() + j));
      const double rel = std::isfinite(x) ? std::max(x, 1e-3) : 0.0;
      store_double(DType::F64, load_double(DType::F64, v[i].data() + j) / 9.0 * rel, v[i].data() + j);
    }
    lhs += dot_f64(v[i], g.outputs[i], false);
    scale += dot_f64(v[i], g.outputs[i], true);
  }
  double h = 1e-6;
  auto shifted = [&](double sign) {
    auto x = inputs;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!grads[i]) continue;
      auto& b = x[i]->base_bytes;
      for (size_t j = 0; j + 8 <= b.size(); j += 8)
        store_double(DType::F64, load_double(DType::F64, b.data() + j) + sign * h * load_double(DType::F64, v[i].data() + j),
                     b.data() + j);
    }
    return x;
  };
  double rhs = 0, f_scale = 0, tol = 0;
  // Near a pole (tan) the O(h^2) truncation error of a 1e-6 step is too large: one retry with a
  // 100 times smaller step before judging.
  for (int attempt = 0; attempt < 2; ++attempt, h /= 100) {
    SideOutcome plus, minus;
    if (!forward(shifted(1), plus) || !forward(shifted(-1), minus)) {
      r.status = Status::Mistrusted;
      r.reason = "the forward refuses a shifted point: nothing to check";
      return r;
    }
    rhs = 0;
    f_scale = 0;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!is_float(outs[k]->dtype)) continue;
      rhs += (dot_f64(u[k]->base_bytes, plus.outputs[k], false) - dot_f64(u[k]->base_bytes, minus.outputs[k], false)) / (2 * h);
      f_scale += dot_f64(u[k]->base_bytes, y.outputs[k], true);
    }
    // Truncation error O(h^2); rounding error about 1e-16 * F / h.
    tol = 1e-5 * std::max({scale, std::fabs(lhs), std::fabs(rhs)}) + 1e-16 * f_scale / h + 1e-9;
    if (std::fabs(lhs - rhs) <= tol || !std::isfinite(lhs) || !std::isfinite(rhs)) break;
  }
  r.compared = true;
  r.out_dtype = "f64";
  r.comparison.elements = 1;
  r.comparison.worst_index = 0;
  r.comparison.worst_expected = rhs;
  r.comparison.worst_actual = lhs;
  r.comparison.worst_threshold = tol;
  r.comparison.worst_expected_text = format_value(DType::F64, rhs);
  r.comparison.worst_actual_text = format_value(DType::F64, lhs);
  r.comparison.max_abs = std::fabs(lhs - rhs);
  r.comparison.max_rel = rhs != 0 ? std::fabs(lhs - rhs) / std::fabs(rhs) : 0;
  r.tolerance.rule = Rule::RtolAtol;
  r.tolerance.rtol = 1e-5;  // reported only; the check is the one below
  r.tolerance.source = "finite differences: |<v, J^T u> - (F(x+hv) - F(x-hv))/2h| <= 1e-5 * max(sum|v*J^T u|, |both|)";
  char buf[256];
  std::snprintf(buf, sizeof buf, "<v, J^T u> = %.17g, finite differences give %.17g (tolerance %.3g, h = %.3g)", lhs, rhs,
                tol, h);
  if (!std::isfinite(lhs) || !std::isfinite(rhs)) {
    // Overflow-range or empty data (exp at its overflow point, the mean of nothing): the
    // derivative is not a finite number to check.
    r.status = Status::Mistrusted;
    r.reason = std::string("not finite at this point: the check proves little; ") + buf;
  } else if (!(std::fabs(lhs - rhs) <= tol)) {
    r.comparison.pass = false;
    r.comparison.mismatches = 1;
    r.status = Status::Fail;
    r.reason = buf;
  } else {
    r.status = scale == 0 ? Status::Mistrusted : Status::Pass;
    if (scale == 0) r.reason = std::string("the gradient is zero along v: the check proves little; ") + buf;
  }
  return r;
}

CaseResult execute_case_unguarded(const Environment& env, const Case& c) {
  CaseResult r;
  Prepared p;
  p.rule = find_op_rule(c.op);
  auto key = dtype_from_name(c.dtype);
  std::optional<Signature> sig = c.sig.empty() && key ? std::optional<Signature>(default_signature(c.op, *key))
                                                      : parse_signature(c.sig);
  if (!p.rule || !key || !sig) {
    r.reason = "the suite cannot run op '" + c.op + "' with dtypes '" + (c.sig.empty() ? c.dtype : c.sig) + "'";
    return r;
  }
  p.sig = *sig;
  const std::string sig_text = format_signature(p.sig);
  const bool fdcheck = c.mode == "fdcheck";
  p.claim = env.find_claim(fdcheck, c.op, sig_text, fdcheck ? "cpu" : c.device);
  if (!p.claim) {
    r.status = Status::NotSupported;
    r.reason = "the plugin claims no " + c.op + " kernel " + sig_text + " on " + c.device;
    return r;
  }
  p.ref_claim = env.find_claim(true, c.op, sig_text, "cpu");
  if (!p.ref_claim) {
    r.reason = "the reference has no " + c.op + " kernel " + sig_text;
    return r;
  }
  check(dx_runtime_op_lookup(env.runtime, c.op.c_str(), &p.op_id), "dx_runtime_op_lookup");
  const OutputsResult spec = output_specs(c.op, c.shapes, p.sig, c.attrs, c.outshapes);
  // An invalid call still needs output tensors to pass: scalars, so the call reaches validation.
  if (spec.outputs.empty())
    for (DType d : p.sig.outputs) p.outputs.emplace_back(contiguous_output(Shape{}, d));
  else
    for (const auto& o : spec.outputs) p.outputs.emplace_back(contiguous_output(o.shape, o.dtype));
  p.valid = spec.error.empty();
  p.inputs = make_inputs(c, p.sig, case_data_key(env.seed, c), false, false);
  p.attrs = make_attrs(c.attrs);
  p.ref_device = env.device_for(env.reference_index, 1 /* kDLCPU */);
  p.plugin_device = env.device_for(env.plugin_index, p.claim->device_type);
  if (p.ref_device < 0 || p.plugin_device < 0) {
    r.reason = std::string("no memory space for ") + (p.ref_device < 0 ? "the reference (cpu)" : c.device);
    return r;
  }
  if (fdcheck) return run_fdcheck(env, c, p);
  if (c.is_backward()) return run_backward(env, c, p);
  return run_forward(env, c, p);
}

}  // namespace

CaseResult execute_case(const Environment& env, const Case& c) {
  const auto start = std::chrono::steady_clock::now();
  CaseResult r;
  try {
    r = execute_case_unguarded(env, c);
  } catch (const HostCallError& e) {
    r = CaseResult{};
    r.status = Status::HarnessError;
    r.reason = e.message;
  } catch (const std::exception& e) {
    r = CaseResult{};
    r.status = Status::HarnessError;
    r.reason = std::string("harness exception: ") + e.what();
  } catch (...) {
    r = CaseResult{};
    r.status = Status::HarnessError;
    r.reason = "unknown harness exception";
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace deepx::conformance
