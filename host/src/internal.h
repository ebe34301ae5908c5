// Internal types and functions of the host runtime, shared by its source files. Nothing here
// crosses the ABI: the exported functions (api.cc, tensor.cc, safetensors.cc, errors.cc,
// dtype_names.cc, services.cc) and the bodies they call (dispatch.cc, loader.cc, certificate.cc)
// resolve the handles of deepx/host.h into these types (handles.h) and turn their statuses into
// error objects (Guard()). Each section names the file that defines what it declares.
#ifndef DEEPX_HOST_SRC_INTERNAL_H_
#define DEEPX_HOST_SRC_INTERNAL_H_

#include <pthread.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <memory>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepx/host.h"
#include "deepx/plugin.h"
#include "deepx/safetensors.h"
#include "handles.h"

// The error object plugins and the host exchange. Layout private to the host.
struct dx_error {
  dx_status_t code;
  std::string message;
};

namespace deepx::host {

// ---- errors (errors.cc) ----------------------------------------------------------------------

// Inside one entry point, failures travel as a dx_status_t code with the message parked in a
// thread-local slot; Guard() turns the two into the error object the entry point returns. The
// slot never outlives the call (Guard clears it on entry and takes it on exit), so nothing of
// one call's error can reach another call, on this thread or any other.

// Parks `message` for the current entry point and returns `code`.
dx_status_t Fail(dx_status_t code, std::string message);
// printf-style Fail.
dx_status_t Failf(dx_status_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// The message parked by the last Fail() of the current entry point ("" when none).
const std::string& PendingMessage();
// Forgets the parked message.
void ClearPendingMessage();
// Takes ownership of a plugin error: parks its message (prefixed) and returns its code.
dx_status_t FailFromError(dx_error_t* error, std::string_view prefix);
// The error object for `code` and the parked message (null for DX_OK); clears the slot.
dx_error_t* TakeError(dx_status_t code) noexcept;
// Creates an error object (used by the host itself for errors returned to plugins). Never null:
// when memory runs out it returns a static out-of-memory error that DestroyError() ignores.
dx_error_t* MakeError(dx_status_t code, std::string message);
// The services' error slots (services.cc): create (null message: ""), destroy (null: no-op),
// code (null: DX_OK), message (null: "").
dx_error_t* ErrorCreate(dx_status_t code, const char* message);
void DestroyError(dx_error_t* error);
dx_status_t ErrorCode(const dx_error_t* error);
const char* ErrorMessage(const dx_error_t* error);

// Runs an entry point's `body` (which returns a dx_status_t), converts any C++ exception into
// a status, and returns the error object the client API hands out: nothing escapes an entry
// point, and no message is left behind.
template <class Body>
dx_error_t* Guard(Body&& body) noexcept {
  ClearPendingMessage();
  dx_status_t code;
  try {
    code = body();
  } catch (const std::bad_alloc&) {
    code = Fail(DX_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    code = Fail(DX_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    code = Fail(DX_INTERNAL, "internal error: unknown exception");
  }
  return TakeError(code);
}

// ---- host services and logging (services.cc) ------------------------------------------------

// The services table every plugin receives.
const dx_host_t* HostServices();
// Sends a log message to the runtime's callback, or to stderr (DEEPX_LOG_LEVEL threshold) when
// it has none or `core` is null. `source` is "host" or a plugin's name.
void LogTo(const struct Core* core, int32_t level, const char* source, const std::string& message);
// The services' registration slots (loader.cc): they stage what a plugin registers during init.
dx_error_t* RegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* desc);
dx_error_t* RegisterMemorySpace(dx_host_context_t* context, const dx_memory_space_desc_t* desc);
dx_error_t* RegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* desc);

// ---- dtypes (inline here; names in dtype_names.cc) ---------------------------------------------

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
// The device type of a DLDevice as an integer. An imported tensor may carry a value outside
// DLDeviceType's enumerators; loading the field as the enum would be undefined.
inline int32_t DeviceTypeOf(const DLDevice& device) {
  int32_t type = 0;
  std::memcpy(&type, &device.device_type, sizeof type);
  return type;
}
// True for the dtypes deepx knows (the groups F, I, B of docs/ops.md; lanes 1).
bool IsKnownDtype(dx_dtype_t d);
// "f32", "i64", "bool", or "dtype(code=..,bits=..,lanes=..)".
std::string DtypeName(dx_dtype_t d);
inline uint64_t DtypeBytes(dx_dtype_t d) { return (((d >> 8) & 0xFFu) + 7u) / 8u * (d >> 16); }

// ---- registries, runtime, tensors, attributes ---------------------------------------------------
// (Core's members are defined in loader.cc; Storage::Release and AttrView in tensor.cc.)

struct Plugin;
class RemoteConnection;  // remote.h: a runtime's connection to deepxd
struct RemoteTensor;     // remote.h: a tensor's handle in deepxd

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
  const dx_extension_t* (*get_extension)(void*, const char*, uint32_t) = nullptr;
  const struct Core* core = nullptr;  // the runtime that loaded it (owns it)
  int32_t num_kernels = 0, num_memory_spaces = 0, num_transports = 0;
  bool concurrent = false;
  int32_t certification = DX_CERTIFICATION_NONE;
  std::string certificate;         // path of the certificate considered, or ""
  std::string certification_note;  // why it is invalid, or ""
  std::mutex serial;  // taken around kernel calls when !concurrent
  dx_host_context context;
};

// A reader-writer lock that prefers the writer: once a plugin load waits to commit, new
// readers wait behind it, so threads that invoke without pause cannot starve a load (glibc's
// default rwlock, behind std::shared_mutex, lets them). Readers must not nest. Usable with
// std::shared_lock and std::unique_lock.
class RegistryLock {
 public:
  RegistryLock() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~RegistryLock() { pthread_rwlock_destroy(&lock_); }
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
  void lock() { pthread_rwlock_wrlock(&lock_); }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() { pthread_rwlock_rdlock(&lock_); }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

// The runtime's state. Shared by the runtime handle, every tensor and every tensor storage it
// allocated, so plugins are shut down only when the runtime handle is destroyed and no tensor or
// storage still needs them.
//
// Concurrency: `plugins`, `ops`, `op_ids`, `spaces` and `transports` change only when a plugin
// loads. Readers hold `registry` shared for as long as they use them (an invoke, for the whole
// call); LoadPlugin() holds `loading` for the whole load (loads are serialised) and `registry`
// exclusively only to commit what the plugin registered. Elements of `spaces` never move
// (a deque), so a Storage may keep a pointer to its space without the lock.
struct Core {
  std::vector<std::string> search_dirs;  // options, then DEEPX_PLUGIN_PATH, then bundled
  std::vector<std::string> certificate_dirs;  // options, then DEEPX_CERTIFICATE_PATH
  bool require_certified = false;
  mutable RegistryLock registry;
  std::mutex loading;
  std::vector<std::unique_ptr<Plugin>> plugins;
  std::vector<Op> ops;
  std::unordered_map<std::string, dx_op_id_t> op_ids;
  std::deque<MemorySpace> spaces;
  std::vector<Transport> transports;
  std::atomic<int64_t> live_tensors{0};  // tensor handles of this runtime not yet destroyed
  dx_log_fn log = nullptr;               // the options' callback, or null for stderr
  void* log_user_data = nullptr;
  bool remote = false;  // the (empty) Core of a runtime connected to deepxd: no local devices
  ~Core();
  const MemorySpace* FindSpace(DLDevice device) const;
};

// What a runtime handle names. A remote runtime (dx_runtime_connect) has `remote` set and an
// empty Core with `remote` true; its calls go to the connection (remote.cc).
// One invoke of a task or program (task.cc): the arrays and options copied, the tensors and
// attribute list borrowed by handle and resolved when it runs.
struct InvokeStep {
  dx_op_id_t op = 0;
  std::string op_name;
  std::vector<dx_tensor_t*> inputs, outputs;
  const dx_attrs_t* attrs = nullptr;
  bool has_options = false;
  dx_invoke_options_t options{};
};

// `executor` runs the runtime's tasks (dx_invoke_async, dx_program_submit; task.h), started by
// the first; dx_runtime_destroy stops it before the handle goes.
class Executor;
struct Runtime {
  std::shared_ptr<Core> core;
  std::shared_ptr<RemoteConnection> remote;
  std::mutex executor_mutex;
  std::shared_ptr<Executor> executor;
  // Cancels the queued tasks and waits for the running one (task.cc); dx_runtime_destroy calls
  // it while the handle still resolves, so the running task can finish; idempotent.
  void StopExecutor();
  ~Runtime();
};

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

// What a tensor handle names: a view of a storage. Keeps its runtime's Core alive. A tensor of a
// remote runtime has `remote` set (its handle in deepxd, freed there when this goes), an empty
// Storage and `dl.data` null: its bytes move only through remote.cc, never through `dl`.
struct Tensor {
  DLTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  Storage* storage = nullptr;
  int32_t device_index = -1;
  std::shared_ptr<Core> core;  // counted in core->live_tensors while set
  std::shared_ptr<RemoteTensor> remote;
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  void SetCore(std::shared_ptr<Core> c) {
    core = std::move(c);
    if (core) core->live_tensors.fetch_add(1, std::memory_order_relaxed);
  }
  ~Tensor() {
    if (storage) storage->Release();
    if (core) core->live_tensors.fetch_sub(1, std::memory_order_relaxed);
  }
};

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

// What an attribute-list handle names.
struct Attrs {
  std::vector<AttrItem> items;
  // Cache of the schema-ordered view for one op (rebuilt when the op or the items change).
  std::mutex cache_mutex;
  uint64_t generation = 1;
  uint64_t cache_generation = 0;
  dx_op_id_t cache_op = 0;
  const void* cache_core = nullptr;
  std::vector<dx_attr_t> cache;
};

// ---- handles (the tables in handles.cc; FailHandle in errors.cc) -----------------------------

template <class T> constexpr HandleKind KindOf();
template <> constexpr HandleKind KindOf<Runtime>() { return HandleKind::kRuntime; }
template <> constexpr HandleKind KindOf<Tensor>() { return HandleKind::kTensor; }
template <> constexpr HandleKind KindOf<Attrs>() { return HandleKind::kAttrs; }
template <class T> constexpr const char* KindName();
template <> constexpr const char* KindName<Runtime>() { return "runtime"; }
template <> constexpr const char* KindName<Tensor>() { return "tensor"; }
template <> constexpr const char* KindName<Attrs>() { return "attribute list"; }
struct Task;
struct Program;
template <> constexpr HandleKind KindOf<Task>() { return HandleKind::kTask; }
template <> constexpr HandleKind KindOf<Program>() { return HandleKind::kProgram; }
template <> constexpr const char* KindName<Task>() { return "task"; }
template <> constexpr const char* KindName<Program>() { return "program"; }

// The status for a refused handle: null is INVALID_ARGUMENT, anything else
// FAILED_PRECONDITION; the message names the call, the parameter and the reason.
dx_status_t FailHandle(HandleProblem problem, const char* where, const char* param,
                       const char* kind);

// Resolves a handle of the client API into its object; on failure parks the message and
// returns the status. `param` names the parameter in the message.
template <class T>
dx_status_t Resolve(const void* handle, const char* where, const char* param, T** out) {
  HandleProblem problem;
  void* object = Handles(KindOf<T>()).Get(reinterpret_cast<uint64_t>(handle), &problem);
  if (object == nullptr) return FailHandle(problem, where, param, KindName<T>());
  *out = static_cast<T*>(object);
  return DX_OK;
}

// Issues a handle for a new object; on success the handle owns it (it is deleted when the
// handle is destroyed). On failure the object is deleted and the status returned.
template <class T, class H>
dx_status_t Issue(std::unique_ptr<T> object, H** out_handle, const char* where) {
  uint64_t h = Handles(KindOf<T>()).Add(object.get());
  if (h == 0) {
    return Failf(DX_RESOURCE_EXHAUSTED, "%s: no %s handle is free (2^24 live handles)", where,
                 KindName<T>());
  }
  object.release();
  *out_handle = reinterpret_cast<H*>(h);
  return DX_OK;
}

// Destroys a handle and deletes its object. Null is a no-op.
template <class T>
dx_status_t Retire(const void* handle, const char* where, const char* param) {
  if (handle == nullptr) return DX_OK;
  HandleProblem problem;
  void* object = Handles(KindOf<T>()).Remove(reinterpret_cast<uint64_t>(handle), &problem);
  if (object == nullptr) return FailHandle(problem, where, param, KindName<T>());
  delete static_cast<T*>(object);
  return DX_OK;
}


// Loads a plugin (loader.cc). Takes core->loading, and core->registry to commit.
dx_status_t LoadPlugin(const std::shared_ptr<Core>& core, const char* name_or_path,
                       int32_t* out_index);
// Lists the plugin files in the search dirs, first occurrence of a name wins.
std::vector<std::string> DiscoverPlugins(const Core& core);
// The plugin search directories: option path, DEEPX_PLUGIN_PATH (unless ignored), bundled, installed.
std::vector<std::string> SearchDirs(const char* option_path, bool ignore_env);
// The bundled plugin directory, next to the host library.
std::string BundledPluginDir();

// Finds and checks the plugin's certificate against `loaded_sha256` (the SHA-256 of the bytes
// loaded, computed before any plugin code ran); marks the pending kernels it grants
// (certificate.cc).
void EvaluateCertificate(const Core& core, Plugin& plugin, std::vector<PendingKernel>& kernels,
                         const std::string& loaded_sha256);
// The certificate parser alone, for host/fuzz/fuzz_certificate.cc: parses the file at `path` as
// a certificate of plugin "fuzz"; false with `why` set when it is refused (certificate.cc).
bool ParseCertificateForFuzzing(const std::string& path, std::string* why);
std::vector<std::string> SplitPath(const char* value);

// Op schemas (dispatch.cc).
const OpSchema* FindSchema(std::string_view op_name);

// Tensor helpers (tensor.cc).
bool IsCompact(const DLTensor& t);
int64_t Numel(const DLTensor& t);
// A new compact tensor in device `device_index` of `core` (the caller holds core->registry).
dx_status_t CreateTensor(const std::shared_ptr<Core>& core, int32_t device_index,
                         dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                         std::unique_ptr<Tensor>* out, const char* where);
// A new view of `base`'s storage; refuses a view that reaches outside it.
dx_status_t ViewTensor(const Tensor* base, const int64_t* shape, const int64_t* strides,
                       int32_t ndim, int64_t elem_offset, std::unique_ptr<Tensor>* out,
                       const char* where);
// Host <-> tensor copies on resolved tensors (the entry points' bodies).
dx_status_t TensorWrite(Tensor* tensor, const void* data, uint64_t size, const char* where);
dx_status_t TensorRead(const Tensor* tensor, void* data, uint64_t size, const char* where);

}  // namespace deepx::host

#endif  // DEEPX_HOST_SRC_INTERNAL_H_
