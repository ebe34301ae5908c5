// The softmax row kernels (src/reduce.cc: one max pass, one fused exp + sum pass with
// exp_nonpositive_f32 / exp_f64, one scale pass) against the reference plugin, forward and
// backward, for every F dtype: long unit-stride rows split over threads, lines along a
// non-last axis (strided, through the compute-type buffer), rows whose spread flushes
// exp(x - max) below 2^-126 to 0, and the special rows (NaN, +Inf, -Inf entries, all -Inf).
// Also log_softmax and cross_entropy on long rows, which share the exp helpers (nn_util.h),
// layer_norm backward's fused row and column sums, and cross_entropy's labels and special logits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

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
  for (dx_dtype_t t : kFloatDtypes) {
    for (const Case& c : kCases) {
      const std::string what = "softmax " + dtype_name(t) + " " + shape_name(c.shape) + " axis " + std::to_string(c.axis);
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
  for (dx_dtype_t t : kFloatDtypes) {
    const In x = In::of(t, s, values);
    const Tol f = tolerance(t);
    expect_close(diff.run("dx.softmax", {x}, {Out(t, s)}, Attrs().i64("axis", 1)), f.rtol, f.atol,
                 "softmax special " + dtype_name(t));
    const Tol g = grad_tolerance(t);
    expect_close(diff.run("dx.softmax", {In::random(t, s, -2, 2, 5), x, x}, {Out(t, s)}, Attrs().i64("axis", 1), true),
                 g.rtol, g.atol, "softmax special backward " + dtype_name(t));
    // Along axis 0 the same values make strided lines with the special entries spread out.
    expect_close(diff.run("dx.softmax", {x}, {Out(t, s)}, Attrs().i64("axis", 0)), f.rtol, f.atol,
                 "softmax special axis 0 " + dtype_name(t));
  }
}

TEST(Rows, LogSoftmaxAndCrossEntropyLongRows) {
  Differential diff;
  for (dx_dtype_t t : kFloatDtypes) {
    const std::vector<int64_t> s = {16, 3000};
    const In x = In::random(t, s, -40, 40, 21);
    // log_softmax values reach -80 here: an absolute error of a few ulps of 80.
    const Tol f = tolerance(t);
    const double scale = t == DX_DTYPE_F32 ? 10 : 1;
    expect_close(diff.run("dx.log_softmax", {x}, {Out(t, s)}), f.rtol * scale, f.atol * scale,
                 "log_softmax long rows " + dtype_name(t));
    const Tol g = grad_tolerance(t);
    expect_close(diff.run("dx.log_softmax", {In::random(t, s, -2, 2, 22), x, x}, {Out(t, s)}, Attrs(), true), g.rtol,
                 g.atol, "log_softmax long rows backward " + dtype_name(t));
    std::vector<double> labels;
    for (int64_t r = 0; r < s[0]; ++r) labels.push_back(static_cast<double>((r * 977) % s[1]));
    const In lab = In::of(DX_DTYPE_I64, {s[0]}, labels);
    for (const char* reduction : {"mean", "none"}) {
      const std::vector<int64_t> out_shape = std::string(reduction) == "none" ? std::vector<int64_t>{s[0]} : std::vector<int64_t>{};
      expect_close(diff.run("dx.cross_entropy", {x, lab}, {Out(t, out_shape)}, Attrs().str("reduction", reduction)),
                   f.rtol * scale, f.atol * scale, std::string("cross_entropy ") + reduction + " " + dtype_name(t));
      const In dy = In::random(t, out_shape, 0.5, 2, 23);
      const In loss = In::random(t, out_shape, 0, 1, 24);
      expect_close(diff.run("dx.cross_entropy", {dy, x, lab, loss}, {Out(t, s), Out::absent()},
                            Attrs().str("reduction", reduction), true),
                   g.rtol, g.atol, std::string("cross_entropy backward ") + reduction + " " + dtype_name(t));
    }
  }
}

/// As expect_close, with the suite's norm-wise floor for gradients that cancel
/// (docs/tolerances.md, rtol_atol_normwise): atol + rtol (|ref| + 8 max|ref| of that output).
void expect_close_normwise(const Result& r, double rtol, double atol, const std::string& what) {
  expect_close(r, rtol, atol, what, 8);
}

/// The stats shape of x normalised from `axis` on, and the normalised (parameter) shape.
std::vector<int64_t> ln_stats_shape(const std::vector<int64_t>& x, size_t axis) {
  std::vector<int64_t> s = x;
  for (size_t d = axis; d < s.size(); ++d) s[d] = 1;
  return s;
}

// layer_norm backward (src/nn_norm.cc): row statistics, then one pass for the row sums fused
// with the dw/db column sums (per fixed part of rows, f64), then the dx pass; the next row is
// prefetched meanwhile. Rows longer than the 256-element sum chunks, odd lengths (the tails of
// every 16-lane loop), short rows (tails only), a mean offset far above the spread, rows of two
// dims, weight/bias absent, and each wanted-output subset (null gradients skipped).
TEST(Rows, LayerNormBackwardRowsAndColumnSums) {
  Differential diff;
  struct LnCase {
    std::vector<int64_t> x;
    size_t axis;
    double lo, hi;
  };
  const LnCase cases[] = {
      {{40, 1000}, 1, -3, 5},      // many rows: several fixed parts, threads
      {{9, 4099}, 1, -2, 2},       // odd length
      {{300, 3}, 1, -1, 1},        // short rows
      {{24, 257}, 1, 1000, 1001},  // mean offset far above the spread
      {{6, 5, 67}, 1, -2, 2},      // a row of two dims
  };
  // {weight, bias, want dx, want dw, want db}
  const bool combos[][5] = {{true, true, true, true, true},    {false, false, true, false, false},
                            {true, false, false, true, false}, {false, true, false, false, true},
                            {true, true, true, false, true},   {true, true, false, false, false}};
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol g = grad_tolerance(t);
    for (const LnCase& c : cases) {
      const std::vector<int64_t> ps(c.x.begin() + static_cast<std::ptrdiff_t>(c.axis), c.x.end());
      const std::vector<int64_t> ss = ln_stats_shape(c.x, c.axis);
      const In x = In::random(t, c.x, c.lo, c.hi, 31);
      const In dy = In::random(t, c.x, -1, 1, 32), dm = In::random(t, ss, -1, 1, 33), dr = In::random(t, ss, -1, 1, 34);
      const In y = In::random(t, c.x, -1, 1, 35), mean = In::random(t, ss, -1, 1, 36), rstd = In::random(t, ss, 0, 1, 37);
      for (const auto& k : combos) {
        const In w = k[0] ? In::random(t, ps, 0.5, 1.5, 38) : In::absent();
        const In b = k[1] ? In::random(t, ps, -1, 1, 39) : In::absent();
        const std::string what = "layer_norm backward " + dtype_name(t) + " " + shape_name(c.x) + (k[0] ? " w" : "") +
                                 (k[1] ? " b" : "") + " want " + std::to_string(k[2]) + std::to_string(k[3]) +
                                 std::to_string(k[4]);
        const Result r = diff.run("dx.layer_norm", {dy, dm, dr, x, w, b, y, mean, rstd},
                                  {k[2] ? Out(t, c.x) : Out::absent(), k[3] ? Out(t, ps) : Out::absent(),
                                   k[4] ? Out(t, ps) : Out::absent()},
                                  Attrs().i64("axis", static_cast<int64_t>(c.axis)).f64("eps", 1e-5), true);
        expect_close_normwise(r, g.rtol, g.atol, what);
      }
    }
    // A gradient for an absent weight or bias is refused, as by the reference.
    const std::vector<int64_t> s = {4, 33}, ss = {4, 1}, ps = {33};
    const In x = In::random(t, s, -1, 1, 40), st = In::random(t, ss, -1, 1, 41);
    expect_same_error(diff.run("dx.layer_norm", {x, st, st, x, In::absent(), In::random(t, ps), x, st, st},
                               {Out(t, s), Out(t, ps), Out(t, ps)}, Attrs(), true),
                      "layer_norm dw without a weight " + dtype_name(t));
    expect_same_error(diff.run("dx.layer_norm", {x, st, st, x, In::random(t, ps), In::absent(), x, st, st},
                               {Out(t, s), Out::absent(), Out(t, ps)}, Attrs(), true),
                      "layer_norm db without a bias " + dtype_name(t));
  }
}

