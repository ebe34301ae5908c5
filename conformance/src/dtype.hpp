// Dtypes of the conformance suite: names, packing, exact decoding and correctly rounded encoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "deepx/host.h"

namespace deepx::conformance {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

struct DTypeInfo {
  DType dtype;
  const char* name;   // "f32"
  dx_dtype_t packed;  // DX_DTYPE_F32
  int bytes;
  bool is_float;
  bool is_signed_int;
  bool is_unsigned_int;
  int mantissa_bits;  // precision p including the implicit bit (floats only)
  int min_exponent;   // exponent of the smallest normal (floats only)
};

const DTypeInfo& info(DType dtype);
inline bool is_float(DType d) { return info(d).is_float; }
inline bool is_integer(DType d) { return info(d).is_signed_int || info(d).is_unsigned_int; }
inline int byte_size(DType d) { return info(d).bytes; }
inline const char* name(DType d) { return info(d).name; }

std::optional<DType> dtype_from_name(std::string_view text);
std::optional<DType> dtype_from_packed(dx_dtype_t packed);
// "f32", or "dtype(code=..,bits=..,lanes=..)" for dtypes the suite does not know.
std::string packed_name(dx_dtype_t packed);

// Floats: the value, exactly (every f16/bf16/f32 value is a double). Integers: the value (i64
// beyond 2^53 loses bits: use load_int for exact integer work). Bool: 0 or 1.
double load_double(DType dtype, const void* element);
// Integers and bool, exactly, sign- or zero-extended.
int64_t load_int(DType dtype, const void* element);
// Floats: round to nearest even, once, from the double (so f16/bf16 see no double rounding).
void store_double(DType dtype, double value, void* element);
// Integers: wraps (two's complement); bool: value != 0.
void store_int(DType dtype, int64_t value, void* element);

// Raw bits of a float element, zero-extended.
uint64_t load_bits(DType dtype, const void* element);

// f16 / bf16 conversions from a double, rounding once to nearest even (exposed for tests).
uint16_t double_to_f16_bits(double value);
uint16_t double_to_bf16_bits(double value);
double f16_bits_to_double(uint16_t bits);
double bf16_bits_to_double(uint16_t bits);

// Distance in units in the last place between two finite-or-infinite values of a float dtype,
// measured on the dtype's own grid (bit patterns mapped to a monotonic integer line; +0 and -0
// are the same point). NaN anywhere gives UINT64_MAX.
uint64_t ulp_distance(DType dtype, double a, double b);
// The spacing of the dtype's grid at |value| (subnormal spacing below the smallest normal).
double ulp_of(DType dtype, double value);
// Largest finite value of a float dtype.
double max_finite(DType dtype);
double min_normal(DType dtype);
double min_subnormal(DType dtype);
// Integer range of an integer dtype.
int64_t int_min(DType dtype);
int64_t int_max(DType dtype);

}  // namespace deepx::conformance
