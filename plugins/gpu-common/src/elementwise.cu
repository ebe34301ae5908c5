// Elementwise kernels: unary math (F; abs/neg/sign also I), gelu, clamp (F, I), binary
// arithmetic with NumPy broadcasting (F and I), comparisons (all -> bool), bool logic,
// bitwise_not (I, bool), where, cast. Bodies in include/deepx/gpu/elementwise.h and
// extra_ops.h.
#include <cmath>
#include <cstdint>
#include <string>

#include "backward_fns.h"
#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/extra_ops.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {
namespace {

template <UnaryOp op>
dx_error_t* unary_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_same_shape(out, in, "output 0");
    expect_one_device({&in, &out});
    Exec exec(call, out.device);
    const Layout l = make_layout(out.shape, {out.operand(), in.operand()});
    if (dtype_is_float(in.dtype)) {
      dispatch_float(in.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, UnaryFloatFn<T>{l, out.data<T>(), in.data<T>(), op}, l.count);
      });
    } else {
      dispatch_int(in.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, UnaryIntFn<T>{l, out.data<T>(), in.data<T>(), op}, l.count);
      });
    }
    exec.finish();
  });
}

/// Validates a broadcasting binary call; returns the layout (out, a, b).
Layout binary_layout(const dx_kernel_call_t* call, View& a, View& b, View& out, bool bool_out) {
  expect_arity(call, 2, 1);
  a = make_view(call->inputs[0], "input 0");
  b = make_view(call->inputs[1], "input 1");
  out = make_view(call->outputs[0], "output 0");
  expect_dtype(b, a.dtype, "input 1");
  expect_dtype(out, bool_out ? DType::Bool : a.dtype, "output 0");
  expect_one_device({&a, &b, &out});
  const auto shape = broadcast_shapes({a.shape, b.shape});
  if (!shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": shapes ") + shape_string(a.shape) + " and " +
                                shape_string(b.shape) + " do not broadcast");
  }
  if (*shape != out.shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": output shape ") + shape_string(out.shape) +
                                " is not the broadcast shape " + shape_string(*shape));
  }
  return make_layout(out.shape, {out.operand(), a.operand(), b.operand()});
}

template <BinaryOp op>
dx_error_t* binary_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    View a, b, out;
    const Layout l = binary_layout(call, a, b, out, false);
    Exec exec(call, out.device);
    if (dtype_is_float(a.dtype)) {
      dispatch_float(a.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, BinaryFloatFn<T>{l, out.data<T>(), a.data<T>(), b.data<T>(), op}, l.count);
      });
    } else {
      dispatch_int(a.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        if (op == BinaryOp::Div && l.count > 0) {
          // Integer division by zero is an error status, detected before anything is written.
          const Layout divisor = make_layout(b.shape, {b.operand()});
          Exec::Scratch flag(exec, sizeof(int));
          check(gpuMemsetAsync(flag.get(), 0, sizeof(int), exec.stream()), "memset");
          launch_for_each(exec, AnyZeroFn<T>{divisor, b.data<T>(), static_cast<int*>(flag.get())}, divisor.count);
          int found = 0;
          check(gpuMemcpyAsync(&found, flag.get(), sizeof(int), gpuMemcpyDeviceToHost, exec.stream()), "copy flag");
          exec.synchronize();
          if (found != 0) fail(DX_ARITHMETIC_ERROR, DXG_BACKEND_NAME ": integer division by zero");
        }
        launch_for_each(exec, BinaryIntFn<T>{l, out.data<T>(), a.data<T>(), b.data<T>(), op}, l.count);
      });
    }
    exec.finish();
  });
}

template <CompareOp op>
dx_error_t* compare_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    View a, b, out;
    const Layout l = binary_layout(call, a, b, out, true);
    Exec exec(call, out.device);
    auto run = [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, CompareFn<T>{l, out.data<uint8_t>(), a.data<T>(), b.data<T>(), op}, l.count);
    };
    if (dtype_is_float(a.dtype)) dispatch_float(a.dtype, run);
    else if (a.dtype == DType::Bool) run(static_cast<uint8_t*>(nullptr));
    else dispatch_int(a.dtype, run);
    exec.finish();
  });
}