// layer_norm backward's column sums (src/nn_norm.cc, Columns): f32 rows collect dw/db in a
// per-thread f32 block row folded into the f64 part sums every 16 rows, counted from the start of
// each fixed part of rows. Parts of exactly 16 rows, of 16 +- 1, of many blocks with a remainder,
// long columns of short (tail-only) and odd rows, and rows whose statistics need f64 (an Inf, a
// NaN, values past the f32 square range) in the middle of a block, with each wanted subset.
TEST(Rows, LayerNormBackwardColumnBlocks) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct BlockCase {
    std::vector<int64_t> x;
    double lo, hi;
  };
  const BlockCase cases[] = {
      {{512, 40}, -2, 2},    // 32 parts of exactly one block
      {{531, 37}, -2, 2},    // parts of 17 and 16 rows: a block plus one row, one block
      {{2003, 5}, -1, 3},    // long columns of short rows: blocks of tails only, remainders
      {{1000, 131}, -3, 3},  // parts of 31-32 rows, odd length (vector body and tail)
      {{77, 1030}, 10, 11},  // long rows with a mean offset, parts of 2-3 rows
  };
  // {want dx, want dw, want db}
  const bool wants[][3] = {{true, true, true}, {false, true, false}, {false, false, true}, {true, true, false}};
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol g = grad_tolerance(t);
    for (const BlockCase& c : cases) {
      const std::vector<int64_t> ps = {c.x[1]}, ss = {c.x[0], 1};
      In x = In::random(t, c.x, c.lo, c.hi, 71);
      if (c.x[0] > 40) {
        // Rows 20 and 37 need f64 statistics: an Inf and a huge value (its square overflows
        // f32); row 29 holds a NaN. Their rows' gradients are NaN or f64, the blocks around them
        // stay f32.
        x.values[static_cast<size_t>(20 * c.x[1] + 1)] = inf;
        x.values[static_cast<size_t>(29 * c.x[1])] = nan;
        if (t == DX_DTYPE_F32 || t == DX_DTYPE_F64) x.values[static_cast<size_t>(37 * c.x[1] + 2)] = 3e30;
      }
      const In dy = In::random(t, c.x, -1, 1, 72), dm = In::random(t, ss, -1, 1, 73), dr = In::random(t, ss, -1, 1, 74);
      const In y = In::random(t, c.x, -1, 1, 75), mean = In::random(t, ss, -1, 1, 76), rstd = In::random(t, ss, 0, 1, 77);
      const In w = In::random(t, ps, 0.5, 1.5, 78), b = In::random(t, ps, -1, 1, 79);
      for (const auto& k : wants) {
        const std::string what = "layer_norm backward blocks " + dtype_name(t) + " " + shape_name(c.x) + " want " +
                                 std::to_string(k[0]) + std::to_string(k[1]) + std::to_string(k[2]);
        const Result r = diff.run("dx.layer_norm", {dy, dm, dr, x, w, b, y, mean, rstd},
                                  {k[0] ? Out(t, c.x) : Out::absent(), k[1] ? Out(t, ps) : Out::absent(),
                                   k[2] ? Out(t, ps) : Out::absent()},
                                  Attrs().f64("eps", 1e-5), true);
        expect_close_normwise(r, g.rtol, g.atol, what);
      }
    }
  }
}

