// Comparisons (dx.eq, ne, lt, le, gt, ge: F, I, bool -> bool, NumPy broadcasting; a NaN operand
// compares false except for ne), bool logic (dx.logical_and/or/xor/not), dx.bitwise_not (I and
// bool), dx.where (bool, T, T) -> T, and dx.cast between every pair of dtypes, with the
// gradients of dx.where and of the F -> F casts.
#include <cmath>
#include <cstring>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

enum class Compare { kEq, kNe, kLt, kLe, kGt, kGe };

template <typename T>
bool compare(Compare op, T a, T b) {
  switch (op) {
    case Compare::kEq: return a == b;
    case Compare::kNe: return a != b;  // true for NaN, as IEEE
    case Compare::kLt: return a < b;
    case Compare::kLe: return a <= b;
    case Compare::kGt: return a > b;
    case Compare::kGe: return a >= b;
  }
  return false;
}

// A broadcasting binary op writing bool (0/1) from two same-dtype inputs; fn(a, b, dtype) gets
// the two elements' addresses.
template <typename Fn>
void binary_to_bool(const Call& call, Fn fn) {
  const auto [a, b, out, ab, bb, shape] = broadcast_binary(call);
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    store_int_wrapping(DType::kBool, out.at(i), fn(ab.at(i), bb.at(i), a.dtype) ? 1 : 0);
  });
}

void comparison(const Call& call, Compare op) {
  binary_to_bool(call, [op](const std::byte* x, const std::byte* y, DType t) {
    if (is_float(t)) return compare(op, load_float(t, x), load_float(t, y));
    return compare(op, load_int(t, x), load_int(t, y));
  });
}

// Checks dx.cast's `dtype` attribute, when given, against the output tensor's dtype: an i64
// packed dx_dtype_t (code | bits << 8 | lanes << 16) or a dtype name ("f32").
void check_cast_dtype_attr(const Call& call, DType out) {
  const dx_attr_t* a = call.attr(0, "dtype");
  if (a == nullptr) return;
  bool match = false;
  if (a->type == DX_ATTR_I64) {
    const DLDataType d = to_dlpack(out);
    const std::int64_t packed = d.code | (std::int64_t{d.bits} << 8) | (std::int64_t{d.lanes} << 16);
    match = a->value.i64 == packed;
  } else if (a->type == DX_ATTR_STRING && a->value.str != nullptr) {
    match = std::string(a->value.str) == name_of(out);
  } else {
    fail(DX_INVALID_ARGUMENT, "dx.cast: attribute 'dtype' must be an i64 (packed dtype) or a string");
  }
  if (!match) {
    fail(DX_INVALID_ARGUMENT, std::string("dx.cast: attribute 'dtype' disagrees with the output dtype ") + name_of(out));
  }
}

}  // namespace

void eq(const Call& call) { comparison(call, Compare::kEq); }
void ne(const Call& call) { comparison(call, Compare::kNe); }
void lt(const Call& call) { comparison(call, Compare::kLt); }
void le(const Call& call) { comparison(call, Compare::kLe); }
void gt(const Call& call) { comparison(call, Compare::kGt); }
void ge(const Call& call) { comparison(call, Compare::kGe); }

void logical_and(const Call& call) {
  binary_to_bool(call, [](const std::byte* x, const std::byte* y, DType t) {
    return load_int(t, x) != 0 && load_int(t, y) != 0;
  });
}
void logical_or(const Call& call) {
  binary_to_bool(call, [](const std::byte* x, const std::byte* y, DType t) {
    return load_int(t, x) != 0 || load_int(t, y) != 0;
  });
}
void logical_xor(const Call& call) {
  binary_to_bool(call, [](const std::byte* x, const std::byte* y, DType t) {
    return (load_int(t, x) != 0) != (load_int(t, y) != 0);
  });
}

void logical_not(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  for_each_index(in.shape, [&](std::span<const std::int64_t> i) {
    store_int_wrapping(DType::kBool, out.at(i), load_int(in.dtype, in.at(i)) == 0 ? 1 : 0);
  });
}

