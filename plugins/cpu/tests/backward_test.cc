// Differential tests of the CPU plugin's backward kernels against the reference plugin's
// (reference-kernels/src/*.cc `*_backward`): every op with a gradient in the CPU plugin, every F
// dtype, broadcasting both ways, rank 0, empty tensors, size-1 dims, unwanted gradients (null
// outputs), the special points where the reference defines a value (ties of max/min/maximum,
// zeros in prod, x at clamp bounds, relu at 0, NaN and Inf), strided / offset views and
// in-place (aliased) gradients.
#include <functional>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

struct Tol {
  double rtol, atol;
};
Tol tolerance(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: return {1e-12, 1e-12};
    case DX_DTYPE_F32: return {1e-5, 1e-6};
    case DX_DTYPE_F16: return {1e-2, 1e-3};
    default: return {2e-2, 1e-2};
  }
}
/// Matmul accumulates in f32 (sgemm) on the cpu and in f64 in the reference.
Tol matmul_tolerance(dx_dtype_t d) {
  return d == DX_DTYPE_F32 ? Tol{1e-4, 1e-4} : tolerance(d);
}

std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const int64_t y = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    out[d] = x == 1 ? y : x;
  }
  return out;
}

using AttrsFn = std::function<Attrs()>;
Attrs no_attrs() { return Attrs(); }

/// Runs the backward of `op` on both plugins and compares every gradient.
void compare(Differential& diff, const char* op, std::vector<In> inputs, std::vector<Out> grads,
           const AttrsFn& attrs, Tol tol, const std::string& what) {
  const Attrs a = attrs();
  expect_close(diff.run(op, inputs, grads, a, /*backward=*/true), tol.rtol, tol.atol, what);
}

/// Unary op: (dy, x, y) -> dx, with dx wanted and not wanted.
void unary_case(Differential& diff, const char* op, dx_dtype_t t, const std::vector<int64_t>& shape,
                In x, const AttrsFn& attrs = no_attrs, uint64_t seed = 3) {
  const std::string what = std::string(op) + " " + dtype_name(t) + " " + shape_name(shape);
  const In dy = In::random(t, shape, -2, 2, seed);
  const In y = In::random(t, shape, -1, 1, seed + 1);
  compare(diff, op, {dy, x, y}, {Out(t, shape)}, attrs, tolerance(t), what);
  compare(diff, op, {dy, x, y}, {Out::absent()}, attrs, tolerance(t), what + " (not wanted)");
}

const std::vector<std::vector<int64_t>> kUnaryShapes = {{}, {0}, {1}, {7}, {3, 1, 5}, {2, 0, 3}, {4, 33, 17}};

TEST(Backward, UnaryOps) {
  Differential diff;
  struct Case {
    const char* op;
    double lo, hi;
  };
  const Case cases[] = {
      {"dx.neg", -3, 3},        {"dx.abs", -3, 3},       {"dx.sign", -3, 3},
      {"dx.exp", -4, 4},        {"dx.expm1", -4, 4},     {"dx.relu", -3, 3},
      {"dx.reciprocal", 0.2, 3}, {"dx.sqrt", 0.1, 5},     {"dx.rsqrt", 0.1, 5},
      {"dx.log", 0.1, 5},       {"dx.log1p", -0.9, 5},   {"dx.sin", -5, 5},
      {"dx.cos", -5, 5},        {"dx.tan", -1.4, 1.4},   {"dx.tanh", -4, 4},
      {"dx.erf", -3, 3},        {"dx.sigmoid", -6, 6},   {"dx.silu", -6, 6},
      {"dx.gelu", -4, 4},
  };
  for (const Case& c : cases) {
    for (dx_dtype_t t : kFloatDtypes) {
      for (const auto& shape : kUnaryShapes) {
        unary_case(diff, c.op, t, shape, In::random(t, shape, c.lo, c.hi, 5));
      }
    }
  }
}

TEST(Backward, GeluBothApproximations) {
  Differential diff;
  for (dx_dtype_t t : kFloatDtypes) {
    for (const char* mode : {"none", "tanh"}) {
      unary_case(diff, "dx.gelu", t, {5, 40}, In::random(t, {5, 40}, -5, 5, 7),
                 [mode] { return Attrs().str("approximate", mode); });
    }
  }
  // An unknown mode is refused by both.
  const Attrs bad = Attrs().str("approximate", "cubic");
  expect_same_error(diff.run("dx.gelu", {In::random(DX_DTYPE_F32, {3}), In::random(DX_DTYPE_F32, {3}),
                                         In::random(DX_DTYPE_F32, {3})},
                             {Out(DX_DTYPE_F32, {3})}, bad, true),
                    "gelu approximate=cubic");
}

