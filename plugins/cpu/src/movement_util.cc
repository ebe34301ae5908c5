#include "movement_util.h"

#include <cmath>
#include <cstring>
#include <string>

namespace deepx::cpu::movement {
namespace {

template <int Size>
using Word = std::conditional_t<
    Size == 1, uint8_t,
    std::conditional_t<Size == 2, uint16_t, std::conditional_t<Size == 4, uint32_t, uint64_t>>>;

template <class W>
void copy_words(const View& out, const View& in, bool parallel) {
  StridedLoop<2> loop;
  loop.rank = out.rank;
  for (int d = 0; d < out.rank; ++d) {
    loop.shape[d] = out.shape[d];
    loop.strides[0][d] = out.strides[d];
    loop.strides[1][d] = in.strides[d];
  }
  loop.simplify();
  W* const po = out.data<W>();
  const W* const pi = in.data<const W>();
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = po + off[0];
    const W* x = pi + off[1];
    if (st[0] == 1 && st[1] == 1) {
      if (o != x) std::memcpy(o, x, static_cast<size_t>(n) * sizeof(W));
    } else if (st[0] == 1 && st[1] == 0) {
      const W v = *x;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    } else if (st[0] == 1) {
      const int64_t sx = st[1];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = x[i * sx];
    } else {
      const int64_t so = st[0], sx = st[1];
      for (int64_t i = 0; i < n; ++i) o[i * so] = x[i * sx];
    }
  };
  if (parallel) {
    for_each_row(loop, row);
  } else {
    run_range(loop, 0, loop.count(), row);
  }
}

template <class W>
void fill_words(const View& out, W value, bool parallel) {
  StridedLoop<1> loop;
  loop.rank = out.rank;
  for (int d = 0; d < out.rank; ++d) {
    loop.shape[d] = out.shape[d];
    loop.strides[0][d] = out.strides[d];
  }
  loop.simplify();
  W* const po = out.data<W>();
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = po + off[0];
    if (st[0] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = value;
    } else {
      const int64_t so = st[0];
      for (int64_t i = 0; i < n; ++i) o[i * so] = value;
    }
  };
  if (parallel) {
    for_each_row(loop, row);
  } else {
    run_range(loop, 0, loop.count(), row);
  }
}

/// i64 -> f64 rounded to odd (exact below 2^53): rounding that to f16/bf16 afterwards gives the
/// correctly rounded i64 -> f16/bf16 conversion (one rounding, as the reference does).
double int64_to_double_round_odd(int64_t v) {
  const bool negative = v < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int shift = 0;
  while ((magnitude >> shift) >= (uint64_t{1} << 53)) ++shift;
  uint64_t kept = magnitude >> shift;
  if (shift > 0 && (magnitude & ((uint64_t{1} << shift) - 1)) != 0) kept |= 1;
  const double d = std::ldexp(static_cast<double>(kept), shift);  // exact
  return negative ? -d : d;
}

template <class T>
T value_of(const dx_attr_t* a) {
  if (a == nullptr) return T{};
  if (a->type == DX_ATTR_I64 || a->type == DX_ATTR_BOOL) {
    const int64_t v = a->value.i64;
    if constexpr (std::is_same_v<T, Bool>) return Bool{static_cast<uint8_t>(v != 0)};
    else if constexpr (std::is_same_v<T, Half>) return Half{double_to_half(int64_to_double_round_odd(v))};
    else if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16{double_to_bfloat16(int64_to_double_round_odd(v))};
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(v);  // one rounding (i64 -> f64 or f32)
    } else {
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<uint64_t>(v)));
    }
  }
  if (a->type == DX_ATTR_F64) {
    const double v = a->value.f64;
    if constexpr (std::is_same_v<T, Bool>) return Bool{static_cast<uint8_t>(v != 0)};
    else if constexpr (is_float_v<T>) return from_f64<T>(v);
    else return saturating_cast<T>(v);
  }
  fail(DX_INVALID_ARGUMENT, "cpu: attribute 'value' must be an i64, f64 or bool");
}

template <class T>
void encode_as(const dx_attr_t* a, void* bytes) {
  const T v = value_of<T>(a);
  std::memcpy(bytes, &v, sizeof(T));
}

}  // namespace

View compact_view(void* base, DLDataType dtype, const int64_t* shape, int rank) {
  View v;
  v.base = static_cast<char*>(base);
  v.dtype = dtype;
  v.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return v;
}

