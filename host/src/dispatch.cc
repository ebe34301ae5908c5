// Op schemas, output-shape checks for the standard ops, and the dispatch hot path.
//
// The hot path (dx_invoke) does no allocation and no string work: the op id indexes a vector,
// the kernel chosen last time is tried first, and the DLTensor pointers are gathered on the
// stack. Attributes of standard ops are put in schema order once per (attrs object, op) and
// cached in the attrs object.
#include <algorithm>
#include <array>
#include <iterator>

#include "deepx/ops.h"
#include "internal.h"
#include "remote.h"

namespace deepx::host {

// The shape rule of every standard op, generated from abi/ops.json with DX_OP_TABLE.
#include "op_table.inc"

struct OpSchema {
  const char* name;
  int32_t num_inputs;
  int32_t num_outputs;
  std::vector<std::string> attrs;
  ShapeRule rule;
};

namespace {

// op_table.inc and deepx/ops.h are generated from the same JSON; a hand edit of either stops the
// build here instead of pairing an op with another op's rule.
struct HeaderRow {
  const char* name;
  int32_t num_inputs;
  int32_t num_outputs;
};
constexpr HeaderRow kHeaderOps[] = {
#define DX_HEADER_ROW_(id, op_name, nin, nout, attr_list) {op_name, nin, nout},
    DX_OP_TABLE(DX_HEADER_ROW_)
#undef DX_HEADER_ROW_
};
constexpr bool SameText(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}
constexpr bool TableMatchesHeader() {
  if (std::size(kHeaderOps) != std::size(kOpTable)) return false;
  for (size_t i = 0; i < std::size(kOpTable); ++i) {
    if (!SameText(kHeaderOps[i].name, kOpTable[i].name) ||
        kHeaderOps[i].num_inputs != kOpTable[i].num_inputs ||
        kHeaderOps[i].num_outputs != kOpTable[i].num_outputs) {
      return false;
    }
  }
  return true;
}
static_assert(TableMatchesHeader(),
              "host/src/op_table.inc disagrees with deepx/ops.h: build the target ops-table-update");

std::vector<OpSchema> BuildSchemas() {
  std::vector<OpSchema> out;
#define DX_SCHEMA_(id, op_name, nin, nout, attr_list)                       \
  {                                                                         \
    OpSchema s{op_name, nin, nout, {}, kOpTable[out.size()].rule};          \
    std::string list(attr_list);                                            \
    size_t start = 0;                                                       \
    while (start < list.size()) {                                           \
      size_t end = list.find(',', start);                                   \
      if (end == std::string::npos) end = list.size();                      \
      s.attrs.push_back(list.substr(start, end - start));                   \
      start = end + 1;                                                      \
    }                                                                       \
    out.push_back(std::move(s));                                            \
  }
  DX_OP_TABLE(DX_SCHEMA_)
#undef DX_SCHEMA_
  return out;
}

const std::vector<OpSchema>& Schemas() {
  static const std::vector<OpSchema> schemas = BuildSchemas();
  return schemas;
}

std::string ShapeString(const DLTensor* t) {
  if (t == nullptr) return "(none)";
  std::string s = "[";
  for (int32_t i = 0; i < t->ndim; ++i) s += (i ? "," : "") + std::to_string(t->shape[i]);
  return s + "]";
}

bool SameShape(const DLTensor* a, const int64_t* shape, int32_t ndim) {
  if (a->ndim != ndim) return false;
  for (int32_t i = 0; i < ndim; ++i) {
    if (a->shape[i] != shape[i]) return false;
  }
  return true;
}

const dx_attr_t* Slot(const dx_attr_t* attrs, int32_t n, int32_t i) {
  return (i < n && attrs[i].type != DX_ATTR_NONE) ? &attrs[i] : nullptr;
}

const char* AttrTypeName(int32_t type) {
  switch (type) {
    case DX_ATTR_I64: return "an i64";
    case DX_ATTR_F64: return "an f64";
    case DX_ATTR_BOOL: return "a bool";
    case DX_ATTR_STRING: return "a string";
    case DX_ATTR_I64_ARRAY: return "an i64 array";
    case DX_ATTR_F64_ARRAY: return "an f64 array";
    default: return "of unknown type";
  }
}

// The host reads a few attributes of the standard ops before any kernel runs; each is read
// through the union member of its type only after checking the type (a string where an i64
// is expected must be an error, not a pointer read as an integer).
dx_status_t CheckAttrType(const char* op, const dx_attr_t* a, int32_t want, int32_t also = -1) {
  if (a == nullptr || a->type == want || a->type == also) return DX_OK;
  return Failf(DX_INVALID_ARGUMENT, "%s: attribute '%s' is %s; it must be %s%s%s", op, a->name,
               AttrTypeName(a->type), AttrTypeName(want), also >= 0 ? " or " : "",
               also >= 0 ? AttrTypeName(also) : "");
}

dx_status_t Mismatch(const std::string& op, const std::string& what) {
  return Fail(DX_SHAPE_MISMATCH, op + ": " + what);
}

// Checks output shapes of the standard ops whose shape rule the host implements (same,
// broadcast, reduce, matmul, softmax, transpose); the kernels check the other rules.
dx_status_t CheckShapes(const Op& op, const DLTensor* const* in, int32_t nin,
                        const DLTensor* const* out, int32_t nout, const dx_attr_t* attrs,
                        int32_t nattrs) {
  const OpSchema* s = op.schema;
  if (s == nullptr) return DX_OK;
  if (s->num_inputs >= 0 && nin != s->num_inputs) {
    return Failf(DX_INVALID_ARGUMENT, "%s takes %d inputs, got %d", s->name, s->num_inputs, nin);
  }
  if (s->num_outputs >= 0 && nout != s->num_outputs) {
    return Failf(DX_INVALID_ARGUMENT, "%s takes %d outputs, got %d", s->name, s->num_outputs,
                 nout);
  }
  if (nin < 1 || in[0] == nullptr || out[0] == nullptr) return DX_OK;
  const DLTensor* x = in[0];
  const DLTensor* y = out[0];
  std::array<int64_t, 64> shape;  // not value-initialised: this runs on every call
  int32_t ndim = 0;
  switch (s->rule) {
    case ShapeRule::kSame:
    case ShapeRule::kSoftmax:
      for (int32_t j = 0; j < nout; ++j) {
        if (out[j] != nullptr && !SameShape(out[j], x->shape, x->ndim)) {
          return Mismatch(s->name, "output " + (nout > 1 ? std::to_string(j) + " " : "") +
                                       "shape " + ShapeString(out[j]) +
                                       " must equal input shape " + ShapeString(x));
        }
      }
      if (s->rule == ShapeRule::kSoftmax) {
        const dx_attr_t* a = Slot(attrs, nattrs, DX_SOFTMAX_AXIS);
        if (dx_status_t st = CheckAttrType(s->name, a, DX_ATTR_I64)) return st;
        int64_t axis = a ? a->value.i64 : -1;
        // A rank-0 tensor is one line of one element: axis 0 and -1 are valid (PyTorch).
        const int64_t rank = x->ndim == 0 ? 1 : x->ndim;
        if (axis < -rank || axis >= rank) {
          return Failf(DX_OUT_OF_RANGE, "%s: axis %lld out of range for rank %d", s->name,
                       static_cast<long long>(axis), x->ndim);
        }
      }
      return DX_OK;
    case ShapeRule::kBroadcast: {
      for (int32_t i = 0; i < nin; ++i) {
        if (in[i] == nullptr) continue;
        ndim = std::max(ndim, in[i]->ndim);
      }
      if (ndim > 64) return Mismatch(s->name, "rank above 64");
      for (int32_t d = 0; d < ndim; ++d) shape[d] = 1;
      for (int32_t i = 0; i < nin; ++i) {
        if (in[i] == nullptr) continue;
        int32_t off = ndim - in[i]->ndim;
        for (int32_t d = 0; d < in[i]->ndim; ++d) {
          int64_t v = in[i]->shape[d];
          int64_t& r = shape[off + d];
          if (r == 1) {
            r = v;
          } else if (v != 1 && v != r) {
            std::string all;
            for (int32_t j = 0; j < nin; ++j) all += (j ? " and " : "") + ShapeString(in[j]);
            return Mismatch(s->name, "shapes " + all + " do not broadcast");
          }
        }
      }
      if (!SameShape(y, shape.data(), ndim)) {
        return Mismatch(s->name, "output shape " + ShapeString(y) +
                                     " must equal the broadcast shape of the inputs");
      }
      return DX_OK;
    }
    case ShapeRule::kReduce: {
      std::array<bool, 64> reduced{};
      const dx_attr_t* axes = Slot(attrs, nattrs, DX_REDUCE_AXES);
      const dx_attr_t* keep = Slot(attrs, nattrs, DX_REDUCE_KEEPDIMS);
      if (dx_status_t st = CheckAttrType(s->name, axes, DX_ATTR_I64_ARRAY)) return st;
      if (dx_status_t st = CheckAttrType(s->name, keep, DX_ATTR_BOOL, DX_ATTR_I64)) return st;
      if (x->ndim > 64) return Mismatch(s->name, "rank above 64");
      if (axes == nullptr || axes->count == 0) {
        for (int32_t d = 0; d < x->ndim; ++d) reduced[d] = true;
      } else {
        if (axes->type != DX_ATTR_I64_ARRAY) {
          return Fail(DX_INVALID_ARGUMENT, std::string(s->name) + ": axes must be an i64 array");
        }
        for (int64_t i = 0; i < axes->count; ++i) {
          int64_t a = axes->value.i64s[i];
          if (a < -x->ndim || a >= x->ndim) {
            return Failf(DX_OUT_OF_RANGE, "%s: axis %lld out of range for rank %d", s->name,
                         static_cast<long long>(a), x->ndim);
          }
          if (a < 0) a += x->ndim;
          if (reduced[a]) {
            return Failf(DX_OUT_OF_RANGE, "%s: axis %lld repeated", s->name,
                         static_cast<long long>(axes->value.i64s[i]));
          }
          reduced[a] = true;
        }
      }
      bool keepdims = keep && keep->value.i64 != 0;
      for (int32_t d = 0; d < x->ndim; ++d) {
        if (!reduced[d]) {
          shape[ndim++] = x->shape[d];
        } else if (keepdims) {
          shape[ndim++] = 1;
        }
      }
      if (!SameShape(y, shape.data(), ndim)) {
        return Mismatch(s->name, "output shape " + ShapeString(y) +
                                     " does not match the reduction of " + ShapeString(x));
      }
      return DX_OK;
    }
    case ShapeRule::kMatmul: {
      if (nin < 2 || in[1] == nullptr) return DX_OK;
      const DLTensor* b = in[1];
      if (x->ndim < 1 || b->ndim < 1) {
        return Mismatch(s->name, "operands must have rank >= 1");
      }
      const dx_attr_t* ta = Slot(attrs, nattrs, DX_MATMUL_TRANSPOSE_A);
      const dx_attr_t* tb = Slot(attrs, nattrs, DX_MATMUL_TRANSPOSE_B);
      if (dx_status_t st = CheckAttrType(s->name, ta, DX_ATTR_BOOL, DX_ATTR_I64)) return st;
      if (dx_status_t st = CheckAttrType(s->name, tb, DX_ATTR_BOOL, DX_ATTR_I64)) return st;
      bool t_a = ta && ta->value.i64 != 0 && x->ndim >= 2;
      bool t_b = tb && tb->value.i64 != 0 && b->ndim >= 2;
      int64_t m = 1, ka, kb, n = 1;
      if (x->ndim == 1) {
        ka = x->shape[0];
      } else {
        m = x->shape[x->ndim - (t_a ? 1 : 2)];
        ka = x->shape[x->ndim - (t_a ? 2 : 1)];
      }
      if (b->ndim == 1) {
        kb = b->shape[0];
      } else {
        kb = b->shape[b->ndim - (t_b ? 1 : 2)];
        n = b->shape[b->ndim - (t_b ? 2 : 1)];
      }
      if (ka != kb) {
        return Mismatch(s->name, "inner dimensions differ: " + ShapeString(x) + " @ " +
                                     ShapeString(b) + (t_a ? " (a transposed)" : "") +
                                     (t_b ? " (b transposed)" : ""));
      }
      int32_t batch_a = std::max(0, x->ndim - 2), batch_b = std::max(0, b->ndim - 2);
      int32_t batch = std::max(batch_a, batch_b);
      if (batch > 60) return Mismatch(s->name, "rank above 62");
      for (int32_t d = 0; d < batch; ++d) {
        int32_t da = d - (batch - batch_a), db = d - (batch - batch_b);
        int64_t va = da >= 0 ? x->shape[da] : 1, vb = db >= 0 ? b->shape[db] : 1;
        if (va != vb && va != 1 && vb != 1) {
          return Mismatch(s->name, "batch dimensions of " + ShapeString(x) + " and " +
                                       ShapeString(b) + " do not broadcast");
        }
        shape[ndim++] = va == 1 ? vb : va;
      }
      if (x->ndim >= 2) shape[ndim++] = m;
      if (b->ndim >= 2) shape[ndim++] = n;
      if (!SameShape(y, shape.data(), ndim)) {
        return Mismatch(s->name, "output shape " + ShapeString(y) + " does not match " +
                                     ShapeString(x) + " @ " + ShapeString(b));
      }
      return DX_OK;
    }
    case ShapeRule::kTranspose: {
      const dx_attr_t* perm = Slot(attrs, nattrs, DX_TRANSPOSE_PERM);
      if (x->ndim > 64) return Mismatch(s->name, "rank above 64");
      std::array<bool, 64> seen{};
      for (int32_t d = 0; d < x->ndim; ++d) {
        int64_t p = x->ndim - 1 - d;
        if (perm) {
          if (perm->type != DX_ATTR_I64_ARRAY || perm->count != x->ndim) {
            return Failf(DX_INVALID_ARGUMENT, "%s: perm must be an i64 array of length %d",
                         s->name, x->ndim);
          }
          p = perm->value.i64s[d];
          if (p < 0) p += x->ndim;
          if (p < 0 || p >= x->ndim || seen[p]) {
            return Failf(DX_INVALID_ARGUMENT, "%s: perm is not a permutation of 0..%d", s->name,
                         x->ndim - 1);
          }
          seen[p] = true;
        }
        shape[ndim++] = x->shape[p];
      }
      if (!SameShape(y, shape.data(), ndim)) {
        return Mismatch(s->name, "output shape " + ShapeString(y) + " does not match the permuted "
                                     "input shape");
      }
      return DX_OK;
    }
    default:
      return DX_OK;
  }
}

// The attributes as the kernel sees them: schema order for standard ops, caller order else.
dx_status_t ResolveAttrs(const Core& core, dx_op_id_t id, const Op& op, const Attrs* attrs,
                         dx_attr_t* buffer, int32_t capacity, std::vector<dx_attr_t>* overflow,
                         const dx_attr_t** out_attrs,
                         int32_t* out_count) {
  *out_attrs = nullptr;
  *out_count = 0;
  if (attrs == nullptr) return DX_OK;
  auto* a = const_cast<Attrs*>(attrs);
  std::lock_guard<std::mutex> lock(a->cache_mutex);
  if (a->cache_generation != a->generation || a->cache_op != id || a->cache_core != &core) {
    a->cache.clear();
    if (op.schema == nullptr) {
      for (const auto& item : a->items) a->cache.push_back(AttrView(item));
    } else {
      for (const auto& item : a->items) {
        if (std::find(op.schema->attrs.begin(), op.schema->attrs.end(), item.name) ==
            op.schema->attrs.end()) {
          std::string known;
          for (const auto& n : op.schema->attrs) known += (known.empty() ? "" : ", ") + n;
          return Fail(DX_INVALID_ARGUMENT, op.name + " has no attribute '" + item.name +
                                               "' (its attributes: " +
                                               (known.empty() ? "none" : known) + ")");
        }
      }
      for (const auto& name : op.schema->attrs) {
        dx_attr_t v;
        std::memset(&v, 0, sizeof v);
        v.name = name.c_str();
        v.type = DX_ATTR_NONE;
        for (const auto& item : a->items) {
          if (item.name == name) v = AttrView(item);
        }
        a->cache.push_back(v);
      }
    }
    a->cache_generation = a->generation;
    a->cache_op = id;
    a->cache_core = &core;
  }
  // Copy out under the lock: another thread may rebuild the cache for another op.
  if (a->cache.size() <= static_cast<size_t>(capacity)) {
    std::copy(a->cache.begin(), a->cache.end(), buffer);
    *out_attrs = buffer;
  } else {
    *overflow = a->cache;
    *out_attrs = overflow->data();
  }
  *out_count = static_cast<int32_t>(a->cache.size());
  return DX_OK;
}

bool KernelMatches(const Kernel& k, int32_t device_type, const DLTensor* const* in, int32_t nin,
                   const DLTensor* const* out, int32_t nout) {
  if (k.device_type != device_type || k.num_outputs != nout) return false;
  if (k.variadic) {
    if (nin < k.num_inputs) return false;
    for (int32_t i = 0; i < nin; ++i) {
      if (in[i] && PackDtype(in[i]->dtype) != k.dtypes[0]) return false;
    }
    for (int32_t i = 0; i < nout; ++i) {
      if (out[i] && PackDtype(out[i]->dtype) != k.dtypes[1 + i]) return false;
    }
    return true;
  }
  if (k.num_inputs != nin) return false;
  for (int32_t i = 0; i < nin; ++i) {
    if (in[i] && PackDtype(in[i]->dtype) != k.dtypes[i]) return false;
  }
  for (int32_t i = 0; i < nout; ++i) {
    if (out[i] && PackDtype(out[i]->dtype) != k.dtypes[nin + i]) return false;
  }
  return true;
}

// A backward call of a kernel with n inputs and m outputs has 2m + n inputs (the output
// gradients, the forward inputs, the forward outputs) and n outputs (the input gradients), each
// matched against the forward signature.
bool BackwardMatches(const Kernel& k, int32_t device_type, const DLTensor* const* in, int32_t nin,
                     const DLTensor* const* out, int32_t nout) {
  if (k.device_type != device_type) return false;
  const int32_t m = k.num_outputs;
  const int32_t n = k.variadic ? nout : k.num_inputs;
  if ((k.variadic && n < k.num_inputs) || nout != n || nin != 2 * m + n) return false;
  auto input_dtype = [&](int32_t i) { return k.variadic ? k.dtypes[0] : k.dtypes[i]; };
  auto output_dtype = [&](int32_t j) { return k.dtypes[(k.variadic ? 1 : n) + j]; };
  auto is = [](const DLTensor* t, dx_dtype_t d) { return t == nullptr || PackDtype(t->dtype) == d; };
  for (int32_t j = 0; j < m; ++j) {
    if (!is(in[j], output_dtype(j)) || !is(in[m + n + j], output_dtype(j))) return false;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (!is(in[m + i], input_dtype(i)) || !is(out[i], input_dtype(i))) return false;
  }
  return true;
}

std::string Signature(const DLTensor* const* in, int32_t nin, const DLTensor* const* out,
                      int32_t nout) {
  std::string s = "(";
  for (int32_t i = 0; i < nin; ++i) {
    s += (i ? ", " : "") + (in[i] ? DtypeName(PackDtype(in[i]->dtype)) : std::string("none"));
  }
  s += ") -> (";
  for (int32_t i = 0; i < nout; ++i) {
    s += (i ? ", " : "") + (out[i] ? DtypeName(PackDtype(out[i]->dtype)) : std::string("none"));
  }
  return s + ")";
}

dx_status_t NoKernel(const Core& core, const Op& op, int32_t device_type, bool backward,
                     const dx_invoke_options_t* options, const DLTensor* const* in, int32_t nin,
                     const DLTensor* const* out, int32_t nout) {
  std::string msg = "no " + std::string(backward ? "backward " : "") + "kernel for " + op.name +
                    " " + Signature(in, nin, out, nout) + " on device type " +
                    std::to_string(device_type);
  if (options && (options->flags & DX_INVOKE_FLAG_PLUGIN)) {
    msg += " in plugin #" + std::to_string(options->plugin_index);
  }
  msg += "; available:";
  for (const auto& k : op.kernels) {
    msg += "\n  " + core.plugins[k.plugin_index]->name + ": device type " +
           std::to_string(k.device_type) + " (";
    for (size_t i = 0; i < k.dtypes.size(); ++i) {
      if (static_cast<int32_t>(i) == (k.variadic ? 1 : k.num_inputs)) msg += ") -> (";
      else if (i) msg += ", ";
      msg += DtypeName(k.dtypes[i]);
    }
    msg += ")";
    if (backward && !k.backward) msg += " [no backward]";
  }
  return Fail(DX_UNSUPPORTED, msg);
}

// A tensor of a runtime connected to deepxd, passed to an in-process runtime's invoke: its memory
// is in the daemon, out of this process's kernels' reach.
dx_status_t RemoteTensorRefused(const char* what, int32_t i) {
  return Failf(DX_INVALID_ARGUMENT,
               "dx_invoke: %s %d is a tensor of a runtime connected to deepxd; an in-process "
               "runtime cannot compute on it (copy it into one of this runtime's tensors with "
               "dx_tensor_copy())",
               what, i);
}

}  // namespace

const OpSchema* FindSchema(std::string_view op_name) {
  for (const auto& s : Schemas()) {
    if (op_name == s.name) return &s;
  }
  return nullptr;
}

dx_status_t Invoke(const dx_runtime_t* runtime_handle, dx_op_id_t id,
                   dx_tensor_t* const* input_handles, int32_t num_inputs,
                   dx_tensor_t* const* output_handles, int32_t num_outputs,
                   const dx_attrs_t* attrs_handle, const dx_invoke_options_t* options) {
  Runtime* runtime = nullptr;
  if (dx_status_t st = Resolve(runtime_handle, "dx_invoke", "runtime", &runtime)) return st;
  if (runtime->remote) {
    return RemoteInvoke(*runtime, id, input_handles, num_inputs, output_handles, num_outputs,
                        attrs_handle, options);
  }
  Core& core = *runtime->core;
  if (num_inputs < 0 || num_outputs < 0 || num_inputs > 64 || num_outputs > 64 ||
      (num_inputs > 0 && input_handles == nullptr) ||
      (num_outputs > 0 && output_handles == nullptr)) {
    return Fail(DX_INVALID_ARGUMENT, "dx_invoke: bad input/output arrays");
  }
  // Handles become objects once, here; a null entry passes an absent tensor.
  Tensor* inputs[64];
  Tensor* outputs[64];
  for (int32_t i = 0; i < num_inputs; ++i) {
    inputs[i] = nullptr;
    if (input_handles[i] == nullptr) continue;
    if (dx_status_t st = Resolve(input_handles[i], "dx_invoke", "an input", &inputs[i])) {
      return Failf(st, "%s (input %d)", PendingMessage().c_str(), i);
    }
    if (inputs[i]->remote) return RemoteTensorRefused("input", i);
  }
  for (int32_t i = 0; i < num_outputs; ++i) {
    outputs[i] = nullptr;
    if (output_handles[i] == nullptr) continue;
    if (dx_status_t st = Resolve(output_handles[i], "dx_invoke", "an output", &outputs[i])) {
      return Failf(st, "%s (output %d)", PendingMessage().c_str(), i);
    }
    if (outputs[i]->remote) return RemoteTensorRefused("output", i);
  }
  Attrs* attrs = nullptr;
  if (attrs_handle != nullptr) {
    if (dx_status_t st = Resolve(attrs_handle, "dx_invoke", "attrs", &attrs)) return st;
  }
  // A plugin loading on another thread waits until this call is done with the registries.
  std::shared_lock<RegistryLock> registry(core.registry);
  if (id >= core.ops.size()) {
    return Failf(DX_NOT_FOUND, "dx_invoke: op id %u is not interned in this runtime", id);
  }
  dx_invoke_options_t opts;
  std::memset(&opts, 0, sizeof opts);
  if (options != nullptr) {
    if (options->struct_size < DX_STRUCT_SIZE(dx_invoke_options_t, flags)) {
      return Fail(DX_INVALID_ARGUMENT, "dx_invoke_ex: options->struct_size is too small; set it "
                                     "to DX_INVOKE_OPTIONS_SIZE_1_0");
    }
    std::memcpy(&opts, options,
                std::min<size_t>(options->struct_size, DX_INVOKE_OPTIONS_SIZE_1_0));
  }
  const bool backward = (opts.flags & DX_INVOKE_FLAG_BACKWARD) != 0;
  const bool pinned = (opts.flags & DX_INVOKE_FLAG_PLUGIN) != 0;

  Op& op = core.ops[id];
  const DLTensor* in[64];
  const DLTensor* out[64];
  int32_t device_type = 0;
  for (int32_t i = 0; i < num_inputs; ++i) {
    in[i] = inputs[i] ? &inputs[i]->dl : nullptr;
    if (in[i] && device_type == 0) device_type = DeviceTypeOf(in[i]->device);
  }
  for (int32_t i = 0; i < num_outputs; ++i) {
    if (outputs[i] == nullptr) {
      if (!backward) return Failf(DX_INVALID_ARGUMENT, "%s: output %d is null", op.name.c_str(), i);
      out[i] = nullptr;
      continue;
    }
    if (outputs[i]->storage && outputs[i]->storage->read_only) {
      return Failf(DX_INVALID_ARGUMENT, "%s: output %d is a read-only DLPack import",
                   op.name.c_str(), i);
    }
    out[i] = &outputs[i]->dl;
    if (device_type == 0) device_type = DeviceTypeOf(out[i]->device);
  }

  dx_attr_t attr_buffer[16];
  std::vector<dx_attr_t> attr_overflow;
  const dx_attr_t* attr_list = nullptr;
  int32_t attr_count = 0;
  if (attrs != nullptr) {
    if (dx_status_t st = ResolveAttrs(core, id, op, attrs, attr_buffer, 16, &attr_overflow,
                                      &attr_list, &attr_count);
        st != DX_OK) {
      return st;
    }
  }
  if (!backward) {
    if (dx_status_t st = CheckShapes(op, in, num_inputs, out, num_outputs, attr_list, attr_count);
        st != DX_OK) {
      return st;
    }
  }

  dx_kernel_call_t call;
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.kernel_data = nullptr;
  call.inputs = in;
  call.outputs = out;
  call.attrs = attr_list;
  call.num_inputs = num_inputs;
  call.num_outputs = num_outputs;
  call.num_attrs = attr_count;
  call.reserved = 0;
  call.stream = nullptr;
  call.host = HostServices();

  const Kernel* uncertified = nullptr;  // a match refused by the trust gate, for the message
  auto usable = [&](const Kernel& k) {
    if (pinned && k.plugin_index != opts.plugin_index) return false;
    if (backward) {
      if (k.backward == nullptr || !BackwardMatches(k, device_type, in, num_inputs, out, num_outputs)) {
        return false;
      }
    } else if (!KernelMatches(k, device_type, in, num_inputs, out, num_outputs)) {
      return false;
    }
    if (core.require_certified && !k.certified) {
      uncertified = &k;
      return false;
    }
    if (k.supports != nullptr) {
      call.kernel_data = k.kernel_data;
      int32_t ok = 0;
      try {
        ok = k.supports(&call);
      } catch (...) {
        ok = 0;
      }
      if (!ok) return false;
    }
    return true;
  };
  const Kernel* chosen = nullptr;
  uint32_t hint = op.last_hit.load(std::memory_order_relaxed);
  if (hint < op.kernels.size() && usable(op.kernels[hint])) {
    chosen = &op.kernels[hint];
  } else {
    for (uint32_t i = 0; i < op.kernels.size(); ++i) {
      if (i != hint && usable(op.kernels[i])) {
        chosen = &op.kernels[i];
        op.last_hit.store(i, std::memory_order_relaxed);
        break;
      }
    }
  }
  if (chosen == nullptr && uncertified != nullptr) {
    const Plugin& p = *uncertified->plugin;
    std::string why = p.certification == DX_CERTIFICATION_VALID
                          ? "kernel not listed: its certificate " + p.certificate +
                                " does not cover this kernel"
                          : p.certification_note;
    return Fail(DX_PERMISSION_DENIED,
                op.name + ": the matching kernel of plugin '" + p.name +
                    "' is not certified and this runtime requires certification (" + why +
                    "). Run `deepx certify " + p.path +
                    " --sign KEY` and keep its certificate next to the library, with the key's "
                    ".pub in the trust store (DEEPX_TRUST_DIR), or unset DEEPX_REQUIRE_CERTIFIED.");
  }
  if (chosen == nullptr) {
    return NoKernel(core, op, device_type, backward, pinned ? &opts : nullptr, in, num_inputs, out,
                    num_outputs);
  }

  call.kernel_data = chosen->kernel_data;
  dx_kernel_fn fn = backward ? chosen->backward : chosen->forward;
  dx_error_t* error = nullptr;
  try {
    if (chosen->plugin->concurrent) {
      error = fn(&call);
    } else {
      std::lock_guard<std::mutex> lock(chosen->plugin->serial);
      error = fn(&call);
    }
  } catch (...) {
    error = MakeError(DX_PLUGIN_ERROR, "the kernel threw a C++ exception across the C ABI");
  }
  if (error != nullptr) {
    return FailFromError(error, op.name + " (plugin '" + chosen->plugin->name + "'): ");
  }
  return DX_OK;
}

}  // namespace deepx::host
