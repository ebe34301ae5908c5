// dx.conv2d (NCHW; stride, padding, dilation, groups; optional bias), dx.max_pool2d and
// dx.avg_pool2d (NCHW; kernel, stride = kernel by default, padding; floor mode; the average
// excludes padding), and their gradients.
// Sums are f64, rounded once.
#include <cmath>
#include <limits>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

struct Pair {
  std::int64_t h = 0, w = 0;
};

// A 2-D attribute: an i64 (both dims) or a list of 1 or 2 i64; `fallback` when unset.
Pair pair_attr(const Call& call, int slot, const char* name, Pair fallback, std::int64_t min_value) {
  const auto v = attr_i64_list(call, slot, name);
  Pair p = fallback;
  if (v) {
    if (v->size() == 1) p = {(*v)[0], (*v)[0]};
    else if (v->size() == 2) p = {(*v)[0], (*v)[1]};
    else fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' needs 1 or 2 values");
  }
  if (p.h < min_value || p.w < min_value) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be >= " + std::to_string(min_value));
  }
  return p;
}

std::int64_t out_extent(std::int64_t in, std::int64_t pad, std::int64_t dilation, std::int64_t kernel,
                        std::int64_t stride, const char* op) {
  const std::int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) fail(DX_SHAPE_MISMATCH, std::string(op) + ": the kernel is larger than the padded input");
  return span / stride + 1;
}

// ---- conv2d ----
struct ConvPlan {
  Tensor x, w;
  std::optional<Tensor> b;
  Pair stride, padding, dilation;
  std::int64_t groups = 1, n = 0, cin = 0, h = 0, wd = 0, cout = 0, kh = 0, kw = 0, ho = 0, wo = 0;
  std::vector<std::int64_t> out_shape;
};

ConvPlan plan_conv(const Call& call, std::size_t first) {
  ConvPlan p;
  p.x = view(call.inputs[first], "input 0");
  p.w = view(call.inputs[first + 1], "input 1");
  if (first + 2 < call.inputs.size() && call.inputs[first + 2] != nullptr) p.b = view(call.inputs[first + 2], "input 2");
  p.stride = pair_attr(call, 0, "stride", {1, 1}, 1);
  p.padding = pair_attr(call, 1, "padding", {0, 0}, 0);
  p.dilation = pair_attr(call, 2, "dilation", {1, 1}, 1);
  p.groups = attr_i64(call, 3, "groups", 1);
  if (p.x.rank() != 4 || p.w.rank() != 4) fail(DX_SHAPE_MISMATCH, "dx.conv2d: x and weight must be rank 4 (NCHW, OIHW)");
  p.n = p.x.shape[0], p.cin = p.x.shape[1], p.h = p.x.shape[2], p.wd = p.x.shape[3];
  p.cout = p.w.shape[0], p.kh = p.w.shape[2], p.kw = p.w.shape[3];
  if (p.groups < 1 || p.cin % p.groups != 0 || p.cout % p.groups != 0 || p.w.shape[1] != p.cin / p.groups) {
    fail(DX_SHAPE_MISMATCH, "dx.conv2d: x " + shape_string(p.x.shape) + ", weight " + shape_string(p.w.shape) +
                                " and groups " + std::to_string(p.groups) + " disagree");
  }
  if (p.b && (p.b->rank() != 1 || p.b->shape[0] != p.cout)) fail(DX_SHAPE_MISMATCH, "dx.conv2d: bias must be (C_out,)");
  p.ho = out_extent(p.h, p.padding.h, p.dilation.h, p.kh, p.stride.h, "dx.conv2d");
  p.wo = out_extent(p.wd, p.padding.w, p.dilation.w, p.kw, p.stride.w, "dx.conv2d");
  p.out_shape = {p.n, p.cout, p.ho, p.wo};
  return p;
}

