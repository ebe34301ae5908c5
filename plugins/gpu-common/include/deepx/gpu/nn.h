// Bodies of the neural-network kernels (src/nn.cu, src/conv.cu, src/attention.cu): linear's
// bias epilogue, log_softmax, layer_norm, rms_norm, batch_norm, embedding, cross_entropy, the
// conv2d im2col / col2im gathers, the pools and the attention steps, forward and backward.
//
// Row bodies (one block per normalisation row, channel or softmax line) follow one interface,
// run by launch_rows() (src/nn_launch.h): `kPhases` block reductions in f64, each a strided fold
// (`partial`) then a fixed tree over shared memory combining with sums or NaN-propagating
// maxima (`is_max`), whose results feed the later phases and the final `write` pass. Every
// statistic is accumulated in f64 (as the reference does) and each output is rounded once.
// Gradients are gathers (each output element sums its own contributions in a fixed order), so
// every kernel is deterministic and needs no atomics.
#ifndef DEEPX_GPU_NN_H_
#define DEEPX_GPU_NN_H_

#include <math.h>
#include <stdint.h>

#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

/// The tree's combine: a sum, or a maximum where a NaN wins (it poisons its row).
DXG_HD double row_combine(bool is_max, double a, double b) {
  if (!is_max) return a + b;
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}
DXG_HD bool nn_is_inf(double v) { return v == HUGE_VAL || v == -HUGE_VAL; }
/// A positive quiet NaN (the reference's quiet_NaN(); `0.0 / 0.0` has a sign that depends on the
/// processor).
DXG_HD double nn_quiet_nan() { return static_cast<double>(bits_to_float(0x7fc00000u)); }

template <class T>
DXG_HD double nn_load(const T* p, int64_t offset) {
  return static_cast<double>(Num<T>::load(p[offset]));
}
template <class T>
DXG_HD void nn_store(T* p, int64_t offset, double v) {
  store_from_double(&p[offset], dtype_of<T>(), v);
}

// ---- generic element movers -----------------------------------------------------------------

/// out[i] = in[i] for one element word type W (bytes moved unchanged). Operands 0 = out, 1 = in.
template <class W>
struct CopyWordsFn {
  Layout layout;
  W* out;
  const W* in;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = in[off[1]];
  }
};

/// Zero bytes in every element of a tensor of any dtype (0 / +0.0 / false). Operand 0.
struct ZeroBytesFn {
  Layout layout;
  char* out;
  int size;
  DXG_HD void operator()(int64_t i) const {
    char* p = out + layout_offset(layout, 0, i) * size;
    for (int b = 0; b < size; ++b) p[b] = 0;
  }
};

/// y = round(acc + bias) from an f64 accumulator buffer (linear, conv2d). Operands 0 = y,
/// 1 = buffer, 2 = bias (broadcast; ignored when null).
template <class T>
struct BiasRoundFn {
  Layout layout;
  T* y;
  const double* acc;
  const T* bias;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    double v = acc[off[1]];
    if (bias != nullptr) v += nn_load(bias, off[2]);
    nn_store(y, off[0], v);
  }
};

// ---- log_softmax ------------------------------------------------------------------------------

/// Forward: out = (x - max) - log(sum(exp(x - max))), never x - (max + log(sum)): max + log(sum)
/// rounds to max at huge logits and the difference cancels. `outer` operands: 0 = out, 1 = x.
template <class T>
struct LogSoftmaxFn {
  static constexpr int kPhases = 2;
  Layout outer;
  int64_t length, x_stride, out_stride;
  const T* x;
  T* out;
  DXG_HD bool is_max(int phase) const { return phase == 0; }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const T* row = x + layout_offset(outer, 1, o);
    double acc = phase == 0 ? -HUGE_VAL : 0.0;
    for (int64_t j = t; j < length; j += n) {
      const double v = nn_load(row, j * x_stride);
      acc = phase == 0 ? row_combine(true, acc, v) : acc + exp(v - r[0]);
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const T* row = x + layout_offset(outer, 1, o);
    T* dst = out + layout_offset(outer, 0, o);
    const double log_sum = log(r[1]);
    for (int64_t j = t; j < length; j += n) nn_store(dst, j * out_stride, (nn_load(row, j * x_stride) - r[0]) - log_sum);
  }
};