TEST(Backward, UnarySpecialValues) {
  Differential diff;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {0.0, -0.0, 1.0, -1.0, inf, -inf, nan, 1e-30, 3.0, -3.0, 0.5, 2.0};
  const std::vector<int64_t> shape = {static_cast<int64_t>(x.size())};
  for (dx_dtype_t t : kFloatDtypes) {
    for (const char* op : {"dx.neg", "dx.abs", "dx.sign", "dx.relu", "dx.exp", "dx.sqrt", "dx.log",
                           "dx.reciprocal", "dx.tanh", "dx.sigmoid", "dx.silu", "dx.erf", "dx.gelu"}) {
      unary_case(diff, op, t, shape, In::of(t, shape, x));
    }
    // Non-finite output gradients.
    const In dy = In::of(t, shape, {inf, -inf, nan, 1, 1, 1, 1, 1, inf, 0, -0.0, 2});
    const In xs = In::of(t, shape, x);
    for (const char* op : {"dx.relu", "dx.abs", "dx.mul"}) {
      if (std::string(op) == "dx.mul") {
        compare(diff, op, {dy, xs, xs, xs}, {Out(t, shape), Out(t, shape)}, no_attrs, tolerance(t),
              std::string(op) + " " + dtype_name(t) + " non-finite dy");
      } else {
        compare(diff, op, {dy, xs, xs}, {Out(t, shape)}, no_attrs, tolerance(t),
              std::string(op) + " " + dtype_name(t) + " non-finite dy");
      }
    }
  }
}

TEST(Backward, Clamp) {
  Differential diff;
  // x exactly at the bounds (the gradient passes), inside, outside, NaN.
  const std::vector<double> x = {-1.0, 1.0, 0.0, -2.0, 2.0, 0.5, std::numeric_limits<double>::quiet_NaN(), -0.75};
  const std::vector<int64_t> shape = {static_cast<int64_t>(x.size())};
  for (dx_dtype_t t : kFloatDtypes) {
    unary_case(diff, "dx.clamp", t, shape, In::of(t, shape, x),
               [] { return Attrs().f64("min", -1.0).f64("max", 1.0); });
    unary_case(diff, "dx.clamp", t, shape, In::of(t, shape, x), [] { return Attrs().f64("min", -1.0); });
    unary_case(diff, "dx.clamp", t, shape, In::of(t, shape, x), [] { return Attrs().f64("max", 1.0); });
    unary_case(diff, "dx.clamp", t, shape, In::of(t, shape, x), no_attrs);
    unary_case(diff, "dx.clamp", t, {6, 50}, In::random(t, {6, 50}, -2, 2, 9),
               [] { return Attrs().f64("min", 0.5).f64("max", -0.5); });  // min > max
    unary_case(diff, "dx.clamp", t, {}, In::of(t, {}, {1.0}), [] { return Attrs().i64("min", 1); });
  }
}

/// Binary op: (dy, a, b, y) -> (da, db) with every subset of the gradients wanted.
void binary_case(Differential& diff, const char* op, dx_dtype_t t, const std::vector<int64_t>& sa,
                 const std::vector<int64_t>& sb, const In& a, const In& b, uint64_t seed = 11) {
  const std::vector<int64_t> so = broadcast(sa, sb);
  const std::string what = std::string(op) + " " + dtype_name(t) + " " + shape_name(sa) + " x " + shape_name(sb);
  const In dy = In::random(t, so, -2, 2, seed);
  const In y = In::random(t, so, -1, 1, seed + 1);
  Tol tol = tolerance(t);
  compare(diff, op, {dy, a, b, y}, {Out(t, sa), Out(t, sb)}, no_attrs, tol, what + " (both)");
  compare(diff, op, {dy, a, b, y}, {Out(t, sa), Out::absent()}, no_attrs, tol, what + " (a only)");
  compare(diff, op, {dy, a, b, y}, {Out::absent(), Out(t, sb)}, no_attrs, tol, what + " (b only)");
  compare(diff, op, {dy, a, b, y}, {Out::absent(), Out::absent()}, no_attrs, tol, what + " (none)");
}

const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> kBinaryShapes = {
    {{}, {}},           {{5}, {5}},           {{3, 4}, {3, 4}},      {{3, 4}, {4}},
    {{4}, {3, 4}},      {{3, 1}, {1, 4}},     {{2, 1, 4}, {3, 1}},   {{}, {2, 3}},
    {{2, 3}, {}},       {{0, 3}, {3}},        {{1}, {0}},            {{5, 1}, {1, 1, 6}},
    {{1, 1}, {1, 1}},   {{64, 300}, {300}},   {{300, 1}, {300, 64}}, {{2, 1, 70, 1}, {1, 9, 1, 40}},
};

TEST(Backward, BinaryOps) {
  Differential diff;
  for (const char* op : {"dx.add", "dx.sub", "dx.mul", "dx.div", "dx.maximum", "dx.minimum"}) {
    for (dx_dtype_t t : kFloatDtypes) {
      for (const auto& [sa, sb] : kBinaryShapes) {
        const bool div = std::string(op) == "dx.div";
        binary_case(diff, op, t, sa, sb, In::random(t, sa, -3, 3, 21),
                    div ? In::random(t, sb, 0.5, 3, 22) : In::random(t, sb, -3, 3, 22));
      }
    }
  }
}

