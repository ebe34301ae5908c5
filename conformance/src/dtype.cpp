#include "dtype.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace deepx::conformance {
namespace {

constexpr DTypeInfo kInfos[] = {
    {DType::F64, "f64", DX_DTYPE_F64, 8, true, false, false, 53, -1022},
    {DType::F32, "f32", DX_DTYPE_F32, 4, true, false, false, 24, -126},
    {DType::F16, "f16", DX_DTYPE_F16, 2, true, false, false, 11, -14},
    {DType::BF16, "bf16", DX_DTYPE_BF16, 2, true, false, false, 8, -126},
    {DType::I64, "i64", DX_DTYPE_I64, 8, false, true, false, 0, 0},
    {DType::I32, "i32", DX_DTYPE_I32, 4, false, true, false, 0, 0},
    {DType::I16, "i16", DX_DTYPE_I16, 2, false, true, false, 0, 0},
    {DType::I8, "i8", DX_DTYPE_I8, 1, false, true, false, 0, 0},
    {DType::U8, "u8", DX_DTYPE_U8, 1, false, false, true, 0, 0},
    {DType::Bool, "bool", DX_DTYPE_BOOL, 1, false, false, false, 0, 0},
};

// A 16-bit binary float with `precision` significand bits (implicit bit included) and
// `exponent_bits` exponent bits: f16 (11, 5) and bf16 (8, 8).
struct Half {
  int precision;
  int exponent_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int min_exp() const { return 1 - bias(); }
  int max_exp() const { return bias(); }
  uint16_t exp_mask() const { return static_cast<uint16_t>(((1u << exponent_bits) - 1u) << (precision - 1)); }
  uint16_t mant_mask() const { return static_cast<uint16_t>((1u << (precision - 1)) - 1u); }
  double max_value() const { return std::ldexp(2.0 - std::ldexp(1.0, 1 - precision), max_exp()); }
};
constexpr Half kF16{11, 5};
constexpr Half kBF16{8, 8};

uint16_t encode_half(const Half& h, double value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return static_cast<uint16_t>(sign | h.exp_mask() | (1u << (h.precision - 2)));
  double a = std::fabs(value);
  // Values at or beyond max + half an ulp round to infinity (the tie goes to the even side, inf).
  const double overflow = h.max_value() + std::ldexp(1.0, h.max_exp() - h.precision);
  if (a >= overflow) return static_cast<uint16_t>(sign | h.exp_mask());
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  int exponent = std::max(e - 1, h.min_exp());
  double quantum = std::ldexp(1.0, exponent - h.precision + 1);
  double units = std::nearbyint(a / quantum);  // exact scaling; rounds half to even
  double rounded = units * quantum;
  if (rounded == 0) return sign;
  std::frexp(rounded, &e);
  int re = e - 1;
  if (re < h.min_exp()) {  // subnormal
    auto mant = static_cast<uint16_t>(rounded / std::ldexp(1.0, h.min_exp() - h.precision + 1));
    return static_cast<uint16_t>(sign | mant);
  }
  auto field = static_cast<uint16_t>(re + h.bias());
  auto mant = static_cast<uint16_t>(rounded / std::ldexp(1.0, re - h.precision + 1) - std::ldexp(1.0, h.precision - 1));
  return static_cast<uint16_t>(sign | (field << (h.precision - 1)) | mant);
}

double decode_half(const Half& h, uint16_t bits) {
  const bool negative = bits & 0x8000;
  const int field = (bits & h.exp_mask()) >> (h.precision - 1);
  const int mant = bits & h.mant_mask();
  double v;
  if (field == (1 << h.exponent_bits) - 1) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), h.min_exp() - h.precision + 1);
  } else {
    v = std::ldexp(static_cast<double>(mant + (1 << (h.precision - 1))), field - h.bias() - h.precision + 1);
  }
  return negative ? -v : v;
}

}  // namespace

const DTypeInfo& info(DType dtype) { return kInfos[static_cast<int>(dtype)]; }