/// Backward: dx = dy - softmax(x) * sum(dy). `outer` operands: 0 = dx, 1 = x, 2 = dy.
template <class T>
struct LogSoftmaxGradFn {
  static constexpr int kPhases = 3;
  Layout outer;
  int64_t length, x_stride, dy_stride, dx_stride;
  const T* x;
  const T* dy;
  T* dx;
  bool constant;  // rank 0: log_softmax of one element is constant, its gradient 0
  DXG_HD bool is_max(int phase) const { return phase == 0; }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const T* xr = x + layout_offset(outer, 1, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    double acc = phase == 0 ? -HUGE_VAL : 0.0;
    for (int64_t j = t; j < length; j += n) {
      if (phase == 0) acc = row_combine(true, acc, nn_load(xr, j * x_stride));
      else if (phase == 1) acc += exp(nn_load(xr, j * x_stride) - r[0]);
      else acc += nn_load(gr, j * dy_stride);
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const T* xr = x + layout_offset(outer, 1, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    T* dst = dx + layout_offset(outer, 0, o);
    for (int64_t j = t; j < length; j += n) {
      const double s = exp(nn_load(xr, j * x_stride) - r[0]) / r[1];
      nn_store(dst, j * dx_stride, constant ? 0.0 : nn_load(gr, j * dy_stride) - s * r[2] + 0.0);
    }
  }
};

// ---- layer_norm -------------------------------------------------------------------------------

/// One thread's share of a two-phase mean/variance reduction over the elements `members`
/// addresses from `base`: phase 0 sums the values, phase 1 sums the squared deviations from
/// the mean r[0] / count (r holds the earlier phases' block results). f64 throughout.
template <class T>
DXG_HD double moment_partial(const T* base, const Layout& members, int64_t t, int n, int phase, const double* r) {
  const double m = phase == 0 ? 0.0 : r[0] / static_cast<double>(members.count);
  double acc = 0;
  for (int64_t j = t; j < members.count; j += n) {
    const double v = nn_load(base, layout_offset(members, 0, j));
    acc += phase == 0 ? v : (v - m) * (v - m);
  }
  return acc;
}

/// Forward. `outer` (rows) operands: 0 = x, 1 = y, 2 = mean, 3 = rstd; `inner` (the normalised
/// elements) operands: 0 = x, 1 = y, 2 = weight, 3 = bias (weight, bias may be null).
template <class T>
struct LayerNormFn {
  static constexpr int kPhases = 2;
  Layout outer, inner;
  const T* x;
  T* y;
  T* mean;
  T* rstd;
  const T* w;
  const T* b;
  double eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    return moment_partial(x + layout_offset(outer, 0, o), inner, t, n, phase, r);
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const double count = static_cast<double>(inner.count);
    const double m = r[0] / count, s = 1.0 / sqrt(r[1] / count + eps);
    const T* row = x + layout_offset(outer, 0, o);
    T* dst = y + layout_offset(outer, 1, o);
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      const double wv = w != nullptr ? nn_load(w, off[2]) : 1.0, bv = b != nullptr ? nn_load(b, off[3]) : 0.0;
      nn_store(dst, off[1], (nn_load(row, off[0]) - m) * s * wv + bv);
    }
    if (t == 0) {
      nn_store(mean, layout_offset(outer, 2, o), m);
      nn_store(rstd, layout_offset(outer, 3, o), s);
    }
  }
};

/// Backward, dx part (dy, dmean, drstd all contribute) and the per-row statistics for the
/// parameter gradients. `outer` operands: 0 = x, 1 = dx, 2 = dy; `stats_outer`: 0 = dmean,
/// 1 = drstd; `inner`: 0 = x, 1 = dx, 2 = dy, 3 = weight. `stats` (2 f64 per row: mean, rstd).
template <class T>
struct LayerNormGradFn {
  static constexpr int kPhases = 4;
  Layout outer, stats_outer, inner;
  const T* x;
  const T* dy;
  const T* dmean;
  const T* drstd;
  const T* w;
  T* dx;  // null: not wanted
  double* stats;
  double eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double mean_of(const double* r) const { return r[0] / static_cast<double>(inner.count); }
  DXG_HD double rstd_of(const double* r) const { return 1.0 / sqrt(r[1] / static_cast<double>(inner.count) + eps); }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const T* xr = x + layout_offset(outer, 0, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    double acc = 0;
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      const double v = nn_load(xr, off[0]);
      if (phase == 0) {
        acc += v;
      } else if (phase == 1) {
        const double d = v - mean_of(r);
        acc += d * d;
      } else {
        const double dxhat = nn_load(gr, off[2]) * (w != nullptr ? nn_load(w, off[3]) : 1.0);
        acc += phase == 2 ? dxhat : dxhat * (v - mean_of(r)) * rstd_of(r);
      }
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const double count = static_cast<double>(inner.count);
    const double m = mean_of(r), s = rstd_of(r);
    if (t == 0) {
      stats[2 * o] = m;
      stats[2 * o + 1] = s;
    }
    if (dx == nullptr) return;
    const double mean_dxhat = r[2] / count, mean_dxhat_xhat = r[3] / count;
    const double gm = nn_load(dmean, layout_offset(stats_outer, 0, o));
    const double gs = nn_load(drstd, layout_offset(stats_outer, 1, o));
    const T* xr = x + layout_offset(outer, 0, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    T* dst = dx + layout_offset(outer, 1, o);
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      const double v = nn_load(xr, off[0]);
      const double xhat = (v - m) * s;
      const double dxhat = nn_load(gr, off[2]) * (w != nullptr ? nn_load(w, off[3]) : 1.0);
      const double through_y = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      const double through_stats = gm / count - gs * s * s * s * (v - m) / count;
      nn_store(dst, off[1], through_y + through_stats + 0.0);
    }
  }
};