// softmax backward rows (src/reduce.cc): the exp pass stores e and sums e and dy e (512-bit
// under AVX-512) while the next line's x and dy stream in, the dx pass prefetches the next dx.
// Many rows of odd length (vector body and scalar tail), rows shorter than one vector, and
// long rows, each set with a row of -Inf entries (probability 0) among finite rows.
TEST(Rows, SoftmaxBackwardPrefetchedRows) {
  Differential diff;
  const double inf = std::numeric_limits<double>::infinity();
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol g = grad_tolerance(t);
    for (const std::vector<int64_t>& s : {std::vector<int64_t>{67, 1041}, std::vector<int64_t>{300, 7},
                                          std::vector<int64_t>{9, 4096}}) {
      In x = In::random(t, s, -8, 8, 81);
      for (int64_t i = 0; i < s[1]; i += 5) x.values[static_cast<size_t>(2 * s[1] + i)] = -inf;  // row 2
      const In dy = In::random(t, s, -2, 2, 82);
      expect_close_normwise(diff.run("dx.softmax", {dy, x, x}, {Out(t, s)}, Attrs().i64("axis", -1), true), g.rtol,
                            g.atol, "softmax backward prefetched rows " + dtype_name(t) + " " + shape_name(s));
    }
  }
}

// log_softmax rows (src/nn_norm.cc), unit-stride and through the compute-type buffer (x and y
// the same buffer: f16/bf16 and strided lines): many rows of odd length (vector body and tail)
// and short rows, with a +Inf max and an all -Inf row among finite ones.
TEST(Rows, LogSoftmaxManyRowsAndInfiniteMax) {
  Differential diff;
  const double inf = std::numeric_limits<double>::infinity();
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol f = tolerance(t);
    const double scale = t == DX_DTYPE_F32 ? 10 : 1;
    for (const std::vector<int64_t>& s : {std::vector<int64_t>{129, 1023}, std::vector<int64_t>{500, 15}}) {
      In x = In::random(t, s, -20, 20, 91);
      x.values[static_cast<size_t>(3 * s[1] + 4)] = inf;  // row 3: +Inf max (NaN / -Inf pattern)
      for (int64_t i = 0; i < s[1]; ++i) x.values[static_cast<size_t>(5 * s[1] + i)] = -inf;  // row 5: all -Inf
      expect_close(diff.run("dx.log_softmax", {x}, {Out(t, s)}), f.rtol * scale, f.atol * scale,
                   "log_softmax many rows " + dtype_name(t) + " " + shape_name(s));
      expect_close(diff.run("dx.log_softmax", {x}, {Out(t, s)}, Attrs().i64("axis", 0)), f.rtol * scale,
                   f.atol * scale, "log_softmax many rows axis 0 " + dtype_name(t) + " " + shape_name(s));
    }
  }
}

