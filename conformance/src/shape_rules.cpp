#include "shape_rules.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace deepx::conformance {

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::Movement: return "movement";
    case OpClass::ExactArith: return "exact_arith";
    case OpClass::BasicArith: return "basic_arith";
    case OpClass::Transcendental: return "transcendental";
    case OpClass::Accumulating: return "accumulating";
    case OpClass::Normalising: return "normalising";
    case OpClass::Random: return "random";
  }
  return "?";
}

const std::vector<OpRule>& op_rules() {
  // The rows come from abi/ops.json through the generated op_table.hpp.
  static const std::vector<OpRule> rules = {
#define DEEPX_OP_RULE_(op_name, nin, nout, attr_list, op_class, grad, shape_rule, dtype_rule, index, bools) \
  OpRule{op_name, nin, op_class, nout, grad, attr_list, shape_rule, dtype_rule, index, bools},
      DEEPX_CONFORMANCE_OP_TABLE(DEEPX_OP_RULE_)
#undef DEEPX_OP_RULE_
  };
  return rules;
}

const char* shape_rule_name(ShapeRule rule) {
  const auto i = static_cast<size_t>(rule);
  return i < std::size(kShapeRuleNames) ? kShapeRuleNames[i] : "?";
}

const OpRule* find_op_rule(const std::string& op) {
  for (const auto& r : op_rules())
    if (op == r.name) return &r;
  return nullptr;
}

const Attr* find_attr(const std::vector<Attr>& attrs, const std::string& name) {
  for (const auto& a : attrs)
    if (a.name == name) return &a;
  return nullptr;
}

DType cast_target(DType from) {
  switch (from) {
    case DType::F64: return DType::I32;   // truncation and saturation, NaN -> 0
    case DType::F32: return DType::F16;   // rounding, overflow to Inf, subnormals
    case DType::F16: return DType::I8;    // saturation from a narrow float
    case DType::BF16: return DType::F32;  // exact widening
    case DType::I64: return DType::BF16;  // one rounding of a wide integer (round-to-odd path)
    case DType::I32: return DType::F32;   // rounding above 2^24
    case DType::I16: return DType::U8;    // wrapping
    case DType::I8: return DType::F64;    // exact
    case DType::U8: return DType::Bool;   // != 0
    case DType::Bool: return DType::F16;  // 0/1
  }
  return from;
}

namespace {
// The output dtype of an op of `rule` for inputs keyed by `dtype` (abi/ops.json "dtype_rules").
DType output_dtype(const OpRule& rule, DType dtype) {
  const bool integral = is_integer(dtype) || dtype == DType::Bool;
  switch (rule.dtype) {
    case DtypeRule::kSame: return dtype;
    case DtypeRule::kToBool: return DType::Bool;
    case DtypeRule::kToI64: return DType::I64;
    case DtypeRule::kIntToI64: return integral ? DType::I64 : dtype;
    case DtypeRule::kIntToF64: return integral ? DType::F64 : dtype;
    case DtypeRule::kMatmul: return dtype == DType::I8 ? DType::I32 : dtype;
    case DtypeRule::kCast: return cast_target(dtype);
  }
  return dtype;
}
}  // namespace

std::vector<DType> expected_signature(const std::string& op, DType dtype) {
  const OpRule* rule = find_op_rule(op);
  if (!rule) return {};
  const Signature s = default_signature(op, dtype);
  std::vector<DType> sig = s.inputs;
  sig.insert(sig.end(), s.outputs.begin(), s.outputs.end());
  return sig;
}

Signature default_signature(const std::string& op, DType key, int outputs) {
  Signature s;
  const OpRule* rule = find_op_rule(op);
  if (!rule) return s;
  const int n_in = rule->inputs < 0 ? 1 : rule->inputs;
  s.inputs.assign(static_cast<size_t>(n_in), key);
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (rule->index_inputs & (1u << i)) s.inputs[i] = DType::I64;
  const int n_out = rule->outputs < 0 ? std::max(outputs, 1) : rule->outputs;
  s.outputs.assign(static_cast<size_t>(n_out), output_dtype(*rule, key));
  for (size_t i = 0; i < s.outputs.size(); ++i)
    if (rule->bool_outputs & (1u << i)) s.outputs[i] = DType::Bool;
  return s;
}

Signature widened_to_f64(const Signature& sig) {
  Signature w = sig;
  for (auto& d : w.inputs) if (is_float(d)) d = DType::F64;
  for (auto& d : w.outputs) if (is_float(d)) d = DType::F64;
  return w;
}

