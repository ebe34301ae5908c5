// Conversions between IEEE binary16 (f16), bfloat16 (bf16) and f32/f64, written from the format
// definitions so the reference shares no code with any plugin. Every narrowing conversion rounds
// once, to nearest with ties to even; subnormals, infinities and NaN (sign and the payload bits
// that fit) are preserved. NaN payloads that would vanish become quiet NaNs, never infinities.
#pragma once

#include <cstdint>

namespace deepx::ref {

// Rounds `value` once (nearest, ties to even) to a binary floating-point format with
// `exponent_bits` exponent bits and `mantissa_bits` stored fraction bits (f16: 5, 10; bf16: 8, 7;
// f32: 8, 23) and returns its bit pattern in the low 1 + exponent_bits + mantissa_bits bits.
// Overflow gives +-Inf, underflow gives +-0 (or a subnormal), NaN keeps its sign and leading
// payload bits. Valid for formats narrower than f64 (exponent_bits <= 10, mantissa_bits <= 51).
std::uint64_t round_double_to_format(double value, int exponent_bits, int mantissa_bits);

// Exact widening: every f16 / bf16 value is representable in f32 and f64.
double f16_to_f64(std::uint16_t bits);
float f16_to_f32(std::uint16_t bits);
double bf16_to_f64(std::uint16_t bits);
float bf16_to_f32(std::uint16_t bits);

// Narrowing, rounded once to nearest even.
std::uint16_t f64_to_f16(double value);
std::uint16_t f32_to_f16(float value);
std::uint16_t f64_to_bf16(double value);
std::uint16_t f32_to_bf16(float value);

}  // namespace deepx::ref
