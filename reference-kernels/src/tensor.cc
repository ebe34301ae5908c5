// dtypes, tensor views, element access and attributes of the reference kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "deepx/reference/half.hpp"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {

bool is_float(DType t) {
  return t == DType::kF64 || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

bool is_int(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kI16 || t == DType::kI8 ||
         t == DType::kU8;
}

std::size_t size_of(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

const char* name_of(DType t) {
  switch (t) {
    case DType::kF64: return "f64";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

DLDataType to_dlpack(DType t) {
  const auto bits = static_cast<std::uint8_t>(size_of(t) * 8);
  switch (t) {
    case DType::kF64: case DType::kF32: case DType::kF16:
      return DLDataType{static_cast<std::uint8_t>(kDLFloat), bits, 1};
    case DType::kBF16: return DLDataType{static_cast<std::uint8_t>(kDLBfloat), bits, 1};
    case DType::kI64: case DType::kI32: case DType::kI16: case DType::kI8:
      return DLDataType{static_cast<std::uint8_t>(kDLInt), bits, 1};
    case DType::kU8: return DLDataType{static_cast<std::uint8_t>(kDLUInt), bits, 1};
    case DType::kBool: return DLDataType{DX_DLPACK_CODE_BOOL, 8, 1};
  }
  return DLDataType{0, 0, 0};
}

std::optional<DType> from_dlpack(DLDataType t) {
  for (DType candidate : kAllTypes) {
    const DLDataType d = to_dlpack(candidate);
    if (d.code == t.code && d.bits == t.bits && d.lanes == t.lanes) return candidate;
  }
  return std::nullopt;
}

void fail(dx_status_t code, std::string message) { throw Error{code, std::move(message)}; }

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::byte* Tensor::at(std::span<const std::int64_t> index) const {
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < index.size(); ++k) offset += index[k] * strides[k];
  return base + offset * static_cast<std::int64_t>(size_of(dtype));
}

Tensor view(const DLTensor* dl, const std::string& role) {
  if (dl == nullptr) fail(DX_INVALID_ARGUMENT, role + " is a null tensor");
  if (dl->device.device_type != kDLCPU) {
    fail(DX_INVALID_ARGUMENT, role + " is not a CPU tensor (device type " +
                                  std::to_string(dl->device.device_type) + ")");
  }
  const std::optional<DType> dtype = from_dlpack(dl->dtype);
  if (!dtype) {
    fail(DX_INVALID_ARGUMENT, role + " has an unsupported dtype (code " +
                                  std::to_string(dl->dtype.code) + ", bits " +
                                  std::to_string(dl->dtype.bits) + ", lanes " +
                                  std::to_string(dl->dtype.lanes) + ")");
  }
  if (dl->ndim < 0) fail(DX_INVALID_ARGUMENT, role + " has a negative rank");
  if (dl->ndim > 0 && dl->shape == nullptr) fail(DX_INVALID_ARGUMENT, role + " has no shape");

  Tensor t;
  t.dtype = *dtype;
  t.shape.assign(dl->shape, dl->shape + dl->ndim);
  t.numel = 1;
  bool empty = false;
  for (std::int64_t dim : t.shape) {
    if (dim < 0) fail(DX_INVALID_ARGUMENT, role + " has a negative dimension " + shape_string(t.shape));
    if (dim == 0) empty = true;
  }
  if (!empty) {
    for (std::int64_t dim : t.shape) {
      if (t.numel > std::numeric_limits<std::int64_t>::max() / dim) {
        fail(DX_INVALID_ARGUMENT, role + " has too many elements " + shape_string(t.shape));
      }
      t.numel *= dim;
    }
  } else {
    t.numel = 0;
  }

  if (dl->strides != nullptr) {
    t.strides.assign(dl->strides, dl->strides + dl->ndim);
  } else {
    // Compact row-major.
    t.strides.assign(t.shape.size(), 1);
    for (std::size_t k = t.shape.size(); k > 1; --k) {
      t.strides[k - 2] = t.strides[k - 1] * (t.shape[k - 1] > 0 ? t.shape[k - 1] : 1);
    }
  }
  if (t.numel > 0 && dl->data == nullptr) fail(DX_INVALID_ARGUMENT, role + " has null data");
  t.base = dl->data == nullptr ? nullptr : static_cast<std::byte*>(dl->data) + dl->byte_offset;
  return t;
}

// ---- broadcasting ----

// NumPy broadcast of two shapes: dims aligned from the right; each pair must be equal or one of
// them 1.
std::vector<std::int64_t> broadcast_shapes(std::span<const std::int64_t> a,
                                           std::span<const std::int64_t> b) {
  const std::size_t rank = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    const std::int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      fail(DX_SHAPE_MISMATCH, "shapes " + shape_string(a) + " and " + shape_string(b) +
                                  " do not broadcast");
    }
    out[k] = da == 1 ? db : da;
  }
  return out;
}

// Re-views `in` with the rank and shape of `out_shape`: missing leading dims and broadcast
// dims of size 1 get stride 0, so in.at(out_index) addresses the broadcast element.
Tensor broadcast_to(const Tensor& in, std::span<const std::int64_t> out_shape) {
  Tensor t = in;
  const std::size_t lead = out_shape.size() - in.rank();
  t.shape.assign(out_shape.begin(), out_shape.end());
  t.strides.assign(out_shape.size(), 0);
  for (std::size_t k = 0; k < in.rank(); ++k) {
    t.strides[lead + k] = in.shape[k] == 1 ? 0 : in.strides[k];
  }
  return t;
}

void expect_output_shape(const Tensor& out, std::span<const std::int64_t> expected) {
  if (!std::equal(out.shape.begin(), out.shape.end(), expected.begin(), expected.end())) {
    fail(DX_SHAPE_MISMATCH, "output has shape " + shape_string(out.shape) + ", expected " +
                                shape_string(expected));
  }
}

BroadcastBinary broadcast_binary(const Call& call) {
  BroadcastBinary r;
  r.a = view(call.inputs[0], "input 0");
  r.b = view(call.inputs[1], "input 1");
  r.out = view(call.outputs[0], "output 0");
  r.shape = broadcast_shapes(r.a.shape, r.b.shape);
  expect_output_shape(r.out, r.shape);
  r.ab = broadcast_to(r.a, r.shape);
  r.bb = broadcast_to(r.b, r.shape);
  return r;
}

// ---- element access --------------------------------------------------------------------------

namespace {
template <typename T>
T read_as(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // tensors need not be aligned for T
  return v;
}
template <typename T>
void write_as(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
}  // namespace

double load_float(DType t, const std::byte* p) {
  switch (t) {
    case DType::kF64: return read_as<double>(p);
    case DType::kF32: return static_cast<double>(read_as<float>(p));
    case DType::kF16: return f16_to_f64(read_as<std::uint16_t>(p));
    case DType::kBF16: return bf16_to_f64(read_as<std::uint16_t>(p));
    default: fail(DX_INTERNAL, std::string("load_float on ") + name_of(t));
  }
}

void store_float(DType t, std::byte* p, double v) {
  switch (t) {
    case DType::kF64: write_as<double>(p, v); return;
    // The C++ conversion rounds to nearest even in the default floating-point environment.
    case DType::kF32: write_as<float>(p, static_cast<float>(v)); return;
    case DType::kF16: write_as<std::uint16_t>(p, f64_to_f16(v)); return;
    case DType::kBF16: write_as<std::uint16_t>(p, f64_to_bf16(v)); return;
    default: fail(DX_INTERNAL, std::string("store_float on ") + name_of(t));
  }
}

std::int64_t load_int(DType t, const std::byte* p) {
  switch (t) {
    case DType::kI64: return read_as<std::int64_t>(p);
    case DType::kI32: return read_as<std::int32_t>(p);
    case DType::kI16: return read_as<std::int16_t>(p);
    case DType::kI8: return read_as<std::int8_t>(p);
    case DType::kU8: return read_as<std::uint8_t>(p);
    case DType::kBool: return read_as<std::uint8_t>(p) != 0 ? 1 : 0;
    default: fail(DX_INTERNAL, std::string("load_int on ") + name_of(t));
  }
}

void store_int_wrapping(DType t, std::byte* p, std::int64_t v) {
  // Conversions to narrower integer types are modular in C++20: exactly two's complement wrap.
  switch (t) {
    case DType::kI64: write_as<std::int64_t>(p, v); return;
    case DType::kI32: write_as<std::int32_t>(p, static_cast<std::int32_t>(v)); return;
    case DType::kI16: write_as<std::int16_t>(p, static_cast<std::int16_t>(v)); return;
    case DType::kI8: write_as<std::int8_t>(p, static_cast<std::int8_t>(v)); return;
    case DType::kU8: write_as<std::uint8_t>(p, static_cast<std::uint8_t>(v)); return;
    case DType::kBool: write_as<std::uint8_t>(p, v != 0 ? 1 : 0); return;
    default: fail(DX_INTERNAL, std::string("store_int_wrapping on ") + name_of(t));
  }
}

// ---- attributes ------------------------------------------------------------------------------

const dx_attr_t* Call::attr(int slot, const char* name) const {
  const dx_attr_t* found = nullptr;
  if (slot >= 0 && static_cast<std::size_t>(slot) < attrs.size() &&
      (attrs[slot].name == nullptr || std::strcmp(attrs[slot].name, name) == 0)) {
    found = &attrs[slot];
  } else {
    for (const dx_attr_t& a : attrs) {
      if (a.name != nullptr && std::strcmp(a.name, name) == 0) {
        found = &a;
        break;
      }
    }
  }
  if (found == nullptr || found->type == DX_ATTR_NONE) return nullptr;
  return found;
}

bool attr_bool(const Call& call, int slot, const char* name, bool fallback) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_BOOL && a->type != DX_ATTR_I64) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be a bool");
  }
  return a->value.i64 != 0;
}