/// Parameter gradients of layer_norm / rms_norm, into f64 buffers: for each normalised element
/// e, summed over the rows in order, gw[e] = sum g * xhat and gb[e] = sum g, with
/// xhat = (x - stats[2r]) * stats[2r + 1] (rms_norm: mean 0). `outer` operands: 0 = x, 1 = dy;
/// `inner`: 0 = x, 1 = dy, 2 = gw, 3 = gb.
template <class T>
struct NormParamGradFn {
  Layout outer, inner;
  const T* x;
  const T* dy;
  const double* stats;
  double* gw;
  double* gb;
  DXG_HD void operator()(int64_t e) const {
    int64_t off[kMaxOperands];
    layout_offsets(inner, e, off);
    double sw = 0, sb = 0;
    for (int64_t o = 0; o < outer.count; ++o) {
      const double g = nn_load(dy + layout_offset(outer, 1, o), off[1]);
      const double v = nn_load(x + layout_offset(outer, 0, o), off[0]);
      sw += g * ((v - stats[2 * o]) * stats[2 * o + 1]);
      sb += g;
    }
    gw[off[2]] = sw;
    gb[off[3]] = sb;
  }
};

// ---- rms_norm ---------------------------------------------------------------------------------

/// Forward: y = x / sqrt(mean(x^2) + eps) * w. `outer` operands: 0 = x, 1 = y; `inner`: 0 = x,
/// 1 = y, 2 = weight (may be null).
template <class T>
struct RmsNormFn {
  static constexpr int kPhases = 1;
  Layout outer, inner;
  const T* x;
  T* y;
  const T* w;
  double eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double partial(int64_t o, int t, int n, int, const double*) const {
    const T* row = x + layout_offset(outer, 0, o);
    double acc = 0;
    for (int64_t j = t; j < inner.count; j += n) {
      const double v = nn_load(row, layout_offset(inner, 0, j));
      acc += v * v;
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const double s = 1.0 / sqrt(r[0] / static_cast<double>(inner.count) + eps);
    const T* row = x + layout_offset(outer, 0, o);
    T* dst = y + layout_offset(outer, 1, o);
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      nn_store(dst, off[1], nn_load(row, off[0]) * s * (w != nullptr ? nn_load(w, off[2]) : 1.0));
    }
  }
};

/// Backward: dx = r (dxhat - x r mean(dxhat x r)), dxhat = dy w. `outer` operands: 0 = x,
/// 1 = dx, 2 = dy; `inner`: 0 = x, 1 = dx, 2 = dy, 3 = weight. Writes (0, r) per row to `stats`.
template <class T>
struct RmsNormGradFn {
  static constexpr int kPhases = 2;
  Layout outer, inner;
  const T* x;
  const T* dy;
  const T* w;
  T* dx;  // null: not wanted
  double* stats;
  double eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double rstd_of(const double* r) const { return 1.0 / sqrt(r[0] / static_cast<double>(inner.count) + eps); }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const T* xr = x + layout_offset(outer, 0, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    double acc = 0;
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      const double v = nn_load(xr, off[0]);
      if (phase == 0) {
        acc += v * v;
      } else {
        const double dxhat = nn_load(gr, off[2]) * (w != nullptr ? nn_load(w, off[3]) : 1.0);
        acc += dxhat * v * rstd_of(r);
      }
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const double s = rstd_of(r);
    if (t == 0) {
      stats[2 * o] = 0.0;
      stats[2 * o + 1] = s;
    }
    if (dx == nullptr) return;
    const double m = r[1] / static_cast<double>(inner.count);
    const T* xr = x + layout_offset(outer, 0, o);
    const T* gr = dy + layout_offset(outer, 2, o);
    T* dst = dx + layout_offset(outer, 1, o);
    for (int64_t j = t; j < inner.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(inner, j, off);
      const double v = nn_load(xr, off[0]);
      const double dxhat = nn_load(gr, off[2]) * (w != nullptr ? nn_load(w, off[3]) : 1.0);
      nn_store(dst, off[1], s * (dxhat - v * s * m) + 0.0);
    }
  }
};

// ---- batch_norm -------------------------------------------------------------------------------

/// Per-channel (C,) tensors of batch_norm: base and stride (null base = absent).
template <class T>
struct ChannelVec {
  T* p;
  int64_t stride;
  DXG_HD double get(int64_t c, double fallback) const { return p != nullptr ? nn_load(p, c * stride) : fallback; }
  DXG_HD void set(int64_t c, double v) const {
    if (p != nullptr) nn_store(p, c * stride, v);
  }
};

