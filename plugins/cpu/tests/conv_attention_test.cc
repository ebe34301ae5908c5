// Differential tests of dx.conv2d, dx.max_pool2d, dx.avg_pool2d and
// dx.scaled_dot_product_attention, forward and backward, for every F dtype: the CPU plugin
// against the reference plugin through the host (differential.h), plus bad calls that both
// must refuse with the same status.
#include <limits>
#include <string>
#include <vector>

#include "differential.h"

namespace deepx::cpu::testing {
namespace {

/// Relative and absolute tolerance of a dtype (the CPU plugin accumulates in f32 for
/// f32/f16/bf16, the reference in f64; both round once).
double tolerance(dx_dtype_t t) {
  switch (t) {
    case DX_DTYPE_F64:
      return 1e-9;
    case DX_DTYPE_F32:
      return 1e-4;
    default:
      return 2e-2;
  }
}

Differential& diff() {
  static Differential instance;
  return instance;
}

// ---- conv2d ------------------------------------------------------------------------------------

struct ConvCase {
  int64_t n, c, h, w, co, kh, kw;
  std::vector<int64_t> stride, padding, dilation;  // empty = unset
  int64_t groups;                                  // 0 = unset
  bool bias;
};

int64_t conv_extent(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

int64_t at_or(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? v[0] : v[i];
}

Attrs conv_attrs(const ConvCase& c) {
  Attrs a;
  if (!c.stride.empty()) {
    if (c.stride.size() == 1 && c.stride[0] == 2)
      std::move(a).i64("stride", 2);
    else
      std::move(a).i64s("stride", c.stride);
  }
  if (!c.padding.empty()) std::move(a).i64s("padding", c.padding);
  if (!c.dilation.empty()) std::move(a).i64s("dilation", c.dilation);
  if (c.groups != 0) std::move(a).i64("groups", c.groups);
  return a;
}

std::vector<int64_t> conv_out_shape(const ConvCase& c) {
  return {c.n, c.co,
          conv_extent(c.h, at_or(c.padding, 0, 0), at_or(c.dilation, 0, 1), c.kh,
                      at_or(c.stride, 0, 1)),
          conv_extent(c.w, at_or(c.padding, 1, 0), at_or(c.dilation, 1, 1), c.kw,
                      at_or(c.stride, 1, 1))};
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {2, 3, 7, 6, 4, 3, 3, {}, {}, {}, 0, true},                 // plain 3x3
      {2, 4, 9, 8, 6, 3, 2, {2, 1}, {1, 2}, {1, 2}, 2, false},    // strides, pads, dilation, groups
      {1, 6, 5, 5, 6, 3, 3, {1}, {1}, {}, 6, true},               // depthwise
      {3, 4, 6, 6, 8, 1, 1, {}, {}, {}, 1, true},                 // pointwise, images batched
      {1, 8, 20, 20, 4, 1, 1, {}, {}, {}, 0, false},              // pointwise, in place
      {5, 2, 4, 4, 3, 2, 2, {2}, {1}, {}, 0, true},               // stride as one i64
      {2, 3, 5, 4, 2, 5, 4, {3, 2}, {2, 1}, {1, 1}, 1, true},     // kernel = input size
      {1, 4, 12, 10, 8, 3, 3, {1, 2}, {2, 0}, {2, 1}, 4, false},  // grouped, dilated
      {0, 3, 5, 5, 2, 3, 3, {}, {}, {}, 0, true},                 // empty batch
      {2, 0, 4, 4, 3, 1, 1, {}, {}, {}, 0, true},                 // no input channels
  };
  return cases;
}

std::vector<In> conv_inputs(const ConvCase& c, dx_dtype_t t) {
  std::vector<In> in;
  in.push_back(In::random(t, {c.n, c.c, c.h, c.w}, -2, 2, 11));
  const int64_t cin_g = c.groups > 0 ? c.c / c.groups : c.c;
  in.push_back(In::random(t, {c.co, cin_g, c.kh, c.kw}, -1, 1, 12));
  in.push_back(c.bias ? In::random(t, {c.co}, -1, 1, 13) : In::absent());
  return in;
}

TEST(ConvAttention, Conv2dForward) {
  int index = 0;
  for (const ConvCase& c : conv_cases()) {
    for (dx_dtype_t t : kFloatDtypes) {
      const std::string what = "conv case " + std::to_string(index) + " " + dtype_name(t);
      const auto r =
          diff().run("dx.conv2d", conv_inputs(c, t), {Out(t, conv_out_shape(c))}, conv_attrs(c));
      expect_close(r, tolerance(t), tolerance(t), what);
    }
    ++index;
  }
}

TEST(ConvAttention, Conv2dBackward) {
  int index = 0;
  for (const ConvCase& c : conv_cases()) {
    for (dx_dtype_t t : kFloatDtypes) {
      const std::string what = "conv backward case " + std::to_string(index) + " " + dtype_name(t);
      std::vector<In> in = {In::random(t, conv_out_shape(c), -1, 1, 21)};
      for (In& x : conv_inputs(c, t)) in.push_back(std::move(x));
      in.push_back(In::random(t, conv_out_shape(c), -1, 1, 22));  // y: only its dtype matters
      const int64_t cin_g = c.groups > 0 ? c.c / c.groups : c.c;
      const Out dx(t, {c.n, c.c, c.h, c.w}), dw(t, {c.co, cin_g, c.kh, c.kw});
      const Out db = c.bias ? Out(t, {c.co}) : Out::absent();
      expect_close(diff().run("dx.conv2d", in, {dx, dw, db}, conv_attrs(c), true), tolerance(t),
                   tolerance(t), what + " all");
      // Each gradient alone.
      expect_close(
          diff().run("dx.conv2d", in, {dx, Out::absent(), Out::absent()}, conv_attrs(c), true),
          tolerance(t), tolerance(t), what + " dx");
      expect_close(
          diff().run("dx.conv2d", in, {Out::absent(), dw, Out::absent()}, conv_attrs(c), true),
          tolerance(t), tolerance(t), what + " dw");
      if (c.bias) {
        expect_close(
            diff().run("dx.conv2d", in, {Out::absent(), Out::absent(), db}, conv_attrs(c), true),
            tolerance(t), tolerance(t), what + " db");
      }
    }
    ++index;
  }
}

TEST(ConvAttention, Conv2dLargerF32) {
  // Large enough for the OpenMP im2col/col2im paths and multi-threaded BLAS.
  const ConvCase c{2, 16, 34, 30, 24, 3, 3, {1}, {1}, {}, 2, true};
  const dx_dtype_t t = DX_DTYPE_F32;
  expect_close(
      diff().run("dx.conv2d", conv_inputs(c, t), {Out(t, conv_out_shape(c))}, conv_attrs(c)), 1e-4,
      1e-4, "large conv");
  std::vector<In> in = {In::random(t, conv_out_shape(c), -1, 1, 21)};
  for (In& x : conv_inputs(c, t)) in.push_back(std::move(x));
  in.push_back(In::random(t, conv_out_shape(c), -1, 1, 22));
  expect_close(
      diff().run("dx.conv2d", in, {Out(t, {2, 16, 34, 30}), Out(t, {24, 8, 3, 3}), Out(t, {24})},
                 conv_attrs(c), true),
      1e-4, 1e-3, "large conv backward");
}

// ---- pooling ------------------------------------------------------------------------------------

struct PoolCase {
  int64_t n, c, h, w;
  std::vector<int64_t> kernel, stride, padding;  // stride/padding empty = unset
};

std::vector<int64_t> pool_out_shape(const PoolCase& c) {
  const int64_t kh = at_or(c.kernel, 0, 1), kw = at_or(c.kernel, 1, 1);
  return {c.n, c.c, conv_extent(c.h, at_or(c.padding, 0, 0), 1, kh, at_or(c.stride, 0, kh)),
          conv_extent(c.w, at_or(c.padding, 1, 0), 1, kw, at_or(c.stride, 1, kw))};
}

Attrs pool_attrs(const PoolCase& c) {
  Attrs a;
  std::move(a).i64s("kernel", c.kernel);
  if (!c.stride.empty()) std::move(a).i64s("stride", c.stride);
  if (!c.padding.empty()) std::move(a).i64s("padding", c.padding);
  return a;
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {2, 3, 8, 8, {2}, {}, {}},             // 2x2, stride = kernel
      {1, 2, 7, 9, {3, 2}, {2, 1}, {1, 1}},  // padding, rectangular
      {2, 2, 5, 6, {3}, {1}, {1}},           // overlapping windows
      {1, 1, 9, 7, {4, 3}, {3, 2}, {2, 1}},  // padding = kernel / 2
      {0, 2, 4, 4, {2}, {}, {}},             // empty
  };
  return cases;
}

/// Values from a small set so windows have ties (the gradient goes to the first maximum).
In tie_values(dx_dtype_t t, std::vector<int64_t> shape, bool with_nan) {
  In in = In::random(t, shape, -2, 3, 31);
  for (size_t i = 0; i < in.values.size(); ++i) {
    in.values[i] = std::floor(in.values[i]) * 0.5;
    if (with_nan && i % 17 == 5) in.values[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return in;
}

TEST(ConvAttention, PoolForwardAndBackward) {
  int index = 0;
  for (const PoolCase& c : pool_cases()) {
    for (dx_dtype_t t : kFloatDtypes) {
      for (const char* op : {"dx.max_pool2d", "dx.avg_pool2d"}) {
        for (bool with_nan : {false, true}) {
          const std::string what = std::string(op) + " case " + std::to_string(index) + " " +
                                   dtype_name(t) + (with_nan ? " nan" : "");
          const In x = std::string(op) == "dx.max_pool2d"
                           ? tie_values(t, {c.n, c.c, c.h, c.w}, with_nan)
                           : In::random(t, {c.n, c.c, c.h, c.w}, -2, 2, 32);
          expect_close(diff().run(op, {x}, {Out(t, pool_out_shape(c))}, pool_attrs(c)),
                       tolerance(t), tolerance(t), what);
          const std::vector<In> in = {In::random(t, pool_out_shape(c), -1, 1, 33), x,
                                      In::random(t, pool_out_shape(c), -1, 1, 34)};
          expect_close(diff().run(op, in, {Out(t, {c.n, c.c, c.h, c.w})}, pool_attrs(c), true),
                       tolerance(t), tolerance(t), what + " backward");
          expect_close(diff().run(op, in, {Out::absent()}, pool_attrs(c), true), 0, 0,
                       what + " backward, nothing wanted");
        }
      }
    }
    ++index;
  }
}

// ---- attention
// ------------------------------------------------------------------------------------

struct AttentionCase {
  std::vector<int64_t> batch;
  int64_t l, s, e, ev;
  int mask;  // 0 none, 1 bool, 2 float
  std::vector<int64_t> mask_shape;
  bool causal;
  double scale;  // 0 = unset
};

std::vector<int64_t> with(std::vector<int64_t> batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = {
      {{2}, 5, 7, 4, 3, 0, {}, false, 0},                // S != L, E != Ev
      {{2}, 6, 6, 8, 8, 0, {}, true, 0},                 // causal
      {{}, 7, 4, 5, 6, 0, {}, true, 0.3},                // rank 2, causal with S < L, scale
      {{2, 3}, 6, 6, 8, 5, 1, {6, 6}, false, 0},         // bool mask broadcast over batches
      {{2, 3}, 4, 9, 8, 5, 1, {2, 3, 4, 9}, true, 0},    // full bool mask and causal
      {{2, 3}, 6, 5, 4, 4, 2, {1, 3, 1, 5}, false, 0},   // float mask broadcast over rows
      {{2, 3}, 6, 5, 4, 4, 2, {2, 3, 6, 5}, true, 0.5},  // full float mask, causal
      {{3}, 5, 6, 4, 2, 2, {6}, false, 0},               // float mask of rank 1
      {{2}, 0, 4, 3, 3, 0, {}, false, 0},                // L = 0
      {{0}, 4, 4, 3, 3, 2, {4, 4}, false, 0},            // no batch element
  };
  return cases;
}

std::vector<In> attention_inputs(const AttentionCase& c, dx_dtype_t t) {
  std::vector<In> in = {In::random(t, with(c.batch, c.l, c.e), -1.5, 1.5, 41),
                        In::random(t, with(c.batch, c.s, c.e), -1.5, 1.5, 42),
                        In::random(t, with(c.batch, c.s, c.ev), -1, 1, 43)};
  if (c.mask == 0) {
    in.push_back(In::absent());
  } else if (c.mask == 1) {
    In m = In::random(DX_DTYPE_F64, c.mask_shape, 0, 1, 44);
    for (double& v : m.values) v = v < 0.75 ? 1 : 0;
    m.dtype = DX_DTYPE_BOOL;
    in.push_back(m);
  } else {
    In m = In::random(t, c.mask_shape, -1, 1, 45);
    for (size_t i = 0; i < m.values.size(); ++i) {
      if (i % 7 == 3) m.values[i] = -std::numeric_limits<double>::infinity();
    }
    in.push_back(m);
  }
  return in;
}

Attrs attention_attrs(const AttentionCase& c) {
  Attrs a;
  std::move(a).boolean("causal", c.causal);
  if (c.scale != 0) std::move(a).f64("scale", c.scale);
  return a;
}

TEST(ConvAttention, AttentionForwardAndBackward) {
  int index = 0;
  for (const AttentionCase& c : attention_cases()) {
    for (dx_dtype_t t : kFloatDtypes) {
      const std::string what = "attention case " + std::to_string(index) + " " + dtype_name(t);
      const std::vector<In> in = attention_inputs(c, t);
      const Out out(t, with(c.batch, c.l, c.ev));
      expect_close(diff().run("dx.scaled_dot_product_attention", in, {out}, attention_attrs(c)),
                   tolerance(t), tolerance(t), what);
      std::vector<In> bin = {In::random(t, with(c.batch, c.l, c.ev), -1, 1, 46)};
      for (const In& x : in) bin.push_back(x);
      bin.push_back(In::random(t, with(c.batch, c.l, c.ev), -1, 1, 47));
      const Out dq(t, with(c.batch, c.l, c.e)), dk(t, with(c.batch, c.s, c.e)),
          dv(t, with(c.batch, c.s, c.ev));
      const Out dmask =
          c.mask == 0 ? Out::absent() : Out(c.mask == 1 ? DX_DTYPE_BOOL : t, c.mask_shape);
      expect_close(diff().run("dx.scaled_dot_product_attention", bin, {dq, dk, dv, dmask},
                              attention_attrs(c), true),
                   tolerance(t), tolerance(t), what + " backward");
      expect_close(
          diff().run("dx.scaled_dot_product_attention", bin,
                     {Out::absent(), dk, Out::absent(), Out::absent()}, attention_attrs(c), true),
          tolerance(t), tolerance(t), what + " backward dk alone");
      if (c.mask == 2) {
        expect_close(diff().run("dx.scaled_dot_product_attention", bin,
                                {Out::absent(), Out::absent(), Out::absent(), dmask},
                                attention_attrs(c), true),
                     tolerance(t), tolerance(t), what + " backward dmask alone");
      }
    }
    ++index;
  }
}

TEST(ConvAttention, AttentionFullyMaskedRowsAndNonFinite) {
  for (dx_dtype_t t : kFloatDtypes) {
    const std::string what = dtype_name(t);
    // Row 1 has no live key: NaN, as the reference.
    In q = In::random(t, {1, 3, 4}, -1, 1, 51), k = In::random(t, {1, 5, 4}, -1, 1, 52);
    In v = In::random(t, {1, 5, 2}, -1, 1, 53);
    In mask = In::of(DX_DTYPE_BOOL, {3, 5}, {1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1});
    const Out out(t, {1, 3, 2});
    expect_close(diff().run("dx.scaled_dot_product_attention", {q, k, v, mask}, {out}),
                 tolerance(t), tolerance(t), what + " fully masked row");
    // An Inf in V behind a masked key contributes nothing.
    In v_inf = v;
    v_inf.values[4] = std::numeric_limits<double>::infinity();  // key 2, channel 0
    expect_close(diff().run("dx.scaled_dot_product_attention", {q, k, v_inf, mask}, {out}),
                 tolerance(t), tolerance(t), what + " inf value behind a mask");
    // A NaN score poisons its row.
    In q_nan = q;
    q_nan.values[0] = std::numeric_limits<double>::quiet_NaN();
    expect_close(diff().run("dx.scaled_dot_product_attention", {q_nan, k, v, mask}, {out}),
                 tolerance(t), tolerance(t), what + " nan query");
    // An Inf key behind a mask: gradients of q/k skip the zero terms.
    In k_inf = k;
    k_inf.values[8] = std::numeric_limits<double>::infinity();  // key 2
    const In dout = In::random(t, {1, 3, 2}, -1, 1, 54), y = In::random(t, {1, 3, 2}, -1, 1, 55);
    expect_close(
        diff().run("dx.scaled_dot_product_attention", {dout, q, k_inf, v, mask, y},
                   {Out(t, {1, 3, 4}), Out(t, {1, 5, 4}), Out(t, {1, 5, 2}), Out::absent()},
                   Attrs(), true),
        tolerance(t), tolerance(t), what + " inf key backward");
  }
}

TEST(ConvAttention, AttentionLargerF32) {
  // Several row blocks' worth of keys and OpenMP row loops.
  const dx_dtype_t t = DX_DTYPE_F32;
  const AttentionCase c{{2, 2}, 96, 80, 32, 24, 2, {96, 80}, true, 0};
  const std::vector<In> in = attention_inputs(c, t);
  expect_close(diff().run("dx.scaled_dot_product_attention", in, {Out(t, {2, 2, 96, 24})},
                          attention_attrs(c)),
               1e-4, 1e-4, "large attention");
  std::vector<In> bin = {In::random(t, {2, 2, 96, 24}, -1, 1, 46)};
  for (const In& x : in) bin.push_back(x);
  bin.push_back(In::random(t, {2, 2, 96, 24}, -1, 1, 47));
  expect_close(diff().run("dx.scaled_dot_product_attention", bin,
                          {Out(t, {2, 2, 96, 32}), Out(t, {2, 2, 80, 32}), Out(t, {2, 2, 80, 24}),
                           Out(t, {96, 80})},
                          attention_attrs(c), true),
               1e-4, 1e-4, "large attention backward");
}

// ---- bad calls ----------------------------------------------------------------------------------

TEST(ConvAttention, BadCallsRefusedLikeTheReference) {
  const dx_dtype_t t = DX_DTYPE_F32;
  const In x = In::random(t, {1, 4, 6, 6}), w = In::random(t, {2, 2, 3, 3}), b = In::random(t, {2});
  // groups does not divide / disagrees with the weight.
  expect_same_error(
      diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})}, Attrs().i64("groups", 3)),
      "groups 3");
  expect_same_error(diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})}),
                    "groups 1, weight for 2");
  expect_same_error(
      diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})}, Attrs().i64("groups", 0)),
      "groups 0");
  expect_same_error(diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})},
                               Attrs().i64("groups", 2).i64("stride", 0)),
                    "stride 0");
  expect_same_error(diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})},
                               Attrs().i64("groups", 2).i64s("padding", {1, 1, 1})),
                    "three paddings");
  expect_same_error(diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 4, 4})},
                               Attrs().i64("groups", 2).i64("dilation", -1)),
                    "negative dilation");
  expect_same_error(diff().run("dx.conv2d", {x, w, In::random(t, {3})}, {Out(t, {1, 2, 4, 4})},
                               Attrs().i64("groups", 2)),
                    "bias shape");
  expect_same_error(
      diff().run("dx.conv2d", {x, w, b}, {Out(t, {1, 2, 5, 4})}, Attrs().i64("groups", 2)),
      "output shape");
  expect_same_error(diff().run("dx.conv2d", {x, In::random(t, {2, 2, 9, 3}), b},
                               {Out(t, {1, 2, 1, 4})}, Attrs().i64("groups", 2)),
                    "kernel larger than the input");
  expect_same_error(diff().run("dx.conv2d", {In::random(t, {4, 6, 6}), w, b},
                               {Out(t, {1, 2, 4, 4})}, Attrs().i64("groups", 2)),
                    "rank 3 input");
  // Backward: a gradient for the absent bias; a wrong gradient shape.
  const In dy = In::random(t, {1, 2, 4, 4}), y = In::random(t, {1, 2, 4, 4});
  expect_same_error(diff().run("dx.conv2d", {dy, x, w, In::absent(), y},
                               {Out(t, {1, 4, 6, 6}), Out(t, {2, 2, 3, 3}), Out(t, {2})},
                               Attrs().i64("groups", 2), true),
                    "db without bias");
  expect_same_error(diff().run("dx.conv2d", {dy, x, w, b, y},
                               {Out(t, {1, 4, 6, 5}), Out(t, {2, 2, 3, 3}), Out(t, {2})},
                               Attrs().i64("groups", 2), true),
                    "dx shape");
  expect_same_error(diff().run("dx.conv2d", {In::random(t, {1, 2, 4, 3}), x, w, b, y},
                               {Out(t, {1, 4, 6, 6}), Out::absent(), Out::absent()},
                               Attrs().i64("groups", 2), true),
                    "dy shape");

  // Pooling.
  expect_same_error(diff().run("dx.max_pool2d", {x}, {Out(t, {1, 4, 3, 3})}), "no kernel");
  expect_same_error(diff().run("dx.avg_pool2d", {x}, {Out(t, {1, 4, 3, 3})},
                               Attrs().i64s("kernel", {2}).i64s("padding", {2})),
                    "padding above half the kernel");
  expect_same_error(
      diff().run("dx.max_pool2d", {x}, {Out(t, {1, 4, 1, 1})}, Attrs().i64s("kernel", {7})),
      "kernel larger than the input");
  expect_same_error(
      diff().run("dx.max_pool2d", {x}, {Out(t, {1, 4, 3, 2})}, Attrs().i64s("kernel", {2})),
      "pool output shape");
  expect_same_error(diff().run("dx.avg_pool2d", {x}, {Out(t, {1, 4, 3, 3})},
                               Attrs().i64s("kernel", {2}).i64s("stride", {0})),
                    "stride 0");
  expect_same_error(diff().run("dx.avg_pool2d", {In::random(t, {4, 6, 6})}, {Out(t, {4, 3, 3})},
                               Attrs().i64s("kernel", {2})),
                    "rank 3 pool input");

  // Attention.
  const In q = In::random(t, {2, 3, 4}), k = In::random(t, {2, 5, 4}), v = In::random(t, {2, 5, 6});
  const Out out(t, {2, 3, 6});
  expect_same_error(diff().run("dx.scaled_dot_product_attention",
                               {q, k, In::random(t, {2, 4, 6}), In::absent()}, {out}),
                    "v keys differ");
  expect_same_error(diff().run("dx.scaled_dot_product_attention",
                               {q, In::random(t, {2, 5, 3}), v, In::absent()}, {out}),
                    "k width differs");
  expect_same_error(diff().run("dx.scaled_dot_product_attention",
                               {q, In::random(t, {1, 5, 4}), v, In::absent()}, {out}),
                    "batch differs");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention", {q, k, v, In::random(t, {3, 4})}, {out}),
      "mask does not broadcast");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention", {q, k, v, In::random(t, {1, 2, 3, 5})}, {out}),
      "mask of higher rank");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention", {q, k, v, In::absent()}, {Out(t, {2, 3, 5})}),
      "output shape");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention",
                 {In::random(t, {4}), In::random(t, {4}), In::random(t, {4}), In::absent()},
                 {Out(t, {4})}),
      "rank 1");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention",
                 {In::random(t, {2, 3, 6}), q, k, v, In::absent(), In::random(t, {2, 3, 6})},
                 {Out(t, {2, 3, 4}), Out(t, {2, 5, 4}), Out(t, {2, 5, 6}), Out(t, {2, 3, 5})},
                 Attrs(), true),
      "dmask without a mask");
  expect_same_error(
      diff().run("dx.scaled_dot_product_attention",
                 {In::random(t, {2, 3, 6}), q, k, v, In::absent(), In::random(t, {2, 3, 6})},
                 {Out(t, {2, 3, 4}), Out(t, {2, 5, 5}), Out::absent(), Out::absent()}, Attrs(),
                 true),
      "dk shape");
}

}  // namespace
}  // namespace deepx::cpu::testing