std::int64_t attr_i64(const Call& call, int slot, const char* name, std::int64_t fallback) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_I64) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be an i64");
  }
  return a->value.i64;
}

std::optional<double> attr_f64(const Call& call, int slot, const char* name) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be an f64");
}

std::optional<std::string> attr_string(const Call& call, int slot, const char* name) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return std::nullopt;
  if (a->type != DX_ATTR_STRING || a->value.str == nullptr || a->count < 0) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be a string");
  }
  return std::string(a->value.str, static_cast<std::size_t>(a->count));
}

std::optional<std::vector<std::int64_t>> attr_i64_list(const Call& call, int slot,
                                                       const char* name) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_I64) return std::vector<std::int64_t>{a->value.i64};
  if (a->type != DX_ATTR_I64_ARRAY) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be an i64 array");
  }
  if (a->count < 0 || (a->count > 0 && a->value.i64s == nullptr)) {
    fail(DX_INVALID_ARGUMENT, std::string("attribute '") + name + "' is malformed");
  }
  return std::vector<std::int64_t>(a->value.i64s, a->value.i64s + a->count);
}

// ---- gradients and conversions ----------------------------------------------------------------

GradBuffer::GradBuffer(std::span<const std::int64_t> shape) {
  view.dtype = DType::kF64;
  view.shape.assign(shape.begin(), shape.end());
  view.numel = 1;
  for (std::int64_t d : shape) view.numel *= d;
  data.assign(static_cast<std::size_t>(view.numel), 0.0);
  view.strides.assign(shape.size(), 1);
  for (std::size_t k = shape.size(); k > 1; --k) {
    view.strides[k - 2] = view.strides[k - 1] * (shape[k - 1] > 0 ? shape[k - 1] : 1);
  }
  view.base = reinterpret_cast<std::byte*>(data.data());
}