/// Forward, one block per channel. `members` (N, spatial...) operands: 0 = x, 1 = y; the
/// channel's base is c * x_cstride (y_cstride). Training: batch statistics (biased variance),
/// running stats updated in place (unbiased variance) by thread 0; evaluation: running stats.
template <class T>
struct BatchNormFn {
  static constexpr int kPhases = 2;
  Layout members;
  int64_t x_cstride, y_cstride;
  const T* x;
  T* y;
  ChannelVec<T> w, b, running_mean, running_var;
  bool training;
  double momentum, eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double partial(int64_t c, int t, int n, int phase, const double* r) const {
    if (!training) return 0.0;
    return moment_partial(x + c * x_cstride, members, t, n, phase, r);
  }
  DXG_HD void write(int64_t c, int t, int n, const double* r) const {
    const double count = static_cast<double>(members.count);
    const double m = training ? r[0] / count : running_mean.get(c, 0.0);
    const double var = training ? r[1] / count : running_var.get(c, 1.0);
    const double s = 1.0 / sqrt(var + eps);
    const double wv = w.get(c, 1.0), bv = b.get(c, 0.0);
    const T* xc = x + c * x_cstride;
    T* yc = y + c * y_cstride;
    for (int64_t j = t; j < members.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(members, j, off);
      nn_store(yc, off[1], (nn_load(xc, off[0]) - m) * s * wv + bv);
    }
    if (t == 0 && training && running_mean.p != nullptr && running_var.p != nullptr && members.count > 0) {
      const double unbiased = count > 1 ? var * count / (count - 1) : nn_quiet_nan();
      const double rm = running_mean.get(c, 0.0), rv = running_var.get(c, 1.0);
      running_mean.set(c, (1 - momentum) * rm + momentum * m);
      running_var.set(c, (1 - momentum) * rv + momentum * unbiased);
    }
  }
};

/// Backward, one block per channel: dx, and by thread 0 dw, db and (evaluation) the running
/// stats' gradients (zero in training, where they do not affect y). `members` operands: 0 = x, 1 = dy, 2 = dx.
template <class T>
struct BatchNormGradFn {
  static constexpr int kPhases = 5;
  Layout members;
  int64_t x_cstride, dy_cstride, dx_cstride;
  const T* x;
  const T* dy;
  T* dx;  // null: not wanted
  ChannelVec<const T> w, running_mean, running_var;
  ChannelVec<double> dw, db, drm, drv;  // f64 (C,) buffers, rounded into the outputs afterwards
  bool training;
  double eps;
  DXG_HD bool is_max(int) const { return false; }
  DXG_HD double mean_of(int64_t c, const double* r) const {
    return training ? r[0] / static_cast<double>(members.count) : running_mean.get(c, 0.0);
  }
  DXG_HD double rstd_of(int64_t c, const double* r) const {
    const double var = training ? r[1] / static_cast<double>(members.count) : running_var.get(c, 1.0);
    return 1.0 / sqrt(var + eps);
  }
  DXG_HD double partial(int64_t c, int t, int n, int phase, const double* r) const {
    if (!training && phase < 2) return 0.0;
    const T* xc = x + c * x_cstride;
    const T* gc = dy + c * dy_cstride;
    const double m = phase == 0 ? 0.0 : mean_of(c, r);
    const double s = phase < 2 ? 0.0 : rstd_of(c, r);
    double acc = 0;
    for (int64_t j = t; j < members.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(members, j, off);
      const double v = nn_load(xc, off[0]);
      switch (phase) {
        case 0: acc += v; break;
        case 1: acc += (v - m) * (v - m); break;
        case 2: acc += nn_load(gc, off[1]); break;
        case 3: acc += nn_load(gc, off[1]) * ((v - m) * s); break;
        default: acc += nn_load(gc, off[1]) * (v - m); break;
      }
    }
    return acc;
  }
  DXG_HD void write(int64_t c, int t, int n, const double* r) const {
    const double count = static_cast<double>(members.count);
    const double m = mean_of(c, r), s = rstd_of(c, r), wv = w.get(c, 1.0);
    const double sum_g = r[2], sum_g_xhat = r[3];
    if (t == 0) {
      const bool any = members.count > 0;
      dw.set(c, any ? sum_g_xhat + 0.0 : 0.0);
      db.set(c, any ? sum_g + 0.0 : 0.0);
      drm.set(c, !training && any ? -wv * s * sum_g + 0.0 : 0.0);
      drv.set(c, !training && any ? -0.5 * wv * s * s * s * r[4] + 0.0 : 0.0);
    }
    if (dx == nullptr) return;
    const T* xc = x + c * x_cstride;
    const T* gc = dy + c * dy_cstride;
    T* dc = dx + c * dx_cstride;
    for (int64_t j = t; j < members.count; j += n) {
      int64_t off[kMaxOperands];
      layout_offsets(members, j, off);
      const double g = nn_load(gc, off[1]);
      const double xhat = (nn_load(xc, off[0]) - m) * s;
      const double d = training ? wv * s * (g - sum_g / count - xhat * sum_g_xhat / count) : wv * s * g;
      nn_store(dc, off[2], d + 0.0);
    }
  }
};