// cross_entropy (src/nn.cc): per row a max pass and an exp-sum pass (AVX-512 under x86-64-v4),
// the next row prefetched meanwhile. Rows longer than the sum chunks with odd lengths, the
// reductions, ignored rows (the default -100 and an in-range ignore_index), special logits
// (-Inf, +Inf, NaN, huge), rank-1 logits, and the label checks.
TEST(Rows, CrossEntropyRowsLabelsAndSpecialLogits) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol f = tolerance(t);
    const Tol g = grad_tolerance(t);
    const double scale = t == DX_DTYPE_F32 ? 10 : 1;  // losses reach ~50: a few ulps of them
    const std::vector<int64_t> s = {33, 8195};
    const In x = In::random(t, s, -30, 30, 51);
    std::vector<double> labels;
    for (int64_t r = 0; r < s[0]; ++r) labels.push_back(r % 7 == 3 ? -100.0 : static_cast<double>((r * 1237) % s[1]));
    const In lab = In::of(DX_DTYPE_I64, {s[0]}, labels);
    for (const char* reduction : {"mean", "sum", "none"}) {
      const bool none = std::string(reduction) == "none";
      const std::vector<int64_t> os = none ? std::vector<int64_t>{s[0]} : std::vector<int64_t>{};
      const std::string what = std::string("cross_entropy ") + reduction + " " + dtype_name(t);
      expect_close(diff.run("dx.cross_entropy", {x, lab}, {Out(t, os)}, Attrs().str("reduction", reduction)),
                   f.rtol * scale, f.atol * scale, what);
      const In dy = In::random(t, os, 0.5, 2, 52);
      expect_close_normwise(diff.run("dx.cross_entropy", {dy, x, lab, In::random(t, os, 0, 1, 53)},
                                     {Out(t, s), Out(DX_DTYPE_I64, {s[0]})}, Attrs().str("reduction", reduction), true),
                            g.rtol, g.atol, what + " backward");
    }
    // ignore_index inside the class range: rows labelled 5 are ignored, the others counted.
    std::vector<double> with_five = labels;
    for (size_t r = 0; r < with_five.size(); ++r) {
      if (with_five[r] < 0 || r % 4 == 0) with_five[r] = 5;  // -100 is out of range here
    }
    const In lab5 = In::of(DX_DTYPE_I64, {s[0]}, with_five);
    expect_close(diff.run("dx.cross_entropy", {x, lab5}, {Out(t, {})}, Attrs().i64("ignore_index", 5)), f.rtol * scale,
                 f.atol * scale, "cross_entropy ignore_index 5 " + dtype_name(t));
    // Every row ignored: the mean is 0 / 0 = NaN; its gradient is zero.
    const In all_ignored = In::of(DX_DTYPE_I64, {3}, {-100, -100, -100});
    const In x3 = In::random(t, {3, 40}, -2, 2, 54);
    expect_close(diff.run("dx.cross_entropy", {x3, all_ignored}, {Out(t, {})}), f.rtol, f.atol,
                 "cross_entropy all ignored " + dtype_name(t));
    expect_close(diff.run("dx.cross_entropy", {In::of(t, {}, {1.0}), x3, all_ignored, In::of(t, {}, {0.0})},
                          {Out(t, {3, 40}), Out::absent()}, Attrs(), true),
                 g.rtol, g.atol, "cross_entropy all ignored backward " + dtype_name(t));
    // Special logits, one row each, reduction none: -Inf entries (probability 0), the label's
    // logit -Inf (loss +Inf), an all -Inf row, +Inf, NaN, and huge finite logits.
    const int64_t c = 37;
    std::vector<double> v(static_cast<size_t>(7 * c));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i)) * 3;
    for (int64_t i = 0; i < c; i += 3) v[static_cast<size_t>(c * 0 + i)] = -inf;
    v[static_cast<size_t>(c * 1 + 2)] = -inf;
    for (int64_t i = 0; i < c; ++i) v[static_cast<size_t>(c * 2 + i)] = -inf;
    v[static_cast<size_t>(c * 3 + 9)] = inf;
    v[static_cast<size_t>(c * 4 + 11)] = nan;
    v[static_cast<size_t>(c * 5 + 4)] = 1e30;
    v[static_cast<size_t>(c * 5 + 5)] = -1e30;
    v[static_cast<size_t>(c * 6 + 1)] = 3e38;
    const In special = In::of(t, {7, c}, v);
    const In special_labels = In::of(DX_DTYPE_I64, {7}, {1, 2, 0, 8, 3, 4, 6});
    expect_close(diff.run("dx.cross_entropy", {special, special_labels}, {Out(t, {7})}, Attrs().str("reduction", "none")),
                 f.rtol, f.atol, "cross_entropy special logits " + dtype_name(t));
    expect_close(diff.run("dx.cross_entropy", {In::random(t, {7}, 0.5, 2, 55), special, special_labels, In::random(t, {7})},
                          {Out(t, {7, c}), Out::absent()}, Attrs().str("reduction", "none"), true),
                 g.rtol, g.atol, "cross_entropy special logits backward " + dtype_name(t));
    // Rank-1 logits with a rank-0 label.
    const In row = In::random(t, {5000}, -10, 10, 56);
    expect_close(diff.run("dx.cross_entropy", {row, In::of(DX_DTYPE_I64, {}, {4321})}, {Out(t, {})}), f.rtol * scale,
                 f.atol * scale, "cross_entropy rank 1 " + dtype_name(t));
    // Label checks: out of range, negative (not the ignore_index), and the ignore_index itself
    // outside the range is fine.
    expect_same_error(diff.run("dx.cross_entropy", {x3, In::of(DX_DTYPE_I64, {3}, {0, 40, 1})}, {Out(t, {})}),
                      "cross_entropy label = classes " + dtype_name(t));
    expect_same_error(diff.run("dx.cross_entropy", {x3, In::of(DX_DTYPE_I64, {3}, {0, -1, 1})}, {Out(t, {})}),
                      "cross_entropy negative label " + dtype_name(t));
    expect_same_error(diff.run("dx.cross_entropy", {In::of(t, {}, {1.0}), x3, In::of(DX_DTYPE_I64, {3}, {0, 99, 1}),
                                                    In::of(t, {}, {0.0})},
                               {Out(t, {3, 40}), Out::absent()}, Attrs(), true),
                      "cross_entropy backward label out of range " + dtype_name(t));
    expect_close(diff.run("dx.cross_entropy", {x3, In::of(DX_DTYPE_I64, {3}, {0, 1000, 1})}, {Out(t, {})},
                          Attrs().i64("ignore_index", 1000)),
                 f.rtol, f.atol, "cross_entropy ignore_index outside the range " + dtype_name(t));
  }
}

