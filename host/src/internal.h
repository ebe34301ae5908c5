// Internal types of the host runtime. Nothing here crosses the ABI: the C API in api_*.cc
// converts between these and the opaque handles of deepx/host.h.
#ifndef DEEPX_HOST_SRC_INTERNAL_H_
#define DEEPX_HOST_SRC_INTERNAL_H_

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepx/host.h"
#include "deepx/plugin.h"

// The error object plugins and the host exchange. Layout private to the host.
struct dx_error {
  dx_status_t code;
  std::string message;
};

namespace deepx::host {

// ---- errors ----------------------------------------------------------------------------------

// Records `message` as the calling thread's last error and returns `code`.
dx_status_t Fail(dx_status_t code, std::string message);
// printf-style Fail.
dx_status_t Failf(dx_status_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// The calling thread's last error message.
const char* LastErrorMessage();
// Takes ownership of a plugin error: records its message (prefixed) and returns its code.
dx_status_t FailFromError(dx_error_t* error, std::string_view prefix);
// The services table every plugin receives.
const dx_host_t* HostServices();
// Creates an error object (used by the host itself for errors returned to plugins).
dx_error_t* MakeError(dx_status_t code, std::string message);
void DestroyError(dx_error_t* error);

// Runs `body` and converts any C++ exception into a status: nothing escapes an entry point.
template <class Body>
dx_status_t Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(DX_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return Fail(DX_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(DX_INTERNAL, "internal error: unknown exception");
  }
}

// ---- dtypes ------------------------------------------------------------------------------------

inline dx_dtype_t PackDtype(DLDataType t) {
  return DX_DTYPE(t.code, t.bits, t.lanes);
}
inline DLDataType UnpackDtype(dx_dtype_t d) {
  DLDataType t;
  t.code = static_cast<uint8_t>(d & 0xFFu);
  t.bits = static_cast<uint8_t>((d >> 8) & 0xFFu);
  t.lanes = static_cast<uint16_t>(d >> 16);
  return t;
}
// True for the dtypes deepx knows (OPS.md groups F, I, B; lanes 1).
bool IsKnownDtype(dx_dtype_t d);
// "f32", "i64", "bool", or "dtype(code=..,bits=..,lanes=..)".
std::string DtypeName(dx_dtype_t d);
inline uint64_t DtypeBytes(dx_dtype_t d) { return (((d >> 8) & 0xFFu) + 7u) / 8u * (d >> 16); }

// ---- registries --------------------------------------------------------------------------------

struct Plugin;

struct Kernel {
  int32_t plugin_index = -1;
  int32_t device_type = 0;
  int32_t num_inputs = 0;
  int32_t num_outputs = 0;
  bool variadic = false;
  std::vector<dx_dtype_t> dtypes;  // inputs then outputs (1 + outputs when variadic)
  uint64_t flags = 0;
  void* kernel_data = nullptr;
  dx_kernel_fn forward = nullptr;
  dx_kernel_fn backward = nullptr;
  dx_kernel_supports_fn supports = nullptr;
  dx_kernel_cost_fn cost = nullptr;
  Plugin* plugin = nullptr;  // set at commit
  bool certified = false;    // a valid certificate of its plugin covers it
};

struct OpSchema;  // dispatch.cc

struct Op {
  std::string name;
  const OpSchema* schema = nullptr;  // null for vendor ops
  std::vector<Kernel> kernels;
  std::atomic<uint32_t> last_hit{0};  // index of the last kernel chosen: checked first
  Op() = default;
  Op(Op&& other) noexcept
      : name(std::move(other.name)), schema(other.schema), kernels(std::move(other.kernels)),
        last_hit(other.last_hit.load()) {}
};

struct MemorySpace {
  std::string name;
  int32_t plugin_index = -1;
  int32_t index = -1;
  dx_memory_space_desc_t desc{};  // copied, string pointer replaced by `name`
  bool HostAccessible() const {
    return desc.kind != DX_MEMORY_DEVICE;
  }
};

struct Transport {
  std::string name;
  int32_t plugin_index = -1;
  dx_transport_desc_t desc{};
};

// What a plugin registers during init, staged until init succeeds.
struct PendingKernel {
  std::string op_name;
  Kernel kernel;
};

}  // namespace deepx::host

// The context handed to a plugin's init. Identifies the plugin in registration callbacks.
struct dx_host_context {
  struct deepx::host::Plugin* plugin = nullptr;
  bool registering = false;
  std::vector<deepx::host::PendingKernel> kernels;
  std::vector<deepx::host::MemorySpace> spaces;
  std::vector<deepx::host::Transport> transports;
};

namespace deepx::host {

struct Plugin {
  int32_t index = -1;
  std::string name, vendor, version, build_id, path;
  uint32_t abi_version = 0;
  uint64_t capabilities = 0;
  void* library = nullptr;
  void* state = nullptr;
  void (*shutdown)(void*) = nullptr;
  int32_t num_kernels = 0, num_memory_spaces = 0, num_transports = 0;
  bool concurrent = false;
  int32_t certification = DX_CERTIFICATION_NONE;
  std::string certificate;         // path of the certificate considered, or ""
  std::string certification_note;  // why it is invalid, or ""
  std::mutex serial;  // taken around kernel calls when !concurrent
  dx_host_context context;
};

// The runtime's state. Shared by the runtime handle and every tensor storage it allocated, so
// plugins are shut down only when the runtime is destroyed and no storage still needs them.
struct Core {
  std::vector<std::string> search_dirs;  // options, then DEEPX_PLUGIN_PATH, then bundled
  std::vector<std::string> certificate_dirs;  // options, then DEEPX_CERTIFICATE_PATH
  bool require_certified = false;
  std::vector<std::unique_ptr<Plugin>> plugins;
  std::vector<Op> ops;
  std::unordered_map<std::string, dx_op_id_t> op_ids;
  std::vector<MemorySpace> spaces;
  std::vector<Transport> transports;
  ~Core();
  const MemorySpace* FindSpace(DLDevice device) const;
};

}  // namespace deepx::host

struct dx_runtime {
  std::shared_ptr<deepx::host::Core> core;
};

namespace deepx::host {

// Tensor storage: refcounted; freed through its memory space, or through the DLPack deleter of
// an imported tensor, exactly once.
struct Storage {
  std::atomic<int64_t> refs{1};
  std::shared_ptr<Core> core;        // keeps the space's plugin alive; null for imports
  const MemorySpace* space = nullptr;
  void* allocation = nullptr;        // what space->free receives
  char* lo = nullptr;                // valid byte range of the storage [lo, hi)
  char* hi = nullptr;
  dx_dlpack_versioned_t* imported = nullptr;
  DLManagedTensor* imported_legacy = nullptr;
  bool read_only = false;