// ---- embedding --------------------------------------------------------------------------------

/// Sets *flag when an index is outside [0, rows). Operand 0 = indices.
template <class I>
struct EmbeddingIndexCheckFn {
  Layout layout;
  const I* idx;
  int64_t rows;
  int* flag;
  DXG_HD void operator()(int64_t i) const {
    const int64_t v = static_cast<int64_t>(idx[layout_offset(layout, 0, i)]);
    if (v < 0 || v >= rows) *flag = 1;
  }
};

/// out[i..., d] = weight[idx[i...], d], bytes moved unchanged. `positions` (the index shape)
/// operands: 0 = indices, 1 = out (its leading dims).
template <class W, class I>
struct EmbeddingFn {
  Layout positions;
  int64_t dim, w_rs, w_cs, out_cs;
  const I* idx;
  const W* w;
  W* out;
  DXG_HD void operator()(int64_t e) const {
    const int64_t p = e / dim, d = e % dim;
    int64_t off[kMaxOperands];
    layout_offsets(positions, p, off);
    const int64_t row = static_cast<int64_t>(idx[off[0]]);
    out[off[1] + d * out_cs] = w[row * w_rs + d * w_cs];
  }
};

/// Weight gradient, one thread per column d: sums dy rows into an f64 (rows x dim) buffer in the
/// order of the index positions (the reference's order). `positions` operands: 0 = indices,
/// 1 = dy (its leading dims).
template <class T, class I>
struct EmbeddingGradFn {
  Layout positions;
  int64_t dim, dy_cs;
  const I* idx;
  const T* dy;
  double* buffer;
  DXG_HD void operator()(int64_t d) const {
    for (int64_t p = 0; p < positions.count; ++p) {
      int64_t off[kMaxOperands];
      layout_offsets(positions, p, off);
      const int64_t row = static_cast<int64_t>(idx[off[0]]);
      buffer[row * dim + d] += nn_load(dy, off[1] + d * dy_cs);
    }
  }
};

// ---- cross_entropy ----------------------------------------------------------------------------

/// One thread: checks every label (out of range and not ignored -> result[0] = 1) and counts
/// the rows not ignored (result[1]).
struct LabelCheckFn {
  const int64_t* labels;
  int64_t stride, rows, classes, ignore_index;
  int64_t* result;
  DXG_HD void operator()(int64_t) const {
    int64_t bad = 0, counted = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t label = labels[r * stride];
      if (label == ignore_index) continue;
      if (label < 0 || label >= classes) bad = 1;
      ++counted;
    }
    result[0] = bad;
    result[1] = counted;
  }
};

/// log(sum(exp(x - max))) from the line's max and sum(exp(x - max)), as the reference: a NaN
/// line gives NaN, an infinite max 0 (so max + it is the max). Kept apart from the max because
/// max + log(sum) rounds to max at huge logits and what is subtracted from it then cancels.
DXG_HD double nn_log_sum_shifted(double max, double sum) {
  if (max != max) return max;
  if (nn_is_inf(max)) return 0.0;
  return log(sum);
}

/// Rows of logits (row stride, class stride): forward losses into `losses` (f64 per row) or,
/// with `grad`, the gradient g * (softmax - onehot) into dlogits.
template <class T>
struct CrossEntropyRowFn {
  static constexpr int kPhases = 2;
  const T* logits;
  int64_t l_rs, l_cs, classes;
  const int64_t* labels;
  int64_t label_stride, ignore_index;
  double* losses;  // forward
  // backward:
  T* grad;  // null in the forward
  int64_t g_rs, g_cs;
  const T* dy;
  int64_t dy_stride;  // per row when reduction is none and batched, else 0
  double divisor;     // counted rows for a mean, else 1
  DXG_HD bool is_max(int phase) const { return phase == 0; }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const T* row = logits + o * l_rs;
    double acc = phase == 0 ? -HUGE_VAL : 0.0;
    for (int64_t c = t; c < classes; c += n) {
      const double v = nn_load(row, c * l_cs);
      acc = phase == 0 ? row_combine(true, acc, v) : acc + exp(v - r[0]);
    }
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    const int64_t label = labels[o * label_stride];
    const T* row = logits + o * l_rs;
    const double m = r[0], log_sum = nn_log_sum_shifted(r[0], r[1]);
    if (grad == nullptr) {
      // log(sum) - (x - max), which keeps log 2 for [1e17, 1e17, 0, 0]; max - x when the max
      // is infinite (the reference's Inf / NaN).
      if (t != 0) return;
      if (label == ignore_index) {
        losses[o] = 0.0;
        return;
      }
      const double x = nn_load(row, label * l_cs);
      losses[o] = nn_is_inf(m) ? m - x : log_sum - (x - m);
      return;
    }
    const double scale = nn_load(dy, o * dy_stride) / divisor;
    for (int64_t c = t; c < classes; c += n) {
      const double v = label == ignore_index
                           ? 0.0
                           : scale * (exp((nn_load(row, c * l_cs) - m) - log_sum) - (c == label ? 1.0 : 0.0)) + 0.0;
      nn_store(grad + o * g_rs, c * g_cs, v);
    }
  }
};

