// Host-side plumbing shared by the CUDA and HIP plugins (compiled by nvcc or hipcc, spelled
// through portability.h): errors, the per-runtime state, tensor views, attribute access, and
// the execution context of one kernel call (device, stream, synchronisation).
#ifndef DEEPX_PLUGINS_GPU_COMMON_RUNTIME_H_
#define DEEPX_PLUGINS_GPU_COMMON_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "deepx/gpu/layout_builder.h"
#include "deepx/gpu/numeric.h"
#include "deepx/gpu/portability.h"
#include "deepx/ops.h"
#include "deepx/plugin.h"

namespace deepx::gpu {

#if defined(DXG_BACKEND_CUDA)
constexpr int32_t kDeviceType = kDLCUDA;
constexpr int32_t kPinnedDeviceType = kDLCUDAHost;
#elif defined(DXG_HOST_EMULATION)
// The emulated plugin claims an extension device so it never poses as a real GPU.
constexpr int32_t kDeviceType = kDLExtDev;
constexpr int32_t kPinnedDeviceType = kDLCUDAHost;
#else
constexpr int32_t kDeviceType = kDLROCM;
constexpr int32_t kPinnedDeviceType = kDLROCMHost;
#endif
/// Plugin name and the prefix of its memory spaces ("cuda:0", "cuda_host").
constexpr const char* kPluginName = DXG_BACKEND_NAME;

/// An error raised inside the plugin, turned into a dx_error_t by guard() at the C boundary.
struct Failure {
  dx_status_t code;
  std::string message;
};

[[noreturn]] inline void fail(dx_status_t code, std::string message) {
  throw Failure{code, std::move(message)};
}

template <class Body>
dx_error_t* guard(const dx_host_t* host, Body&& body) noexcept {
  if (host == nullptr) return nullptr;
  try {
    body();
    return nullptr;
  } catch (const Failure& f) {
    return host->error_create(f.code, f.message.c_str());
  } catch (const std::bad_alloc&) {
    return host->error_create(DX_OUT_OF_MEMORY, DXG_BACKEND_NAME " plugin: out of host memory");
  } catch (const std::exception& e) {
    return host->error_create(DX_INTERNAL, e.what());
  } catch (...) {
    return host->error_create(DX_INTERNAL, DXG_BACKEND_NAME " plugin: unknown exception");
  }
}

/// Fails with the runtime's own words when a GPU call did not succeed.
inline void check(gpuError_t status, const char* what) {
  if (status == gpuSuccess) return;
  (void)gpuGetLastError();  // clear the sticky-free error state for the next call
  const dx_status_t code = status == gpuErrorMemoryAllocation ? DX_OUT_OF_MEMORY : DX_INTERNAL;
  fail(code, std::string(DXG_BACKEND_NAME ": ") + what + ": " + gpuGetErrorName(status) + ": " +
                 gpuGetErrorString(status));
}

/// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(gpuGetDevice(&previous_), "get current device");
    if (previous_ != device) check(gpuSetDevice(device), "set device");
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)gpuSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct PluginState;

/// One GPU as the plugin uses it: its stream for synchronous calls and its memory pool.
struct DeviceState {
  int index = 0;
  gpuStream_t sync_stream = nullptr;
  gpuMemPool_t pool = nullptr;
  bool pools_supported = false;
  uint64_t capacity = 0;
  std::string space_name;
  std::mutex blas_mutex;  // guards blas_handle (cuBLAS handles hold a mutable stream)
  void* blas_handle = nullptr;
  // Allocation statistics (the space's `stats` slot). The pool reports its own bytes; without a
  // pool (DEEPX_GPU_ALLOCATOR=device) the sizes of live blocks are kept here, since cudaFree /
  // hipFree take no size.
  std::mutex stats_mutex;
  std::unordered_map<void*, uint64_t> live_sizes;  // guarded by stats_mutex
  uint64_t live_allocations = 0;                   // guarded by stats_mutex
  uint64_t in_use_bytes = 0, peak_in_use_bytes = 0;  // guarded; allocator=device only
};

