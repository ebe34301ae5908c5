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

}  // namespace

void encode_value(const Call& call, int slot, const char* name, DType t, std::byte* bytes) {
  const dx_attr_t* a = call.attr(slot, name);
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

namespace {

// dx.transpose's permutation for a rank-`rank` tensor (unset = reversed axes).
std::vector<std::int64_t> transpose_perm(const Call& call, std::size_t rank) {
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
  return perm;
}

}  // namespace

void transpose(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  const std::size_t rank = in.rank();
  const std::vector<std::int64_t> perm = transpose_perm(call, rank);
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

void transpose_backward(const Call& call) {
  // dx[j] = dy[i] with j[perm[k]] = i_k: the inverse permutation, through an f64 buffer (dx may
  // alias dy).
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const std::size_t rank = x.rank();
  const std::vector<std::int64_t> perm = transpose_perm(call, rank);
  std::vector<std::int64_t> expected(rank);
  for (std::size_t i = 0; i < rank; ++i) expected[i] = x.shape[perm[i]];
  expect_output_shape(dy, expected);
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  std::vector<std::int64_t> in_index(rank);
  for_each_index(dy.shape, [&](std::span<const std::int64_t> out_index) {
    for (std::size_t k = 0; k < rank; ++k) in_index[perm[k]] = out_index[k];
    GradBuffer::add(buf.view.at(in_index), load_float(dy.dtype, dy.at(out_index)));
  });
  buf.store(*dx);
}

void copy_backward(const Call& call) {
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

void fill(const Call& call) {
  const Tensor out = view(call.outputs[0], "output 0");
  std::byte element[8];
  encode_value(call, DX_FILL_VALUE, "value", out.dtype, element);
  for_each_index(out.shape, [&](std::span<const std::int64_t> index) {
    std::memcpy(out.at(index), element, size_of(out.dtype));
  });
}

}  // namespace deepx::ref