std::string format_signature(const Signature& sig) {
  std::string s;
  for (size_t i = 0; i < sig.inputs.size(); ++i) s += (i ? ":" : "") + std::string(name(sig.inputs[i]));
  s += "->";
  for (size_t i = 0; i < sig.outputs.size(); ++i) s += (i ? ":" : "") + std::string(name(sig.outputs[i]));
  return s;
}

std::optional<Signature> parse_signature(std::string_view text) {
  const size_t arrow = text.find("->");
  if (arrow == std::string_view::npos) return std::nullopt;
  Signature sig;
  auto parse_list = [](std::string_view list, std::vector<DType>& out) {
    size_t start = 0;
    if (list.empty()) return true;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      if (colon == std::string_view::npos) colon = list.size();
      auto d = dtype_from_name(list.substr(start, colon - start));
      if (!d) return false;
      out.push_back(*d);
      start = colon + 1;
    }
    return true;
  };
  if (!parse_list(text.substr(0, arrow), sig.inputs) || !parse_list(text.substr(arrow + 2), sig.outputs) ||
      sig.outputs.empty())
    return std::nullopt;
  return sig;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

bool attr_bool(const std::vector<Attr>& attrs, const char* name) {
  const Attr* a = find_attr(attrs, name);
  return a && (a->value.kind == AttrValue::Kind::Bool || a->value.kind == AttrValue::Kind::I64) && a->value.i64 != 0;
}

// Normalised reduction axes (sorted, in range), or an error.
std::optional<std::vector<int>> reduce_axes(const Shape& shape, const std::vector<Attr>& attrs, std::string& error) {
  const int rank = static_cast<int>(shape.size());
  std::vector<int> axes;
  const Attr* a = find_attr(attrs, "axes");
  if (!a || (a->value.kind == AttrValue::Kind::I64Array && a->value.i64s.empty())) {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  if (a->value.kind != AttrValue::Kind::I64Array) {
    error = "axes must be an i64 array";
    return std::nullopt;
  }
  for (int64_t v : a->value.i64s) {
    if (v < -rank || v >= rank) {
      error = "axis " + std::to_string(v) + " out of range for rank " + std::to_string(rank);
      return std::nullopt;
    }
    int axis = static_cast<int>(v < 0 ? v + rank : v);
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) {
      error = "duplicate axis " + std::to_string(v);
      return std::nullopt;
    }
    axes.push_back(axis);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

struct MatmulGeometry {
  Shape batch;             // broadcast batch dims of the output
  Shape a_batch, b_batch;  // operands' own batch dims
  int64_t m = 1, k = 1, n = 1;
  bool a_vector = false, b_vector = false;
  Shape out;
};

std::optional<MatmulGeometry> matmul_geometry(const Shape& a, const Shape& b, bool ta, bool tb, std::string& error) {
  if (a.empty() || b.empty()) {
    error = "matmul operands must have rank >= 1";
    return std::nullopt;
  }
  MatmulGeometry g;
  int64_t ka, kb;
  if (a.size() == 1) {
    g.a_vector = true;
    g.m = 1;
    ka = a[0];
  } else {
    const int64_t r = a[a.size() - 2], c = a[a.size() - 1];
    g.m = ta ? c : r;
    ka = ta ? r : c;
    g.a_batch.assign(a.begin(), a.end() - 2);
  }
  if (b.size() == 1) {
    g.b_vector = true;
    g.n = 1;
    kb = b[0];
  } else {
    const int64_t r = b[b.size() - 2], c = b[b.size() - 1];
    kb = tb ? c : r;
    g.n = tb ? r : c;
    g.b_batch.assign(b.begin(), b.end() - 2);
  }
  if (ka != kb) {
    error = "matmul inner dimensions differ: " + std::to_string(ka) + " vs " + std::to_string(kb);
    return std::nullopt;
  }
  g.k = ka;
  auto batch = broadcast_shapes(g.a_batch, g.b_batch);
  if (!batch) {
    error = "matmul batch dimensions do not broadcast";
    return std::nullopt;
  }
  g.batch = *batch;
  g.out = g.batch;
  if (!g.a_vector) g.out.push_back(g.m);
  if (!g.b_vector) g.out.push_back(g.n);
  return g;
}

Shape row_major_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= shape[i];
  }
  return s;
}

// Offset (in elements, row-major) in an operand with batch dims `own` of the output batch index.
int64_t batch_offset(const Shape& batch, const Shape& own, int64_t flat, int64_t matrix_size) {
  int64_t offset = 0, own_stride = matrix_size;
  Shape idx(batch.size());
  for (size_t i = batch.size(); i-- > 0;) {
    idx[i] = flat % std::max<int64_t>(batch[i], 1);
    flat /= std::max<int64_t>(batch[i], 1);
  }
  for (size_t j = own.size(); j-- > 0;) {
    const size_t i = j + (batch.size() - own.size());
    if (own[j] != 1) offset += idx[i] * own_stride;
    own_stride *= own[j];
  }
  return offset;
}