void copy_view(const View& out, const View& in, bool parallel) {
  if (out.count() == 0) return;
  switch (element_size(out.dtype)) {
    case 1: copy_words<Word<1>>(out, in, parallel); break;
    case 2: copy_words<Word<2>>(out, in, parallel); break;
    case 4: copy_words<Word<4>>(out, in, parallel); break;
    case 8: copy_words<Word<8>>(out, in, parallel); break;
    default: fail(DX_UNSUPPORTED, "cpu: unsupported element size " + dtype_name(out.dtype));
  }
}

void fill_view(const View& out, const void* value, bool parallel) {
  if (out.count() == 0) return;
  switch (element_size(out.dtype)) {
    case 1: { Word<1> w; std::memcpy(&w, value, 1); fill_words(out, w, parallel); break; }
    case 2: { Word<2> w; std::memcpy(&w, value, 2); fill_words(out, w, parallel); break; }
    case 4: { Word<4> w; std::memcpy(&w, value, 4); fill_words(out, w, parallel); break; }
    case 8: { Word<8> w; std::memcpy(&w, value, 8); fill_words(out, w, parallel); break; }
    default: fail(DX_UNSUPPORTED, "cpu: unsupported element size " + dtype_name(out.dtype));
  }
}

void zero_view(const View& out) {
  const uint64_t zero = 0;
  fill_view(out, &zero);
}

GradBuffer::GradBuffer(const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  data.assign(static_cast<size_t>(n), 0.0);
  view = compact_view(data.data(), make_dtype(kDLFloat, 64), shape, rank);
}

std::optional<std::vector<int64_t>> attr_i64_list(const dx_kernel_call_t* call, int slot,
                                                  const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_I64) return std::vector<int64_t>{a->value.i64};
  if (a->type != DX_ATTR_I64_ARRAY) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' must be an i64 array");
  }
  if (a->count < 0 || (a->count > 0 && a->value.i64s == nullptr)) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' is malformed");
  }
  return std::vector<int64_t>(a->value.i64s, a->value.i64s + a->count);
}

std::optional<double> attr_f64(const dx_kernel_call_t* call, int slot, const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute '") + name + "' must be an f64");
}

int normal_axis(const dx_kernel_call_t* call, int slot, int rank, int64_t fallback,
                const char* op) {
  const int64_t axis = attr_i64(call, slot, "axis", fallback);
  const int64_t normal = axis < 0 ? axis + rank : axis;
  if (normal < 0 || normal >= rank) {
    fail(DX_OUT_OF_RANGE, std::string(op) + ": axis " + std::to_string(axis) +
                              " is out of range for rank " + std::to_string(rank));
  }
  return static_cast<int>(normal);
}

void encode_value(const dx_attr_t* a, DLDataType dtype, void* bytes) {
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 64) return encode_as<double>(a, bytes);
      if (dtype.bits == 32) return encode_as<float>(a, bytes);
      if (dtype.bits == 16) return encode_as<Half>(a, bytes);
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return encode_as<BFloat16>(a, bytes);
      break;
    case kDLInt:
      if (dtype.bits == 64) return encode_as<int64_t>(a, bytes);
      if (dtype.bits == 32) return encode_as<int32_t>(a, bytes);
      if (dtype.bits == 16) return encode_as<int16_t>(a, bytes);
      if (dtype.bits == 8) return encode_as<int8_t>(a, bytes);
      break;
    case kDLUInt:
      if (dtype.bits == 8) return encode_as<uint8_t>(a, bytes);
      break;
    case DX_DLPACK_CODE_BOOL:
      if (dtype.bits == 8) return encode_as<Bool>(a, bytes);
      break;
    default: break;
  }
  fail(DX_UNSUPPORTED, "cpu: no value encoding for dtype " + dtype_name(dtype));
}

void expect_shape(const View& v, const int64_t* expected, int rank, const char* what) {
  bool ok = v.rank == rank;
  for (int d = 0; ok && d < rank; ++d) ok = v.shape[d] == expected[d];
  if (!ok) {
    std::string message = std::string("cpu: ") + what + " has shape ";
    message += shape_string(v.shape, v.rank);
    message += ", expected ";
    message += shape_string(expected, rank);
    fail(DX_SHAPE_MISMATCH, std::move(message));
  }
}

}  // namespace deepx::cpu::movement
