#include "shape_rules.hpp"

#include <algorithm>
#include <cmath>
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
  }
  return "?";
}

const std::vector<OpRule>& op_rules() {
  static const std::vector<OpRule> rules = {
      {"dx.add", 2, OpClass::BasicArith},         {"dx.sub", 2, OpClass::BasicArith},
      {"dx.mul", 2, OpClass::BasicArith},         {"dx.div", 2, OpClass::BasicArith},
      {"dx.neg", 1, OpClass::ExactArith},         {"dx.relu", 1, OpClass::ExactArith},
      {"dx.exp", 1, OpClass::Transcendental},     {"dx.sum", 1, OpClass::Accumulating},
      {"dx.max", 1, OpClass::ExactArith},         {"dx.matmul", 2, OpClass::Accumulating},
      {"dx.softmax", 1, OpClass::Normalising},    {"dx.transpose", 1, OpClass::Movement},
      {"dx.copy", 1, OpClass::Movement},          {"dx.fill", 0, OpClass::Movement},
      // Exact elementwise results (an input, its magnitude, an integer value, a bool).
      {"dx.abs", 1, OpClass::ExactArith},         {"dx.sign", 1, OpClass::ExactArith},
      {"dx.floor", 1, OpClass::ExactArith},       {"dx.ceil", 1, OpClass::ExactArith},
      {"dx.round", 1, OpClass::ExactArith},       {"dx.clamp", 1, OpClass::ExactArith},
      {"dx.maximum", 2, OpClass::ExactArith},     {"dx.minimum", 2, OpClass::ExactArith},
      {"dx.eq", 2, OpClass::ExactArith},          {"dx.ne", 2, OpClass::ExactArith},
      {"dx.lt", 2, OpClass::ExactArith},          {"dx.le", 2, OpClass::ExactArith},
      {"dx.gt", 2, OpClass::ExactArith},          {"dx.ge", 2, OpClass::ExactArith},
      {"dx.logical_and", 2, OpClass::ExactArith}, {"dx.logical_or", 2, OpClass::ExactArith},
      {"dx.logical_xor", 2, OpClass::ExactArith}, {"dx.logical_not", 1, OpClass::ExactArith},
      {"dx.bitwise_not", 1, OpClass::ExactArith}, {"dx.where", 3, OpClass::Movement},
      {"dx.cast", 1, OpClass::Movement},
      // One IEEE operation per element: correctly rounded.
      {"dx.reciprocal", 1, OpClass::BasicArith},  {"dx.sqrt", 1, OpClass::BasicArith},
      // libm functions: the f64 reference rounded once.
      {"dx.rsqrt", 1, OpClass::Transcendental},   {"dx.expm1", 1, OpClass::Transcendental},
      {"dx.log", 1, OpClass::Transcendental},     {"dx.log1p", 1, OpClass::Transcendental},
      {"dx.sin", 1, OpClass::Transcendental},     {"dx.cos", 1, OpClass::Transcendental},
      {"dx.tan", 1, OpClass::Transcendental},     {"dx.tanh", 1, OpClass::Transcendental},
      {"dx.erf", 1, OpClass::Transcendental},     {"dx.sigmoid", 1, OpClass::Transcendental},
      {"dx.silu", 1, OpClass::Transcendental},    {"dx.gelu", 1, OpClass::Transcendental},
      {"dx.pow", 2, OpClass::Transcendental},
      // Reductions.
      {"dx.min", 1, OpClass::ExactArith},         {"dx.argmax", 1, OpClass::ExactArith},
      {"dx.argmin", 1, OpClass::ExactArith},      {"dx.mean", 1, OpClass::Accumulating},
      {"dx.prod", 1, OpClass::Accumulating},
  };
  return rules;
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
bool is_comparison(const std::string& op) {
  return op == "dx.eq" || op == "dx.ne" || op == "dx.lt" || op == "dx.le" || op == "dx.gt" || op == "dx.ge";
}
bool is_reduction(const std::string& op) {
  return op == "dx.sum" || op == "dx.max" || op == "dx.min" || op == "dx.mean" || op == "dx.prod";
}
bool is_arg_reduction(const std::string& op) { return op == "dx.argmax" || op == "dx.argmin"; }

// The output dtype of `op` for inputs keyed by `dtype`.
DType output_dtype(const std::string& op, DType dtype) {
  const bool integral = is_integer(dtype) || dtype == DType::Bool;
  if (is_comparison(op)) return DType::Bool;
  if (is_arg_reduction(op)) return DType::I64;
  if ((op == "dx.sum" || op == "dx.prod") && integral) return DType::I64;
  if (op == "dx.mean" && integral) return DType::F64;
  if (op == "dx.matmul" && dtype == DType::I8) return DType::I32;
  if (op == "dx.cast") return cast_target(dtype);
  return dtype;
}
}  // namespace