/// One thread: the reduction of the per-row losses, in row order (none: copy each).
template <class T>
struct CrossEntropyReduceFn {
  const double* losses;
  int64_t rows, out_stride;
  T* out;
  int mode;  // 0 none, 1 mean, 2 sum
  double counted;
  DXG_HD void operator()(int64_t) const {
    if (mode == 0) {
      for (int64_t r = 0; r < rows; ++r) nn_store(out, r * out_stride, losses[r]);
      return;
    }
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) total += losses[r];
    nn_store(out, 0, mode == 2 ? total : total / counted);
  }
};

// ---- conv2d ---------------------------------------------------------------------------------

/// Geometry of a conv2d call (element strides of x).
struct ConvGeometry {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo, groups;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  DXG_HD int64_t cin_g() const { return cin / groups; }
  DXG_HD int64_t cout_g() const { return cout / groups; }
  DXG_HD int64_t k() const { return cin_g() * kh * kw; }
  DXG_HD int64_t p() const { return ho * wo; }
};

/// im2col of batches [n0, n0 + count): col[n][g][k][p] (compact) = x at the tap, 0 in padding.
template <class T>
struct Im2colFn {
  ConvGeometry c;
  int64_t n0;
  const T* x;
  int64_t xs[4];
  T* col;
  DXG_HD void operator()(int64_t e) const {
    const int64_t p = e % c.p(), k = (e / c.p()) % c.k(), g = (e / (c.p() * c.k())) % c.groups;
    const int64_t n = n0 + e / (c.p() * c.k() * c.groups);
    const int64_t kw = k % c.kw, kh = (k / c.kw) % c.kh, ci = k / (c.kw * c.kh);
    const int64_t oh = p / c.wo, ow = p % c.wo;
    const int64_t ih = oh * c.stride_h - c.pad_h + kh * c.dil_h, iw = ow * c.stride_w - c.pad_w + kw * c.dil_w;
    T v{};
    if (ih >= 0 && ih < c.h && iw >= 0 && iw < c.w) {
      v = x[n * xs[0] + (g * c.cin_g() + ci) * xs[1] + ih * xs[2] + iw * xs[3]];
    }
    col[e] = v;
  }
};

/// col2im gather of batches [n0, n0 + count): each x element sums its taps of the f64 dcol
/// (n, g, k, p) buffer into the f64 dx buffer (compact N, C, H, W).
struct Col2imFn {
  ConvGeometry c;
  int64_t n0;
  const double* dcol;
  double* dx;
  DXG_HD void operator()(int64_t e) const {
    const int64_t iw = e % c.w, ih = (e / c.w) % c.h, ch = (e / (c.w * c.h)) % c.cin;
    const int64_t nl = e / (c.w * c.h * c.cin);
    const int64_t g = ch / c.cin_g(), ci = ch % c.cin_g();
    const double* base = dcol + (nl * c.groups + g) * c.k() * c.p();
    double acc = 0;
    for (int64_t kh = 0; kh < c.kh; ++kh) {
      const int64_t th = ih + c.pad_h - kh * c.dil_h;
      if (th < 0 || th % c.stride_h != 0) continue;
      const int64_t oh = th / c.stride_h;
      if (oh >= c.ho) continue;
      for (int64_t kw = 0; kw < c.kw; ++kw) {
        const int64_t tw = iw + c.pad_w - kw * c.dil_w;
        if (tw < 0 || tw % c.stride_w != 0) continue;
        const int64_t ow = tw / c.stride_w;
        if (ow >= c.wo) continue;
        acc += base[((ci * c.kh + kh) * c.kw + kw) * c.p() + oh * c.wo + ow];
      }
    }
    dx[(n0 * c.cin * c.h * c.w) + e] = acc;
  }
};

// ---- pooling ----------------------------------------------------------------------------------

struct PoolGeometry {
  int64_t n, c, h, w, ho, wo, kh, kw, sh, sw, ph, pw;
};

/// The window of output (oh, ow) clipped to the input: rows [h0, h1), columns [w0, w1).
DXG_HD void pool_window(const PoolGeometry& g, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0,
                        int64_t& w1) {
  h0 = oh * g.sh - g.ph;
  w0 = ow * g.sw - g.pw;
  h1 = h0 + g.kh < g.h ? h0 + g.kh : g.h;
  w1 = w0 + g.kw < g.w ? w0 + g.kw : g.w;
  h0 = h0 < 0 ? 0 : h0;
  w0 = w0 < 0 ? 0 : w0;
}