// Calls fn(out index, x index, w index) for every in-bounds product term of the convolution.
template <typename Fn>
void for_each_conv_term(const ConvPlan& p, Fn fn) {
  const std::int64_t cin_g = p.cin / p.groups, cout_g = p.cout / p.groups;
  std::int64_t oi[4], xi[4], wi[4];
  for (std::int64_t n = 0; n < p.n; ++n) {
    for (std::int64_t co = 0; co < p.cout; ++co) {
      const std::int64_t g = co / cout_g;
      for (std::int64_t oh = 0; oh < p.ho; ++oh) {
        for (std::int64_t ow = 0; ow < p.wo; ++ow) {
          oi[0] = n, oi[1] = co, oi[2] = oh, oi[3] = ow;
          for (std::int64_t ci = 0; ci < cin_g; ++ci) {
            for (std::int64_t kh = 0; kh < p.kh; ++kh) {
              const std::int64_t ih = oh * p.stride.h - p.padding.h + kh * p.dilation.h;
              if (ih < 0 || ih >= p.h) continue;
              for (std::int64_t kw = 0; kw < p.kw; ++kw) {
                const std::int64_t iw = ow * p.stride.w - p.padding.w + kw * p.dilation.w;
                if (iw < 0 || iw >= p.wd) continue;
                xi[0] = n, xi[1] = g * cin_g + ci, xi[2] = ih, xi[3] = iw;
                wi[0] = co, wi[1] = ci, wi[2] = kh, wi[3] = kw;
                fn(std::span<const std::int64_t>(oi), std::span<const std::int64_t>(xi), std::span<const std::int64_t>(wi));
              }
            }
          }
        }
      }
    }
  }
}

// ---- pooling ----
struct PoolPlan {
  Tensor x;
  Pair kernel, stride, padding;
  std::int64_t ho = 0, wo = 0;
  std::vector<std::int64_t> out_shape;
};

PoolPlan plan_pool(const Call& call, const DLTensor* x_dl, const char* op) {
  PoolPlan p;
  p.x = view(x_dl, "input 0");
  if (p.x.rank() != 4) fail(DX_SHAPE_MISMATCH, std::string(op) + ": x must be rank 4 (NCHW)");
  if (call.attr(0, "kernel") == nullptr) fail(DX_INVALID_ARGUMENT, std::string(op) + ": attribute 'kernel' is required");
  p.kernel = pair_attr(call, 0, "kernel", {1, 1}, 1);
  p.stride = pair_attr(call, 1, "stride", p.kernel, 1);
  p.padding = pair_attr(call, 2, "padding", {0, 0}, 0);
  if (2 * p.padding.h > p.kernel.h || 2 * p.padding.w > p.kernel.w) {
    fail(DX_INVALID_ARGUMENT, std::string(op) + ": padding must be at most half the kernel");
  }
  p.ho = out_extent(p.x.shape[2], p.padding.h, 1, p.kernel.h, p.stride.h, op);
  p.wo = out_extent(p.x.shape[3], p.padding.w, 1, p.kernel.w, p.stride.w, op);
  p.out_shape = {p.x.shape[0], p.x.shape[1], p.ho, p.wo};
  return p;
}

// Calls fn(out index, in-bounds input indices of its window, in row-major window order).
template <typename Fn>
void for_each_window(const PoolPlan& p, Fn fn) {
  std::vector<std::vector<std::int64_t>> members;
  for_each_index(p.out_shape, [&](std::span<const std::int64_t> o) {
    members.clear();
    for (std::int64_t kh = 0; kh < p.kernel.h; ++kh) {
      const std::int64_t ih = o[2] * p.stride.h - p.padding.h + kh;
      if (ih < 0 || ih >= p.x.shape[2]) continue;
      for (std::int64_t kw = 0; kw < p.kernel.w; ++kw) {
        const std::int64_t iw = o[3] * p.stride.w - p.padding.w + kw;
        if (iw < 0 || iw >= p.x.shape[3]) continue;
        members.push_back({o[0], o[1], ih, iw});
      }
    }
    fn(o, members);
  });
}

// Position in `members` of the window's maximum: the first NaN, else the first maximum.
std::size_t window_argmax(const Tensor& x, const std::vector<std::vector<std::int64_t>>& members) {
  std::size_t best = 0;
  double best_v = load_float(x.dtype, x.at(members[0]));
  for (std::size_t k = 1; k < members.size() && !std::isnan(best_v); ++k) {
    const double v = load_float(x.dtype, x.at(members[k]));
    if (std::isnan(v) || v > best_v) {
      best = k;
      best_v = v;
    }
  }
  return best;
}

}  // namespace