std::vector<DType> expected_signature(const std::string& op, DType dtype) {
  const OpRule* rule = find_op_rule(op);
  if (!rule) return {};
  std::vector<DType> sig(static_cast<size_t>(rule->inputs), dtype);
  sig.push_back(output_dtype(op, dtype));
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

ShapeResult output_spec(const std::string& op, const std::vector<Shape>& shapes, DType dtype,
                        const std::vector<Attr>& attrs) {
  ShapeResult r;
  const OpRule* rule = find_op_rule(op);
  if (!rule) {
    r.error = "no shape rule for " + op;
    return r;
  }
  if (op == "dx.fill") {
    r.output = OutputSpec{shapes.at(0), dtype};
  } else if (rule->inputs == 2 && op != "dx.matmul") {
    auto b = broadcast_shapes(shapes.at(0), shapes.at(1));
    if (!b) r.error = "shapes " + format_shape(shapes[0]) + " and " + format_shape(shapes[1]) + " do not broadcast";
    else r.output = OutputSpec{*b, output_dtype(op, dtype)};
  } else if (op == "dx.where") {
    auto ab = broadcast_shapes(shapes.at(0), shapes.at(1));
    auto abc = ab ? broadcast_shapes(*ab, shapes.at(2)) : std::nullopt;
    if (!abc) r.error = "the shapes of dx.where do not broadcast";
    else r.output = OutputSpec{*abc, dtype};
  } else if (is_arg_reduction(op)) {
    const Shape& in = shapes.at(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    const Attr* a = find_attr(attrs, "axis");
    const bool keep = attr_bool(attrs, "keepdims");
    Shape out;
    int64_t reduced = numel(in);
    if (!a) {
      if (keep) out.assign(in.size(), 1);
    } else {
      const int64_t limit = rank == 0 ? 1 : rank;
      const int64_t axis = a->value.i64 < 0 ? a->value.i64 + limit : a->value.i64;
      if (a->value.kind != AttrValue::Kind::I64 || axis < 0 || axis >= limit) {
        r.output = OutputSpec{Shape{}, DType::I64};  // reaches the kernel, which refuses it
        r.error = "axis out of range";
        return r;
      }
      if (rank > 0) reduced = in[static_cast<size_t>(axis)];
      for (int64_t i = 0; i < rank; ++i) {
        if (i != axis) out.push_back(in[static_cast<size_t>(i)]);
        else if (keep) out.push_back(1);
      }
    }
    r.output = OutputSpec{out, DType::I64};
    if (reduced == 0) r.error = "argmax/argmin of an empty set";  // still has a shape
  } else if (is_reduction(op)) {
    auto axes = reduce_axes(shapes.at(0), attrs, r.error);
    if (axes) {
      const bool keep = attr_bool(attrs, "keepdims");
      Shape out;
      for (int i = 0; i < static_cast<int>(shapes[0].size()); ++i) {
        bool reduced = std::find(axes->begin(), axes->end(), i) != axes->end();
        if (!reduced) out.push_back(shapes[0][i]);
        else if (keep) out.push_back(1);
      }
      r.output = OutputSpec{out, output_dtype(op, dtype)};
      if (op == "dx.max" || op == "dx.min") {
        int64_t reduced = 1;
        for (int a : *axes) reduced *= shapes[0][a];
        if (reduced == 0 && numel(out) > 0) r.error = "max of an empty set";  // still has a shape
      }
    }
  } else if (op == "dx.matmul") {
    auto g = matmul_geometry(shapes.at(0), shapes.at(1), attr_bool(attrs, "transpose_a"),
                             attr_bool(attrs, "transpose_b"), r.error);
    if (g) r.output = OutputSpec{g->out, dtype == DType::I8 ? DType::I32 : dtype};
  } else if (op == "dx.transpose") {
    const Shape& in = shapes.at(0);
    const int rank = static_cast<int>(in.size());
    std::vector<int64_t> perm;
    const Attr* a = find_attr(attrs, "perm");
    if (!a) {
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    } else if (a->value.kind == AttrValue::Kind::I64Array) {
      perm = a->value.i64s;
    }
    std::vector<bool> used(static_cast<size_t>(rank), false);
    bool ok = static_cast<int>(perm.size()) == rank;
    for (size_t i = 0; ok && i < perm.size(); ++i) {
      if (perm[i] < 0 || perm[i] >= rank || used[static_cast<size_t>(perm[i])]) ok = false;
      else used[static_cast<size_t>(perm[i])] = true;
    }
    if (!ok) {
      r.error = "invalid perm";
    } else {
      Shape out;
      for (auto p : perm) out.push_back(in[static_cast<size_t>(p)]);
      r.output = OutputSpec{out, dtype};
    }
  } else {  // same-shape unary ops: neg, relu, exp, copy, softmax
    if (op == "dx.softmax") {
      const Attr* a = find_attr(attrs, "axis");
      const int64_t rank = static_cast<int64_t>(shapes.at(0).size());
      const int64_t axis = a ? a->value.i64 : -1;
      if (rank == 0 ? (axis != 0 && axis != -1) : (axis < -rank || axis >= rank))
        r.error = "softmax axis out of range";
    }
    r.output = OutputSpec{shapes.at(0), output_dtype(op, dtype)};
  }
  return r;
}

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

}  // namespace deepx::conformance
