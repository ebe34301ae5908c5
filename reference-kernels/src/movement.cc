// Data movement and creation: dx.transpose (attr `perm`), dx.copy, dx.fill (attr `value`).
// Transpose and copy move element bytes unchanged (bit-exact for every dtype); fill converts
// its value once to the output dtype.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/half.hpp"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

void move_element(const Tensor& out, std::span<const std::int64_t> out_index, const Tensor& in,
                  std::span<const std::int64_t> in_index) {
  std::memmove(out.at(out_index), in.at(in_index), size_of(in.dtype));
}

// The i64 value `v` as a double rounded to odd (exact below 2^53; otherwise the discarded bits
// are folded into the last bit), so that a second rounding to a format with at most 51
// fraction bits gives the correctly rounded result of `v` itself.
double to_double_round_to_odd(std::int64_t v) {
  const bool negative = v < 0;
  std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  int shift = 0;
  while ((magnitude >> shift) >= (std::uint64_t{1} << 53)) ++shift;
  std::uint64_t kept = magnitude >> shift;
  if (shift > 0 && (magnitude & ((std::uint64_t{1} << shift) - 1)) != 0) kept |= 1;
  const double d = std::ldexp(static_cast<double>(kept), shift);  // exact
  return negative ? -d : d;
}

// Float -> integer for dx.fill: truncate toward zero, saturate, NaN -> 0.
std::int64_t saturating_int(double v, std::int64_t lo, std::int64_t hi) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  // Compare in double: lo is exact (a power of two or small); hi may round up to 2^63, which
  // is why the test is >= rather than >.
  if (t <= static_cast<double>(lo)) return lo;
  if (t >= static_cast<double>(hi)) return hi;
  return static_cast<std::int64_t>(t);
}

void int_range(DType t, std::int64_t& lo, std::int64_t& hi) {
  switch (t) {
    case DType::kI64: lo = std::numeric_limits<std::int64_t>::min(); hi = std::numeric_limits<std::int64_t>::max(); return;
    case DType::kI32: lo = std::numeric_limits<std::int32_t>::min(); hi = std::numeric_limits<std::int32_t>::max(); return;
    case DType::kI16: lo = std::numeric_limits<std::int16_t>::min(); hi = std::numeric_limits<std::int16_t>::max(); return;
    case DType::kI8: lo = std::numeric_limits<std::int8_t>::min(); hi = std::numeric_limits<std::int8_t>::max(); return;
    case DType::kU8: lo = 0; hi = std::numeric_limits<std::uint8_t>::max(); return;
    default: lo = 0; hi = 1; return;
  }
}

// Encodes dx.fill's value as one element of `t` into `bytes`.
void encode_fill_value(const Call& call, DType t, std::byte* bytes) {
  const dx_attr_t* a = call.attr(DX_FILL_VALUE, "value");
  if (a == nullptr) {
    std::memset(bytes, 0, size_of(t));  // unset = 0, which is all-zero bits in every dtype
    return;
  }
  if (a->type == DX_ATTR_I64 || a->type == DX_ATTR_BOOL) {
    const std::int64_t v = a->value.i64;
    if (!is_float(t)) {
      store_int_wrapping(t, bytes, v);  // exact, wrapping; bool is v != 0
    } else if (t == DType::kF64) {
      store_float(t, bytes, static_cast<double>(v));  // one rounding (i64 -> f64)
    } else if (t == DType::kF32) {
      const float f = static_cast<float>(v);  // one rounding (i64 -> f32)
      std::memcpy(bytes, &f, sizeof f);
    } else {
      store_float(t, bytes, to_double_round_to_odd(v));  // round-to-odd then once to f16/bf16
    }
    return;
  }
  if (a->type == DX_ATTR_F64) {
    const double v = a->value.f64;
    if (is_float(t)) {
      store_float(t, bytes, v);
    } else if (t == DType::kBool) {
      store_int_wrapping(t, bytes, v != 0 ? 1 : 0);  // NaN != 0: true, as bool(nan) in NumPy
    } else {
      std::int64_t lo = 0, hi = 0;
      int_range(t, lo, hi);
      store_int_wrapping(t, bytes, saturating_int(v, lo, hi));
    }
    return;
  }
  fail(DX_INVALID_ARGUMENT, "attribute 'value' of dx.fill must be an i64, f64 or bool");
}

}  // namespace

void transpose(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  const std::size_t rank = in.rank();
  std::vector<std::int64_t> perm(rank);
  if (const auto given = attr_i64_list(call, DX_TRANSPOSE_PERM, "perm")) {
    if (given->size() != rank) {
      fail(DX_INVALID_ARGUMENT, "perm has " + std::to_string(given->size()) +
                                    " entries for a rank-" + std::to_string(rank) + " tensor");
    }
    std::vector<bool> seen(rank, false);
    for (std::size_t i = 0; i < rank; ++i) {
      const std::int64_t p = (*given)[i] < 0 ? (*given)[i] + static_cast<std::int64_t>(rank)
                                             : (*given)[i];
      if (p < 0 || p >= static_cast<std::int64_t>(rank) || seen[p]) {
        fail(DX_INVALID_ARGUMENT, "perm " + shape_string(*given) + " is not a permutation of " +
                                      std::to_string(rank) + " axes");
      }
      seen[p] = true;
      perm[i] = p;
    }
  } else {
    for (std::size_t i = 0; i < rank; ++i) perm[i] = static_cast<std::int64_t>(rank - 1 - i);
  }
  std::vector<std::int64_t> expected(rank);
  for (std::size_t i = 0; i < rank; ++i) expected[i] = in.shape[perm[i]];
  expect_output_shape(out, expected);

  std::vector<std::int64_t> in_index(rank);
  for_each_index(out.shape, [&](std::span<const std::int64_t> out_index) {
    // out[i0, i1, ...] = in[j] with j[perm[k]] = i_k.
    for (std::size_t k = 0; k < rank; ++k) in_index[perm[k]] = out_index[k];
    move_element(out, out_index, in, in_index);
  });
}

void copy(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  for_each_index(in.shape, [&](std::span<const std::int64_t> index) {
    move_element(out, index, in, index);
  });
}

void fill(const Call& call) {
  const Tensor out = view(call.outputs[0], "output 0");
  std::byte element[8];
  encode_fill_value(call, out.dtype, element);
  for_each_index(out.shape, [&](std::span<const std::int64_t> index) {
    std::memcpy(out.at(index), element, size_of(out.dtype));
  });
}

}  // namespace deepx::ref