void conv2d(const Call& call) {
  const ConvPlan p = plan_conv(call, 0);
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, p.out_shape);
  GradBuffer acc(p.out_shape);  // f64 sums, rounded once at the end
  for_each_conv_term(p, [&](auto oi, auto xi, auto wi) {
    GradBuffer::add(acc.view.at(oi), load_float(p.x.dtype, p.x.at(xi)) * load_float(p.w.dtype, p.w.at(wi)));
  });
  if (p.b) {
    for_each_index(p.out_shape, [&](std::span<const std::int64_t> o) {
      GradBuffer::add(acc.view.at(o), channel_value(p.b, o[1], 0));
    });
  }
  acc.store(y);
}

void conv2d_backward(const Call& call) {
  // inputs: dy, x, w, b (may be null), y; outputs: dx, dw, db.
  const ConvPlan p = plan_conv(call, 1);
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.out_shape);
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  const std::optional<Tensor> dw = grad_output(call, 1, p.w.shape);
  const std::optional<Tensor> db = p.b ? grad_output(call, 2, p.b->shape) : std::nullopt;
  GradBuffer gx(p.x.shape), gw(p.w.shape), gb(std::vector<std::int64_t>{p.cout});
  for_each_conv_term(p, [&](auto oi, auto xi, auto wi) {
    const double g = load_float(dy.dtype, dy.at(oi));
    GradBuffer::add(gx.view.at(xi), g * load_float(p.w.dtype, p.w.at(wi)));
    GradBuffer::add(gw.view.at(wi), g * load_float(p.x.dtype, p.x.at(xi)));
  });
  for_each_index(p.out_shape, [&](std::span<const std::int64_t> o) {
    const std::int64_t c[1] = {o[1]};
    GradBuffer::add(gb.view.at(c), load_float(dy.dtype, dy.at(o)));
  });
  if (dx) gx.store(*dx);
  if (dw) gw.store(*dw);
  if (db) gb.store(*db);
}

void max_pool2d(const Call& call) {
  const PoolPlan p = plan_pool(call, call.inputs[0], "dx.max_pool2d");
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, p.out_shape);
  for_each_window(p, [&](std::span<const std::int64_t> o, const std::vector<std::vector<std::int64_t>>& members) {
    // A window of padding alone (an empty input dim with padding = kernel / 2) has no
    // maximum: NaN, as the mean of an empty window is (0 / 0).
    store_float(y.dtype, y.at(o),
                members.empty() ? std::numeric_limits<double>::quiet_NaN()
                                : load_float(p.x.dtype, p.x.at(members[window_argmax(p.x, members)])));
  });
}

void max_pool2d_backward(const Call& call) {
  const PoolPlan p = plan_pool(call, call.inputs[1], "dx.max_pool2d");
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.out_shape);
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  if (!dx) return;
  GradBuffer gx(p.x.shape);
  for_each_window(p, [&](std::span<const std::int64_t> o, const std::vector<std::vector<std::int64_t>>& members) {
    if (members.empty()) return;  // a window of padding alone reads no input
    GradBuffer::add(gx.view.at(members[window_argmax(p.x, members)]), load_float(dy.dtype, dy.at(o)));
  });
  gx.store(*dx);
}

void avg_pool2d(const Call& call) {
  const PoolPlan p = plan_pool(call, call.inputs[0], "dx.avg_pool2d");
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, p.out_shape);
  for_each_window(p, [&](std::span<const std::int64_t> o, const std::vector<std::vector<std::int64_t>>& members) {
    double sum = 0;
    for (const auto& m : members) sum += load_float(p.x.dtype, p.x.at(m));
    store_float(y.dtype, y.at(o), sum / static_cast<double>(members.size()));
  });
}

void avg_pool2d_backward(const Call& call) {
  const PoolPlan p = plan_pool(call, call.inputs[1], "dx.avg_pool2d");
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.out_shape);
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  if (!dx) return;
  GradBuffer gx(p.x.shape);
  for_each_window(p, [&](std::span<const std::int64_t> o, const std::vector<std::vector<std::int64_t>>& members) {
    const double g = load_float(dy.dtype, dy.at(o)) / static_cast<double>(members.size());
    for (const auto& m : members) GradBuffer::add(gx.view.at(m), g);
  });
  gx.store(*dx);
}

}  // namespace deepx::ref