TEST(Backward, Pow) {
  Differential diff;
  for (dx_dtype_t t : kFloatDtypes) {
    for (const auto& [sa, sb] : kBinaryShapes) {
      binary_case(diff, "dx.pow", t, sa, sb, In::random(t, sa, 0.2, 3, 31), In::random(t, sb, -2, 2, 32));
    }
    // Zeros in the base and the exponent (PyTorch's conventions), negative bases with integer
    // exponents.
    const std::vector<int64_t> s = {8};
    binary_case(diff, "dx.pow", t, s, s, In::of(t, s, {0, 0, 0, 2, -2, -1.5, 0, 3}),
                In::of(t, s, {0, 2, -1, 0, 3, 2, 0.5, 1}));
  }
}

TEST(Backward, MaximumMinimumTies) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<int64_t> s = {8};
  for (dx_dtype_t t : kFloatDtypes) {
    for (const char* op : {"dx.maximum", "dx.minimum"}) {
      binary_case(diff, op, t, s, s, In::of(t, s, {1, 2, 3, 3, nan, 1, nan, -0.0}),
                  In::of(t, s, {1, 1, 4, 3, 2, nan, nan, 0.0}));
      // Ties under broadcasting: a small integer set makes many.
      In a = In::random(t, {6, 10}, -2, 2, 41), b = In::random(t, {10}, -2, 2, 42);
      for (double& v : a.values) v = std::floor(v);
      for (double& v : b.values) v = std::floor(v);
      binary_case(diff, op, t, {6, 10}, {10}, a, b);
    }
  }
}

TEST(Backward, Where) {
  Differential diff;
  const std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5}, {5}, {5}}, {{3, 4}, {4}, {3, 1}}, {{}, {2, 3}, {}}, {{2, 1, 3}, {4, 1}, {3}}, {{0, 2}, {2}, {1}},
      {{50, 40}, {50, 40}, {40}}};
  for (dx_dtype_t t : kFloatDtypes) {
    for (const auto& [sc, sa, sb] : shapes) {
      const std::vector<int64_t> so = broadcast(broadcast(sc, sa), sb);
      const std::string what = "where " + dtype_name(t) + " " + shape_name(sc) + shape_name(sa) + shape_name(sb);
      const In c = In::random(DX_DTYPE_BOOL, sc, 0, 2, 51);
      const In a = In::random(t, sa, -2, 2, 52), b = In::random(t, sb, -2, 2, 53);
      const In dy = In::random(t, so, -2, 2, 54), y = In::random(t, so, -2, 2, 55);
      compare(diff, "dx.where", {dy, c, a, b, y}, {Out(DX_DTYPE_BOOL, sc), Out(t, sa), Out(t, sb)}, no_attrs,
            tolerance(t), what);
      compare(diff, "dx.where", {dy, c, a, b, y}, {Out::absent(), Out(t, sa), Out::absent()}, no_attrs,
            tolerance(t), what + " (a only)");
      compare(diff, "dx.where", {dy, c, a, b, y}, {Out::absent(), Out::absent(), Out(t, sb)}, no_attrs,
            tolerance(t), what + " (b only)");
    }
  }
}

TEST(Backward, CastCopyTranspose) {
  Differential diff;
  for (dx_dtype_t from : kFloatDtypes) {
    for (dx_dtype_t to : kFloatDtypes) {
      for (const auto& shape : kUnaryShapes) {
        const std::string what = "cast " + dtype_name(from) + "->" + dtype_name(to) + " " + shape_name(shape);
        const In dy = In::random(to, shape, -300, 300, 61), x = In::random(from, shape, -2, 2, 62);
        const Tol tol = tolerance(from).rtol > tolerance(to).rtol ? tolerance(from) : tolerance(to);
        compare(diff, "dx.cast", {dy, x, In::random(to, shape, -1, 1, 63)}, {Out(from, shape)}, no_attrs, tol, what);
      }
    }
    for (const auto& shape : kUnaryShapes) {
      unary_case(diff, "dx.copy", from, shape, In::random(from, shape, -2, 2, 64));
    }
    struct TransposeCase {
      std::vector<int64_t> shape;
      std::vector<int64_t> perm;  // empty: unset (reversed)
    };
    const TransposeCase cases[] = {{{}, {}}, {{4}, {}}, {{3, 5}, {}}, {{2, 3, 4}, {2, 0, 1}},
                                   {{2, 3, 4}, {-1, 1, 0}}, {{0, 3}, {1, 0}}, {{40, 1, 70}, {2, 1, 0}}};
    for (const TransposeCase& c : cases) {
      std::vector<int64_t> out_shape(c.shape.rbegin(), c.shape.rend());
      if (!c.perm.empty()) {
        for (size_t d = 0; d < c.perm.size(); ++d) {
          int64_t p = c.perm[d] < 0 ? c.perm[d] + static_cast<int64_t>(c.shape.size()) : c.perm[d];
          out_shape[d] = c.shape[p];
        }
      }
      const AttrsFn attrs = [&c] { return c.perm.empty() ? Attrs() : Attrs().i64s("perm", c.perm); };
      const std::string what = "transpose " + dtype_name(from) + " " + shape_name(c.shape);
      compare(diff, "dx.transpose",
            {In::random(from, out_shape, -2, 2, 65), In::random(from, c.shape, -2, 2, 66),
             In::random(from, out_shape, -2, 2, 67)},
            {Out(from, c.shape)}, attrs, tolerance(from), what);
    }
    expect_same_error(diff.run("dx.transpose", {In::random(from, {2, 3}), In::random(from, {2, 3}), In::random(from, {2, 3})},
                               {Out(from, {2, 3})}, Attrs().i64s("perm", {0, 0}), true),
                      "transpose bad perm");
  }
}

