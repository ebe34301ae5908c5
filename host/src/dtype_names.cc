// Dtype names: which dx_dtype_t values deepx knows, and their names for messages and for
// dx_dtype_string().
#include <cstdio>

#include "internal.h"

namespace deepx::host {

bool IsKnownDtype(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: case DX_DTYPE_F32: case DX_DTYPE_F16: case DX_DTYPE_BF16:
    case DX_DTYPE_I64: case DX_DTYPE_I32: case DX_DTYPE_I16: case DX_DTYPE_I8:
    case DX_DTYPE_U8: case DX_DTYPE_BOOL:
      return true;
    default:
      return false;
  }
}

std::string DtypeName(dx_dtype_t d) {
  if (IsKnownDtype(d)) return dx_dtype_string(d);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "dtype(code=%u,bits=%u,lanes=%u)", d & 0xFFu,
                (d >> 8) & 0xFFu, d >> 16);
  return buffer;
}

}  // namespace deepx::host

extern "C" DX_EXPORT const char* dx_dtype_string(dx_dtype_t dtype) {
  switch (dtype) {
    case DX_DTYPE_F64: return "f64";
    case DX_DTYPE_F32: return "f32";
    case DX_DTYPE_F16: return "f16";
    case DX_DTYPE_BF16: return "bf16";
    case DX_DTYPE_I64: return "i64";
    case DX_DTYPE_I32: return "i32";
    case DX_DTYPE_I16: return "i16";
    case DX_DTYPE_I8: return "i8";
    case DX_DTYPE_U8: return "u8";
    case DX_DTYPE_BOOL: return "bool";
    default: return "unknown";
  }
}