dx_error_t* where_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 1);
    const View cond = make_view(call->inputs[0], "input 0");
    const View a = make_view(call->inputs[1], "input 1");
    const View b = make_view(call->inputs[2], "input 2");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(cond, DType::Bool, "input 0");
    expect_dtype(b, a.dtype, "input 2");
    expect_dtype(out, a.dtype, "output 0");
    expect_one_device({&cond, &a, &b, &out});
    const auto shape = broadcast_shapes({cond.shape, a.shape, b.shape});
    if (!shape || *shape != out.shape) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": where: the output is not the broadcast shape of the inputs");
    }
    const Layout l = make_layout(out.shape, {out.operand(), cond.operand(), a.operand(), b.operand()});
    Exec exec(call, out.device);
    dispatch_size(a.dtype, [&](auto tag) {
      using W = tag_t<decltype(tag)>;
      launch_for_each(exec, WhereFn<W>{l, out.data<W>(), cond.data<uint8_t>(), a.data<W>(), b.data<W>()}, l.count);
    });
    exec.finish();
  });
}

dx_error_t* cast_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_same_shape(out, in, "output 0");
    expect_one_device({&in, &out});
    // The optional `dtype` attribute must name the output's dtype (packed i64 or a name).
    if (const dx_attr_t* a = attr_at(call, 0)) {
      bool matches = true;
      if (a->type == DX_ATTR_I64) {
        const DLTensor* t = call->outputs[0];
        const int64_t packed = t->dtype.code | (t->dtype.bits << 8) | (int64_t{t->dtype.lanes} << 16);
        matches = a->value.i64 == packed;
      } else if (a->type == DX_ATTR_STRING) {
        matches = a->value.str != nullptr && std::string(a->value.str) == dtype_name(out.dtype);
      } else {
        fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": cast: attribute dtype must be an i64 or a string");
      }
      if (!matches) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": cast: attribute dtype does not match the output");
    }
    const Layout l = make_layout(out.shape, {out.operand(), in.operand()});
    Exec exec(call, out.device);
    launch_for_each(exec, CastFn{l, out.base, in.base, out.dtype, in.dtype}, l.count);
    exec.finish();
  });
}

/// Validates a same-shape unary call (dtype of the output given); returns (out, in) layout.
Layout unary_layout(const dx_kernel_call_t* call, View& in, View& out, DType out_type) {
  expect_arity(call, 1, 1);
  in = make_view(call->inputs[0], "input 0");
  out = make_view(call->outputs[0], "output 0");
  expect_dtype(out, out_type, "output 0");
  expect_same_shape(out, in, "output 0");
  expect_one_device({&in, &out});
  return make_layout(out.shape, {out.operand(), in.operand()});
}

dx_error_t* gelu_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    View in, out;
    const bool tanh_form = gelu_uses_tanh(call);
    expect_arity(call, 1, 1);
    const Layout l = unary_layout(call, in, out, make_view(call->inputs[0], "input 0").dtype);
    Exec exec(call, out.device);
    dispatch_float(in.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, GeluFn<T>{l, out.data<T>(), in.data<T>(), tanh_form}, l.count);
    });
    exec.finish();
  });
}

/// An integer clamp bound saturated to the dtype's range: an i64 exactly, an f64 rounded inward
/// (ceil for min, floor for max); a NaN bound is DX_INVALID_ARGUMENT (the reference's rules).
bool int_clamp_bound(const dx_kernel_call_t* call, int slot, const char* name, DType t, bool lower, int64_t& out) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return false;
  int64_t lo = 0, hi = 0;
  switch (t) {
    case DType::I64: lo = INT64_MIN; hi = INT64_MAX; break;
    case DType::I32: lo = INT32_MIN; hi = INT32_MAX; break;
    case DType::I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case DType::I8: lo = INT8_MIN; hi = INT8_MAX; break;
    default: lo = 0; hi = 255; break;
  }
  if (a->type == DX_ATTR_I64) {
    out = a->value.i64 < lo ? lo : (a->value.i64 > hi ? hi : a->value.i64);
    return true;
  }
  if (a->type != DX_ATTR_F64) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": clamp: ") + name + " must be an i64 or f64");
  const double v = a->value.f64;
  if (v != v) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": clamp: ") + name + " is NaN on an integer tensor");
  out = saturate_to_int(lower ? std::ceil(v) : std::floor(v), t);
  return true;
}

dx_error_t* clamp_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    View in, out;
    const Layout l = unary_layout(call, in, out, make_view(call->inputs[0], "input 0").dtype);
    if (dtype_is_float(in.dtype)) {
      const FloatClampBounds b = float_clamp_bounds(call);
      Exec exec(call, out.device);
      dispatch_float(in.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, ClampFloatFn<T>{l, out.data<T>(), in.data<T>(), b.has_lo, b.has_hi, b.lo, b.hi}, l.count);
      });
      exec.finish();
      return;
    }
    int64_t lo = 0, hi = 0;
    const bool has_lo = int_clamp_bound(call, DX_CLAMP_MIN, "min", in.dtype, true, lo);
    const bool has_hi = int_clamp_bound(call, DX_CLAMP_MAX, "max", in.dtype, false, hi);
    Exec exec(call, out.device);
    dispatch_int(in.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, ClampIntFn<T>{l, out.data<T>(), in.data<T>(), has_lo, has_hi, lo, hi}, l.count);
    });
    exec.finish();
  });
}

