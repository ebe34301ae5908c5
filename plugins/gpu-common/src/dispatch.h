// Runtime dtype -> storage type dispatch: calls fn(tag) with a null pointer of the storage
// type, so one generic lambda instantiates each kernel template once per dtype it supports.
#ifndef DEEPX_PLUGINS_GPU_COMMON_DISPATCH_H_
#define DEEPX_PLUGINS_GPU_COMMON_DISPATCH_H_

#include <cstdint>
#include <string>

#include "runtime.h"

namespace deepx::gpu {

template <class Fn>
void dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::F64: fn(static_cast<double*>(nullptr)); break;
    case DType::F32: fn(static_cast<float*>(nullptr)); break;
    case DType::F16: fn(static_cast<Half*>(nullptr)); break;
    case DType::BF16: fn(static_cast<BFloat16*>(nullptr)); break;
    default: fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": dtype ") + dtype_name(t) + " is not a float type");
  }
}

template <class Fn>
void dispatch_int(DType t, Fn&& fn) {
  switch (t) {
    case DType::I64: fn(static_cast<int64_t*>(nullptr)); break;
    case DType::I32: fn(static_cast<int32_t*>(nullptr)); break;
    case DType::I16: fn(static_cast<int16_t*>(nullptr)); break;
    case DType::I8: fn(static_cast<int8_t*>(nullptr)); break;
    case DType::U8: fn(static_cast<uint8_t*>(nullptr)); break;
    default: fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": dtype ") + dtype_name(t) + " is not an integer type");
  }
}

/// Element-size dispatch for byte-moving kernels (copy, where, fill): an unsigned word type.
template <class Fn>
void dispatch_size(DType t, Fn&& fn) {
  switch (dtype_size(t)) {
    case 8: fn(static_cast<uint64_t*>(nullptr)); break;
    case 4: fn(static_cast<uint32_t*>(nullptr)); break;
    case 2: fn(static_cast<uint16_t*>(nullptr)); break;
    default: fn(static_cast<uint8_t*>(nullptr)); break;
  }
}

template <class P>
using tag_t = std::remove_pointer_t<P>;

/// All inputs and outputs of a call on one device (a kernel runs on one GPU).
inline void expect_one_device(const std::vector<const View*>& views) {
  for (const View* v : views) {
    if (v->device != views.front()->device) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": the tensors of one call are on different devices");
    }
  }
}

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_DISPATCH_H_
