// dx.uniform, dx.normal, dx.dropout on the reference's Philox mapping (include/deepx/gpu/
// philox.h): every element is a pure function of (seed, offset, its row-major position), so
// the GPU reproduces the reference's streams exactly, in any launch order.
#include <string>

#include "backward_fns.h"
#include "deepx/gpu/extra_ops.h"
#include "deepx/gpu/philox.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {

/// uniform (normal = false) or normal values at row-major positions of the output.
struct RandomFillFn {
  Layout layout;
  char* out;
  DType type;
  PhiloxStream stream;
  bool normal;
  double a, b;  // low, high or mean, std
  DXG_HD void operator()(int64_t i) const {
    const auto u = static_cast<uint64_t>(i);
    const double v = normal ? add_mul_unfused(a, b, stream.normal(u)) : add_mul_unfused(a, b - a, stream.uniform(u));
    store_from_double(out + layout_offset(layout, 0, i) * dtype_size(type), type, v);
  }
};

/// dropout: keep element i when u_i >= p, scaled by 1 / (1 - p); operands 0 = y, 1 = mask,
/// 2 = x.
struct DropoutFn {
  Layout layout;
  char* y;
  uint8_t* mask;
  const char* x;
  DType type;
  PhiloxStream stream;
  double p;
  bool training;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double v = load_as_double(x + off[2] * dtype_size(type), type);
    const bool keep = !training || stream.uniform(static_cast<uint64_t>(i)) >= p;
    store_from_double(y + off[0] * dtype_size(type), type, !training ? v : (keep ? v / (1.0 - p) : 0.0));
    mask[off[1]] = keep ? 1 : 0;
  }
};

namespace {

PhiloxStream stream_of(const dx_kernel_call_t* call, int seed_slot, int offset_slot) {
  const auto seed = static_cast<uint64_t>(attr_i64(call, seed_slot, "seed", 0));
  const auto offset = static_cast<uint64_t>(attr_i64(call, offset_slot, "offset", 0));
  return PhiloxStream::make(seed, offset);
}

template <bool kNormal>
dx_error_t* random_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 0, 1);
    const View out = make_view(call->outputs[0], "output 0");
    if (!dtype_is_float(out.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": random ops need a float output");
    RandomFillFn fn{};
    fn.layout = make_layout(out.shape, {out.operand()});
    fn.out = out.base;
    fn.type = out.dtype;
    fn.stream = stream_of(call, 2, 3);
    fn.normal = kNormal;
    fn.a = attr_f64(call, 0, kNormal ? "mean" : "low", kNormal ? 0.0 : 0.0);
    fn.b = attr_f64(call, 1, kNormal ? "std" : "high", 1.0);
    Exec exec(call, out.device);
    launch_for_each(exec, fn, fn.layout.count);
    exec.finish();
  });
}

dx_error_t* dropout_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 2);
    const View x = make_view(call->inputs[0], "input 0");
    const View y = make_view(call->outputs[0], "output 0");
    const View mask = make_view(call->outputs[1], "output 1");
    expect_dtype(y, x.dtype, "output 0");
    expect_dtype(mask, DType::Bool, "output 1");
    expect_same_shape(y, x, "output 0");
    expect_same_shape(mask, x, "output 1");
    expect_one_device({&x, &y, &mask});
    DropoutFn fn{};
    fn.p = attr_f64(call, 0, "p", 0.5);
    if (!(fn.p >= 0 && fn.p <= 1)) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dropout: p must be in [0, 1], got " + std::to_string(fn.p));
    }
    fn.stream = stream_of(call, 1, 2);
    fn.training = attr_bool(call, 3, "training", true);
    fn.layout = make_layout(x.shape, {y.operand(), mask.operand(), x.operand()});
    fn.y = y.base;
    fn.mask = mask.data<uint8_t>();
    fn.x = x.base;
    fn.type = x.dtype;
    Exec exec(call, y.device);
    launch_for_each(exec, fn, fn.layout.count);
    exec.finish();
  });
}

/// dropout: inputs dy, d mask (ignored), x, y, mask; dx from the saved mask.
dx_error_t* dropout_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 1);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[2], "forward input 0");
    const View mask = make_view(call->inputs[4], "forward output 1");
    expect_dtype(dy, x.dtype, "output gradient 0");
    expect_dtype(mask, DType::Bool, "forward output 1");
    expect_same_shape(dy, x, "output gradient 0");
    expect_same_shape(mask, x, "forward output 1");
    const double p = attr_f64(call, 0, "p", 0.5);
    if (!(p >= 0.0 && p <= 1.0)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dropout: p must be in [0, 1]");
    const bool training = attr_bool(call, 3, "training", true);
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    expect_one_device({&dy, &mask, &*dx});
    Exec exec(call, dx->device);
    const Layout l = make_layout(x.shape, {dx->operand(), dy.operand(), mask.operand()});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, DropoutGradFn<T>{l, dx->data<T>(), dy.data<T>(), mask.data<uint8_t>(), p, training},
                      l.count);
    });
    exec.finish();
  });
}

}  // namespace

void register_random_kernels(Registrar& r) {
  for (DType d : float_types()) {
    r.add("dx.uniform", 0, 1, {d}, &random_forward<false>, kDeterministic);
    r.add("dx.normal", 0, 1, {d}, &random_forward<true>, kDeterministic);
    r.add("dx.dropout", 1, 2, {d, d, DType::Bool}, &dropout_forward, kDeterministic, &dropout_backward);
  }
}

}  // namespace deepx::gpu
