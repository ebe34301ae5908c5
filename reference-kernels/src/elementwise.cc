// Elementwise kernels: dx.add, dx.sub, dx.mul, dx.div (NumPy broadcasting), dx.neg, dx.exp,
// dx.relu. Floating values are computed in f64 and rounded once to the output dtype; integers
// are computed in 64-bit unsigned arithmetic so overflow wraps (two's complement) without UB.
#include <algorithm>
#include <cmath>
#include <limits>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

double apply_float(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
  }
  return 0;
}

// Integer arithmetic on i64-widened values; the caller stores the low bits (wrap).
std::int64_t apply_int(BinaryOp op, std::int64_t a, std::int64_t b) {
  const auto ua = static_cast<std::uint64_t>(a);
  const auto ub = static_cast<std::uint64_t>(b);
  switch (op) {
    case BinaryOp::kAdd: return static_cast<std::int64_t>(ua + ub);
    case BinaryOp::kSub: return static_cast<std::int64_t>(ua - ub);
    case BinaryOp::kMul: return static_cast<std::int64_t>(ua * ub);
    case BinaryOp::kDiv:
      // Only i64 can hit INT64_MIN / -1 (narrower values are exact in i64 and wrap on store);
      // its true quotient 2^63 wraps to INT64_MIN. C++ division truncates toward zero.
      if (a == std::numeric_limits<std::int64_t>::min() && b == -1) return a;
      return a / b;
  }
  return 0;
}

void binary(const Call& call, BinaryOp op) {
  const Tensor a = view(call.inputs[0], "input 0");
  const Tensor b = view(call.inputs[1], "input 1");
  const Tensor out = view(call.outputs[0], "output 0");
  const std::vector<std::int64_t> shape = broadcast_shapes(a.shape, b.shape);
  expect_output_shape(out, shape);
  const Tensor ab = broadcast_to(a, shape);
  const Tensor bb = broadcast_to(b, shape);

  if (is_float(out.dtype)) {
    for_each_index(shape, [&](std::span<const std::int64_t> i) {
      const double x = load_float(a.dtype, ab.at(i));
      const double y = load_float(b.dtype, bb.at(i));
      store_float(out.dtype, out.at(i), apply_float(op, x, y));
    });
    return;
  }
  if (op == BinaryOp::kDiv) {
    // Check every divisor before writing anything, so a failed call leaves the output as it was.
    for_each_index(shape, [&](std::span<const std::int64_t> i) {
      if (load_int(b.dtype, bb.at(i)) == 0) {
        fail(DX_ARITHMETIC_ERROR, "integer division by zero at index " + shape_string(i));
      }
    });
  }
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t x = load_int(a.dtype, ab.at(i));
    const std::int64_t y = load_int(b.dtype, bb.at(i));
    store_int_wrapping(out.dtype, out.at(i), apply_int(op, x, y));
  });
}

template <typename FloatFn, typename IntFn>
void unary(const Call& call, FloatFn float_fn, IntFn int_fn) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  for_each_index(in.shape, [&](std::span<const std::int64_t> i) {
    if (is_float(out.dtype)) {
      store_float(out.dtype, out.at(i), float_fn(load_float(in.dtype, in.at(i))));
    } else {
      store_int_wrapping(out.dtype, out.at(i), int_fn(load_int(in.dtype, in.at(i))));
    }
  });
}

std::int64_t no_int_form(std::int64_t) {
  fail(DX_INTERNAL, "floating-only op called on an integer tensor");
}

}  // namespace

void add(const Call& call) { binary(call, BinaryOp::kAdd); }
void sub(const Call& call) { binary(call, BinaryOp::kSub); }
void mul(const Call& call) { binary(call, BinaryOp::kMul); }
void div(const Call& call) { binary(call, BinaryOp::kDiv); }

void neg(const Call& call) {
  unary(
      call, [](double x) { return -x; },
      [](std::int64_t x) { return static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(x)); });
}

void exp(const Call& call) {
  // std::exp in f64, rounded once by store_float for f32/f16/bf16.
  unary(call, [](double x) { return std::exp(x); }, no_int_form);
}

void relu(const Call& call) {
  // NaN propagates; -0 gives +0 (x > 0 is false for -0).
  unary(call, [](double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }, no_int_form);
}

}  // namespace deepx::ref
