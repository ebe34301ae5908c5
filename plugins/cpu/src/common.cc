#include "common.h"

#include <cstdio>

namespace deepx::cpu {

std::string dtype_name(DLDataType t) {
  const char* base = "?";
  switch (t.code) {
    case kDLFloat: base = "f"; break;
    case kDLBfloat: base = "bf"; break;
    case kDLInt: base = "i"; break;
    case kDLUInt: base = "u"; break;
    case DX_DLPACK_CODE_BOOL: return t.lanes == 1 ? "bool" : "bool(lanes)";
    default: break;
  }
  // Appended piecewise: `base + std::to_string(...)` trips GCC 12's false -Wrestrict.
  std::string name(base);
  name += std::to_string(t.bits);
  if (t.lanes != 1) {
    name += 'x';
    name += std::to_string(t.lanes);
  }
  return name;
}

std::string shape_string(const int64_t* shape, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

View make_view(const DLTensor* t, const char* what) {
  if (t == nullptr) fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " is null");
  const int type = t->device.device_type;
  if (type != kDLCPU && type != kDLCUDAHost && type != kDLROCMHost) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " is not in host memory (device type " +
                                  std::to_string(type) + ")");
  }
  if (t->ndim < 0) fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " has negative ndim");
  if (t->ndim > kMaxRank) {
    fail(DX_UNSUPPORTED, std::string("cpu: ") + what + " has rank " + std::to_string(t->ndim) +
                             ", above the supported " + std::to_string(kMaxRank));
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " has a null shape");
  }
  if (t->dtype.lanes != 1) {
    fail(DX_SHAPE_MISMATCH, std::string("cpu: ") + what + " has vector dtype " + dtype_name(t->dtype));
  }
  View v;
  v.dtype = t->dtype;
  v.rank = t->ndim;
  int64_t compact = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (t->shape[d] < 0) {
      fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " has a negative dimension");
    }
    v.shape[d] = t->shape[d];
    v.strides[d] = t->strides != nullptr ? t->strides[d] : compact;
    compact *= t->shape[d];
  }
  if (t->data == nullptr && v.count() > 0) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + what + " has null data");
  }
  v.base = static_cast<char*>(t->data) + t->byte_offset;
  return v;
}

void expect_arity(const dx_kernel_call_t* call, int inputs, int outputs) {
  if (call->num_inputs != inputs || call->num_outputs != outputs) {
    fail(DX_INVALID_ARGUMENT, "cpu: expected " + std::to_string(inputs) + " inputs and " +
                                  std::to_string(outputs) + " outputs, got " +
                                  std::to_string(call->num_inputs) + " and " +
                                  std::to_string(call->num_outputs));
  }
  if ((inputs > 0 && call->inputs == nullptr) || (outputs > 0 && call->outputs == nullptr)) {
    fail(DX_INVALID_ARGUMENT, "cpu: null tensor array");
  }
}

void expect_dtype(const View& v, DLDataType want, const char* what) {
  if (!same_dtype(v.dtype, want)) {
    fail(DX_SHAPE_MISMATCH, std::string("cpu: ") + what + " has dtype " + dtype_name(v.dtype) +
                                ", the kernel expects " + dtype_name(want));
  }
}

bool attr_bool(const dx_kernel_call_t* call, int slot, const char* name, bool fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_BOOL && a->type != DX_ATTR_I64) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " must be a bool");
  }
  return a->value.i64 != 0;
}

int64_t attr_i64(const dx_kernel_call_t* call, int slot, const char* name, int64_t fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_I64) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: attribute ") + name + " must be an i64");
  }
  return a->value.i64;
}

void check_same_shape(const View& out, const View& in) {
  bool ok = out.rank == in.rank;
  for (int d = 0; ok && d < in.rank; ++d) ok = out.shape[d] == in.shape[d];
  if (!ok) {
    fail(DX_SHAPE_MISMATCH, "cpu: output shape " + shape_string(out.shape, out.rank) +
                                " differs from input shape " + shape_string(in.shape, in.rank));
  }
}

}  // namespace deepx::cpu
