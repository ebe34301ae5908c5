// Element types and conversions shared by the device kernels and the host-emulation tests.
//
// f16 and bf16 are stored as raw bits and converted with integer arithmetic only (round to
// nearest even, subnormals, Inf, NaN), so the same code gives the same bits under nvcc, hipcc
// and g++: no dependence on cuda_fp16.h / hip_fp16.h, on denormal flushing or on intrinsics.
#ifndef DEEPX_GPU_NUMERIC_H_
#define DEEPX_GPU_NUMERIC_H_

#include <stdint.h>
#include <string.h>

#include "deepx/gpu/portability.h"

namespace deepx::gpu {

/// The element types the kernels know, in one small enum (runtime dtype dispatch).
enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool, Invalid };

DXG_HD int dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    default: return 1;
  }
}
DXG_HD bool dtype_is_float(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

/// IEEE binary16 bits.
struct Half {
  uint16_t bits;
};
/// bfloat16 bits (the upper half of an f32).
struct BFloat16 {
  uint16_t bits;
};
/// One byte, 0 or 1 (DLPack bool).
struct Bool {
  uint8_t bits;
};

DXG_HD uint32_t float_to_bits(float f) {
#if defined(DXG_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}
DXG_HD float bits_to_float(uint32_t u) {
#if defined(DXG_DEVICE_PASS)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

DXG_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise (value = mantissa * 2^-24)
      uint32_t e = 113;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --e;
      }
      bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  return bits_to_float(bits);
}

DXG_HD uint16_t float_to_half(float value) {
  const uint32_t x = float_to_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN stays a quiet NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (a < 0x38800000u) {                                              // half subnormal or zero
    if (a <= 0x33000000u) return static_cast<uint16_t>(sign);          // <= 2^-25: ties to 0
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | r);
}

DXG_HD float bfloat16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

DXG_HD uint16_t float_to_bfloat16(float value) {
  const uint32_t f = float_to_bits(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);
  const uint32_t rounded = f + 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

/// double -> float rounded to odd; rounding that to f16/bf16 is then the correctly rounded
/// double -> f16/bf16 conversion (f32 has more than 2p + 2 bits for both narrow formats).
DXG_HD float double_to_float_round_odd(double d) {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t bits = float_to_bits(f);
  const double mf = static_cast<double>(f) < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double md = d < 0 ? -d : d;
  if (mf > md) bits -= 1;  // one ulp back toward zero
  return bits_to_float(bits | 1u);
}

/// a + b * c with two roundings, never fused into one FMA: the reference computes these
/// (random scaling, arange) unfused, and bit-identical results need the same roundings. nvcc
/// would contract `a + b * c` by default (-fmad=true), hipcc too (-ffp-contract=fast).
DXG_HD double add_mul_unfused(double a, double b, double c) {
#if defined(DXG_DEVICE_PASS) && defined(DXG_BACKEND_CUDA)
  return __dadd_rn(a, __dmul_rn(b, c));
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  const double product = b * c;
  return a + product;
#endif
}

/// Arithmetic traits: storage type T computes in C; f16/bf16 in f32, rounded once on store.
template <class T>
struct Num {
  using C = T;
  static DXG_HD C load(T v) { return v; }
  static DXG_HD T store(C v) { return v; }
};
template <>
struct Num<Half> {
  using C = float;
  static DXG_HD float load(Half v) { return half_to_float(v.bits); }
  static DXG_HD Half store(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Num<BFloat16> {
  using C = float;
  static DXG_HD float load(BFloat16 v) { return bfloat16_to_float(v.bits); }
  static DXG_HD BFloat16 store(float v) { return BFloat16{float_to_bfloat16(v)}; }
};

/// The DType of a storage type.
template <class T>
DXG_HD constexpr DType dtype_of() {
  if constexpr (sizeof(T) == 8 && static_cast<T>(0.5) != static_cast<T>(0)) return DType::F64;
  else if constexpr (sizeof(T) == 4 && static_cast<T>(0.5) != static_cast<T>(0)) return DType::F32;
  else return DType::Invalid;
}
template <> DXG_HD constexpr DType dtype_of<Half>() { return DType::F16; }
template <> DXG_HD constexpr DType dtype_of<BFloat16>() { return DType::BF16; }

// ---- runtime-typed element access (cast, fill, arange, random, reductions' outputs) ----------

/// Reads any float element as double (exact).
DXG_HD double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::F64: return *static_cast<const double*>(p);
    case DType::F32: return *static_cast<const float*>(p);
    case DType::F16: return half_to_float(*static_cast<const uint16_t*>(p));
    case DType::BF16: return bfloat16_to_float(*static_cast<const uint16_t*>(p));
    case DType::I64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::I32: return *static_cast<const int32_t*>(p);
    case DType::I16: return *static_cast<const int16_t*>(p);
    case DType::I8: return *static_cast<const int8_t*>(p);
    case DType::U8: return *static_cast<const uint8_t*>(p);
    case DType::Bool: return *static_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
    default: return 0;
  }
}

/// Reads any integer or bool element as int64 (exact).
DXG_HD int64_t load_as_int(const void* p, DType t) {
  switch (t) {
    case DType::I64: return *static_cast<const int64_t*>(p);
    case DType::I32: return *static_cast<const int32_t*>(p);
    case DType::I16: return *static_cast<const int16_t*>(p);
    case DType::I8: return *static_cast<const int8_t*>(p);
    case DType::U8: return *static_cast<const uint8_t*>(p);
    case DType::Bool: return *static_cast<const uint8_t*>(p) != 0;
    default: return 0;
  }
}

/// Stores an integer, wrapping to the width of `t` (two's complement); floats round once.
DXG_HD void store_int_wrapping(void* p, DType t, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  switch (t) {
    case DType::I64: *static_cast<int64_t*>(p) = v; break;
    case DType::I32: *static_cast<uint32_t*>(p) = static_cast<uint32_t>(u); break;
    case DType::I16: *static_cast<uint16_t*>(p) = static_cast<uint16_t>(u); break;
    case DType::I8: case DType::U8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(u); break;
    case DType::Bool: *static_cast<uint8_t*>(p) = v != 0; break;
    case DType::F64: *static_cast<double*>(p) = static_cast<double>(v); break;
    case DType::F32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DType::F16:
      *static_cast<uint16_t*>(p) = float_to_half(double_to_float_round_odd(static_cast<double>(v)));
      break;
    case DType::BF16:
      *static_cast<uint16_t*>(p) =
          float_to_bfloat16(double_to_float_round_odd(static_cast<double>(v)));
      break;
    default: break;
  }
}

/// double -> integer: truncate toward zero, saturate, NaN -> 0 (the cast contract).
DXG_HD int64_t saturate_to_int(double v, DType t) {
  if (v != v) return 0;
  double lo, hi;
  switch (t) {
    case DType::I64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case DType::I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DType::I16: lo = -32768.0; hi = 32767.0; break;
    case DType::I8: lo = -128.0; hi = 127.0; break;
    case DType::U8: lo = 0.0; hi = 255.0; break;
    default: return v != 0;
  }
  if (v <= lo) return static_cast<int64_t>(lo);
  // 2^63 - 1 is not a double: anything >= 2^63 saturates to INT64_MAX.
  if (t == DType::I64 && v >= 9223372036854775808.0) return INT64_MAX;
  if (v >= hi) return static_cast<int64_t>(hi);
  return static_cast<int64_t>(v);  // truncates toward zero
}

/// Stores a double into any element: floats round once (f16/bf16 via round-to-odd), integers
/// truncate and saturate, bool is `v != 0` (NaN -> true).
DXG_HD void store_from_double(void* p, DType t, double v) {
  switch (t) {
    case DType::F64: *static_cast<double*>(p) = v; break;
    case DType::F32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DType::F16: *static_cast<uint16_t*>(p) = float_to_half(double_to_float_round_odd(v)); break;
    case DType::BF16:
      *static_cast<uint16_t*>(p) = float_to_bfloat16(double_to_float_round_odd(v));
      break;
    case DType::Bool: *static_cast<uint8_t*>(p) = v != 0; break;
    default: store_int_wrapping(p, t, saturate_to_int(v, t)); break;
  }
}

/// The cast contract between any two dtypes, for one element.
DXG_HD void cast_element(void* dst, DType to, const void* src, DType from) {
  if (dtype_is_float(from)) {
    store_from_double(dst, to, load_as_double(src, from));
  } else if (to == DType::F32 && from == DType::I64) {
    // i64 -> f32 directly: one rounding (via double would round twice above 2^53).
    *static_cast<float*>(dst) = static_cast<float>(load_as_int(src, from));
  } else {
    store_int_wrapping(dst, to, load_as_int(src, from));
  }
}

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_NUMERIC_H_