void bitwise_not(const Call& call) {
  // ~x on the two's complement value (the stored low bits are exact); for bool, logical not.
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  for_each_index(in.shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t x = load_int(in.dtype, in.at(i));
    store_int_wrapping(out.dtype, out.at(i), in.dtype == DType::kBool ? (x == 0 ? 1 : 0) : ~x);
  });
}

void where(const Call& call) {
  const Tensor cond = view(call.inputs[0], "input 0");
  const Tensor a = view(call.inputs[1], "input 1");
  const Tensor b = view(call.inputs[2], "input 2");
  const Tensor out = view(call.outputs[0], "output 0");
  const std::vector<std::int64_t> shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape);
  expect_output_shape(out, shape);
  const Tensor cb = broadcast_to(cond, shape);
  const Tensor ab = broadcast_to(a, shape);
  const Tensor bb = broadcast_to(b, shape);
  // Element bytes are copied unchanged (bit-exact, NaN payloads included).
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    const std::byte* src = load_int(DType::kBool, cb.at(i)) != 0 ? ab.at(i) : bb.at(i);
    std::memmove(out.at(i), src, size_of(out.dtype));
  });
}

void where_backward(const Call& call) {
  // inputs: dy, cond, a, b, y; outputs: d cond (zeros: no gradient), da, db.
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor cond = view(call.inputs[1], "forward input 0");
  const Tensor a = view(call.inputs[2], "forward input 1");
  const Tensor b = view(call.inputs[3], "forward input 2");
  const std::vector<std::int64_t> shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape);
  expect_output_shape(dy, shape);
  const std::optional<Tensor> gc = grad_output(call, 0, cond.shape);
  const std::optional<Tensor> ga = grad_output(call, 1, a.shape);
  const std::optional<Tensor> gb = grad_output(call, 2, b.shape);
  GradBuffer buf_a(ga ? a.shape : std::vector<std::int64_t>{});
  GradBuffer buf_b(gb ? b.shape : std::vector<std::int64_t>{});
  const Tensor acc_a = broadcast_to(buf_a.view, ga ? shape : std::vector<std::int64_t>{});
  const Tensor acc_b = broadcast_to(buf_b.view, gb ? shape : std::vector<std::int64_t>{});
  const Tensor cb = broadcast_to(cond, shape);
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    const double g = load_float(dy.dtype, dy.at(i));
    const bool take_a = load_int(DType::kBool, cb.at(i)) != 0;
    if (ga && take_a) GradBuffer::add(acc_a.at(i), g);
    if (gb && !take_a) GradBuffer::add(acc_b.at(i), g);
  });
  if (ga) buf_a.store(*ga);
  if (gb) buf_b.store(*gb);
  if (gc) zero_fill(*gc);
}

void cast(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  check_cast_dtype_attr(call, out.dtype);
  std::int64_t lo = 0, hi = 0;
  int_range(out.dtype, lo, hi);
  for_each_index(in.shape, [&](std::span<const std::int64_t> i) {
    if (!is_float(in.dtype)) {
      // I and bool: exact or rounded once to F, wrapped to I, != 0 to bool.
      store_int_any(out.dtype, out.at(i), load_int(in.dtype, in.at(i)));
      return;
    }
    const double x = load_float(in.dtype, in.at(i));
    if (is_float(out.dtype)) {
      store_float(out.dtype, out.at(i), x);  // one rounding
    } else if (out.dtype == DType::kBool) {
      store_int_wrapping(DType::kBool, out.at(i), x != 0 ? 1 : 0);  // NaN is true, as bool(nan)
    } else {
      store_int_wrapping(out.dtype, out.at(i), saturating_int(x, lo, hi));
    }
  });
}

void cast_backward(const Call& call) {
  // F -> F only: the gradient is dy converted back to the input dtype (rounded once).
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  expect_output_shape(dy, x.shape);
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  for_each_index(x.shape, [&](std::span<const std::int64_t> i) {
    GradBuffer::add(buf.view.at(i), load_float(dy.dtype, dy.at(i)));
  });
  buf.store(*dx);
}

}  // namespace deepx::ref
