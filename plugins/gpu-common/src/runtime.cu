// Host plumbing of the GPU plugins: dtypes, views, attributes, the execution context and the
// registrar (see runtime.h).
#include <cstdlib>
#include <string>

#include "runtime.h"

namespace deepx::gpu {

DType dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1) return DType::Invalid;
  switch (t.code) {
    case kDLFloat:
      return t.bits == 64 ? DType::F64 : t.bits == 32 ? DType::F32 : t.bits == 16 ? DType::F16 : DType::Invalid;
    case kDLBfloat: return t.bits == 16 ? DType::BF16 : DType::Invalid;
    case kDLInt:
      return t.bits == 64 ? DType::I64 : t.bits == 32 ? DType::I32 : t.bits == 16 ? DType::I16
             : t.bits == 8 ? DType::I8 : DType::Invalid;
    case kDLUInt: return t.bits == 8 ? DType::U8 : DType::Invalid;
    case DX_DLPACK_CODE_BOOL: return t.bits == 8 ? DType::Bool : DType::Invalid;
    default: return DType::Invalid;
  }
}

static DLDataType dtype_to_dlpack(DType t) {
  switch (t) {
    case DType::F64: return {kDLFloat, 64, 1};
    case DType::F32: return {kDLFloat, 32, 1};
    case DType::F16: return {kDLFloat, 16, 1};
    case DType::BF16: return {kDLBfloat, 16, 1};
    case DType::I64: return {kDLInt, 64, 1};
    case DType::I32: return {kDLInt, 32, 1};
    case DType::I16: return {kDLInt, 16, 1};
    case DType::I8: return {kDLInt, 8, 1};
    case DType::U8: return {kDLUInt, 8, 1};
    case DType::Bool: return {DX_DLPACK_CODE_BOOL, 8, 1};
    default: return {0, 0, 0};
  }
}

const char* dtype_name(DType t) {
  static const char* const names[] = {"f64", "f32", "f16", "bf16", "i64", "i32",
                                      "i16", "i8",  "u8",  "bool", "invalid"};
  return names[static_cast<int>(t) <= static_cast<int>(DType::Invalid) ? static_cast<int>(t) : 10];
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

View make_view(const DLTensor* t, const char* what) {
  if (t == nullptr) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " is null");
  if (t->device.device_type != kDeviceType) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " is on device type " +
                                  std::to_string(t->device.device_type) + ", expected " +
                                  std::to_string(kDeviceType));
  }
  if (t->ndim < 0 || t->ndim > 32) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " has rank " + std::to_string(t->ndim));
  }
  View v;
  v.dtype = dtype_from_dlpack(t->dtype);
  if (v.dtype == DType::Invalid) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " has an unsupported dtype");
  }
  v.device = t->device.device_id;
  v.shape.assign(t->shape, t->shape + t->ndim);
  for (int64_t e : v.shape) {
    if (e < 0) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " has a negative dimension");
  }
  v.strides = t->strides != nullptr ? std::vector<int64_t>(t->strides, t->strides + t->ndim)
                                    : compact_strides(v.shape);
  v.base = static_cast<char*>(t->data) + t->byte_offset;
  if (v.count() > 0 && t->data == nullptr) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " has no data");
  }
  return v;
}

void expect_arity(const dx_kernel_call_t* call, int inputs, int outputs) {
  if (call->num_inputs != inputs || call->num_outputs != outputs) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": expected ") + std::to_string(inputs) +
                                  " inputs and " + std::to_string(outputs) + " outputs, got " +
                                  std::to_string(call->num_inputs) + " and " +
                                  std::to_string(call->num_outputs));
  }
}

void expect_dtype(const View& v, DType want, const char* what) {
  if (v.dtype != want) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + what + " is " + dtype_name(v.dtype) +
                                  ", expected " + dtype_name(want));
  }
}

void expect_same_shape(const View& a, const View& b, const char* what) {
  if (a.shape != b.shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + what + ": shape " + shape_string(a.shape) +
                                " does not match " + shape_string(b.shape));
  }
}

void expect_shape(const View& v, const std::vector<int64_t>& shape, const char* what) {
  if (v.shape != shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + what + ": shape " + shape_string(v.shape) +
                                ", expected " + shape_string(shape));
  }
}

std::optional<View> grad_output(const dx_kernel_call_t* call, int i, const View& like, const char* what) {
  if (i >= call->num_outputs || call->outputs[i] == nullptr) return std::nullopt;
  View g = make_view(call->outputs[i], what);
  expect_dtype(g, like.dtype, what);
  expect_same_shape(g, like, what);
  return g;
}