TEST(Backward, ExactClassGradientsAreTheReferencesBits) {
  // The conformance suite certifies these gradients bit-exact: the broadcast sums must add the
  // contributions in the reference's order.
  Differential diff;
  const Attrs none;
  for (dx_dtype_t t : kFloatDtypes) {
    for (const char* op : {"dx.maximum", "dx.minimum"}) {
      for (const auto& [sa, sb] : kBinaryShapes) {
        const std::vector<int64_t> so = broadcast(sa, sb);
        const In dy = In::random(t, so, -30, 30, 131), y = In::random(t, so, -2, 2, 132);
        expect_equal(diff.run(op, {dy, In::random(t, sa, -3, 3, 133), In::random(t, sb, -3, 3, 134), y},
                              {Out(t, sa), Out(t, sb)}, none, true),
                     std::string(op) + " " + dtype_name(t) + " " + shape_name(sa) + " x " + shape_name(sb));
      }
    }
    const In dy = In::random(t, {50, 40}, -30, 30, 135);
    expect_equal(diff.run("dx.where", {dy, In::random(DX_DTYPE_BOOL, {1, 40}, 0, 2, 136), In::random(t, {40}),
                                       In::random(t, {50, 1}), dy},
                          {Out(DX_DTYPE_BOOL, {1, 40}), Out(t, {40}), Out(t, {50, 1})}, none, true),
                 "where " + dtype_name(t));
    const In x = In::random(t, {50, 40}, -3, 3, 137);
    for (const char* op : {"dx.relu", "dx.copy", "dx.abs", "dx.neg"}) {
      expect_equal(diff.run(op, {dy, x, x}, {Out(t, {50, 40})}, none, true), std::string(op) + " " + dtype_name(t));
    }
    for (const char* op : {"dx.max", "dx.min", "dx.sum"}) {
      const Attrs axes = Attrs().i64s("axes", {0});
      expect_equal(diff.run(op, {In::random(t, {40}, -3, 3, 138), x, In::random(t, {40}, -3, 3, 139)},
                            {Out(t, {50, 40})}, axes, true),
                   std::string(op) + " " + dtype_name(t));
    }
    expect_equal(diff.run("dx.transpose", {In::random(t, {40, 50}, -3, 3, 140), x, In::random(t, {40, 50})},
                          {Out(t, {50, 40})}, none, true),
                 "transpose " + dtype_name(t));
  }
}

// ---- reductions ---------------------------------------------------------------------------------