/// Data of a memory space slot (space_data).
struct SpaceData {
  PluginState* state = nullptr;
  DeviceState* device = nullptr;  // null for the pinned host space
};

/// Per-runtime state: the host services and the devices. kernel_data of every kernel.
struct PluginState {
  const dx_host_t* host = nullptr;
  dx_host_context_t* context = nullptr;
  std::vector<std::unique_ptr<DeviceState>> devices;
  std::vector<std::unique_ptr<SpaceData>> spaces;
  std::string pinned_name;
  /// DEEPX_GPU_ALLOCATOR=device: cudaMalloc/hipMalloc instead of the stream-ordered pool
  /// (synchronous, but every allocation can be exported over IPC).
  bool use_pool = true;
  /// DEEPX_CUDA_GEMM=portable: the tiled GEMM instead of cuBLAS (always on for HIP).
  bool portable_gemm = false;

  DeviceState& device(int id) {
    if (id < 0 || id >= static_cast<int>(devices.size())) {
      fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": no device ") + std::to_string(id));
    }
    return *devices[static_cast<size_t>(id)];
  }
  void log(int level, const std::string& message) const {
    if (host != nullptr && host->log != nullptr) host->log(context, level, message.c_str());
  }
};

// ---- tensors -------------------------------------------------------------------------------

DType dtype_from_dlpack(DLDataType t);
const char* dtype_name(DType t);

/// A validated device tensor: first element, dtype, shape and explicit element strides.
struct View {
  char* base = nullptr;
  DType dtype = DType::Invalid;
  int device = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t count() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
  OperandShape operand() const { return OperandShape{shape, strides}; }
  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(base);
  }
};

/// Validates a kernel argument: non-null, on this plugin's device type, a known dtype, a sane
/// shape, data present when non-empty.
View make_view(const DLTensor* t, const char* what);

void expect_arity(const dx_kernel_call_t* call, int inputs, int outputs);
void expect_dtype(const View& v, DType want, const char* what);
void expect_same_shape(const View& a, const View& b, const char* what);
void expect_shape(const View& v, const std::vector<int64_t>& shape, const char* what);
/// The input gradient `i` a backward call asks for, checked to have the dtype and shape of
/// `like` (the forward input); nullopt when the caller passed null (not wanted) or the call has
/// fewer outputs.
std::optional<View> grad_output(const dx_kernel_call_t* call, int i, const View& like, const char* what);
std::string shape_string(const std::vector<int64_t>& shape);

/// Builds a layout or fails with DX_UNSUPPORTED (too many dimensions after collapsing).
Layout make_layout(const std::vector<int64_t>& shape, const std::vector<OperandShape>& operands);

// ---- attributes ----------------------------------------------------------------------------

inline const dx_attr_t* attr_at(const dx_kernel_call_t* call, int slot) {
  if (call->attrs == nullptr || slot >= call->num_attrs) return nullptr;
  const dx_attr_t* a = &call->attrs[slot];
  return a->type == DX_ATTR_NONE ? nullptr : a;
}
bool attr_bool(const dx_kernel_call_t* call, int slot, const char* name, bool fallback);
/// The reduction ops' `axes` attribute as one flag per dim of a rank-`rank` input (unset or
/// empty: every dim). Negative axes count from the end; a bad type is DX_INVALID_ARGUMENT, an
/// out-of-range or repeated axis DX_OUT_OF_RANGE.
std::vector<bool> reduce_axes_attr(const dx_kernel_call_t* call, int rank);
/// The `axis` of softmax / log_softmax for a rank-`rank` tensor (default -1; rank 0 acts as
/// rank 1), or DX_OUT_OF_RANGE.
int64_t softmax_axis(const dx_kernel_call_t* call, int rank);
int64_t attr_i64(const dx_kernel_call_t* call, int slot, const char* name, int64_t fallback);
double attr_f64(const dx_kernel_call_t* call, int slot, const char* name, double fallback);