/// bitwise_not (I and bool) and logical_not (bool).
template <bool kLogical>
dx_error_t* not_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    View in, out;
    const Layout l = unary_layout(call, in, out, make_view(call->inputs[0], "input 0").dtype);
    if (kLogical) expect_dtype(in, DType::Bool, "input 0");
    Exec exec(call, out.device);
    if (in.dtype == DType::Bool) {
      launch_for_each(exec, NotFn<uint8_t>{l, out.data<uint8_t>(), in.data<uint8_t>(), true}, l.count);
    } else {
      dispatch_int(in.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, NotFn<T>{l, out.data<T>(), in.data<T>(), false}, l.count);
      });
    }
    exec.finish();
  });
}

template <LogicOp op>
dx_error_t* logic_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    View a, b, out;
    const Layout l = binary_layout(call, a, b, out, true);
    expect_dtype(a, DType::Bool, "input 0");
    Exec exec(call, out.device);
    launch_for_each(exec, LogicFn{l, out.data<uint8_t>(), a.data<uint8_t>(), b.data<uint8_t>(), op}, l.count);
    exec.finish();
  });
}

}  // namespace

bool gelu_uses_tanh(const dx_kernel_call_t* call) {
  const dx_attr_t* a = attr_at(call, 0);
  if (a == nullptr) return false;
  if (a->type != DX_ATTR_STRING || a->value.str == nullptr) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": gelu: approximate must be a string");
  }
  const std::string mode = a->value.str;
  if (mode == "none") return false;
  if (mode == "tanh") return true;
  fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": gelu: approximate must be \"none\" or \"tanh\", got \"" + mode + "\"");
}

FloatClampBounds float_clamp_bounds(const dx_kernel_call_t* call) {
  FloatClampBounds b;
  b.has_lo = attr_at(call, DX_CLAMP_MIN) != nullptr;
  b.has_hi = attr_at(call, DX_CLAMP_MAX) != nullptr;
  b.lo = attr_f64(call, DX_CLAMP_MIN, "min", 0.0);
  b.hi = attr_f64(call, DX_CLAMP_MAX, "max", 0.0);
  return b;
}