Layout make_layout(const std::vector<int64_t>& shape, const std::vector<OperandShape>& operands) {
  std::optional<Layout> l = build_layout(shape, operands);
  if (!l) fail(DX_UNSUPPORTED, DXG_BACKEND_NAME ": too many non-contiguous dimensions for one kernel");
  return *l;
}

int64_t softmax_axis(const dx_kernel_call_t* call, int rank) {
  const int64_t attr = attr_i64(call, DX_SOFTMAX_AXIS, "axis", -1);
  const int64_t limit = rank == 0 ? 1 : rank;
  const int64_t axis = attr < 0 ? attr + limit : attr;
  if (axis < 0 || axis >= limit) fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": softmax axis " + std::to_string(attr) + " is out of range");
  return axis;
}

std::vector<bool> reduce_axes_attr(const dx_kernel_call_t* call, int rank) {
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  const dx_attr_t* axes = attr_at(call, DX_REDUCE_AXES);
  if (axes != nullptr && axes->type != DX_ATTR_I64_ARRAY) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": reduction: axes must be an i64 array");
  }
  if (axes == nullptr || axes->count == 0) return std::vector<bool>(static_cast<size_t>(rank), true);
  for (int64_t i = 0; i < axes->count; ++i) {
    int64_t a = axes->value.i64s[i];
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || reduced[static_cast<size_t>(a)]) {
      fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": reduction: axis " + std::to_string(axes->value.i64s[i]) +
                                " is out of range or repeated");
    }
    reduced[static_cast<size_t>(a)] = true;
  }
  return reduced;
}

bool attr_bool(const dx_kernel_call_t* call, int slot, const char* name, bool fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_BOOL && a->type != DX_ATTR_I64) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " must be a bool");
  }
  return a->value.i64 != 0;
}

int64_t attr_i64(const dx_kernel_call_t* call, int slot, const char* name, int64_t fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type != DX_ATTR_I64 && a->type != DX_ATTR_BOOL) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " must be an i64");
  }
  return a->value.i64;
}

double attr_f64(const dx_kernel_call_t* call, int slot, const char* name, double fallback) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return fallback;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " must be a number");
}

// ---- Exec ----------------------------------------------------------------------------------

Exec::Exec(const dx_kernel_call_t* call, int device)
    : state_(static_cast<PluginState*>(call->kernel_data)),
      device_(&state_->device(device)),
      guard_(device),
      stream_(call->stream != nullptr ? reinterpret_cast<gpuStream_t>(call->stream)
                                      : device_->sync_stream),
      synchronous_(call->stream == nullptr) {}

void Exec::finish() {
  check(gpuGetLastError(), "kernel launch");
  if (synchronous_) check(gpuStreamSynchronize(stream_), "synchronise");
}

void Exec::synchronize() { check(gpuStreamSynchronize(stream_), "synchronise"); }

Exec::Scratch::Scratch(Exec& exec, uint64_t bytes) : exec_(exec) {
  if (bytes == 0) return;
  if (exec.state().use_pool && exec.device().pools_supported) {
    check(gpuMallocFromPoolAsync(&ptr_, bytes, exec.device().pool, exec.stream()), "scratch alloc");
  } else {
    check(gpuMalloc(&ptr_, bytes), "scratch alloc");
  }
}

Exec::Scratch::~Scratch() {
  if (ptr_ == nullptr) return;
  if (exec_.state().use_pool && exec_.device().pools_supported) {
    (void)gpuFreeAsync(ptr_, exec_.stream());
  } else {
    // cudaFree synchronises the device, so pending work that reads the scratch completes first.
    (void)gpuFree(ptr_);
  }
}

// ---- Registrar -----------------------------------------------------------------------------

void Registrar::add(const char* op, int num_inputs, int num_outputs, std::vector<DType> dtypes,
                    dx_kernel_fn forward, dx_kernel_flags_t flags, dx_kernel_fn backward) {
  if (error_ != nullptr) return;
  std::vector<DLDataType> signature;
  signature.reserve(dtypes.size());
  for (DType d : dtypes) signature.push_back(dtype_to_dlpack(d));
  dx_kernel_desc_t desc{};
  desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  desc.op_name = op;
  desc.device_type = kDeviceType;
  desc.num_inputs = num_inputs;
  desc.num_outputs = num_outputs;
  desc.dtypes = signature.data();
  desc.flags = flags;
  desc.kernel_data = state_;
  desc.forward = forward;
  desc.backward = backward;
  error_ = state_->host->register_kernel(state_->context, &desc);
  if (error_ == nullptr) ++registered_;
}

}  // namespace deepx::gpu
