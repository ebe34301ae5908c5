#include "runner.hpp"

#include <chrono>
#include <cstring>
#include <memory>

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

bool Environment::discover(std::string& error) {
  int32_t op_count = 0;
  if (dx_runtime_op_count(runtime, &op_count) != DX_OK) {
    error = std::string("dx_runtime_op_count: ") + dx_last_error_message();
    return false;
  }
  for (int32_t id = 0; id < op_count; ++id) {
    const char* name = nullptr;
    int32_t kernels = 0;
    if (dx_runtime_op_name(runtime, static_cast<dx_op_id_t>(id), &name) != DX_OK ||
        dx_runtime_kernel_count(runtime, static_cast<dx_op_id_t>(id), &kernels) != DX_OK) {
      error = std::string("reading op ") + std::to_string(id) + ": " + dx_last_error_message();
      return false;
    }
    for (int32_t k = 0; k < kernels; ++k) {
      dx_kernel_info_t ki{};
      ki.struct_size = DX_STRUCT_SIZE(dx_kernel_info_t, has_supports);
      if (dx_runtime_kernel_info(runtime, static_cast<dx_op_id_t>(id), k, &ki) != DX_OK) {
        error = std::string("dx_runtime_kernel_info: ") + dx_last_error_message();
        return false;
      }
      const bool mine = ki.plugin_index == plugin_index, reference = ki.plugin_index == reference_index;
      if (!mine && !reference) continue;
      Claim c;
      c.op = name;
      c.device_type = ki.device_type;
      c.flags = ki.flags;
      c.has_supports = ki.has_supports != 0;
      c.device = device_type_name(ki.device_type);
      c.signature.assign(ki.dtypes, ki.dtypes + ki.num_dtypes);
      c.dtype = c.signature.empty() ? "none" : packed_name(c.signature[0]);
      // Only signatures the suite knows how to test are claims it certifies; the rest (ops
      // without a rule, mixed-precision or vendor-specific signatures) are listed as uncovered.
      bool covered = false;
      if (auto key = dtype_from_packed(c.signature.empty() ? 0 : c.signature[0])) {
        std::vector<dx_dtype_t> want;
        for (DType d : expected_signature(c.op, *key)) want.push_back(info(d).packed);
        covered = !want.empty() && want == c.signature;
      }
      if (mine) {
        if (covered) plugin_claims[c.op].push_back(c);
        else uncovered_claims.push_back(c);
      }
      if (reference && covered) reference_claims[c.op].push_back(c);
    }
  }
  return true;
}

const Claim* Environment::find_claim(bool reference, const std::string& op, const std::string& dtype,
                                     const std::string& device) const {
  const auto& map = reference ? reference_claims : plugin_claims;
  auto it = map.find(op);
  if (it == map.end()) return nullptr;
  for (const auto& c : it->second)
    if (c.dtype == dtype && c.device == device) return &c;
  return nullptr;
}

int32_t Environment::device_for(int32_t plugin, int32_t device_type) const {
  int32_t count = 0;
  if (dx_runtime_device_count(runtime, &count) != DX_OK) return -1;
  int32_t fallback = -1;
  for (int32_t i = 0; i < count; ++i) {
    dx_device_info_t di{};
    di.struct_size = DX_STRUCT_SIZE(dx_device_info_t, alignment);
    if (dx_runtime_device_info(runtime, i, &di) != DX_OK) continue;
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
  void operator()(dx_tensor_t* t) const { dx_tensor_destroy(t); }
};
using TensorPtr = std::unique_ptr<dx_tensor_t, TensorDeleter>;
struct AttrsDeleter {
  void operator()(dx_attrs_t* a) const { dx_attrs_destroy(a); }
};
using AttrsPtr = std::unique_ptr<dx_attrs_t, AttrsDeleter>;

struct HostCallError {
  std::string message;
};

void check(dx_status_t status, const char* what) {
  if (status != DX_OK)
    throw HostCallError{std::string(what) + " failed: " + dx_status_string(status) + ": " + dx_last_error_message()};
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
      case AttrValue::Kind::String: check(dx_attrs_set_string(raw, n, v.str.c_str()), "dx_attrs_set_string"); break;
    }
  }
  return a;
}

struct SideOutcome {
  dx_status_t status = DX_OK;
  std::string message;
  std::string violation;  // the kernel wrote an input or outside its output view
  std::vector<uint8_t> output;
  std::vector<std::vector<uint8_t>> logical_inputs;  // when asked for
  double seconds = 0;
};