// log_softmax rows longer than L2-sized blocks (the next row prefetched during the exp pass;
// the AVX-512 exp-sum and its scalar tail), with special entries in long rows, and long
// strided lines (axis 0: through the buffer, no prefetch).
TEST(Rows, LogSoftmaxLongRowsWithSpecialEntries) {
  Differential diff;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (dx_dtype_t t : kFloatDtypes) {
    const Tol f = tolerance(t);
    const Tol g = grad_tolerance(t);
    const double scale = t == DX_DTYPE_F32 ? 10 : 1;
    const std::vector<int64_t> s = {5, 40001};
    In x = In::random(t, s, -20, 20, 61);
    for (int64_t i = 0; i < s[1]; i += 101) x.values[static_cast<size_t>(s[1] + i)] = -inf;  // row 1
    x.values[static_cast<size_t>(2 * s[1] + 39999)] = nan;                                   // row 2
    x.values[static_cast<size_t>(3 * s[1] + 17)] = 1e30;                                     // row 3
    x.values[static_cast<size_t>(4 * s[1] + 40000)] = inf;                                   // row 4
    expect_close(diff.run("dx.log_softmax", {x}, {Out(t, s)}), f.rtol * scale, f.atol * scale,
                 "log_softmax long special rows " + dtype_name(t));
    const In clean = In::random(t, s, -20, 20, 62);
    expect_close_normwise(diff.run("dx.log_softmax", {In::random(t, s, -2, 2, 63), clean, clean}, {Out(t, s)}, Attrs(), true),
                          g.rtol, g.atol, "log_softmax long rows backward " + dtype_name(t));
    const std::vector<int64_t> tall = {3001, 3};
    const In xt = In::random(t, tall, -20, 20, 64);
    expect_close(diff.run("dx.log_softmax", {xt}, {Out(t, tall)}, Attrs().i64("axis", 0)), f.rtol * scale,
                 f.atol * scale, "log_softmax long strided lines " + dtype_name(t));
  }
}

}  // namespace
}  // namespace deepx::cpu::testing
