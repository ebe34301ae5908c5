// f16 / bf16 <-> f32 / f64 conversions from first principles (see half.hpp).
#include "deepx/reference/half.hpp"

#include <bit>
#include <cstdint>

namespace deepx::ref {
namespace {

constexpr int kF64MantissaBits = 52;
constexpr std::uint64_t kF64MantissaMask = (std::uint64_t{1} << kF64MantissaBits) - 1;

// Number of significant bits of a non-zero integer.
int bit_length(std::uint64_t v) { return 64 - std::countl_zero(v); }

// Widens a narrow format's bit pattern to f64 exactly (used for f16 and bf16).
double widen_to_f64(std::uint64_t bits, int exponent_bits, int mantissa_bits) {
  const std::uint64_t sign = (bits >> (exponent_bits + mantissa_bits)) & 1;
  const std::uint64_t exponent_field = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const std::uint64_t fraction = bits & ((std::uint64_t{1} << mantissa_bits) - 1);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int shift_to_f64 = kF64MantissaBits - mantissa_bits;
  std::uint64_t out = sign << 63;
  if (exponent_field == (1u << exponent_bits) - 1) {
    // Inf or NaN: the payload moves into the top of the f64 fraction, unchanged (no quieting,
    // so a signalling NaN survives a round trip).
    out |= std::uint64_t{0x7FF} << 52 | fraction << shift_to_f64;
  } else if (exponent_field == 0) {
    if (fraction != 0) {
      // Subnormal: value = fraction * 2^(1 - bias - mantissa_bits); normalise for f64.
      const int msb = bit_length(fraction) - 1;  // fraction = 1.xxx * 2^msb
      const int unbiased = msb + 1 - bias - mantissa_bits;
      const std::uint64_t f64_fraction =
          (fraction << (kF64MantissaBits - msb)) & kF64MantissaMask;
      out |= static_cast<std::uint64_t>(unbiased + 1023) << 52 | f64_fraction;
    }
  } else {
    const int unbiased = static_cast<int>(exponent_field) - bias;
    out |= static_cast<std::uint64_t>(unbiased + 1023) << 52 | fraction << shift_to_f64;
  }
  return std::bit_cast<double>(out);
}

}  // namespace

std::uint64_t round_double_to_format(double value, int exponent_bits, int mantissa_bits) {
  const std::uint64_t in = std::bit_cast<std::uint64_t>(value);
  const std::uint64_t sign = in >> 63;
  const int f64_exponent_field = static_cast<int>((in >> 52) & 0x7FF);
  const std::uint64_t f64_fraction = in & kF64MantissaMask;
  const std::uint64_t exponent_all_ones = (std::uint64_t{1} << exponent_bits) - 1;
  const std::uint64_t sign_bit = sign << (exponent_bits + mantissa_bits);
  const std::uint64_t inf_bits = exponent_all_ones << mantissa_bits;

  if (f64_exponent_field == 0x7FF) {
    if (f64_fraction == 0) return sign_bit | inf_bits;
    // NaN: keep the leading payload bits; if none survive, make it a quiet NaN.
    std::uint64_t payload = f64_fraction >> (kF64MantissaBits - mantissa_bits);
    if (payload == 0) payload = std::uint64_t{1} << (mantissa_bits - 1);
    return sign_bit | inf_bits | payload;
  }

  // value = significand * 2^exponent with an integer significand.
  std::uint64_t significand;
  int exponent;
  if (f64_exponent_field == 0) {
    if (f64_fraction == 0) return sign_bit;  // +-0
    significand = f64_fraction;
    exponent = -1074;
  } else {
    significand = f64_fraction | (std::uint64_t{1} << kF64MantissaBits);
    exponent = f64_exponent_field - 1075;
  }

  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int min_normal_exponent = 1 - bias;
  const int max_exponent = bias;
  // floor(log2(|value|))
  const int binade = exponent + bit_length(significand) - 1;
  if (binade > max_exponent + 1) return sign_bit | inf_bits;  // far beyond the largest finite

  // The target's spacing (quantum) at this value is 2^quantum_exponent; subnormals share the
  // spacing of the smallest normal binade.
  const int quantum_exponent =
      (binade < min_normal_exponent ? min_normal_exponent : binade) - mantissa_bits;
  const int shift = quantum_exponent - exponent;

  // `units` = |value| / 2^quantum_exponent rounded to nearest, ties to even.
  std::uint64_t units;
  if (shift <= 0) {
    units = significand << -shift;  // exact: the value is a multiple of the quantum
  } else if (shift > 53) {
    units = 0;  // |value| < 2^(quantum_exponent - 1): below half a quantum
  } else {
    units = significand >> shift;
    const std::uint64_t remainder = significand & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (remainder > half || (remainder == half && (units & 1) != 0)) ++units;
  }

  // For normal numbers units = 2^mantissa_bits + fraction; adding it to the exponent field
  // (biased exponent - 1) yields the encoding, and a carry out of the fraction (rounding up to
  // the next binade, or from the largest subnormal to the smallest normal) lands in the exponent
  // field by itself. For subnormals the exponent-field term is zero and units is the fraction.
  const int field_base =
      (binade < min_normal_exponent ? min_normal_exponent : binade) + bias - 1;
  std::uint64_t magnitude =
      (static_cast<std::uint64_t>(field_base) << mantissa_bits) + units;
  if (magnitude >= inf_bits) magnitude = inf_bits;  // rounded past the largest finite value
  return sign_bit | magnitude;
}

double f16_to_f64(std::uint16_t bits) { return widen_to_f64(bits, 5, 10); }
double bf16_to_f64(std::uint16_t bits) { return widen_to_f64(bits, 8, 7); }

float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t exponent_field = (bits >> 10) & 0x1F;
  if (exponent_field == 0x1F && (bits & 0x3FF) != 0) {
    // NaN: move the payload bit for bit (a hardware f64->f32 narrowing would quiet it).
    const std::uint32_t sign = static_cast<std::uint32_t>(bits >> 15) << 31;
    return std::bit_cast<float>(sign | 0x7F800000u | static_cast<std::uint32_t>(bits & 0x3FF) << 13);
  }
  return static_cast<float>(f16_to_f64(bits));  // exact
}

float bf16_to_f32(std::uint16_t bits) {
  // bf16 is the top half of an f32.
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t f64_to_f16(double value) {
  return static_cast<std::uint16_t>(round_double_to_format(value, 5, 10));
}
std::uint16_t f64_to_bf16(double value) {
  return static_cast<std::uint16_t>(round_double_to_format(value, 8, 7));
}

std::uint16_t f32_to_f16(float value) {
  const std::uint32_t in = std::bit_cast<std::uint32_t>(value);
  if ((in & 0x7F800000u) == 0x7F800000u && (in & 0x7FFFFFu) != 0) {
    std::uint32_t payload = (in & 0x7FFFFFu) >> 13;
    if (payload == 0) payload = 0x200;
    return static_cast<std::uint16_t>((in >> 16 & 0x8000u) | 0x7C00u | payload);
  }
  return f64_to_f16(static_cast<double>(value));  // widening is exact, so one rounding
}

std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t in = std::bit_cast<std::uint32_t>(value);
  if ((in & 0x7F800000u) == 0x7F800000u && (in & 0x7FFFFFu) != 0) {
    std::uint32_t top = in >> 16;
    if ((top & 0x7F) == 0) top |= 0x40;  // the payload lived only in the dropped bits
    return static_cast<std::uint16_t>(top);
  }
  return f64_to_bf16(static_cast<double>(value));
}

}  // namespace deepx::ref