SideOutcome run_side(dx_runtime_t* rt, dx_op_id_t op, int32_t plugin, int32_t device,
                     const std::vector<TensorSpec>& inputs, const TensorSpec& output, const dx_attrs_t* attrs,
                     bool read_inputs) {
  SideOutcome o;
  std::vector<Placed> placed_inputs;
  std::vector<dx_tensor_t*> in_ptrs;
  for (const auto& spec : inputs) {
    placed_inputs.push_back(place(rt, device, spec));
    in_ptrs.push_back(placed_inputs.back().kernel_tensor());
  }
  Placed out = place(rt, device, output);
  dx_tensor_t* out_ptr = out.kernel_tensor();
  dx_invoke_options_t opts{};
  opts.struct_size = DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index);
  opts.flags = DX_INVOKE_FLAG_PLUGIN;
  opts.plugin_index = plugin;
  const auto start = std::chrono::steady_clock::now();
  o.status = dx_invoke_ex(rt, op, in_ptrs.empty() ? nullptr : in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()),
                          &out_ptr, 1, attrs, &opts);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.status != DX_OK) {
    o.message = dx_last_error_message();
    return o;
  }
  o.output.resize(static_cast<size_t>(numel(output.logical)) * static_cast<size_t>(byte_size(output.dtype)));
  check(dx_tensor_read(out_ptr, o.output.data(), o.output.size()), "dx_tensor_read (output)");
  // "The kernel writes their elements and nothing else": inputs keep their bytes, and the
  // output's base tensor keeps the sentinel wherever the output view does not reach.
  for (size_t i = 0; i < inputs.size() && o.violation.empty(); ++i) {
    std::vector<uint8_t> now(inputs[i].base_bytes.size());
    check(dx_tensor_read(placed_inputs[i].base.get(), now.data(), now.size()), "dx_tensor_read (input base)");
    if (now != inputs[i].base_bytes) o.violation = "the kernel modified input " + std::to_string(i);
  }
  if (output.plan.is_view && o.violation.empty()) {
    std::vector<uint8_t> base(output.base_bytes.size());
    check(dx_tensor_read(out.base.get(), base.data(), base.size()), "dx_tensor_read (output base)");
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
    for (size_t e = 0; e < covered.size() && o.violation.empty(); ++e)
      if (!covered[e])
        for (size_t b = 0; b < width; ++b)
          if (base[e * width + b] != output.base_bytes[e * width + b]) {
            o.violation = "the kernel wrote base element " + std::to_string(e) + ", outside its output view";
            break;
          }
  }
  if (read_inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<uint8_t> bytes(static_cast<size_t>(numel(inputs[i].logical)) *
                                 static_cast<size_t>(byte_size(inputs[i].dtype)));
      check(dx_tensor_read(in_ptrs[i], bytes.data(), bytes.size()), "dx_tensor_read (input)");
      o.logical_inputs.push_back(std::move(bytes));
    }
  }
  return o;
}

// Runs the plugin with its output aliasing input 0 exactly (same tensor: data, shape and
// strides), as DX_KERNEL_FLAG_INPLACE allows, and returns input 0's final contents.
SideOutcome run_in_place(dx_runtime_t* rt, dx_op_id_t op, int32_t plugin, int32_t device,
                         const std::vector<TensorSpec>& inputs, const dx_attrs_t* attrs) {
  SideOutcome o;
  std::vector<Placed> placed_inputs;
  std::vector<dx_tensor_t*> in_ptrs;
  for (const auto& spec : inputs) {
    placed_inputs.push_back(place(rt, device, spec));
    in_ptrs.push_back(placed_inputs.back().kernel_tensor());
  }
  dx_tensor_t* out_ptr = in_ptrs[0];
  dx_invoke_options_t opts{};
  opts.struct_size = DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index);
  opts.flags = DX_INVOKE_FLAG_PLUGIN;
  opts.plugin_index = plugin;
  o.status = dx_invoke_ex(rt, op, in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()), &out_ptr, 1, attrs, &opts);
  if (o.status != DX_OK) {
    o.message = dx_last_error_message();
    return o;
  }
  o.output.resize(static_cast<size_t>(numel(inputs[0].logical)) * static_cast<size_t>(byte_size(inputs[0].dtype)));
  check(dx_tensor_read(out_ptr, o.output.data(), o.output.size()), "dx_tensor_read (in-place output)");
  return o;
}