// ---- execution -----------------------------------------------------------------------------

/// Where one kernel call runs: the tensors' device, the caller's stream (enqueue and return)
/// or, for a null stream, the device's own stream followed by a synchronisation.
class Exec {
 public:
  Exec(const dx_kernel_call_t* call, int device);
  gpuStream_t stream() const { return stream_; }
  PluginState& state() const { return *state_; }
  DeviceState& device() const { return *device_; }
  /// Checks the launches and, for a synchronous call, waits for them.
  void finish();
  /// Waits for the stream now (a kernel that must look at a result on the host).
  void synchronize();
  /// Stream-ordered scratch memory, freed on the stream when `Scratch` goes away.
  class Scratch {
   public:
    Scratch(Exec& exec, uint64_t bytes);
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* get() const { return ptr_; }

   private:
    Exec& exec_;
    void* ptr_ = nullptr;
  };

 private:
  PluginState* state_;
  DeviceState* device_;
  DeviceGuard guard_;
  gpuStream_t stream_;
  bool synchronous_;
};

/// Registers kernels with the host; remembers the first refusal.
class Registrar {
 public:
  Registrar(PluginState* state) : state_(state) {}
  void add(const char* op, int num_inputs, int num_outputs, std::vector<DType> dtypes,
           dx_kernel_fn forward, dx_kernel_flags_t flags, dx_kernel_fn backward = nullptr);
  dx_error_t* take_error() {
    dx_error_t* e = error_;
    error_ = nullptr;
    return e;
  }
  int registered() const { return registered_; }

 private:
  PluginState* state_;
  dx_error_t* error_ = nullptr;
  int registered_ = 0;
};

/// The dtype groups of docs/ops.md.
inline const std::vector<DType>& float_types() {
  static const std::vector<DType> t{DType::F64, DType::F32, DType::F16, DType::BF16};
  return t;
}
inline const std::vector<DType>& int_types() {
  static const std::vector<DType> t{DType::I64, DType::I32, DType::I16, DType::I8, DType::U8};
  return t;
}
inline const std::vector<DType>& all_types() {
  static const std::vector<DType> t{DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                    DType::I32, DType::I16, DType::I8,  DType::U8,   DType::Bool};
  return t;
}

constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;
constexpr dx_kernel_flags_t kInPlace = DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;

void register_elementwise_kernels(Registrar& r);
void register_movement_kernels(Registrar& r);
void register_reduction_kernels(Registrar& r);
void register_matmul_kernels(Registrar& r);
void register_random_kernels(Registrar& r);
dx_error_t* register_memory_spaces(PluginState* state);

/// Pool statistics of one device: reserved and used bytes, current and high-water marks.
struct PoolStats {
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
};
PoolStats pool_stats(const DeviceState& d);
void release_devices(PluginState* state);
/// Destroys the device's BLAS handle, if any (matmul.cu).
void release_blas(DeviceState& device);

/// Runs a kernel body under guard() with the call checked for structural sanity.
template <class Body>
dx_error_t* kernel_entry(const dx_kernel_call_t* call, Body&& body) noexcept {
  if (call == nullptr || call->host == nullptr) return nullptr;
  return guard(call->host, [&] {
    if (call->struct_size < DX_KERNEL_CALL_SIZE_1_0 || call->kernel_data == nullptr ||
        call->num_inputs < 0 || call->num_outputs < 0 || call->num_attrs < 0 ||
        (call->num_inputs > 0 && call->inputs == nullptr) ||
        (call->num_outputs > 0 && call->outputs == nullptr) ||
        (call->num_attrs > 0 && call->attrs == nullptr)) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": malformed dx_kernel_call_t");
    }
    body();
  });
}

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_RUNTIME_H_