// Sums of |terms| are taken in long double over the finite terms only, so that terms of f64
// magnitude do not overflow; a sum beyond the f64 range becomes DBL_MAX. Infinite and NaN terms
// are left out: they decide the result (Inf or NaN, matched exactly) unless finite terms can
// overflow the accumulator too, in which case the order of accumulation decides which infinity
// (or NaN) comes out and the comparator leaves the element unconstrained.
double clamp_to_double(long double v) {
  if (std::isfinite(v) && v > static_cast<long double>(std::numeric_limits<double>::max()))
    return std::numeric_limits<double>::max();
  return static_cast<double>(v);
}

}  // namespace

std::vector<double> abs_term_sums(const std::string& op, const std::vector<Shape>& shapes,
                                  const std::vector<std::vector<double>>& inputs,
                                  const std::vector<Attr>& attrs, int64_t& accumulation_length) {
  accumulation_length = 1;
  std::vector<double> sums;
  std::string error;
  if (op == "dx.sum" || op == "dx.mean" || op == "dx.prod") {
    const bool product = op == "dx.prod";
    const Shape& in = shapes.at(0);
    auto axes = reduce_axes(in, attrs, error);
    if (!axes) return sums;
    Shape out_dims;  // output shape without keepdims (same row-major order)
    std::vector<bool> reduced(in.size(), false);
    for (int a : *axes) reduced[static_cast<size_t>(a)] = true;
    int64_t k = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      if (reduced[i]) k *= in[i];
      else out_dims.push_back(in[i]);
    }
    accumulation_length = k;
    // sum: sum|x|; mean: sum|x| / K (its terms are x / K); prod: |product| (the relative error
    // of K roundings scales the result itself).
    std::vector<long double> wide(static_cast<size_t>(numel(out_dims)), product ? 1.0L : 0.0L);
    const Shape out_strides = row_major_strides(out_dims);
    const int64_t total = numel(in);
    Shape idx(in.size(), 0);
    for (int64_t flat = 0; flat < total; ++flat) {
      int64_t rem = flat, o = 0;
      for (size_t i = in.size(); i-- > 0;) {
        idx[i] = rem % in[i];
        rem /= in[i];
      }
      for (size_t i = 0, j = 0; i < in.size(); ++i)
        if (!reduced[i]) o += idx[i] * out_strides[j++];
      const long double term = std::fabs(static_cast<long double>(inputs[0][static_cast<size_t>(flat)]));
      if (product) wide[static_cast<size_t>(o)] *= std::isfinite(term) ? term : 1.0L;
      else if (std::isfinite(term)) wide[static_cast<size_t>(o)] += term;
    }
    for (long double w : wide) {
      if (op == "dx.mean" && k > 0) w /= static_cast<long double>(k);
      sums.push_back(clamp_to_double(w));
    }
  } else if (op == "dx.matmul") {
    const bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
    auto g = matmul_geometry(shapes.at(0), shapes.at(1), ta, tb, error);
    if (!g) return sums;
    accumulation_length = g->k;
    const int64_t batches = numel(g->batch);
    sums.assign(static_cast<size_t>(batches * g->m * g->n), 0.0);
    const int64_t a_matrix = g->m * g->k, b_matrix = g->k * g->n;
    for (int64_t bt = 0; bt < batches; ++bt) {
      const int64_t a_off = g->a_vector ? 0 : batch_offset(g->batch, g->a_batch, bt, a_matrix);
      const int64_t b_off = g->b_vector ? 0 : batch_offset(g->batch, g->b_batch, bt, b_matrix);
      for (int64_t i = 0; i < g->m; ++i)
        for (int64_t j = 0; j < g->n; ++j) {
          long double s = 0;
          for (int64_t kk = 0; kk < g->k; ++kk) {
            // Stored layouts: A is [m,k] or, transposed, [k,m]; B is [k,n] or [n,k].
            const int64_t ai = g->a_vector ? kk : (ta ? kk * g->m + i : i * g->k + kk);
            const int64_t bi = g->b_vector ? kk : (tb ? j * g->k + kk : kk * g->n + j);
            const long double term = std::fabs(static_cast<long double>(inputs[0][static_cast<size_t>(a_off + ai)]) *
                                               static_cast<long double>(inputs[1][static_cast<size_t>(b_off + bi)]));
            if (std::isfinite(term)) s += term;
          }
          sums[static_cast<size_t>((bt * g->m + i) * g->n + j)] = clamp_to_double(s);
        }
    }
  }
  return sums;
}