std::optional<DType> dtype_from_name(std::string_view text) {
  for (const auto& i : kInfos)
    if (text == i.name) return i.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_packed(dx_dtype_t packed) {
  for (const auto& i : kInfos)
    if (packed == i.packed) return i.dtype;
  return std::nullopt;
}

std::string packed_name(dx_dtype_t packed) {
  if (auto d = dtype_from_packed(packed)) return name(*d);
  return "dtype(code=" + std::to_string(packed & 0xff) + ",bits=" + std::to_string((packed >> 8) & 0xff) +
         ",lanes=" + std::to_string(packed >> 16) + ")";
}

uint16_t double_to_f16_bits(double value) { return encode_half(kF16, value); }
uint16_t double_to_bf16_bits(double value) { return encode_half(kBF16, value); }
double f16_bits_to_double(uint16_t bits) { return decode_half(kF16, bits); }
double bf16_bits_to_double(uint16_t bits) { return decode_half(kBF16, bits); }

double load_double(DType dtype, const void* p) {
  switch (dtype) {
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::F16: { uint16_t b; std::memcpy(&b, p, 2); return f16_bits_to_double(b); }
    case DType::BF16: { uint16_t b; std::memcpy(&b, p, 2); return bf16_bits_to_double(b); }
    default: return static_cast<double>(load_int(dtype, p));
  }
}

int64_t load_int(DType dtype, const void* p) {
  switch (dtype) {
    case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::I8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::U8: { uint8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::Bool: { uint8_t v; std::memcpy(&v, p, 1); return v; }
    default: return static_cast<int64_t>(load_double(dtype, p));
  }
}

void store_double(DType dtype, double value, void* p) {
  switch (dtype) {
    case DType::F64: std::memcpy(p, &value, 8); return;
    case DType::F32: { float v = static_cast<float>(value); std::memcpy(p, &v, 4); return; }
    case DType::F16: { uint16_t b = double_to_f16_bits(value); std::memcpy(p, &b, 2); return; }
    case DType::BF16: { uint16_t b = double_to_bf16_bits(value); std::memcpy(p, &b, 2); return; }
    default: store_int(dtype, static_cast<int64_t>(value), p); return;
  }
}

void store_int(DType dtype, int64_t value, void* p) {
  const auto u = static_cast<uint64_t>(value);
  switch (dtype) {
    case DType::I64: std::memcpy(p, &u, 8); return;
    case DType::I32: { auto v = static_cast<uint32_t>(u); std::memcpy(p, &v, 4); return; }
    case DType::I16: { auto v = static_cast<uint16_t>(u); std::memcpy(p, &v, 2); return; }
    case DType::I8:
    case DType::U8: { auto v = static_cast<uint8_t>(u); std::memcpy(p, &v, 1); return; }
    case DType::Bool: { uint8_t v = value != 0; std::memcpy(p, &v, 1); return; }
    default: store_double(dtype, static_cast<double>(value), p); return;
  }
}

uint64_t load_bits(DType dtype, const void* p) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, static_cast<size_t>(byte_size(dtype)));  // little-endian host
  return bits;
}

namespace {
// Bits of `value` (already a value of the dtype) on the dtype's grid.
uint64_t grid_bits(DType dtype, double value) {
  unsigned char buf[8] = {};
  store_double(dtype, value, buf);
  return load_bits(dtype, buf);
}
}  // namespace

uint64_t ulp_distance(DType dtype, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return UINT64_MAX;
  const int width = byte_size(dtype) * 8;
  const uint64_t sign = uint64_t{1} << (width - 1);
  const uint64_t ba = grid_bits(dtype, a), bb = grid_bits(dtype, b);
  const uint64_t ma = ba & (sign - 1), mb = bb & (sign - 1);
  const bool na = (ba & sign) && ma != 0, nb = (bb & sign) && mb != 0;
  if (na == nb) return ma > mb ? ma - mb : mb - ma;
  return ma + mb;  // opposite sides of zero
}

double ulp_of(DType dtype, double value) {
  const auto& i = info(dtype);
  double a = std::fabs(value);
  if (std::isinf(a)) a = max_finite(dtype);
  int e = 0;
  std::frexp(a, &e);
  int exponent = a == 0 ? i.min_exponent : std::max(e - 1, i.min_exponent);
  return std::ldexp(1.0, exponent - i.mantissa_bits + 1);
}

double max_finite(DType dtype) {
  switch (dtype) {
    case DType::F64: return std::numeric_limits<double>::max();
    case DType::F32: return std::numeric_limits<float>::max();
    case DType::F16: return kF16.max_value();
    case DType::BF16: return kBF16.max_value();
    default: return static_cast<double>(int_max(dtype));
  }
}

double min_normal(DType dtype) { return std::ldexp(1.0, info(dtype).min_exponent); }
double min_subnormal(DType dtype) {
  return std::ldexp(1.0, info(dtype).min_exponent - info(dtype).mantissa_bits + 1);
}

int64_t int_min(DType dtype) {
  switch (dtype) {
    case DType::I64: return std::numeric_limits<int64_t>::min();
    case DType::I32: return std::numeric_limits<int32_t>::min();
    case DType::I16: return std::numeric_limits<int16_t>::min();
    case DType::I8: return std::numeric_limits<int8_t>::min();
    default: return 0;
  }
}

int64_t int_max(DType dtype) {
  switch (dtype) {
    case DType::I64: return std::numeric_limits<int64_t>::max();
    case DType::I32: return std::numeric_limits<int32_t>::max();
    case DType::I16: return std::numeric_limits<int16_t>::max();
    case DType::I8: return std::numeric_limits<int8_t>::max();
    case DType::U8: return 255;
    case DType::Bool: return 1;
    default: return 0;
  }
}

}  // namespace deepx::conformance