  void Retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void Release();
};

}  // namespace deepx::host

struct dx_tensor {
  DLTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  deepx::host::Storage* storage = nullptr;
  int32_t device_index = -1;
  ~dx_tensor() {
    if (storage) storage->Release();
  }
};

namespace deepx::host {

struct AttrItem {
  std::string name;
  int32_t type = DX_ATTR_NONE;
  int64_t scalar_i = 0;
  double scalar_f = 0;
  std::string str;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};
// Fills a dx_attr_t view of `item` (pointers into `item`).
dx_attr_t AttrView(const AttrItem& item);

}  // namespace deepx::host

struct dx_attrs {
  std::vector<deepx::host::AttrItem> items;
  // Cache of the schema-ordered view for one op (rebuilt when the op or the items change).
  std::mutex cache_mutex;
  uint64_t generation = 1;
  uint64_t cache_generation = 0;
  dx_op_id_t cache_op = 0;
  const void* cache_core = nullptr;
  std::vector<dx_attr_t> cache;
};

namespace deepx::host {

// Loads a plugin (loader.cc).
dx_status_t LoadPlugin(const std::shared_ptr<Core>& core, const char* name_or_path,
                       int32_t* out_index);
// Lists the plugin files in the search dirs, first occurrence of a name wins.
std::vector<std::string> DiscoverPlugins(const Core& core);
// The plugin search directories: option path, DEEPX_PLUGIN_PATH (unless ignored), bundled, installed.
std::vector<std::string> SearchDirs(const char* option_path, bool ignore_env);
// The bundled plugin directory, next to the host library.
std::string BundledPluginDir();

// Finds and checks the plugin's certificate; marks the pending kernels it covers (certificate.cc).
void EvaluateCertificate(const Core& core, Plugin& plugin, std::vector<PendingKernel>& kernels);
std::vector<std::string> SplitPath(const char* value);

// Op schemas (dispatch.cc).
const OpSchema* FindSchema(std::string_view op_name);

// Tensor helpers (tensor.cc).
bool IsCompact(const DLTensor& t);
int64_t Numel(const DLTensor& t);

}  // namespace deepx::host

#endif  // DEEPX_HOST_SRC_INTERNAL_H_