namespace {

std::optional<std::vector<int64_t>> i64_list(const std::vector<Attr>& attrs, const char* name) {
  const Attr* a = find_attr(attrs, name);
  if (!a) return std::nullopt;
  if (a->value.kind == AttrValue::Kind::I64) return std::vector<int64_t>{a->value.i64};
  if (a->value.kind == AttrValue::Kind::I64Array) return a->value.i64s;
  return std::vector<int64_t>{};  // wrong kind: let the kernels refuse it
}

int64_t i64_attr(const std::vector<Attr>& attrs, const char* name, int64_t fallback) {
  const Attr* a = find_attr(attrs, name);
  return a && a->value.kind == AttrValue::Kind::I64 ? a->value.i64 : fallback;
}

// An axis attribute normalised against `rank`, or -1 when out of range.
int64_t norm_axis(int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  return a < 0 || a >= rank ? -1 : a;
}

struct Pair2 {
  int64_t h = 0, w = 0;
  bool ok = true;
};
Pair2 pair_attr(const std::vector<Attr>& attrs, const char* name, Pair2 fallback, int64_t min_value) {
  Pair2 p = fallback;
  if (auto v = i64_list(attrs, name)) {
    if (v->size() == 1) p = {(*v)[0], (*v)[0]};
    else if (v->size() == 2) p = {(*v)[0], (*v)[1]};
    else p.ok = false;
  }
  if (p.h < min_value || p.w < min_value) p.ok = false;
  return p;
}

int64_t out_extent(int64_t in, int64_t pad, int64_t dilation, int64_t kernel, int64_t stride) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? -1 : span / stride + 1;
}

}  // namespace

std::vector<int> mutated_inputs(const std::string& op, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs) {
  std::vector<int> m;
  if (op == "dx.batch_norm" && attr_bool(attrs, "training"))
    for (int i : {3, 4})
      if (static_cast<size_t>(i) < shapes.size() && !is_absent(shapes[static_cast<size_t>(i)])) m.push_back(i);
  return m;
}

int64_t index_limit(const std::string& op, int input, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs) {
  if (input != 1 || shapes.size() < 2 || is_absent(shapes[0])) return -1;
  const Shape& x = shapes[0];
  const int64_t rank = static_cast<int64_t>(x.size());
  if (op == "dx.embedding") return rank == 2 ? x[0] : -1;
  if (op == "dx.cross_entropy") return rank >= 1 ? x[static_cast<size_t>(rank - 1)] : -1;
  if (op == "dx.index_select" || op == "dx.gather" || op == "dx.scatter_add") {
    const int64_t axis = norm_axis(i64_attr(attrs, "axis", 0), rank);
    return axis < 0 ? -1 : x[static_cast<size_t>(axis)];
  }
  return -1;
}

int64_t accumulation_length(const std::string& op, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs) {
  int64_t k = 1;
  if (shapes.empty() || is_absent(shapes[0])) return k;
  const Shape& x = shapes[0];
  if (op == "dx.sum" || op == "dx.mean" || op == "dx.prod") {
    std::string error;
    if (auto axes = reduce_axes(x, attrs, error))
      for (int a : *axes) k *= x[static_cast<size_t>(a)];
  } else if (op == "dx.matmul" && shapes.size() >= 2) {
    std::string error;
    if (auto g = matmul_geometry(x, shapes[1], attr_bool(attrs, "transpose_a"), attr_bool(attrs, "transpose_b"), error))
      k = g->k;
  } else if (op == "dx.linear" && !x.empty()) {
    k = x.back() + 1;  // the bias is one more term
  } else if (op == "dx.conv2d" && shapes.size() >= 2 && shapes[1].size() == 4) {
    k = shapes[1][1] * shapes[1][2] * shapes[1][3] + 1;
  } else if (op == "dx.avg_pool2d") {
    const Pair2 kern = pair_attr(attrs, "kernel", {1, 1}, 1);
    k = kern.h * kern.w;
  } else if (op == "dx.scatter_add" && shapes.size() >= 2) {
    k = std::max<int64_t>(numel(shapes[1]), 0) + 1;
  }
  return std::max<int64_t>(k, 1);
}