void GradBuffer::add(std::byte* p, double v) {
  double x;
  std::memcpy(&x, p, sizeof x);
  x += v;
  std::memcpy(p, &x, sizeof x);
}

void GradBuffer::store(const Tensor& grad) const {
  expect_output_shape(grad, view.shape);
  for_each_index(view.shape, [&](std::span<const std::int64_t> i) {
    store_float(grad.dtype, grad.at(i), load_float(DType::kF64, view.at(i)));
  });
}

std::optional<Tensor> grad_output(const Call& call, std::size_t i,
                                  std::span<const std::int64_t> expected) {
  if (i >= call.outputs.size() || call.outputs[i] == nullptr) return std::nullopt;
  Tensor t = view(call.outputs[i], "gradient output " + std::to_string(i));
  if (!std::equal(t.shape.begin(), t.shape.end(), expected.begin(), expected.end())) {
    fail(DX_SHAPE_MISMATCH, "gradient output " + std::to_string(i) + " has shape " +
                                shape_string(t.shape) + ", the forward input has " +
                                shape_string(expected));
  }
  return t;
}

void zero_fill(const Tensor& t) {
  for_each_index(t.shape, [&](std::span<const std::int64_t> i) {
    std::memset(t.at(i), 0, size_of(t.dtype));  // all-zero bits are 0 / false in every dtype
  });
}

double to_double_round_to_odd(std::int64_t v) {
  const bool negative = v < 0;
  std::uint64_t magnitude =
      negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  int shift = 0;
  while ((magnitude >> shift) >= (std::uint64_t{1} << 53)) ++shift;
  std::uint64_t kept = magnitude >> shift;
  if (shift > 0 && (magnitude & ((std::uint64_t{1} << shift) - 1)) != 0) kept |= 1;
  const double d = std::ldexp(static_cast<double>(kept), shift);  // exact
  return negative ? -d : d;
}

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

void store_int_any(DType t, std::byte* p, std::int64_t v) {
  if (!is_float(t)) {
    store_int_wrapping(t, p, v);
  } else if (t == DType::kF64) {
    store_float(t, p, static_cast<double>(v));  // one rounding (i64 -> f64)
  } else if (t == DType::kF32) {
    const float f = static_cast<float>(v);  // one rounding (i64 -> f32)
    std::memcpy(p, &f, sizeof f);
  } else {
    store_float(t, p, to_double_round_to_odd(v));  // round-to-odd, then once to f16/bf16
  }
}

}  // namespace deepx::ref