void register_elementwise_kernels(Registrar& r) {
  const struct {
    const char* name;
    dx_kernel_fn fn;
    bool ints;
    UnaryOp op;
  } unary[] = {
      {"dx.abs", &unary_forward<UnaryOp::Abs>, true, UnaryOp::Abs},
      {"dx.neg", &unary_forward<UnaryOp::Neg>, true, UnaryOp::Neg},
      {"dx.sign", &unary_forward<UnaryOp::Sign>, true, UnaryOp::Sign},
      {"dx.reciprocal", &unary_forward<UnaryOp::Reciprocal>, false, UnaryOp::Reciprocal},
      {"dx.sqrt", &unary_forward<UnaryOp::Sqrt>, false, UnaryOp::Sqrt},
      {"dx.rsqrt", &unary_forward<UnaryOp::Rsqrt>, false, UnaryOp::Rsqrt},
      {"dx.exp", &unary_forward<UnaryOp::Exp>, false, UnaryOp::Exp},
      {"dx.expm1", &unary_forward<UnaryOp::Expm1>, false, UnaryOp::Expm1},
      {"dx.log", &unary_forward<UnaryOp::Log>, false, UnaryOp::Log},
      {"dx.log1p", &unary_forward<UnaryOp::Log1p>, false, UnaryOp::Log1p},
      {"dx.sin", &unary_forward<UnaryOp::Sin>, false, UnaryOp::Sin},
      {"dx.cos", &unary_forward<UnaryOp::Cos>, false, UnaryOp::Cos},
      {"dx.tan", &unary_forward<UnaryOp::Tan>, false, UnaryOp::Tan},
      {"dx.tanh", &unary_forward<UnaryOp::Tanh>, false, UnaryOp::Tanh},
      {"dx.erf", &unary_forward<UnaryOp::Erf>, false, UnaryOp::Erf},
      {"dx.sigmoid", &unary_forward<UnaryOp::Sigmoid>, false, UnaryOp::Sigmoid},
      {"dx.relu", &unary_forward<UnaryOp::Relu>, false, UnaryOp::Relu},
      {"dx.silu", &unary_forward<UnaryOp::Silu>, false, UnaryOp::Silu},
      {"dx.floor", &unary_forward<UnaryOp::Floor>, false, UnaryOp::Floor},
      {"dx.ceil", &unary_forward<UnaryOp::Ceil>, false, UnaryOp::Ceil},
      {"dx.round", &unary_forward<UnaryOp::Round>, false, UnaryOp::Round},
  };
  for (const auto& u : unary) {
    for (DType d : float_types()) r.add(u.name, 1, 1, {d, d}, u.fn, kInPlace, unary_backward_fn(u.op));
    if (u.ints) {
      for (DType d : int_types()) r.add(u.name, 1, 1, {d, d}, u.fn, kInPlace);
    }
  }
  const struct {
    const char* name;
    dx_kernel_fn fn;
    bool ints;
    BinaryOp op;
  } binary[] = {
      {"dx.add", &binary_forward<BinaryOp::Add>, true, BinaryOp::Add},
      {"dx.sub", &binary_forward<BinaryOp::Sub>, true, BinaryOp::Sub},
      {"dx.mul", &binary_forward<BinaryOp::Mul>, true, BinaryOp::Mul},
      {"dx.div", &binary_forward<BinaryOp::Div>, true, BinaryOp::Div},
      {"dx.maximum", &binary_forward<BinaryOp::Maximum>, true, BinaryOp::Maximum},
      {"dx.minimum", &binary_forward<BinaryOp::Minimum>, true, BinaryOp::Minimum},
      {"dx.pow", &binary_forward<BinaryOp::Pow>, false, BinaryOp::Pow},
  };
  for (const auto& b : binary) {
    for (DType d : float_types()) r.add(b.name, 2, 1, {d, d, d}, b.fn, kInPlace, binary_backward_fn(b.op));
    if (b.ints) {
      for (DType d : int_types()) r.add(b.name, 2, 1, {d, d, d}, b.fn, kInPlace);
    }
  }
  const std::pair<const char*, dx_kernel_fn> compares[] = {
      {"dx.eq", &compare_forward<CompareOp::Eq>}, {"dx.ne", &compare_forward<CompareOp::Ne>},
      {"dx.lt", &compare_forward<CompareOp::Lt>}, {"dx.le", &compare_forward<CompareOp::Le>},
      {"dx.gt", &compare_forward<CompareOp::Gt>}, {"dx.ge", &compare_forward<CompareOp::Ge>},
  };
  for (const auto& [name, fn] : compares) {
    for (DType d : all_types()) r.add(name, 2, 1, {d, d, DType::Bool}, fn, kDeterministic);
  }
  for (DType d : all_types()) {
    r.add("dx.where", 3, 1, {DType::Bool, d, d, d}, &where_forward, kInPlace,
          dtype_is_float(d) ? where_backward_fn() : nullptr);
  }
  for (DType d : float_types()) {
    r.add("dx.gelu", 1, 1, {d, d}, &gelu_forward, kInPlace, gelu_backward_fn());
    r.add("dx.clamp", 1, 1, {d, d}, &clamp_forward, kInPlace, clamp_backward_fn());
  }
  for (DType d : int_types()) {
    r.add("dx.clamp", 1, 1, {d, d}, &clamp_forward, kInPlace);
    r.add("dx.bitwise_not", 1, 1, {d, d}, &not_forward<false>, kInPlace);
  }
  r.add("dx.bitwise_not", 1, 1, {DType::Bool, DType::Bool}, &not_forward<false>, kInPlace);
  r.add("dx.logical_not", 1, 1, {DType::Bool, DType::Bool}, &not_forward<true>, kInPlace);
  const std::pair<const char*, dx_kernel_fn> logic[] = {
      {"dx.logical_and", &logic_forward<LogicOp::And>},
      {"dx.logical_or", &logic_forward<LogicOp::Or>},
      {"dx.logical_xor", &logic_forward<LogicOp::Xor>},
  };
  for (const auto& [name, fn] : logic) r.add(name, 2, 1, {DType::Bool, DType::Bool, DType::Bool}, fn, kInPlace);
  for (DType from : all_types()) {
    for (DType to : all_types()) {
      r.add("dx.cast", 1, 1, {from, to}, &cast_forward,
            dtype_size(from) == dtype_size(to) ? kInPlace : kDeterministic,
            dtype_is_float(from) && dtype_is_float(to) ? cast_backward_fn() : nullptr);
    }
  }
}

}  // namespace deepx::gpu