std::vector<int64_t> reduced_shape(const std::vector<int64_t>& shape, const std::vector<int64_t>& axes,
                                   bool keepdims) {
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + static_cast<int64_t>(shape.size()) : a] = true;
  std::vector<int64_t> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) out.push_back(shape[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

void reduction_case(Differential& diff, const char* op, dx_dtype_t t, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& axes, bool keepdims, const In& x) {
  const std::vector<int64_t> so = reduced_shape(shape, axes, keepdims);
  const std::string what = std::string(op) + " " + dtype_name(t) + " " + shape_name(shape) + " axes " +
                           shape_name(axes) + (keepdims ? " keepdims" : "");
  const AttrsFn attrs = [&axes, keepdims] {
    Attrs a = Attrs().boolean("keepdims", keepdims);
    return axes.empty() ? std::move(a) : std::move(a).i64s("axes", axes);
  };
  const In dy = In::random(t, so, -2, 2, 71), y = In::random(t, so, -2, 2, 72);
  compare(diff, op, {dy, x, y}, {Out(t, shape)}, attrs, tolerance(t), what);
  compare(diff, op, {dy, x, y}, {Out::absent()}, attrs, tolerance(t), what + " (not wanted)");
}

struct ReductionShape {
  std::vector<int64_t> shape, axes;
};
const ReductionShape kReductionShapes[] = {
    {{}, {}},          {{7}, {}},          {{7}, {0}},           {{3, 4}, {1}},        {{3, 4}, {0}},
    {{3, 4}, {-1, 0}}, {{2, 3, 4}, {1}},   {{2, 3, 4}, {0, 2}},  {{2, 1, 4}, {1}},     {{0, 3}, {1}},
    {{3, 0}, {1}},     {{4, 1}, {}},       {{64, 300}, {0}},     {{300, 64}, {1}},     {{5, 6, 7, 8}, {1, 3}},
};

TEST(Backward, Reductions) {
  Differential diff;
  for (const char* op : {"dx.sum", "dx.mean", "dx.prod", "dx.max", "dx.min"}) {
    const bool extreme = std::string(op) == "dx.max" || std::string(op) == "dx.min";
    for (dx_dtype_t t : kFloatDtypes) {
      for (const ReductionShape& r : kReductionShapes) {
        int64_t group = 1;
        const auto so = reduced_shape(r.shape, r.axes, false);
        int64_t n = 1, m = 1;
        for (int64_t d : r.shape) n *= d;
        for (int64_t d : so) m *= d;
        group = m > 0 ? n / m : 0;
        if (extreme && group == 0) continue;  // max/min of an empty set: no forward, no gradient
        // Products of long groups stay finite with values near 1.
        const In x = std::string(op) == "dx.prod" ? In::random(t, r.shape, 0.7, 1.3, 73)
                                                  : In::random(t, r.shape, -3, 3, 73);
        for (bool keepdims : {false, true}) reduction_case(diff, op, t, r.shape, r.axes, keepdims, x);
      }
    }
  }
}

TEST(Backward, ReductionSpecialValues) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<int64_t> s = {4, 5};
  for (dx_dtype_t t : kFloatDtypes) {
    // Ties: the gradient goes to the first extreme; a NaN takes it (the first NaN).
    const In ties = In::of(t, s, {1, 3, 3, 2, 3,  -1, -1, -1, -1, -1,  2, nan, 5, nan, 5,  0, -0.0, 0, inf, inf});
    for (const char* op : {"dx.max", "dx.min"}) {
      for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{}}) {
        reduction_case(diff, op, t, s, axes, false, ties);
      }
    }
    // Zeros in prod: none, one, two per group.
    const In zeros = In::of(t, s, {1, 2, 3, 4, 0.5,  2, 0, 3, 1, 2,  0, 2, 0, 1, 3,  -1, 2, -0.5, 1, 0});
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{}}) {
      reduction_case(diff, "dx.prod", t, s, axes, false, zeros);
      reduction_case(diff, "dx.sum", t, s, axes, true, zeros);
      reduction_case(diff, "dx.mean", t, s, axes, false, zeros);
    }
  }
  // Bad axes are refused by both.
  expect_same_error(diff.run("dx.sum", {In::random(DX_DTYPE_F32, {3}), In::random(DX_DTYPE_F32, {3, 4}),
                                        In::random(DX_DTYPE_F32, {3})},
                             {Out(DX_DTYPE_F32, {3, 4})}, Attrs().i64s("axes", {5}), true),
                    "sum backward axis out of range");
}

TEST(Backward, Softmax) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  const Case cases[] = {{{}, -1}, {{}, 0}, {{7}, 0}, {{3, 5}, -1}, {{3, 5}, 0}, {{2, 3, 4}, 1},
                        {{2, 0, 4}, 2}, {{4, 1}, 1}, {{1}, 0}, {{64, 300}, -1}, {{300, 64}, 0}};
  for (dx_dtype_t t : kFloatDtypes) {
    for (const Case& c : cases) {
      const int64_t axis = c.axis;
      unary_case(diff, "dx.softmax", t, c.shape, In::random(t, c.shape, -5, 5, 81),
                 [axis] { return Attrs().i64("axis", axis); });
    }
    // A NaN poisons its line; -Inf entries get probability 0; an all -Inf line is NaN.
    const std::vector<int64_t> s = {3, 4};
    unary_case(diff, "dx.softmax", t, s, In::of(t, s, {1, nan, 2, 3,  -inf, 0, 1, -inf,  -inf, -inf, -inf, -inf}),
               [] { return Attrs().i64("axis", 1); });
    unary_case(diff, "dx.softmax", t, s, In::random(t, s), no_attrs);  // default axis
  }
  expect_same_error(diff.run("dx.softmax", {In::random(DX_DTYPE_F32, {3}), In::random(DX_DTYPE_F32, {3}),
                                            In::random(DX_DTYPE_F32, {3})},
                             {Out(DX_DTYPE_F32, {3})}, Attrs().i64("axis", 2), true),
                    "softmax axis out of range");
}

// ---- matmul -------------------------------------------------------------------------------------