OutputsResult output_specs(const std::string& op, const std::vector<Shape>& shapes, const Signature& sig,
                           const std::vector<Attr>& attrs, const std::vector<Shape>& outshapes) {
  OutputsResult r;
  const OpRule* rule = find_op_rule(op);
  if (!rule) {
    r.error = "no shape rule for " + op;
    return r;
  }
  const DType key = sig.inputs.empty() ? (sig.outputs.empty() ? DType::F32 : sig.outputs[0]) : sig.inputs[0];
  auto out = [&](std::vector<Shape> list) {
    for (size_t i = 0; i < list.size(); ++i)
      r.outputs.push_back(OutputSpec{list[i], i < sig.outputs.size() ? sig.outputs[i] : output_dtype(*rule, key)});
  };
  auto present = [&](size_t i) { return i < shapes.size() && !is_absent(shapes[i]); };
  const Shape none;
  const Shape& x = present(0) ? shapes[0] : none;
  const int64_t rank = static_cast<int64_t>(x.size());
  // An error with a shape (a max or argmax over an empty set) still reaches the kernel, which
  // must refuse it: those rules keep both.
  bool keep_outputs_on_error = false;

  // One case per rule of abi/ops.json "shape_rules"; a rule added there without a case here is
  // reported (and fails the unit test CertifyOpTable.EveryShapeRuleIsImplemented).
  switch (rule->shape) {
    case ShapeRule::kCreation:
      out({shapes.at(0)});
      break;
    case ShapeRule::kSame: {
      std::vector<Shape> list(static_cast<size_t>(std::max(rule->outputs, 1)), x);
      out(list);
      break;
    }
    case ShapeRule::kSoftmax: {
      const Attr* a = find_attr(attrs, "axis");
      const int64_t axis = a ? a->value.i64 : -1;
      if (rank == 0 ? (axis != 0 && axis != -1) : (axis < -rank || axis >= rank)) r.error = "softmax axis out of range";
      else out({x});
      break;
    }
    case ShapeRule::kBroadcast: {
      std::optional<Shape> b = x;
      for (size_t i = 1; b && i < shapes.size(); ++i) b = broadcast_shapes(*b, shapes[i]);
      if (b) out({*b});
      else if (shapes.size() == 2) r.error = "shapes " + format_shape(shapes[0]) + " and " + format_shape(shapes[1]) + " do not broadcast";
      else r.error = "the shapes of " + op + " do not broadcast";
      break;
    }
    case ShapeRule::kReduce: {
      auto axes = reduce_axes(x, attrs, r.error);
      if (!axes) break;
      const bool keep = attr_bool(attrs, "keepdims");
      Shape y;
      int64_t reduced = 1;
      for (int i = 0; i < static_cast<int>(x.size()); ++i) {
        if (std::find(axes->begin(), axes->end(), i) == axes->end()) y.push_back(x[static_cast<size_t>(i)]);
        else if (keep) y.push_back(1);
      }
      for (int a : *axes) reduced *= x[static_cast<size_t>(a)];
      out({y});
      // A reduction without an identity (max, min) over an empty set: still has a shape.
      if ((op == "dx.max" || op == "dx.min") && reduced == 0 && numel(y) > 0) {
        r.error = "max of an empty set";
        keep_outputs_on_error = true;
      }
      break;
    }
    case ShapeRule::kArgreduce: {
      const Attr* a = find_attr(attrs, "axis");
      const bool keep = attr_bool(attrs, "keepdims");
      Shape y;
      int64_t reduced = numel(x);
      keep_outputs_on_error = true;
      if (!a) {
        if (keep) y.assign(x.size(), 1);
      } else {
        const int64_t limit = rank == 0 ? 1 : rank;
        const int64_t axis = a->value.i64 < 0 ? a->value.i64 + limit : a->value.i64;
        if (a->value.kind != AttrValue::Kind::I64 || axis < 0 || axis >= limit) {
          out({Shape{}});  // reaches the kernel, which refuses it
          r.error = "axis out of range";
          break;
        }
        if (rank > 0) reduced = x[static_cast<size_t>(axis)];
        for (int64_t i = 0; i < rank; ++i) {
          if (i != axis) y.push_back(x[static_cast<size_t>(i)]);
          else if (keep) y.push_back(1);
        }
      }
      out({y});
      if (reduced == 0) r.error = "argmax/argmin of an empty set";  // still has a shape
      break;
    }
    case ShapeRule::kMatmul: {
      auto g = matmul_geometry(x, present(1) ? shapes[1] : none, attr_bool(attrs, "transpose_a"),
                               attr_bool(attrs, "transpose_b"), r.error);
      if (g) out({g->out});
      break;
    }
    case ShapeRule::kTranspose: {
      const int rk = static_cast<int>(x.size());
      std::vector<int64_t> perm;
      const Attr* a = find_attr(attrs, "perm");
      if (!a) {
        for (int i = rk - 1; i >= 0; --i) perm.push_back(i);
      } else if (a->value.kind == AttrValue::Kind::I64Array) {
        perm = a->value.i64s;
      }
      std::vector<bool> used(static_cast<size_t>(rk), false);
      bool ok = static_cast<int>(perm.size()) == rk;
      for (size_t i = 0; ok && i < perm.size(); ++i) {
        if (perm[i] < 0 || perm[i] >= rk || used[static_cast<size_t>(perm[i])]) ok = false;
        else used[static_cast<size_t>(perm[i])] = true;
      }
      if (!ok) {
        r.error = "invalid perm";
      } else {
        Shape y;
        for (auto p : perm) y.push_back(x[static_cast<size_t>(p)]);
        out({y});
      }
      break;
    }
    case ShapeRule::kLinear: {
      const Shape& w = present(1) ? shapes[1] : none;
      if (rank < 1 || w.size() != 2 || w[1] != x.back()) r.error = "linear: x (..., in) and W (out, in) disagree";
      else if (present(2) && (shapes[2].size() != 1 || shapes[2][0] != w[0])) r.error = "linear: bias must be (out,)";
      else {
        Shape y(x.begin(), x.end() - 1);
        y.push_back(w[0]);
        out({y});
      }
      break;
    }
    case ShapeRule::kNorm: {
      const int64_t axis = norm_axis(i64_attr(attrs, "axis", -1), rank);
      if (axis < 0) {
        r.error = "normalisation axis out of range";
        break;
      }
      const Shape inner(x.begin() + axis, x.end());
      for (size_t i = 1; i < shapes.size(); ++i)
        if (present(i) && shapes[i] != inner) r.error = "weight/bias must have the normalised shape";
      if (!r.error.empty()) break;
      // y, then the statistics (layer_norm's mean and rstd): x.shape[:axis] followed by 1s.
      Shape stats(x.begin(), x.begin() + axis);
      stats.resize(x.size(), 1);
      std::vector<Shape> list{x};
      list.resize(static_cast<size_t>(std::max(rule->outputs, 1)), stats);
      out(list);
      break;
    }
    case ShapeRule::kBatchNorm:
      if (rank < 2) {
        r.error = "batch_norm: x must be (N, C, ...)";
        break;
      }
      for (size_t i = 1; i < 5; ++i)
        if (present(i) && (shapes[i].size() != 1 || shapes[i][0] != x[1])) r.error = "per-channel tensors must be (C,)";
      if (!attr_bool(attrs, "training") && (!present(3) || !present(4))) r.error = "evaluation needs running stats";
      if (r.error.empty()) out({x});
      break;
    case ShapeRule::kEmbedding:
      if (rank != 2 || !present(1)) {
        r.error = "embedding: weight must be rank 2";
      } else {
        Shape y = shapes[1];
        y.push_back(x[1]);
        out({y});
      }
      break;
    case ShapeRule::kCrossEntropy: {
      const Shape& l = present(1) ? shapes[1] : none;
      const Attr* red = find_attr(attrs, "reduction");
      const std::string reduction = red && red->value.kind == AttrValue::Kind::String ? red->value.str : "mean";
      if (reduction != "mean" && reduction != "sum" && reduction != "none") r.error = "bad reduction";
      else if (rank == 2 && l.size() == 1 && l[0] == x[0]) out({reduction == "none" ? Shape{x[0]} : Shape{}});
      else if (rank == 1 && l.empty()) out({Shape{}});
      else r.error = "cross_entropy: logits (N, C) with labels (N,) or (C,) with ()";
      break;
    }
    case ShapeRule::kConv2d: {
      const Shape& w = present(1) ? shapes[1] : none;
      const Pair2 stride = pair_attr(attrs, "stride", {1, 1}, 1), pad = pair_attr(attrs, "padding", {0, 0}, 0),
                  dil = pair_attr(attrs, "dilation", {1, 1}, 1);
      const int64_t groups = i64_attr(attrs, "groups", 1);
      if (rank != 4 || w.size() != 4) r.error = "conv2d: x and w must be rank 4";
      else if (!stride.ok || !pad.ok || !dil.ok || groups < 1) r.error = "conv2d: bad attributes";
      else if (x[1] != w[1] * groups || w[0] % groups != 0) r.error = "conv2d: channels disagree with groups";
      else if (present(2) && (shapes[2].size() != 1 || shapes[2][0] != w[0])) r.error = "conv2d: bias must be (C_out,)";
      else {
        const int64_t ho = out_extent(x[2], pad.h, dil.h, w[2], stride.h), wo = out_extent(x[3], pad.w, dil.w, w[3], stride.w);
        if (ho < 0 || wo < 0) r.error = "conv2d: kernel larger than the padded input";
        else out({Shape{x[0], w[0], ho, wo}});
      }
      break;
    }
    case ShapeRule::kPool2d: {
      const Pair2 kern = pair_attr(attrs, "kernel", {1, 1}, 1);
      const Pair2 stride = pair_attr(attrs, "stride", kern, 1), pad = pair_attr(attrs, "padding", {0, 0}, 0);
      if (rank != 4) r.error = "pool: x must be rank 4";
      else if (!find_attr(attrs, "kernel") || !kern.ok || !stride.ok || !pad.ok) r.error = "pool: bad attributes";
      else if (2 * pad.h > kern.h || 2 * pad.w > kern.w) r.error = "pool: padding must be at most half the kernel";
      else {
        const int64_t ho = out_extent(x[2], pad.h, 1, kern.h, stride.h), wo = out_extent(x[3], pad.w, 1, kern.w, stride.w);
        if (ho < 0 || wo < 0) r.error = "pool: kernel larger than the padded input";
        else out({Shape{x[0], x[1], ho, wo}});
      }
      break;
    }
    case ShapeRule::kAttention: {
      const Shape& k = present(1) ? shapes[1] : none;
      const Shape& v = present(2) ? shapes[2] : none;
      const size_t rk = x.size();
      bool ok = rk >= 2 && k.size() == rk && v.size() == rk;
      for (size_t d = 0; ok && d + 2 < rk; ++d) ok = k[d] == x[d] && v[d] == x[d];
      if (ok) ok = k[rk - 1] == x[rk - 1] && v[rk - 2] == k[rk - 2];
      if (!ok) {
        r.error = "attention: q, k, v disagree";
        break;
      }
      Shape scores(x.begin(), x.end() - 2);
      scores.push_back(x[rk - 2]);
      scores.push_back(k[rk - 2]);
      if (present(3)) {
        auto b = broadcast_shapes(shapes[3], scores);
        if (shapes[3].size() > scores.size() || !b || *b != scores) r.error = "attention: mask does not broadcast";
      }
      if (r.error.empty()) {
        Shape y(x.begin(), x.end() - 2);
        y.push_back(x[rk - 2]);
        y.push_back(v[rk - 1]);
        out({y});
      }
      break;
    }
    case ShapeRule::kReshape:
      if (outshapes.empty()) r.error = "reshape needs outshapes=";
      else if (numel(outshapes[0]) != numel(x)) r.error = "reshape: sizes differ";
      else out({outshapes[0]});
      break;
    case ShapeRule::kBroadcastTo: {
      Shape target;
      const auto attr_shape = i64_list(attrs, "shape");
      if (!outshapes.empty()) target = outshapes[0];
      else if (attr_shape) target = *attr_shape;
      auto b = broadcast_shapes(x, target);
      if (!b || *b != target) r.error = "broadcast_to: does not broadcast";
      else if (attr_shape && *attr_shape != target) r.error = "broadcast_to: the shape attribute differs from the output";
      else out({target});
      break;
    }
    case ShapeRule::kConcat: {
      const int64_t axis = norm_axis(i64_attr(attrs, "axis", 0), rank);
      if (axis < 0) {
        r.error = "concat: axis out of range";
        break;
      }
      Shape y = x;
      y[static_cast<size_t>(axis)] = 0;
      for (const auto& s : shapes) {
        bool ok = s.size() == x.size() && !is_absent(s);
        for (size_t d = 0; ok && d < x.size(); ++d) ok = static_cast<int64_t>(d) == axis || s[d] == x[d];
        if (!ok) r.error = "concat: shapes disagree";
        else y[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
      }
      if (r.error.empty()) out({y});
      break;
    }
    case ShapeRule::kSplit: {
      const int64_t axis = norm_axis(i64_attr(attrs, "axis", 0), rank);
      const int64_t n = static_cast<int64_t>(sig.outputs.size());
      if (axis < 0 || n < 1) {
        r.error = "split: axis out of range";
        break;
      }
      const int64_t dim = x[static_cast<size_t>(axis)];
      std::vector<int64_t> sizes = i64_list(attrs, "sizes").value_or(std::vector<int64_t>{});
      if (sizes.empty()) {
        if (dim % n == 0) sizes.assign(static_cast<size_t>(n), dim / n);
        else r.error = "split: not divisible";
      }
      int64_t total = 0;
      for (auto v : sizes) total += v < 0 ? (r.error = "split: negative size", 0) : v;
      if (r.error.empty() && (static_cast<int64_t>(sizes.size()) != n || total != dim)) r.error = "split: sizes do not cover the axis";
      if (r.error.empty()) {
        std::vector<Shape> list;
        for (auto v : sizes) {
          Shape y = x;
          y[static_cast<size_t>(axis)] = v;
          list.push_back(y);
        }
        out(list);
      }
      break;
    }
    case ShapeRule::kSlice: {
      const auto starts = i64_list(attrs, "starts").value_or(std::vector<int64_t>{});
      const auto stops = i64_list(attrs, "stops").value_or(std::vector<int64_t>{});
      const auto steps = i64_list(attrs, "steps").value_or(std::vector<int64_t>{});
      const size_t rk = x.size();
      if (starts.size() > rk || stops.size() > rk || steps.size() > rk) {
        r.error = "slice: more bounds than axes";
        break;
      }
      Shape y;
      for (size_t k = 0; k < rk && r.error.empty(); ++k) {
        const int64_t n = x[k], step = k < steps.size() ? steps[k] : 1;
        if (step <= 0) r.error = "slice: steps must be positive";
        auto clamp_bound = [n](int64_t v) {
          if (v < 0) v += n;
          return v < 0 ? 0 : (v > n ? n : v);
        };
        const int64_t a = k < starts.size() ? clamp_bound(starts[k]) : 0, b = k < stops.size() ? clamp_bound(stops[k]) : n;
        y.push_back(b > a && step > 0 ? (b - a + step - 1) / step : 0);
      }
      if (r.error.empty()) out({y});
      break;
    }
    case ShapeRule::kIndexSelect: {
      const int64_t axis = norm_axis(i64_attr(attrs, "axis", 0), rank);
      if (axis < 0) r.error = "index_select: axis out of range";
      else if (!present(1) || shapes[1].size() != 1) r.error = "index_select: indices must be 1-D";
      else {
        Shape y = x;
        y[static_cast<size_t>(axis)] = shapes[1][0];
        out({y});
      }
      break;
    }
    case ShapeRule::kGather:
    case ShapeRule::kScatterAdd: {
      const bool scatter = rule->shape == ShapeRule::kScatterAdd;
      const int64_t axis = norm_axis(i64_attr(attrs, "axis", 0), rank);
      const Shape& idx = present(1) ? shapes[1] : none;
      bool ok = axis >= 0 && idx.size() == x.size();
      for (size_t d = 0; ok && d < x.size(); ++d) ok = static_cast<int64_t>(d) == axis || idx[d] <= x[d];
      if (ok && scatter) {
        ok = present(2) && shapes[2].size() == idx.size();
        for (size_t d = 0; ok && d < idx.size(); ++d) ok = idx[d] <= shapes[2][d];
      }
      if (!ok) r.error = op + ": shapes disagree";
      else out({scatter ? x : idx});
      break;
    }
    case ShapeRule::kPad: {
      const auto pads = i64_list(attrs, "pads").value_or(std::vector<int64_t>{});
      if (pads.size() != 2 * x.size()) {
        r.error = "pad: pads needs 2 entries per axis";
        break;
      }
      Shape y;
      for (size_t k = 0; k < x.size(); ++k) {
        if (pads[2 * k] < 0 || pads[2 * k + 1] < 0) r.error = "pad: negative";
        y.push_back(x[k] + pads[2 * k] + pads[2 * k + 1]);
      }
      if (r.error.empty()) out({y});
      break;
    }
    case ShapeRule::kTile: {
      std::vector<int64_t> reps = i64_list(attrs, "repeats").value_or(std::vector<int64_t>{});
      for (auto v : reps)
        if (v < 0) r.error = "tile: negative repeats";
      if (!r.error.empty()) break;
      const size_t rk = std::max(reps.size(), x.size());
      reps.insert(reps.begin(), rk - reps.size(), 1);
      Shape xs = x;
      xs.insert(xs.begin(), rk - x.size(), 1);
      Shape y;
      for (size_t k = 0; k < rk; ++k) y.push_back(xs[k] * reps[k]);
      out({y});
      break;
    }
    default:
      r.error = std::string("the shape rule '") + shape_rule_name(rule->shape) + "' of " + op +
                " has no implementation in the suite";
      return r;
  }
  if (!r.error.empty() && !keep_outputs_on_error) r.outputs.clear();
  return r;
}

ShapeResult output_spec(const std::string& op, const std::vector<Shape>& shapes, DType dtype,
                        const std::vector<Attr>& attrs) {
  ShapeResult r;
  OutputsResult all = output_specs(op, shapes, default_signature(op, dtype), attrs);
  r.error = all.error;
  if (!all.outputs.empty()) r.output = all.outputs[0];
  return r;
}

}  // namespace deepx::conformance
