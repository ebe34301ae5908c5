// The softmax row kernels (src/reduction.cc: one max pass, one fused exp + sum pass with
// exp_nonpositive_f32 / exp_f64, one scale pass) against the reference plugin, forward and
// backward, for every F dtype: long unit-stride rows split over threads, lines along a
// non-last axis (strided, through the compute-type buffer), rows whose spread flushes
// exp(x - max) below 2^-126 to 0, and the special rows (NaN, +Inf, -Inf entries, all -Inf).
// Also log_softmax and cross_entropy on long rows, which share the exp helpers (nn_util.h).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

constexpr dx_dtype_t kFloatTypes[] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16};

struct Tol {
  double rtol, atol;
};
/// The suite's normalising-op tolerances (docs/tolerances.md) are 1.3e-6 / 1e-5 for f32; these
/// are tighter for f32 and f64 to catch a lost term, and the suite's own for f16/bf16.
Tol tolerance(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: return {1e-12, 1e-13};
    case DX_DTYPE_F32: return {2e-6, 1e-7};
    case DX_DTYPE_F16: return {1e-3, 1e-5};
    default: return {1.6e-2, 1e-5};
  }
}
/// Gradients cancel (dy - sum(dy s)): an absolute floor of the gradient's scale, as the suite's
/// normwise rule.
Tol grad_tolerance(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: return {1e-11, 1e-12};
    case DX_DTYPE_F32: return {1e-5, 1e-6};
    case DX_DTYPE_F16: return {1e-2, 1e-3};
    default: return {5e-2, 1e-2};
  }
}

std::string name_of(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: return "f64";
    case DX_DTYPE_F32: return "f32";
    case DX_DTYPE_F16: return "f16";
    default: return "bf16";
  }
}

std::string shape_name(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

struct Case {
  std::vector<int64_t> shape;
  int64_t axis;
  double lo, hi;
};

const Case kCases[] = {
    {{64, 1024}, -1, -3, 3},     // unit-stride rows, split over threads
    {{1024, 48}, 0, -3, 3},      // lines along axis 0: strided
    {{3, 5000}, 1, -60, 60},     // long rows whose spread flushes tiny exp terms to 0
    {{2, 33, 17}, 1, -5, 5},     // middle axis
    {{5, 1}, -1, -5, 5},         // one-element lines
    {{4, 7}, -1, -1e4, 1e4},     // one-hot rows
};

TEST(Rows, SoftmaxForwardAndBackward) {
  Differential diff;
  for (dx_dtype_t t : kFloatTypes) {
    for (const Case& c : kCases) {
      const std::string what = "softmax " + name_of(t) + " " + shape_name(c.shape) + " axis " + std::to_string(c.axis);
      const In x = In::random(t, c.shape, c.lo, c.hi, 11);
      const Tol f = tolerance(t);
      expect_close(diff.run("dx.softmax", {x}, {Out(t, c.shape)}, Attrs().i64("axis", c.axis)), f.rtol, f.atol, what);
      const In dy = In::random(t, c.shape, -2, 2, 12);
      const In y = In::random(t, c.shape, 0, 1, 13);  // the kernel recomputes softmax from x
      const Tol g = grad_tolerance(t);
      expect_close(diff.run("dx.softmax", {dy, x, y}, {Out(t, c.shape)}, Attrs().i64("axis", c.axis), true), g.rtol,
                   g.atol, what + " backward");
    }
  }
}

TEST(Rows, SoftmaxSpecialRows) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<int64_t> s = {6, 5};
  const std::vector<double> values = {
      1, nan, 2, 3, 4,           // NaN: the line is NaN
      -inf, 0, 1, -inf, 2,       // -Inf entries: probability 0
      -inf, -inf, -inf, -inf, -inf,  // all -Inf: NaN
      1, inf, 2, 3, 4,           // +Inf max: exp(Inf - Inf) = NaN, the line is NaN
      -100, 0, -200, 50, -1e30,  // terms far below the max flush to 0
      0, -0.0, 0, -0.0, 0,       // equal entries
  };
  for (dx_dtype_t t : kFloatTypes) {
    const In x = In::of(t, s, values);
    const Tol f = tolerance(t);
    expect_close(diff.run("dx.softmax", {x}, {Out(t, s)}, Attrs().i64("axis", 1)), f.rtol, f.atol,
                 "softmax special " + name_of(t));
    const Tol g = grad_tolerance(t);
    expect_close(diff.run("dx.softmax", {In::random(t, s, -2, 2, 5), x, x}, {Out(t, s)}, Attrs().i64("axis", 1), true),
                 g.rtol, g.atol, "softmax special backward " + name_of(t));
    // Along axis 0 the same values make strided lines with the special entries spread out.
    expect_close(diff.run("dx.softmax", {x}, {Out(t, s)}, Attrs().i64("axis", 0)), f.rtol, f.atol,
                 "softmax special axis 0 " + name_of(t));
  }
}

TEST(Rows, LogSoftmaxAndCrossEntropyLongRows) {
  Differential diff;
  for (dx_dtype_t t : kFloatTypes) {
    const std::vector<int64_t> s = {16, 3000};
    const In x = In::random(t, s, -40, 40, 21);
    // log_softmax values reach -80 here: an absolute error of a few ulps of 80.
    const Tol f = tolerance(t);
    const double scale = t == DX_DTYPE_F32 ? 10 : 1;
    expect_close(diff.run("dx.log_softmax", {x}, {Out(t, s)}), f.rtol * scale, f.atol * scale,
                 "log_softmax long rows " + name_of(t));
    const Tol g = grad_tolerance(t);
    expect_close(diff.run("dx.log_softmax", {In::random(t, s, -2, 2, 22), x, x}, {Out(t, s)}, Attrs(), true), g.rtol,
                 g.atol, "log_softmax long rows backward " + name_of(t));
    std::vector<double> labels;
    for (int64_t r = 0; r < s[0]; ++r) labels.push_back(static_cast<double>((r * 977) % s[1]));
    const In lab = In::of(DX_DTYPE_I64, {s[0]}, labels);
    for (const char* reduction : {"mean", "none"}) {
      const std::vector<int64_t> out_shape = std::string(reduction) == "none" ? std::vector<int64_t>{s[0]} : std::vector<int64_t>{};
      expect_close(diff.run("dx.cross_entropy", {x, lab}, {Out(t, out_shape)}, Attrs().str("reduction", reduction)),
                   f.rtol * scale, f.atol * scale, std::string("cross_entropy ") + reduction + " " + name_of(t));
      const In dy = In::random(t, out_shape, 0.5, 2, 23);
      const In loss = In::random(t, out_shape, 0, 1, 24);
      expect_close(diff.run("dx.cross_entropy", {dy, x, lab, loss}, {Out(t, s), Out::absent()},
                            Attrs().str("reduction", reduction), true),
                   g.rtol, g.atol, std::string("cross_entropy backward ") + reduction + " " + name_of(t));
    }
  }
}

}  // namespace
}  // namespace deepx::cpu::testing