/// The window's maximum position (the first NaN, else the first maximum); false when empty.
template <class T>
DXG_HD bool pool_argmax(const PoolGeometry& g, const T* plane, const int64_t* xs, int64_t oh, int64_t ow,
                        int64_t& bh, int64_t& bw) {
  int64_t h0, h1, w0, w1;
  pool_window(g, oh, ow, h0, h1, w0, w1);
  if (h0 >= h1 || w0 >= w1) return false;
  bh = h0;
  bw = w0;
  double best = nn_load(plane, h0 * xs[2] + w0 * xs[3]);
  for (int64_t ih = h0; ih < h1 && best == best; ++ih) {
    for (int64_t iw = (ih == h0 ? w0 + 1 : w0); iw < w1 && best == best; ++iw) {
      const double v = nn_load(plane, ih * xs[2] + iw * xs[3]);
      if (v != v || v > best) {
        best = v;
        bh = ih;
        bw = iw;
      }
    }
  }
  return true;
}

/// Forward, one thread per output element (n, c, oh, ow).
template <class T>
struct PoolFn {
  PoolGeometry g;
  bool is_max;
  const T* x;
  int64_t xs[4];
  T* y;
  int64_t ys[4];
  DXG_HD void operator()(int64_t e) const {
    const int64_t ow = e % g.wo, oh = (e / g.wo) % g.ho, ch = (e / (g.wo * g.ho)) % g.c, n = e / (g.wo * g.ho * g.c);
    const T* plane = x + n * xs[0] + ch * xs[1];
    T* dst = y + n * ys[0] + ch * ys[1] + oh * ys[2] + ow * ys[3];
    if (is_max) {
      int64_t bh = 0, bw = 0;
      const double v = pool_argmax(g, plane, xs, oh, ow, bh, bw) ? nn_load(plane, bh * xs[2] + bw * xs[3]) : nn_quiet_nan();
      nn_store(dst, 0, v);
      return;
    }
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, ow, h0, h1, w0, w1);
    double sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += nn_load(plane, ih * xs[2] + iw * xs[3]);
    const int64_t members = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    nn_store(dst, 0, sum / static_cast<double>(members));
  }
};

/// Backward, one thread per input element: the windows containing it, in output order.
template <class T>
struct PoolGradFn {
  PoolGeometry g;
  bool is_max;
  const T* x;
  int64_t xs[4];
  const T* dy;
  int64_t dys[4];
  T* dx;
  int64_t dxs[4];
  DXG_HD void operator()(int64_t e) const {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, ch = (e / (g.w * g.h)) % g.c, n = e / (g.w * g.h * g.c);
    const T* plane = x + n * xs[0] + ch * xs[1];
    const T* gplane = dy + n * dys[0] + ch * dys[1];
    const int64_t lo_h = ih + g.ph - (g.kh - 1), lo_w = iw + g.pw - (g.kw - 1);
    const int64_t oh0 = lo_h <= 0 ? 0 : (lo_h + g.sh - 1) / g.sh, ow0 = lo_w <= 0 ? 0 : (lo_w + g.sw - 1) / g.sw;
    int64_t oh1 = (ih + g.ph) / g.sh, ow1 = (iw + g.pw) / g.sw;
    oh1 = oh1 < g.ho - 1 ? oh1 : g.ho - 1;
    ow1 = ow1 < g.wo - 1 ? ow1 : g.wo - 1;
    double acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const double gv = nn_load(gplane, oh * dys[2] + ow * dys[3]);
        if (is_max) {
          int64_t bh = 0, bw = 0;
          if (pool_argmax(g, plane, xs, oh, ow, bh, bw) && bh == ih && bw == iw) acc += gv;
        } else {
          int64_t h0, h1, w0, w1;
          pool_window(g, oh, ow, h0, h1, w0, w1);
          acc += gv / static_cast<double>((h1 - h0) * (w1 - w0));
        }
      }
    }
    nn_store(dx, n * dxs[0] + ch * dxs[1] + ih * dxs[2] + iw * dxs[3], acc + 0.0);
  }
};

// ---- scaled_dot_product_attention (compact f64 operands: q (B, L, E), k (B, S, E), v (B, S, Ev))

struct AttentionGeometry {
  int64_t batch, l, s, e, ev;
  double scale;
  bool causal;
};

/// scores[b, i, j] = scale (q_i . k_j) (+ additive mask); a masked key holds -Inf unless its
/// score is NaN (a NaN anywhere in the row poisons it, as in the reference).
struct AttentionScoresFn {
  AttentionGeometry g;
  const double* q;
  const double* k;
  const double* mask;  // (B, L, S) or null
  bool bool_mask;
  double* scores;
  DXG_HD void operator()(int64_t idx) const {
    const int64_t j = idx % g.s, i = (idx / g.s) % g.l, b = idx / (g.s * g.l);
    const double* qi = q + (b * g.l + i) * g.e;
    const double* kj = k + (b * g.s + j) * g.e;
    double score = 0;
    for (int64_t d = 0; d < g.e; ++d) score += qi[d] * kj[d];
    score *= g.scale;
    bool live = !(g.causal && j > i);
    if (mask != nullptr) {
      if (bool_mask) live = live && mask[idx] != 0;
      else score += mask[idx];
    }
    scores[idx] = live || score != score ? score : -HUGE_VAL;
  }
};