std::string status_text(dx_status_t s, const std::string& message) {
  std::string t = dx_status_string(s);
  if (!message.empty()) t += " (" + message + ")";
  return t;
}

CaseResult execute_case_unguarded(const Environment& env, const Case& c) {
  CaseResult r;
  const OpRule* rule = find_op_rule(c.op);
  auto dtype = dtype_from_name(c.dtype);
  if (!rule || !dtype) {
    r.reason = "the suite cannot run op '" + c.op + "' with dtype '" + c.dtype + "'";
    return r;
  }
  const Claim* claim = env.find_claim(false, c.op, c.dtype, c.device);
  if (!claim) {
    r.status = Status::NotSupported;
    r.reason = "the plugin claims no " + c.op + " kernel for " + c.dtype + " on " + c.device;
    return r;
  }
  const Claim* ref_claim = env.find_claim(true, c.op, c.dtype, "cpu");
  if (!ref_claim) {
    r.reason = "the reference has no " + c.op + " kernel for " + c.dtype;
    return r;
  }
  dx_op_id_t op_id = 0;
  check(dx_runtime_op_lookup(env.runtime, c.op.c_str(), &op_id), "dx_runtime_op_lookup");

  const ShapeResult spec = output_spec(c.op, c.shapes, *dtype, c.attrs);
  // An invalid call still needs an output tensor to pass: a scalar, so the call reaches validation.
  const DType out_dtype = spec.output ? spec.output->dtype : *dtype;
  const Shape out_shape = spec.output ? spec.output->shape : Shape{};
  r.out_dtype = name(out_dtype);
  r.out_shape = out_shape;
  if (spec.output && !claim->signature.empty() && claim->signature.back() != info(out_dtype).packed) {
    r.status = Status::Fail;
    r.reason = "the plugin's signature has output dtype " + packed_name(claim->signature.back()) +
               ", the op's rule gives " + name(out_dtype);
    return r;
  }

  // Inputs: identical bytes for both sides.
  const uint64_t key = case_data_key(env.seed, c);
  int64_t k_hint = 1;
  if (c.op == "dx.sum" && !c.shapes.empty()) k_hint = numel(c.shapes[0]);
  if (c.op == "dx.matmul")
    for (auto d : c.shapes[0]) k_hint = std::max(k_hint, d);
  const int n_inputs = rule->inputs;
  std::vector<TensorSpec> inputs;
  for (int i = 0; i < n_inputs; ++i) {
    TensorSpec t;
    t.logical = c.shapes[static_cast<size_t>(i)];
    t.plan = plan_layout(t.logical, c.layouts[static_cast<size_t>(i)]);
    t.dtype = *dtype;
    GenRequest g{c.op, *dtype, c.tier, i, key, numel(t.plan.base_shape), k_hint};
    t.base_bytes = generate(g);
    inputs.push_back(std::move(t));
  }
  TensorSpec output;
  output.logical = out_shape;
  output.plan = plan_layout(out_shape, c.out_layout);
  output.dtype = out_dtype;
  // A sentinel pattern, so elements a kernel forgets to write show up.
  output.base_bytes.assign(static_cast<size_t>(numel(output.plan.base_shape)) * static_cast<size_t>(byte_size(out_dtype)),
                           0xA5);

  AttrsPtr attrs = make_attrs(c.attrs);
  const int32_t ref_device = env.device_for(env.reference_index, 1 /* kDLCPU */);
  const int32_t plugin_device = env.device_for(env.plugin_index, claim->device_type);
  if (ref_device < 0 || plugin_device < 0) {
    r.reason = std::string("no memory space for ") + (ref_device < 0 ? "the reference (cpu)" : c.device);
    return r;
  }

  const bool need_terms = tolerance_for(c.op, out_dtype, c.tier).rule == Rule::ErrorBound;
  SideOutcome ref = run_side(env.runtime, op_id, env.reference_index, ref_device, inputs, output, attrs.get(), need_terms);
  SideOutcome got = run_side(env.runtime, op_id, env.plugin_index, plugin_device, inputs, output, attrs.get(), false);
  r.reference_status = ref.status;
  r.plugin_status = got.status;
  r.reference_seconds = ref.seconds;
  r.plugin_seconds = got.seconds;

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
    return r;
  }
  if (!c.expect.empty()) {
    r.reason = "the manifest expects " + c.expect + " but the reference succeeded";
    return r;
  }
  if (got.status == DX_UNSUPPORTED && claim->has_supports) {
    // The kernel's supports() predicate declined this call: not claimed, not a failure.
    r.status = Status::NotSupported;
    r.reason = "the kernel's supports() declined: " + status_text(got.status, got.message);
    return r;
  }
  if (got.status == DX_UNSUPPORTED) {
    r.status = Status::Unimplemented;
    r.reason = "claimed kernel returned " + status_text(got.status, got.message);
    return r;
  }
  if (got.status != DX_OK) {
    r.status = Status::Fail;
    r.reason = "the reference succeeded, the plugin returned " + status_text(got.status, got.message);
    return r;
  }
  if (!ref.violation.empty()) {
    r.reason = "reference: " + ref.violation;
    return r;
  }
  if (!got.violation.empty()) {
    r.status = Status::Fail;
    r.reason = got.violation;
    return r;
  }

  // A kernel that claims determinism must give the same bits on a second run.
  if (claim->flags & DX_KERNEL_FLAG_DETERMINISTIC) {
    SideOutcome again = run_side(env.runtime, op_id, env.plugin_index, plugin_device, inputs, output, attrs.get(), false);
    r.determinism_checked = true;
    if (again.status != DX_OK || again.output != got.output) {
      r.status = Status::Fail;
      r.reason = again.status != DX_OK
                     ? "a second run returned " + status_text(again.status, again.message)
                     : std::string("a second run gave different bits, but the kernel claims DX_KERNEL_FLAG_DETERMINISTIC");
      return r;
    }
  }

  r.tolerance = tolerance_for(c.op, out_dtype, c.tier);
  std::vector<double> terms;
  int64_t k = 1;
  if (r.tolerance.rule == Rule::ErrorBound) {
    std::vector<std::vector<double>> logical;
    for (size_t i = 0; i < ref.logical_inputs.size(); ++i) {
      const auto& bytes = ref.logical_inputs[i];
      std::vector<double> values(bytes.size() / static_cast<size_t>(byte_size(*dtype)));
      for (size_t j = 0; j < values.size(); ++j)
        values[j] = load_double(*dtype, bytes.data() + j * static_cast<size_t>(byte_size(*dtype)));
      logical.push_back(std::move(values));
    }
    terms = abs_term_sums(c.op, c.shapes, logical, c.attrs, k);
  }
  r.comparison = compare_outputs(r.tolerance, out_dtype, ref.output.data(), got.output.data(), numel(out_shape),
                                 terms.empty() ? nullptr : &terms, k);
  r.compared = true;
  // A kernel that allows an output to alias an input must also be right when it does: rerun
  // with the output being input 0 itself (not through stride-0 views, where aliasing races).
  if (r.comparison.pass && (claim->flags & DX_KERNEL_FLAG_INPLACE) && n_inputs >= 1 && out_dtype == *dtype &&
      out_shape == c.shapes[0] && c.layouts[0].rfind("broadcast", 0) != 0) {
    SideOutcome alias = run_in_place(env.runtime, op_id, env.plugin_index, plugin_device, inputs, attrs.get());
    r.in_place_checked = true;
    if (alias.status != DX_OK) {
      r.status = Status::Fail;
      r.reason = "in place (output aliasing input 0, DX_KERNEL_FLAG_INPLACE): " + status_text(alias.status, alias.message);
      return r;
    }
    Comparison in_place = compare_outputs(r.tolerance, out_dtype, ref.output.data(), alias.output.data(),
                                          numel(out_shape), terms.empty() ? nullptr : &terms, k);
    if (!in_place.pass) {
      r.comparison = in_place;
      r.status = Status::Fail;
      r.reason = "in place (output aliasing input 0, DX_KERNEL_FLAG_INPLACE): " + in_place.reason;
      return r;
    }
  }
  if (!r.comparison.pass) {
    r.status = Status::Fail;
    r.reason = r.comparison.reason;
  } else if (c.op != "dx.fill" && mostly_constant(out_dtype, ref.output.data(), numel(out_shape))) {
    r.status = Status::Mistrusted;
    r.reason = "matches, but >= 90% of the expected output is one value: the case proves little";
  } else {
    r.status = Status::Pass;
  }
  return r;
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