std::vector<int64_t> matmul_shape(std::vector<int64_t> a, std::vector<int64_t> b, bool ta, bool tb) {
  if (a.size() >= 2 && ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (b.size() >= 2 && tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const bool av = a.size() == 1, bv = b.size() == 1;
  std::vector<int64_t> ba(a.begin(), a.end() - (av ? 1 : 2)), bb(b.begin(), b.end() - (bv ? 1 : 2));
  std::vector<int64_t> out = broadcast(ba, bb);
  if (!av) out.push_back(a[a.size() - 2]);
  if (!bv) out.push_back(b[b.size() - 1]);
  return out;
}

TEST(Backward, Matmul) {
  Differential diff;
  struct Case {
    std::vector<int64_t> a, b;
    bool ta, tb;
  };
  const Case cases[] = {
      {{3, 4}, {4, 5}, false, false},       {{4, 3}, {4, 5}, true, false},       {{3, 4}, {5, 4}, false, true},
      {{4, 3}, {5, 4}, true, true},         {{2, 3, 4}, {4, 5}, false, false},   {{3, 4}, {2, 4, 5}, false, false},
      {{2, 3, 4}, {2, 4, 5}, false, false}, {{2, 1, 3, 4}, {5, 4, 2}, false, false}, {{4}, {4, 5}, false, false},
      {{3, 4}, {4}, false, false},          {{4}, {4}, false, false},            {{4}, {2, 4, 5}, false, false},
      {{2, 3, 4}, {4}, false, false},       {{3, 0}, {0, 5}, false, false},      {{0, 4}, {4, 5}, false, false},
      {{1, 3, 4}, {0, 4, 5}, false, false}, {{2, 4, 3}, {1, 5, 4}, true, true},  {{1, 1}, {1, 1}, false, false},
      {{33, 70}, {70, 45}, false, false},   {{3, 33, 70}, {45, 70}, false, true}, {{4}, {3, 4}, false, true},
  };
  for (dx_dtype_t t : kFloatDtypes) {
    for (const Case& c : cases) {
      const std::vector<int64_t> so = matmul_shape(c.a, c.b, c.ta, c.tb);
      const std::string what = "matmul " + dtype_name(t) + " " + shape_name(c.a) + (c.ta ? "T" : "") + " x " +
                               shape_name(c.b) + (c.tb ? "T" : "");
      const In a = In::random(t, c.a, -2, 2, 91), b = In::random(t, c.b, -2, 2, 92);
      const In dy = In::random(t, so, -2, 2, 93), y = In::random(t, so, -2, 2, 94);
      const bool ta = c.ta, tb = c.tb;
      const AttrsFn attrs = [ta, tb] { return Attrs().boolean("transpose_a", ta).boolean("transpose_b", tb); };
      compare(diff, "dx.matmul", {dy, a, b, y}, {Out(t, c.a), Out(t, c.b)}, attrs, matmul_tolerance(t), what);
      compare(diff, "dx.matmul", {dy, a, b, y}, {Out(t, c.a), Out::absent()}, attrs, matmul_tolerance(t), what + " (a only)");
      compare(diff, "dx.matmul", {dy, a, b, y}, {Out::absent(), Out(t, c.b)}, attrs, matmul_tolerance(t), what + " (b only)");
    }
  }
  expect_same_error(diff.run("dx.matmul", {In::random(DX_DTYPE_F32, {3, 5}), In::random(DX_DTYPE_F32, {3, 4}),
                                           In::random(DX_DTYPE_F32, {5, 5}), In::random(DX_DTYPE_F32, {3, 5})},
                             {Out(DX_DTYPE_F32, {3, 4}), Out(DX_DTYPE_F32, {5, 5})}, Attrs(), true),
                    "matmul backward inner dims differ");
}

// ---- strided views and aliasing -----------------------------------------------------------------

enum class Layout { kCompact, kGapped, kColumnMajor };

/// A tensor of a call: values, layout, or (outputs) an alias of input `alias_of`.
struct Spec {
  dx_dtype_t dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
  Layout layout = Layout::kCompact;
  int alias_of = -1;
};

Spec spec_of(const In& in, Layout layout) { return Spec{in.dtype, in.shape, in.values, layout, -1}; }

PluginResult run_views(Differential& diff, int32_t plugin, const char* op, const std::vector<Spec>& ins,
                       const std::vector<Spec>& outs, const Attrs& attrs) {
  std::vector<dx_tensor_t*> owned;
  auto make = [&](const Spec& s, const std::vector<double>& values) {
    const size_t rank = s.shape.size();
    std::vector<int64_t> strides(rank);
    int64_t stride = 1;
    if (s.layout == Layout::kColumnMajor) {
      for (size_t d = 0; d < rank; ++d) {
        strides[d] = stride;
        stride *= std::max<int64_t>(1, s.shape[d]);
      }
    } else {
      for (size_t d = rank; d-- > 0;) {
        strides[d] = stride * (s.layout == Layout::kGapped ? 2 : 1);
        stride *= std::max<int64_t>(1, s.shape[d]);
      }
    }
    const int64_t offset = s.layout == Layout::kCompact ? 0 : 3;
    int64_t span = offset + 1;
    for (size_t d = 0; d < rank; ++d) span += std::max<int64_t>(0, s.shape[d] - 1) * strides[d];
    dx_tensor_t* base = nullptr;
    check(dx_tensor_create(diff.runtime(), diff.device(), s.dtype, &span, 1, &base), "create base");
    owned.push_back(base);
    const std::vector<uint8_t> junk = to_bytes(s.dtype, std::vector<double>(static_cast<size_t>(span), 777.0));
    check(dx_tensor_write(base, junk.data(), junk.size()), "write base");
    dx_tensor_t* view = nullptr;
    check(dx_tensor_view(base, s.shape.data(), strides.data(), static_cast<int32_t>(rank), offset, &view), "view");
    owned.push_back(view);
    const std::vector<uint8_t> bytes = to_bytes(s.dtype, values);
    if (!bytes.empty()) check(dx_tensor_write(view, bytes.data(), bytes.size()), "write view");
    return view;
  };
  std::vector<dx_tensor_t*> in_ptrs, out_ptrs;
  for (const Spec& s : ins) in_ptrs.push_back(make(s, s.values));
  for (const Spec& s : outs) {
    if (s.alias_of >= 0) {
      out_ptrs.push_back(in_ptrs[static_cast<size_t>(s.alias_of)]);
    } else {
      out_ptrs.push_back(make(s, std::vector<double>(static_cast<size_t>(numel(s.shape)), 12345.0)));
    }
  }
  dx_op_id_t id{};
  check(dx_runtime_op_lookup(diff.runtime(), op, &id), "lookup");
  dx_invoke_options_t options{};
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN | DX_INVOKE_FLAG_BACKWARD;
  options.plugin_index = plugin;
  PluginResult result;
  result.status = take_status(dx_invoke_ex(diff.runtime(), id, in_ptrs.data(), static_cast<int32_t>(in_ptrs.size()),
                                           out_ptrs.data(), static_cast<int32_t>(out_ptrs.size()), attrs.get(),
                                           &options),
                              &result.message);
  if (result.status == DX_OK) {
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<uint8_t> bytes(static_cast<size_t>(numel(outs[i].shape)) * dtype_bytes(outs[i].dtype));
      if (!bytes.empty()) check(dx_tensor_read(out_ptrs[i], bytes.data(), bytes.size()), "read");
      result.outputs.push_back(from_bytes(outs[i].dtype, bytes));
    }
  }
  for (auto it = owned.rbegin(); it != owned.rend(); ++it) dx_error_destroy(dx_tensor_destroy(*it));
  return result;
}

void check_views(Differential& diff, const char* op, const std::vector<Spec>& ins, const std::vector<Spec>& outs,
                 const AttrsFn& attrs, Tol tol, const std::string& what) {
  const Attrs a = attrs();
  const Result r{run_views(diff, diff.cpu_plugin(), op, ins, outs, a),
                 run_views(diff, diff.reference_plugin(), op, ins, outs, a)};
  expect_close(r, tol.rtol, tol.atol, what);
}

TEST(Backward, StridedAndOffsetViews) {
  Differential diff;
  for (dx_dtype_t t : kFloatDtypes) {
    for (Layout in_layout : {Layout::kGapped, Layout::kColumnMajor}) {
      for (Layout out_layout : {Layout::kCompact, Layout::kGapped, Layout::kColumnMajor}) {
        const std::string tag = dtype_name(t) + " layout " + std::to_string(static_cast<int>(in_layout)) + "/" +
                                std::to_string(static_cast<int>(out_layout));
        const std::vector<int64_t> s = {6, 5, 7};
        const In x = In::random(t, s, 0.2, 2, 101), dy = In::random(t, s, -2, 2, 102);
        for (const char* op : {"dx.exp", "dx.tanh", "dx.relu", "dx.copy"}) {
          check_views(diff, op, {spec_of(dy, in_layout), spec_of(x, in_layout), spec_of(x, Layout::kCompact)},
                      {Spec{t, s, {}, out_layout}}, no_attrs, tolerance(t), std::string(op) + " " + tag);
        }
        const In b = In::random(t, {5, 1}, 0.5, 2, 103);
        check_views(diff, "dx.div",
                    {spec_of(dy, in_layout), spec_of(x, in_layout), spec_of(b, in_layout), spec_of(dy, in_layout)},
                    {Spec{t, s, {}, out_layout}, Spec{t, {5, 1}, {}, out_layout}}, no_attrs, tolerance(t), "div " + tag);
        const In dy_sum = In::random(t, {6, 7}, -2, 2, 104);
        for (const char* op : {"dx.sum", "dx.prod", "dx.max"}) {
          check_views(diff, op, {spec_of(dy_sum, in_layout), spec_of(x, in_layout), spec_of(dy_sum, in_layout)},
                      {Spec{t, s, {}, out_layout}}, [] { return Attrs().i64s("axes", {1}); }, tolerance(t),
                      std::string(op) + " " + tag);
        }
        check_views(diff, "dx.softmax", {spec_of(dy, in_layout), spec_of(x, in_layout), spec_of(x, in_layout)},
                    {Spec{t, s, {}, out_layout}}, [] { return Attrs().i64("axis", 1); }, tolerance(t), "softmax " + tag);
        check_views(diff, "dx.transpose",
                    {spec_of(In::random(t, {7, 5, 6}, -2, 2, 105), in_layout), spec_of(x, in_layout),
                     spec_of(In::random(t, {7, 5, 6}, -2, 2, 106), in_layout)},
                    {Spec{t, s, {}, out_layout}}, no_attrs, tolerance(t), "transpose " + tag);
        const In ma = In::random(t, {2, 9, 11}, -2, 2, 107), mb = In::random(t, {11, 13}, -2, 2, 108);
        const In mdy = In::random(t, {2, 9, 13}, -2, 2, 109);
        check_views(diff, "dx.matmul",
                    {spec_of(mdy, in_layout), spec_of(ma, in_layout), spec_of(mb, in_layout), spec_of(mdy, in_layout)},
                    {Spec{t, {2, 9, 11}, {}, out_layout}, Spec{t, {11, 13}, {}, out_layout}}, no_attrs,
                    matmul_tolerance(t), "matmul " + tag);
      }
    }
  }
}

TEST(Backward, InPlaceGradients) {
  Differential diff;
  for (dx_dtype_t t : kFloatDtypes) {
    const std::vector<int64_t> s = {4, 9};
    const In x = In::random(t, s, 0.2, 2, 111), dy = In::random(t, s, -2, 2, 112);
    const In b = In::random(t, s, 0.5, 2, 113);
    // dx over dy, dx over x.
    for (int alias : {0, 1}) {
      for (const char* op : {"dx.exp", "dx.sigmoid", "dx.softmax", "dx.max", "dx.prod", "dx.copy"}) {
        const bool reduce = std::string(op) == "dx.max" || std::string(op) == "dx.prod";
        const In g = reduce ? In::random(t, {4}, -2, 2, 114) : dy;
        if (reduce && alias == 0) continue;  // dy has another shape
        check_views(diff, op, {spec_of(g, Layout::kCompact), spec_of(x, Layout::kCompact), spec_of(g, Layout::kCompact)},
                    {Spec{t, s, {}, Layout::kCompact, alias}},
                    [reduce] { return reduce ? Attrs().i64s("axes", {1}) : Attrs(); }, tolerance(t),
                    std::string(op) + " " + dtype_name(t) + " alias input " + std::to_string(alias));
      }
      // Both gradients of mul: da over dy, then db over a (each pass must see the original data).
      check_views(diff, "dx.mul",
                  {spec_of(dy, Layout::kCompact), spec_of(x, Layout::kCompact), spec_of(b, Layout::kCompact),
                   spec_of(dy, Layout::kCompact)},
                  {Spec{t, s, {}, Layout::kCompact, 0}, Spec{t, s, {}, Layout::kCompact, 1 + alias}}, no_attrs,
                  tolerance(t), "mul " + dtype_name(t) + " aliased gradients " + std::to_string(alias));
    }
    // Transpose's gradient over its own (square) dy.
    const In sq = In::random(t, {6, 6}, -2, 2, 115);
    check_views(diff, "dx.transpose", {spec_of(sq, Layout::kCompact), spec_of(sq, Layout::kCompact), spec_of(sq, Layout::kCompact)},
                {Spec{t, {6, 6}, {}, Layout::kCompact, 0}}, no_attrs, tolerance(t), "transpose in place " + dtype_name(t));
    const In m = In::random(t, {5, 5}, -2, 2, 116);
    check_views(diff, "dx.matmul",
                {spec_of(m, Layout::kCompact), spec_of(m, Layout::kCompact),
                 spec_of(m, Layout::kCompact), spec_of(m, Layout::kCompact)},
                {Spec{t, {5, 5}, {}, Layout::kCompact, 1}, Spec{t, {5, 5}, {}, Layout::kCompact, 2}}, no_attrs,
                matmul_tolerance(t), "matmul in place " + dtype_name(t));
  }
}

TEST(Backward, LargeBroadcastReductionsAreExactlyRepeatable) {
  // Big enough to take the parallel, blocked paths; the result must not depend on the thread
  // split (compare two runs bit for bit) and agree with the reference.
  Differential diff;
  const In a = In::random(DX_DTYPE_F32, {512, 384}, -2, 2, 121), b = In::random(DX_DTYPE_F32, {384}, -2, 2, 122);
  const In dy = In::random(DX_DTYPE_F32, {512, 384}, -2, 2, 123);
  const Attrs none;
  const Result first = diff.run("dx.mul", {dy, a, b, dy}, {Out(DX_DTYPE_F32, {512, 384}), Out(DX_DTYPE_F32, {384})}, none, true);
  expect_close(first, 1e-5, 1e-5, "mul [512,384] x [384]");
  const PluginResult again = diff.run_on(diff.cpu_plugin(), "dx.mul", {dy, a, b, dy},
                                         {Out(DX_DTYPE_F32, {512, 384}), Out(DX_DTYPE_F32, {384})}, none, true);
  ASSERT_EQ(again.status, DX_OK);
  EXPECT_EQ(again.outputs, first.cpu.outputs);
  const In c = In::random(DX_DTYPE_F32, {512, 1}, -2, 2, 124);
  expect_close(diff.run("dx.sub", {dy, a, c, dy}, {Out::absent(), Out(DX_DTYPE_F32, {512, 1})}, none, true),
               1e-5, 1e-5, "sub [512,384] x [512,1]");
}

}  // namespace
}  // namespace deepx::cpu::testing