/// Softmax of each compact f64 row of `length`, in place (the probabilities).
struct SoftmaxRowsFn {
  static constexpr int kPhases = 2;
  double* data;
  int64_t length;
  DXG_HD bool is_max(int phase) const { return phase == 0; }
  DXG_HD double partial(int64_t o, int t, int n, int phase, const double* r) const {
    const double* row = data + o * length;
    double acc = phase == 0 ? -HUGE_VAL : 0.0;
    for (int64_t j = t; j < length; j += n) acc = phase == 0 ? row_combine(true, acc, row[j]) : acc + exp(row[j] - r[0]);
    return acc;
  }
  DXG_HD void write(int64_t o, int t, int n, const double* r) const {
    double* row = data + o * length;
    for (int64_t j = t; j < length; j += n) row[j] = r[0] != r[0] ? r[0] : exp(row[j] - r[0]) / r[1];
  }
};

/// out[b, i, d] = sum_j p_ij v_jd (skipping exact zeros, so a masked key's Inf/NaN value is not
/// read, as in the reference).
struct AttentionOutFn {
  AttentionGeometry g;
  const double* p;
  const double* v;
  double* out;
  DXG_HD void operator()(int64_t idx) const {
    const int64_t d = idx % g.ev, i = (idx / g.ev) % g.l, b = idx / (g.ev * g.l);
    const double* pi = p + (b * g.l + i) * g.s;
    double sum = 0;
    for (int64_t j = 0; j < g.s; ++j) {
      if (pi[j] != 0 || pi[j] != pi[j]) sum += pi[j] * v[(b * g.s + j) * g.ev + d];
    }
    out[idx] = sum;
  }
};

/// dp[b, i, j] = dout_i . v_j.
struct AttentionDprobFn {
  AttentionGeometry g;
  const double* dout;
  const double* v;
  double* dp;
  DXG_HD void operator()(int64_t idx) const {
    const int64_t j = idx % g.s, i = (idx / g.s) % g.l, b = idx / (g.s * g.l);
    const double* gi = dout + (b * g.l + i) * g.ev;
    const double* vj = v + (b * g.s + j) * g.ev;
    double sum = 0;
    for (int64_t d = 0; d < g.ev; ++d) sum += gi[d] * vj[d];
    dp[idx] = sum;
  }
};

/// One thread per row: ds = p (dp - sum(p dp)), in place over dp (unscaled).
struct AttentionDscoreFn {
  AttentionGeometry g;
  const double* p;
  double* dp;
  DXG_HD void operator()(int64_t row) const {
    const double* pr = p + row * g.s;
    double* dr = dp + row * g.s;
    double dot = 0;
    for (int64_t j = 0; j < g.s; ++j) dot += pr[j] * dr[j];
    for (int64_t j = 0; j < g.s; ++j) dr[j] = pr[j] * (dr[j] - dot);
  }
};

/// dq[b, i, d] = sum_j scale ds_ij k_jd (zero ds skipped, as the reference).
struct AttentionDqFn {
  AttentionGeometry g;
  const double* ds;
  const double* k;
  double* dq;
  DXG_HD void operator()(int64_t idx) const {
    const int64_t d = idx % g.e, i = (idx / g.e) % g.l, b = idx / (g.e * g.l);
    double sum = 0;
    for (int64_t j = 0; j < g.s; ++j) {
      const double s = ds[(b * g.l + i) * g.s + j] * g.scale;
      if (s != 0) sum += s * k[(b * g.s + j) * g.e + d];
    }
    dq[idx] = sum;
  }
};

/// dk[b, j, d] = sum_i scale ds_ij q_id; dv[b, j, d] = sum_i p_ij dout_id.
struct AttentionDkvFn {
  AttentionGeometry g;
  const double* ds;  // dk when non-null
  const double* q;
  const double* p;  // dv when ds is null
  const double* dout;
  double* out;
  int64_t width;  // e for dk, ev for dv
  DXG_HD void operator()(int64_t idx) const {
    const int64_t d = idx % width, j = (idx / width) % g.s, b = idx / (width * g.s);
    double sum = 0;
    for (int64_t i = 0; i < g.l; ++i) {
      const int64_t sij = (b * g.l + i) * g.s + j;
      if (ds != nullptr) {
        const double s = ds[sij] * g.scale;
        if (s != 0) sum += s * q[(b * g.l + i) * g.e + d];
      } else {
        sum += p[sij] * dout[(b * g.l + i) * g.ev + d];
      }
    }
    out[idx] = sum;
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_NN_H_
