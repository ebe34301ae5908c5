/**
 * @file deepx/host.h
 * @brief The client-facing host API: what C programs, the Go/Java/Python bindings and the CLI
 * call to load plugins, make tensors and run ops.
 *
 * The conventions below are written out, with examples for C, Go, Java and Python, in
 * docs/abi-conventions.md and docs/error-model.md; every declaration states the parts that
 * apply to it.
 *
 * - **Errors are objects.** Every fallible function returns a ::dx_error_t pointer: null on
 *   success; otherwise an error the caller owns, carrying a code (dx_error_code()) and a message
 *   with its length (dx_error_message()), freed with dx_error_destroy(). Nothing is kept per
 *   thread, so an error may be read on another thread than the one that made the call. On
 *   error the out-parameters are left unchanged. The functions are marked ::DX_MUST_USE:
 *   ignoring the result leaks the error; `dx_error_destroy(dx_tensor_destroy(t));` is the idiom
 *   for a call whose failure the caller does not care about.
 * - **Handles** (::dx_runtime_t, ::dx_tensor_t, ::dx_attrs_t, ::dx_safetensors_t) are opaque
 *   pointer-sized values the caller never dereferences; they are not addresses of objects.
 *   Each carries a generation: a handle that was destroyed, or one of another kind, is refused
 *   with ::DX_FAILED_PRECONDITION by every call, destroy included, never used (a slot is
 *   reused with a new generation; the check holds for 2^32 reuses of one slot). Every create
 *   has its destroy; destroying null is a no-op.
 * - **Lifetimes.** A tensor keeps its runtime's plugins alive: dx_runtime_destroy() invalidates
 *   the runtime handle at once, and the plugins are shut down when the last tensor and DLPack
 *   export of the runtime are gone (a tensor the caller forgets keeps them loaded; the runtime
 *   logs a warning with the number of live tensors when it is destroyed with some left). A
 *   view (dx_tensor_view()) or an export holds its storage like a reference count.
 * - **Bad input** (null pointers, wrong `struct_size`, out-of-range indices, bad shapes,
 *   views or imports that would reach outside their memory) is reported as an error, never as
 *   a crash. Nothing of deepx or of a plugin throws, aborts or exits through this API.
 * - **Strings** returned by the API are NUL-terminated and borrowed: valid for the lifetime of
 *   the object they describe (usually the runtime); an error message also comes with its length.
 *   Strings passed in are NUL-terminated (names, paths) or pointer + length (attribute values)
 *   and are copied.
 * - **Structs** passed in or filled start with `struct_size`: store the struct's named size
 *   (e.g. ::DX_RUNTIME_OPTIONS_SIZE_1_0). Every constant is an object-like `#define` or an enum
 *   value (no function-like macro is needed to call the API), and abi/deepx-abi.json lists
 *   every constant, size, field offset and op for binding generators.
 * - **Threading.** Every function may be called concurrently from any thread unless it says
 *   otherwise. dx_runtime_load_plugin() and dx_runtime_load_search_path() may run while other
 *   threads invoke ops on the same runtime (loads are serialised with each other; a call that
 *   starts before a load completes sees the runtime as it was before it). The exceptions:
 *   dx_runtime_destroy() must not overlap other calls on the same runtime, and a tensor,
 *   attribute list or safetensors file must not be destroyed while another thread uses it
 *   (later calls with the destroyed handle are refused, as above).
 *
 * **Remote runtimes** (since 1.1). dx_runtime_connect() returns a runtime whose calls go to a
 * deepx daemon (`deepxd`) over its wire protocol (docs/protocol.md) instead of to plugins loaded
 * into this process; the rest of the program is the same. Plugins, devices, ops and kernels are
 * the daemon's, listed once when the runtime connects (its strings and op ids are stable for the
 * runtime's lifetime, like an in-process runtime's); tensors live in the daemon and are named by
 * the handles of this API as usual; dx_tensor_write(), dx_tensor_read(), dx_tensor_copy(),
 * dx_tensor_view() and dx_invoke() (and its variants) become requests. Each call waits for its
 * reply at most the request timeout of ::dx_connect_options_t (::DX_TIMEOUT otherwise). When the
 * daemon exits, restarts or drops the connection, the call in progress and every later request
 * (tensor create, view, write, read, copy, invoke) fail at once with ::DX_UNAVAILABLE and a
 * message naming the daemon, the call and the task id during which the connection was lost; the
 * catalogue stays readable and destroying the handles still succeeds (docs/remote.md). A remote
 * runtime refuses, with the status given and a message saying why:
 * - dx_runtime_load_plugin() and dx_runtime_load_search_path() (::DX_UNSUPPORTED): the daemon
 *   loads the plugins named in its configuration, never a path sent by a client;
 * - dx_runtime_plugin_extension() (::DX_UNSUPPORTED): an extension is a struct of pointers into
 *   a plugin loaded in the daemon's process;
 * - dx_runtime_device_stats() (::DX_UNSUPPORTED): wire protocol 1.0 has no per-device statistics;
 * - dx_tensor_dltensor(), dx_tensor_to_dlpack() and dx_tensor_to_dlpack_legacy() of a remote
 *   tensor (::DX_UNSUPPORTED): its memory is in the daemon and not reachable from this process
 *   (a later minor maps host tensors through shared memory);
 * - dx_tensor_from_dlpack() and dx_tensor_from_dlpack_legacy() into a remote runtime
 *   (::DX_UNSUPPORTED; the tensor is released, as on every refusal): the daemon cannot reach
 *   this process's memory (copy it in with dx_tensor_create() and dx_tensor_write());
 * - dx_safetensors_load() into a remote runtime (::DX_UNSUPPORTED): it allocates through the
 *   runtime's local devices, of which a remote runtime has none (dx_safetensors_save() of remote
 *   tensors works: it reads them with dx_tensor_read());
 * - a remote tensor passed to dx_invoke() of another runtime, in-process or remote
 *   (::DX_INVALID_ARGUMENT): a daemon computes only on its own session's tensors.
 * dx_tensor_copy() between a remote tensor and a tensor of another runtime stages the bytes
 * through this process's memory.
 *
 * **Tasks and programs** (since 1.1). dx_invoke_async() queues an invoke on the runtime's
 * executor thread and returns a ::dx_task_t at once (dx_task_wait() with a timeout, dx_task_poll(),
 * dx_task_cancel() of a task not yet started, dx_task_destroy()); dx_program_create(),
 * dx_program_add_invoke() and dx_program_submit() run a list of invokes in order as one task (on
 * a remote runtime one Submit request with one reply), whose failure names the step. Both work
 * the same in-process and remote; the tasks of a runtime run one at a time in submission order
 * (see ::dx_task_t for ordering, borrowing, cancelling and a daemon that dies).
 *
 * @since 1.0
 */
#ifndef DEEPX_HOST_H_
#define DEEPX_HOST_H_

#include "deepx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A host runtime: its plugins, registries and tensors. A handle (see above).
    @since 1.0 */
typedef struct dx_runtime dx_runtime_t;
/** @brief A tensor: a DLTensor plus the storage it views, allocated in a memory space. A
    handle (see above). @since 1.0 */
typedef struct dx_tensor dx_tensor_t;
/** @brief A reusable list of named, typed op attributes. A handle (see above). @since 1.0 */
typedef struct dx_attrs dx_attrs_t;
/** @brief An interned op id: dense, stable for the runtime's lifetime. @since 1.0 */
typedef uint32_t dx_op_id_t;

/**
 * @brief A dtype packed into 32 bits exactly as DLDataType lays it out in memory on a
 * little-endian machine: code | bits << 8 | lanes << 16. Used where a binding would otherwise
 * have to pass a struct by value.
 * @since 1.0
 */
typedef uint32_t dx_dtype_t;
/** Packs a DLPack type code, bit width and lane count into a ::dx_dtype_t. @since 1.0 */
#define DX_DTYPE(code, bits, lanes) \
  ((dx_dtype_t)(((uint32_t)(code)) | ((uint32_t)(bits) << 8) | ((uint32_t)(lanes) << 16)))
/* The dtypes deepx knows, as plain constants (pinned to DX_DTYPE() by the ABI tests). */
#define DX_DTYPE_F64 0x00014002u  /**< 64-bit IEEE float: DX_DTYPE(kDLFloat, 64, 1). @since 1.0 */
#define DX_DTYPE_F32 0x00012002u  /**< 32-bit IEEE float: DX_DTYPE(kDLFloat, 32, 1). @since 1.0 */
#define DX_DTYPE_F16 0x00011002u  /**< 16-bit IEEE float: DX_DTYPE(kDLFloat, 16, 1). @since 1.0 */
#define DX_DTYPE_BF16 0x00011004u /**< bfloat16: DX_DTYPE(kDLBfloat, 16, 1). @since 1.0 */
#define DX_DTYPE_I64 0x00014000u  /**< int64_t: DX_DTYPE(kDLInt, 64, 1). @since 1.0 */
#define DX_DTYPE_I32 0x00012000u  /**< int32_t: DX_DTYPE(kDLInt, 32, 1). @since 1.0 */
#define DX_DTYPE_I16 0x00011000u  /**< int16_t: DX_DTYPE(kDLInt, 16, 1). @since 1.0 */
#define DX_DTYPE_I8 0x00010800u   /**< int8_t: DX_DTYPE(kDLInt, 8, 1). @since 1.0 */
#define DX_DTYPE_U8 0x00010801u   /**< uint8_t: DX_DTYPE(kDLUInt, 8, 1). @since 1.0 */
#define DX_DTYPE_BOOL 0x00010806u /**< bool, one byte 0 or 1: DX_DTYPE(6, 8, 1). @since 1.0 */

/* ------------------------------------------------------------------------------------------ */
/* Versions and errors                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** @brief The packed ABI version (DX_MAKE_VERSION) of the host library actually loaded.
    Compare with DX_ABI_VERSION to detect a header/library mismatch. Any thread. @since 1.0 */
DX_EXPORT uint32_t dx_abi_version(void);

/** @brief Static name of a status code ("INVALID_ARGUMENT"); "UNKNOWN" for unknown codes.
    Never null; the string is static. Any thread. @since 1.0 */
DX_EXPORT const char* dx_status_string(dx_status_t code);

/** @brief Static short name of a dtype ("f32", "bf16", "bool"), or "unknown" for a dtype deepx
    does not know. Never null. Any thread. @since 1.0 */
DX_EXPORT const char* dx_dtype_string(dx_dtype_t dtype);

/**
 * @brief The code of an error returned by a deepx call.
 * @param error an error, or null (success).
 * @return ::DX_OK for null, else the error's code (never ::DX_OK). Any thread; the error is
 *         only read.
 * @since 1.0
 */
DX_EXPORT dx_status_t dx_error_code(const dx_error_t* error);

/**
 * @brief The message of an error returned by a deepx call: what went wrong, naming the call
 * and the argument or object at fault.
 * @param error an error, or null (success: the message is "").
 * @param out_length receives the message's length in bytes, without the terminating NUL; may
 *        be null.
 * @return the UTF-8 message, NUL-terminated, owned by `error` and valid until it is destroyed.
 *         Never null. Any thread; the error is only read.
 * @since 1.0
 */
DX_EXPORT const char* dx_error_message(const dx_error_t* error, size_t* out_length);

/**
 * @brief Frees an error returned by a deepx call. Null is a no-op. Any thread, once per error.
 * @since 1.0
 */
DX_EXPORT void dx_error_destroy(dx_error_t* error);

/* ------------------------------------------------------------------------------------------ */
/* Runtime and plugins                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** @brief Bit set of DX_RUNTIME_FLAG_* values. @since 1.0 */
typedef uint64_t dx_runtime_flags_t;
/** Ignore DEEPX_PLUGIN_PATH: neither dx_runtime_load_plugin() (by name) nor
    dx_runtime_load_search_path() look there. @since 1.0 */
#define DX_RUNTIME_FLAG_IGNORE_ENV ((dx_runtime_flags_t)1u << 0)
/** Trust-gated dispatch: run a kernel only if a valid certificate (written by
    `deepx certify --sign KEY`, signed by a key of the trust store: DEEPX_TRUST_DIR, else
    `<prefix>/share/deepx/trusted-keys`) covers its plugin binary (by SHA-256 of the bytes
    loaded, hashed before any plugin code runs), op, device type and dtypes; otherwise dx_invoke()
    refuses with ::DX_PERMISSION_DENIED. Also turned on by DEEPX_REQUIRE_CERTIFIED=1 in the
    environment (unless ::DX_RUNTIME_FLAG_IGNORE_ENV). @since 1.0 */
#define DX_RUNTIME_FLAG_REQUIRE_CERTIFIED ((dx_runtime_flags_t)1u << 1)

/**
 * @brief Receives the log messages of a runtime and of its plugins (dx_runtime_options_t::log).
 * @param user_data the options' `log_user_data`, passed back unchanged.
 * @param level a ::dx_log_level_t value.
 * @param source "host" or the name of the plugin that logged, NUL-terminated.
 * @param message the message, UTF-8, `length` bytes (also NUL-terminated).
 * @param length the message's length in bytes.
 * Both strings are borrowed for the call only. Called on any thread, concurrently, including
 * threads the caller never made (a plugin's workers); it must not block for long and must not
 * call back into deepx for the same runtime.
 * @since 1.0
 */
typedef void (*dx_log_fn)(void* user_data, int32_t level, const char* source,
                          const char* message, size_t length);

/** @brief Options of dx_runtime_create(). Zero-initialise, then set `struct_size`.
    @since 1.0 */
typedef struct dx_runtime_options {
  /** ::DX_RUNTIME_OPTIONS_SIZE_1_0; written by the caller. */
  size_t struct_size;
  /** DX_RUNTIME_FLAG_* bits. */
  dx_runtime_flags_t flags;
  /** Colon-separated directories searched for plugins before DEEPX_PLUGIN_PATH; may be null.
      Copied. */
  const char* plugin_path;
  /** Colon-separated directories searched for `<plugin name>.certificate` before
      DEEPX_CERTIFICATE_PATH and before `<plugin file>.certificate` next to the library; may be
      null. Copied. */
  const char* certificate_path;
  /** Where the runtime's and its plugins' log messages go, or null for standard error (where
      DEEPX_LOG_LEVEL, 0-3, sets the threshold; default 2, warnings). With a callback every
      message is passed on and the callback filters. */
  dx_log_fn log;
  /** Passed back to `log` unchanged; deepx never dereferences it. */
  void* log_user_data;
  /** Extensions of the runtime's options (see ::dx_extension_t), or null; borrowed for the
      call. The host refuses none: it skips entries it does not know. */
  const dx_extension_t* next;
} dx_runtime_options_t;

/**
 * @brief Creates a runtime with no plugins loaded.
 * @param options may be null for defaults; borrowed for the call.
 * @param out_runtime receives the runtime; destroy it with dx_runtime_destroy().
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_create(const dx_runtime_options_t* options,
                                        dx_runtime_t** out_runtime);

/**
 * @brief Destroys a runtime handle. Null is a no-op.
 *
 * The handle is invalid at once (later calls with it are refused with
 * ::DX_FAILED_PRECONDITION). The runtime itself lives on while any of its tensors (handles,
 * views, DLPack exports) does: those stay fully usable, and each plugin's shutdown runs when
 * the last of them is destroyed, or here when there are none. A runtime destroyed with live
 * tensors logs a warning naming how many. Libraries stay mapped (plugins are never unloaded).
 * Must not overlap other calls on the same runtime.
 * @return ::DX_FAILED_PRECONDITION for a handle already destroyed or of another kind.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_destroy(dx_runtime_t* runtime);

/** @brief Options of dx_runtime_connect(). Zero-initialise, then set `struct_size`; a zeroed
    field means the default. @since 1.1 */
typedef struct dx_connect_options {
  /** ::DX_CONNECT_OPTIONS_SIZE_1_1; written by the caller. */
  size_t struct_size;
  /** How long connecting and the version exchange (Hello) may take, in milliseconds; 0 means
      5000. */
  uint32_t connect_timeout_ms;
  /** How long each call waits for the daemon's reply, in milliseconds; 0 means 60000. A call
      that runs out fails with ::DX_TIMEOUT; the connection stays usable (a late reply is
      discarded) unless the request itself could not be sent whole. */
  uint32_t request_timeout_ms;
  /** A name for the daemon's logs, NUL-terminated, or null for "libdeepx_host". Copied. */
  const char* client_name;
  /** Extensions of the options (see ::dx_extension_t), or null; borrowed for the call. The host
      refuses none: it skips entries it does not know. */
  const dx_extension_t* next;
} dx_connect_options_t;

/**
 * @brief Connects to a deepx daemon and returns a runtime whose calls go to it (see "Remote
 * runtimes" above for what works and what is refused).
 *
 * Connects, exchanges protocol versions (Hello: a daemon of another protocol major is refused),
 * and lists the daemon's plugins, ops, devices and kernels, all within the options' timeouts.
 * @param address `unix:PATH` or a bare PATH of the daemon's unix socket. Other schemes (`tcp:`)
 *        are refused with ::DX_UNSUPPORTED. Copied.
 * @param options may be null for defaults; borrowed for the call.
 * @param out_runtime receives the runtime; destroy it with dx_runtime_destroy(), which closes the
 *        connection once no tensor of the runtime is left (the daemon frees the session's
 *        tensors when it closes).
 * @return ::DX_INVALID_ARGUMENT for a null or malformed address or options;
 *         ::DX_UNAVAILABLE when nothing listens at the address, or the daemon closed the
 *         connection; ::DX_PERMISSION_DENIED when the socket may not be opened;
 *         ::DX_TIMEOUT when the connect timeout ran out; ::DX_VERSION_MISMATCH when the daemon
 *         speaks another protocol major (the message names both versions); or the status of the
 *         daemon's refusal.
 *
 * Any thread. The returned runtime may be used from several threads at once: its requests are
 * serialised on the one connection.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_connect(const char* address,
                                                     const dx_connect_options_t* options,
                                                     dx_runtime_t** out_runtime);

/**
 * @brief Loads one plugin.
 * @param runtime the runtime to load into.
 * @param name_or_path a path containing '/', opened as is; or a plugin name such as "cpu",
 *        looked up as `libdeepx-plugin-<name>.so` in the options' plugin_path, then
 *        DEEPX_PLUGIN_PATH, then the installed plugin directory. Copied.
 * @param out_plugin_index receives the plugin's index; may be null.
 * @return ::DX_NOT_FOUND (with every path tried in the message), ::DX_VERSION_MISMATCH (with
 *         both versions and what to do), ::DX_PLUGIN_ERROR for a malformed plugin,
 *         ::DX_ALREADY_EXISTS if a plugin of that name is loaded, ::DX_IO_ERROR for a file that
 *         is not a loadable shared object (not a regular file, truncated, not ELF for this
 *         machine: checked before the dynamic loader sees it), or the plugin's init error.
 *         On any error nothing of the plugin stays registered.
 *
 * Threading: may run while other threads use the runtime (invoke, tensors, queries); loads are
 * serialised with each other. A call that started before the load completed sees the runtime
 * without the new plugin.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_load_plugin(dx_runtime_t* runtime, const char* name_or_path,
                                             int32_t* out_plugin_index);

/**
 * @brief Loads every `libdeepx-plugin-*.so` found in the options' plugin_path and
 * DEEPX_PLUGIN_PATH (first occurrence of a name wins). A plugin that fails to load is skipped
 * and logged with its reason (a bad file does not stop the scan); the call still succeeds.
 * @param runtime the runtime to load into.
 * @param out_loaded receives how many plugins loaded; may be null.
 * @param out_failed receives how many plugin files failed to load; may be null.
 * Threading: as dx_runtime_load_plugin().
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_load_search_path(dx_runtime_t* runtime,
                                                               int32_t* out_loaded,
                                                               int32_t* out_failed);

/** @brief Number of loaded plugins. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_plugin_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief Certification state of a loaded plugin (dx_plugin_info_t::certification).
    @since 1.0 */
typedef enum dx_certification {
  DX_CERTIFICATION_NONE = 0,    /**< No certificate file was found. */
  DX_CERTIFICATION_VALID = 1,   /**< A certificate grants trust: signed by a key of the trust
                                     store that is not revoked, over the SHA-256 of the bytes
                                     loaded, with a CERTIFIED verdict (docs/conformance.md). */
  DX_CERTIFICATION_INVALID = 2  /**< A certificate was found but grants nothing: malformed, of
                                     another plugin or binary, unsigned, signed by an untrusted
                                     or revoked key, edited after signing, not CERTIFIED, of
                                     another build, or recording a library loaded here in
                                     another version. `certification_note` says which. */
} dx_certification_t;

/** @brief What a loaded plugin declared. Strings are borrowed for the runtime's lifetime.
    @since 1.0 */
typedef struct dx_plugin_info {
  /** ::DX_PLUGIN_INFO_SIZE_1_0; written by the caller. */
  size_t struct_size;
  const char* name;     /**< Plugin name. */
  const char* vendor;   /**< Vendor, "" when not given. */
  const char* version;  /**< Plugin version, "" when not given. */
  const char* build_id; /**< Build id, "" when not given. */
  const char* path;     /**< Absolute path of the library file. */
  uint32_t abi_version; /**< Packed ABI version the plugin was built against. */
  uint32_t reserved;    /**< Zero. */
  uint64_t capabilities;     /**< DX_PLUGIN_CAP_* bits (deepx/types.h). */
  int32_t num_kernels;       /**< Kernels it registered. */
  int32_t num_memory_spaces; /**< Memory spaces it registered. */
  int32_t num_transports;    /**< Transports it registered. */
  int32_t certification;     /**< A ::dx_certification_t value. */
  const char* certificate;   /**< Path of the certificate file considered, "" when none. */
  const char* certification_note; /**< Why the certificate is invalid, or "". */
} dx_plugin_info_t;

/**
 * @brief Describes plugin `index`.
 * @param runtime the runtime.
 * @param index 0 .. dx_runtime_plugin_count() - 1.
 * @param out_info caller-owned; set `struct_size` first; filled up to min(known, struct_size).
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_plugin_info(const dx_runtime_t* runtime,
                                                          int32_t index,
                                                          dx_plugin_info_t* out_info);

/**
 * @brief Asks loaded plugin `index` for one of its extensions (dx_plugin_t::get_extension).
 * @param runtime the runtime.
 * @param index 0 .. dx_runtime_plugin_count() - 1.
 * @param name the extension's namespaced name, NUL-terminated; borrowed for the call.
 * @param min_version the oldest version of the extension the caller can use.
 * @param out_extension receives the extension struct, borrowed for as long as the runtime's
 *        plugins stay loaded (see the lifetime rules above), or null when the plugin does not
 *        offer it (not an error).
 * @return ::DX_OUT_OF_RANGE for a bad index; ::DX_PLUGIN_ERROR when the plugin returns a
 *         struct whose header is malformed (a `struct_size` below ::DX_EXTENSION_SIZE_1_0, or
 *         another name).
 * Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_plugin_extension(const dx_runtime_t* runtime,
                                                               int32_t index, const char* name,
                                                               uint32_t min_version,
                                                               const dx_extension_t** out_extension);

/* ------------------------------------------------------------------------------------------ */
/* Devices (memory spaces)                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of registered memory spaces ("devices"), over all plugins. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_device_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief What a memory space declared. Strings are borrowed for the runtime's lifetime.
    @since 1.0 */
typedef struct dx_device_info {
  /** ::DX_DEVICE_INFO_SIZE_1_0; written by the caller. */
  size_t struct_size;
  const char* name;     /**< Space name, e.g. "cpu". */
  int32_t device_type;  /**< DLDeviceType. */
  int32_t device_id;    /**< DLPack device id. */
  int32_t kind;         /**< dx_memory_kind_t (deepx/plugin.h). */
  int32_t plugin_index; /**< Index of the plugin that serves it. */
  uint64_t capacity;    /**< Bytes, 0 when unknown. */
  uint64_t alignment;   /**< Alignment of every allocation, in bytes. */
} dx_device_info_t;

/** @brief Describes device `index`; set `out_info->struct_size` first. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_device_info(const dx_runtime_t* runtime, int32_t index,
                                             dx_device_info_t* out_info);

/**
 * @brief Reads device `index`'s allocation statistics (bytes in use and reserved, their peaks,
 * live allocations) from the memory space that serves it.
 *
 * Set `out_stats->struct_size` (::DX_MEMORY_STATS_SIZE_1_0) first;
 * fields beyond it are left alone. Any thread; the plugin's slot must tolerate being called while
 * kernels and copies run. ::DX_OUT_OF_RANGE for a bad index; ::DX_UNSUPPORTED when the space's plugin has no
 * `stats` slot; otherwise the plugin's error, if any.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_device_stats(const dx_runtime_t* runtime, int32_t index,
                                              dx_memory_stats_t* out_stats);

/** @brief Finds a device by name ("cpu", "cuda:0"); ::DX_NOT_FOUND when absent. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_find_device(const dx_runtime_t* runtime, const char* name,
                                             int32_t* out_index);

/* ------------------------------------------------------------------------------------------ */
/* Ops and kernels                                                                             */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of interned ops; ids are 0 .. count-1. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_op_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief Name of op `id`; borrowed for the runtime's lifetime. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_op_name(const dx_runtime_t* runtime, dx_op_id_t id,
                                         const char** out_name);

/**
 * @brief Interns an op name: resolve once, then call dx_invoke() with the id on the hot path.
 * @return ::DX_NOT_FOUND when no kernel of any loaded plugin implements the op.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_op_lookup(const dx_runtime_t* runtime, const char* name,
                                           dx_op_id_t* out_id);

/** @brief Number of kernels registered for op `id`, over all plugins. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_kernel_count(const dx_runtime_t* runtime, dx_op_id_t id,
                                              int32_t* out_count);

/** @brief What a registered kernel declared. Pointers are borrowed for the runtime's life.
    @since 1.0 */
typedef struct dx_kernel_info {
  /** ::DX_KERNEL_INFO_SIZE_1_0; written by the caller. */
  size_t struct_size;
  int32_t plugin_index;     /**< Plugin that registered it. */
  int32_t device_type;      /**< DLDeviceType it runs on. */
  int32_t num_inputs;       /**< Inputs (minimum, when variadic). */
  int32_t num_outputs;      /**< Outputs. */
  int32_t num_dtypes;       /**< Entries in `dtypes`. */
  int32_t reserved;         /**< Zero. */
  const dx_dtype_t* dtypes; /**< Dtype signature: inputs then outputs. */
  uint64_t flags;           /**< DX_KERNEL_FLAG_* bits (deepx/types.h). */
  int32_t has_backward;     /**< 1 when a backward kernel is registered. */
  int32_t has_supports;     /**< 1 when the kernel has a supports() predicate, so it may decline
                                 valid calls with ::DX_UNSUPPORTED. */
  int32_t certified;        /**< 1 when a valid certificate of its plugin covers this kernel. */
  int32_t reserved2;        /**< Zero. */
} dx_kernel_info_t;

/** @brief Describes kernel `index` of op `id`; set `out_info->struct_size` first. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_runtime_kernel_info(const dx_runtime_t* runtime, dx_op_id_t id,
                                             int32_t index, dx_kernel_info_t* out_info);

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * @brief Allocates a compact row-major tensor in device `device_index`.
 * @param runtime the runtime whose device (memory space) allocates.
 * @param device_index 0 .. dx_runtime_device_count() - 1.
 * @param dtype the element type, e.g. ::DX_DTYPE_F32.
 * @param shape `ndim` non-negative sizes, copied; may be null when ndim is 0 (a scalar).
 * @param ndim 0 to 32.
 * @param out_tensor receives the tensor; destroy with dx_tensor_destroy(). Contents are
 *        uninitialised.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_create(dx_runtime_t* runtime, int32_t device_index,
                                       dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                                       dx_tensor_t** out_tensor);

/**
 * @brief Makes a new tensor handle viewing the storage of `base` with another shape, strides
 * (in elements) and element offset; the storage lives until its last view or export is gone.
 * Refuses views that reach outside the storage.
 * @param base the tensor whose storage is viewed; borrowed for the call.
 * @param shape `ndim` sizes, copied.
 * @param strides `ndim` entries in elements (non-negative), copied; null for compact row-major.
 * @param ndim 0 to 32.
 * @param elem_offset offset in elements from `base`'s element 0 (may be negative when `base`
 *        is itself an offset view).
 * @param out_tensor receives the view; destroy it with dx_tensor_destroy().
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_view(const dx_tensor_t* base, const int64_t* shape,
                                     const int64_t* strides, int32_t ndim, int64_t elem_offset,
                                     dx_tensor_t** out_tensor);

/** @brief Destroys a tensor handle; its storage is freed when no other view or DLPack export
    references it. Null is a no-op. Not concurrently with other uses of the same tensor. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_destroy(dx_tensor_t* tensor);

/** @brief The tensor's DLTensor view, borrowed for the tensor's lifetime. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_dltensor(const dx_tensor_t* tensor, const DLTensor** out);

/** @brief Rank of the tensor. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_ndim(const dx_tensor_t* tensor, int32_t* out_ndim);

/** @brief Copies the shape into `out_shape` (capacity `capacity` entries, >= ndim). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_shape(const dx_tensor_t* tensor, int64_t* out_shape,
                                      int32_t capacity);

/** @brief Dtype of the tensor. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_dtype(const dx_tensor_t* tensor, dx_dtype_t* out_dtype);

/** @brief Index of the device (memory space) holding the tensor, or -1 for an imported tensor
    whose device no loaded plugin serves. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_device(const dx_tensor_t* tensor, int32_t* out_device_index);

/** @brief Number of elements (product of the shape). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_numel(const dx_tensor_t* tensor, int64_t* out_numel);

/**
 * @brief Copies `size` bytes of host memory into the tensor, in row-major element order,
 * through the tensor's memory space. `size` must equal numel × element size.
 * Works for any strides and any memory space.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_write(dx_tensor_t* tensor, const void* data, uint64_t size);

/** @brief Copies the tensor's elements, in row-major order, into `size` bytes of host memory. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_read(const dx_tensor_t* tensor, void* data, uint64_t size);

/**
 * @brief Copies the elements of `src` into `dst`: same dtype and shape, any devices, any
 * strides. Synchronous.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_copy(dx_runtime_t* runtime, dx_tensor_t* dst,
                                     const dx_tensor_t* src);

/* ------------------------------------------------------------------------------------------ */
/* DLPack exchange                                                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * Stream semantics of the exchange (device tensors: kDLCUDA, kDLROCM, their host-pinned kinds).
 * Every deepx call that touches tensor memory (dx_invoke*, dx_tensor_read/write/copy, the
 * safetensors calls) is synchronous: the plugin enqueues the work on a stream of its own and
 * waits for it before the call returns. Hence:
 * - Export: when dx_tensor_to_dlpack() returns, every write deepx made to the tensor has
 *   completed, so a consumer may read or write the memory on any stream at once, with no event
 *   to wait for (in the Python protocol, any `stream` argument to `__dlpack__` is satisfied).
 *   While the export lives, deepx keeps the memory allocated; the consumer must finish its own
 *   work on it (synchronise its stream) before calling the deleter, after which deepx may free
 *   and reuse it.
 * - Import: the producer must have completed its writes before dx_tensor_from_dlpack() (for
 *   example, synchronise the producer's stream; PyTorch: torch.cuda.current_stream().synchronize()),
 *   because deepx's streams do not wait on the producer's. The producer must not write the
 *   memory while a deepx call uses it. deepx calls the deleter after its last use has completed.
 * - Memory of a device a loaded plugin serves is read and written through that plugin's memory
 *   space (its copy function), like the space's own tensors.
 * - Memory of a device no loaded plugin serves imports as a tensor that can be exported again
 *   but not computed on, read or written (::DX_UNSUPPORTED).
 */

/**
 * @brief Imports a DLPack >= 1.0 tensor without copying.
 *
 * Ownership of `managed` always passes to deepx, even on error: on error (unknown DLPack major,
 * unsupported dtype, null data with elements) the deleter is called before returning; on
 * success it is called exactly once, when the last tensor view of the storage is destroyed.
 * A read-only import (DX_DLPACK_FLAG_READ_ONLY) is refused as an output of dx_invoke().
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_from_dlpack(dx_runtime_t* runtime,
                                            dx_dlpack_versioned_t* managed,
                                            dx_tensor_t** out_tensor);

/** @brief Imports a legacy (unversioned) DLPack tensor; ownership as dx_tensor_from_dlpack(). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_from_dlpack_legacy(dx_runtime_t* runtime,
                                                   DLManagedTensor* managed,
                                                   dx_tensor_t** out_tensor);

/**
 * @brief Exports a tensor as DLPack 1.0 without copying. The export keeps the storage alive
 * independently of `tensor`; the consumer calls `deleter` exactly once. Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_to_dlpack(const dx_tensor_t* tensor,
                                          dx_dlpack_versioned_t** out_managed);

/** @brief Exports a tensor as a legacy DLManagedTensor; as dx_tensor_to_dlpack(), except that
    a read-only tensor is refused with ::DX_UNSUPPORTED (the legacy struct cannot say so). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_tensor_to_dlpack_legacy(const dx_tensor_t* tensor,
                                                 DLManagedTensor** out_managed);

/* ------------------------------------------------------------------------------------------ */
/* Attributes                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** @brief Creates an empty attribute list; destroy with dx_attrs_destroy(). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_create(dx_attrs_t** out_attrs);
/** @brief Destroys an attribute list. Null is a no-op. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_destroy(dx_attrs_t* attrs);
/** @brief Sets (or replaces) an i64 attribute. Not concurrently with other uses of `attrs`. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_i64(dx_attrs_t* attrs, const char* name, int64_t value);
/** @brief Sets (or replaces) an f64 attribute. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_f64(dx_attrs_t* attrs, const char* name, double value);
/** @brief Sets (or replaces) a bool attribute (`value` 0 or 1). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_bool(dx_attrs_t* attrs, const char* name, int32_t value);
/** @brief Sets (or replaces) a string attribute: `length` bytes of UTF-8 at `value`, copied
    (kernels see them NUL-terminated too, so the bytes must not contain NUL); `length` -1 means
    `value` is NUL-terminated. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_string(dx_attrs_t* attrs, const char* name,
                                                       const char* value, int64_t length);
/** @brief Sets (or replaces) an i64-array attribute; `count` values copied (may be 0). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_i64_array(dx_attrs_t* attrs, const char* name,
                                             const int64_t* values, int64_t count);
/** @brief Sets (or replaces) an f64-array attribute; `count` values copied (may be 0). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_attrs_set_f64_array(dx_attrs_t* attrs, const char* name,
                                             const double* values, int64_t count);

/* ------------------------------------------------------------------------------------------ */
/* Invocation                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** @brief Bit set of DX_INVOKE_FLAG_* values. @since 1.0 */
typedef uint64_t dx_invoke_flags_t;
/** Run the op's backward kernel. Inputs: the output gradients, then the forward inputs, then
    the forward outputs; outputs: the input gradients (null entries for unwanted ones). @since 1.0 */
#define DX_INVOKE_FLAG_BACKWARD ((dx_invoke_flags_t)1u << 0)
/** Run only kernels of the plugin `plugin_index` (else any plugin, in load order). @since 1.0 */
#define DX_INVOKE_FLAG_PLUGIN ((dx_invoke_flags_t)1u << 1)

/** @brief Options of dx_invoke_ex(). Zero-initialise, then set `struct_size`; a zeroed field
    means the default. @since 1.0 */
typedef struct dx_invoke_options {
  /** ::DX_INVOKE_OPTIONS_SIZE_1_0; written by the caller. */
  size_t struct_size;
  /** DX_INVOKE_FLAG_* bits. */
  dx_invoke_flags_t flags;
  /** Plugin whose kernels may run, when ::DX_INVOKE_FLAG_PLUGIN is set. */
  int32_t plugin_index;
  /** Reserved, zero. */
  int32_t reserved;
  /** Extensions of this call (see ::dx_extension_t), or null; borrowed for the call. Unknown
      entries are skipped. The asynchronous, stream-ordered invoke planned for a later minor
      arrives this way or as appended fields (docs/versioning.md). */
  const dx_extension_t* next;
} dx_invoke_options_t;

/**
 * @brief Runs op `op` synchronously on the given tensors.
 *
 * Picks the first kernel (in plugin load order) whose device type matches the tensors, whose
 * dtype signature matches, and whose supports() predicate accepts the call. Output tensors are
 * allocated by the caller with the op's output shapes (docs/ops.md); for the standard ops whose
 * shape rule the host knows (elementwise, reductions, matmul, softmax, transpose) they are
 * checked before any kernel runs.
 * @param runtime the runtime.
 * @param op an id from dx_runtime_op_lookup().
 * @param inputs `num_inputs` borrowed tensors; a null entry passes an absent optional input.
 * @param num_inputs 0 to 64.
 * @param outputs `num_outputs` borrowed tensors, written by the kernel.
 * @param num_outputs 0 to 64.
 * @param attrs may be null; borrowed for the call. For standard ops, names not in the op's
 *        schema are refused with ::DX_INVALID_ARGUMENT.
 * @return ::DX_NOT_FOUND for an unknown id, ::DX_UNSUPPORTED when no kernel matches (the message
 *         lists the signature asked for and the ones available), or the kernel's error.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_invoke(dx_runtime_t* runtime, dx_op_id_t op,
                                dx_tensor_t* const* inputs, int32_t num_inputs,
                                dx_tensor_t* const* outputs, int32_t num_outputs,
                                const dx_attrs_t* attrs);

/** @brief As dx_invoke(), resolving the op by name first (a string lookup per call). @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_invoke_by_name(dx_runtime_t* runtime, const char* op_name,
                                        dx_tensor_t* const* inputs, int32_t num_inputs,
                                        dx_tensor_t* const* outputs, int32_t num_outputs,
                                        const dx_attrs_t* attrs);

/** @brief As dx_invoke(), with options (a plugin to use, the backward pass); `options` may be
    null for the defaults. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_invoke_ex(dx_runtime_t* runtime, dx_op_id_t op,
                                   dx_tensor_t* const* inputs, int32_t num_inputs,
                                   dx_tensor_t* const* outputs, int32_t num_outputs,
                                   const dx_attrs_t* attrs, const dx_invoke_options_t* options);

/* ------------------------------------------------------------------------------------------ */
/* Asynchronous invoke and programs (since 1.1)                                                */
/* ------------------------------------------------------------------------------------------ */

/**
 * @brief A task: one dx_invoke_async() or one dx_program_submit(), queued or running on its
 * runtime's executor, then done with one outcome. A handle (see above). @since 1.1
 *
 * **Execution and ordering.** Each runtime, in-process or remote, runs its tasks on one executor
 * thread of its own (started by its first task): the tasks of a runtime run one at a time, in the
 * order they were submitted, whichever threads submitted them; tasks of different runtimes run
 * concurrently. A synchronous call (dx_invoke(), dx_tensor_read(), ...) does not wait for the
 * runtime's tasks: wait for the task before reading its outputs or reusing its inputs. On a remote
 * runtime the executor sends each task as one request (an invoke as an Invoke, a program as one
 * Submit) and waits for its reply, at most the request timeout of ::dx_connect_options_t; the
 * connection's synchronous calls from other threads interleave with it, each whole.
 *
 * **Borrowed arguments.** A task refers to its tensors and attribute list by handle and resolves
 * them when it runs: they must stay alive, and the attribute list unchanged, until the task is
 * done; a handle destroyed before then fails the task with ::DX_FAILED_PRECONDITION. The
 * invoke options are copied at submission.
 *
 * **Cancelling.** dx_task_cancel() cancels a task that has not started: its outcome becomes
 * ::DX_CANCELLED and it never runs. A running task is never interrupted (a kernel has no way to
 * stop; a daemon's request in progress completes): cancel reports ::DX_FAILED_PRECONDITION and
 * the task ends with its own outcome.
 *
 * **Failure of the daemon.** When the connection of a remote runtime is lost, the running task
 * fails with ::DX_UNAVAILABLE as soon as the socket closes, and every queued task of the runtime
 * fails at once with the same status and message when its turn comes (nothing is sent); no
 * request of a task waits longer than the request timeout, so dx_task_wait() with -1 ends within
 * that timeout for the task waited on and for each task queued before it.
 *
 * **Lifetime.** Destroy with dx_task_destroy(). A task outlives its runtime: dx_runtime_destroy()
 * cancels the runtime's queued tasks (::DX_CANCELLED, "the runtime was destroyed"), waits for the
 * running one, and leaves every task handle valid for dx_task_wait() and dx_task_destroy().
 */
typedef struct dx_task dx_task_t;

/** @brief A program: a list of invokes built once and submitted as one task (in-process: run
    in order by the runtime's executor; remote: one Submit message, one reply). A handle (see
    above). Build it from one thread at a time. @since 1.1 */
typedef struct dx_program dx_program_t;

/**
 * @brief As dx_invoke_ex(), but queued on the runtime's executor: returns at once with a task
 * whose outcome dx_task_wait() gives.
 *
 * The arguments are checked now (a bad handle, array or options struct_size fails this call and
 * makes no task); what the kernel or the daemon says (no kernel, shape mismatch, the kernel's
 * error, a lost connection) is the task's outcome.
 * @param runtime the runtime, in-process or remote.
 * @param op,inputs,num_inputs,outputs,num_outputs,attrs as dx_invoke(); the tensors and
 *        attribute list are borrowed until the task is done (see ::dx_task_t), the arrays are
 *        copied.
 * @param options may be null; copied.
 * @param out_task receives the task; destroy it with dx_task_destroy().
 * @return ::DX_INVALID_ARGUMENT for a null `out_task`, bad arrays or a too small
 *         `options->struct_size`; ::DX_FAILED_PRECONDITION for a destroyed runtime;
 *         ::DX_NOT_FOUND for an op id not interned in the runtime.
 *
 * Any thread.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_invoke_async(dx_runtime_t* runtime, dx_op_id_t op,
                                                  dx_tensor_t* const* inputs, int32_t num_inputs,
                                                  dx_tensor_t* const* outputs, int32_t num_outputs,
                                                  const dx_attrs_t* attrs,
                                                  const dx_invoke_options_t* options,
                                                  dx_task_t** out_task);

/**
 * @brief Waits for a task to finish and returns its outcome.
 * @param task the task.
 * @param timeout_ms how long to wait, in milliseconds: 0 only looks, -1 waits until the task is
 *        done (on a remote runtime the request timeout still bounds the task once it is sent).
 *        Other negative values are refused.
 * @return ::DX_TIMEOUT when the task is not done in time (the task goes on; wait again); once
 *         done, the task's outcome, the same on every call: null for success, or a new error
 *         object (its status and message: the kernel's or daemon's error, ::DX_CANCELLED,
 *         ::DX_UNAVAILABLE, ...; for a program, which step failed and how many completed).
 *         ::DX_INVALID_ARGUMENT for a null task or a bad timeout; ::DX_FAILED_PRECONDITION for a
 *         destroyed task. Use dx_task_poll() to tell a task not yet done from one whose outcome
 *         is ::DX_TIMEOUT.
 *
 * Any thread; several threads may wait on the same task.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_task_wait(dx_task_t* task, int32_t timeout_ms);

/**
 * @brief Says whether a task is done, without blocking.
 * @param task the task.
 * @param out_done receives 1 when the task is done (dx_task_wait() then returns at once), 0
 *        otherwise.
 * @return ::DX_INVALID_ARGUMENT for a null argument; ::DX_FAILED_PRECONDITION for a destroyed
 *         task. Never the task's outcome.
 *
 * Any thread.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_task_poll(dx_task_t* task, int32_t* out_done);

/**
 * @brief Cancels a task that has not started (see ::dx_task_t): it never runs and its outcome
 * becomes ::DX_CANCELLED.
 * @param task the task.
 * @return null when the task was cancelled (or was cancelled already);
 *         ::DX_FAILED_PRECONDITION when it is running or done (nothing is interrupted; the
 *         message says which); ::DX_INVALID_ARGUMENT for a null task.
 *
 * Any thread.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_task_cancel(dx_task_t* task);

/**
 * @brief Destroys a task handle. Null is a no-op.
 *
 * A task not yet started is cancelled first (it never runs); a running task is detached: it
 * completes on the executor and its outcome is dropped (its tensors must stay alive until then,
 * as dx_runtime_destroy() or a dx_task_wait() on another task of the runtime submitted later
 * guarantees). A task is destroyed once; a later call with the handle is refused.
 * @return ::DX_FAILED_PRECONDITION for a handle already destroyed or of another kind.
 *
 * Must not overlap other calls on the same task.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_task_destroy(dx_task_t* task);

/**
 * @brief Creates an empty program for `runtime`.
 * @param runtime the runtime, in-process or remote; it must outlive the program's submissions
 *        (a program submitted after its runtime is destroyed is refused).
 * @param out_program receives the program; destroy it with dx_program_destroy().
 * @return ::DX_INVALID_ARGUMENT for a null argument; ::DX_FAILED_PRECONDITION for a destroyed
 *         runtime.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_program_create(dx_runtime_t* runtime,
                                                    dx_program_t** out_program);

/**
 * @brief Appends one invoke (a step) to a program.
 *
 * Arguments as dx_invoke_async(): the arrays and options are copied, the tensors and attribute
 * list are borrowed until every task submitted from the program is done. A step's outputs may be
 * later steps' inputs: the steps run in order. At most 4096 steps.
 * @return ::DX_INVALID_ARGUMENT for bad arrays or options (the program is unchanged);
 *         ::DX_NOT_FOUND for an op id not interned in the runtime; ::DX_RESOURCE_EXHAUSTED past
 *         4096 steps.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_program_add_invoke(dx_program_t* program, dx_op_id_t op,
                                                        dx_tensor_t* const* inputs,
                                                        int32_t num_inputs,
                                                        dx_tensor_t* const* outputs,
                                                        int32_t num_outputs,
                                                        const dx_attrs_t* attrs,
                                                        const dx_invoke_options_t* options);

/**
 * @brief Submits the program's steps as one task: they run in order and stop at the first that
 * fails.
 *
 * On a remote runtime the whole program is one Submit request with one reply. The program may be
 * submitted again and changed after this call (the task has its own copy of the steps).
 * @param program the program; an empty one is refused.
 * @param out_task receives the task. Its outcome is null when every step succeeded; otherwise
 *         the failing step's status, with a message that starts with
 *         "step K (OP) failed after K steps completed: " (K counts from 0);
 *         dx_task_steps_completed() gives K as a number.
 * @return ::DX_INVALID_ARGUMENT for a null argument or an empty program;
 *         ::DX_FAILED_PRECONDITION when the program's runtime was destroyed.
 *
 * Any thread, but not concurrently with dx_program_add_invoke() on the same program.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_program_submit(dx_program_t* program, dx_task_t** out_task);

/**
 * @brief How many steps of a task completed: for a program, the steps that succeeded (all of
 * them when it succeeded); for an invoke, 1 after success and 0 otherwise.
 * @param task the task; a task not yet done reports the steps completed so far in-process, 0
 *        remotely (the daemon reports them with its one reply).
 * @param out_steps receives the count.
 * @return ::DX_INVALID_ARGUMENT for a null argument; ::DX_FAILED_PRECONDITION for a destroyed
 *         task.
 * @since 1.1
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_task_steps_completed(dx_task_t* task, int32_t* out_steps);

/** @brief Destroys a program. Null is a no-op; tasks submitted from it are unaffected.
    @return ::DX_FAILED_PRECONDITION for a handle already destroyed or of another kind.
    @since 1.1 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_program_destroy(dx_program_t* program);

/* ------------------------------------------------------------------------------------------ */
/* Named 1.0 sizes                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* What a caller built against ABI 1.0 stores in `struct_size` (plain LP64 constants, pinned to
   DX_STRUCT_SIZE() by abi/tests/abi_layout_pins.h). */

/** `struct_size` of a ::dx_runtime_options_t in ABI 1.0 (up to `next`). @since 1.0 */
#define DX_RUNTIME_OPTIONS_SIZE_1_0 56
/** `struct_size` of a ::dx_plugin_info_t in ABI 1.0 (up to `certification_note`).
    @since 1.0 */
#define DX_PLUGIN_INFO_SIZE_1_0 96
/** `struct_size` of a ::dx_device_info_t in ABI 1.0 (up to `alignment`). @since 1.0 */
#define DX_DEVICE_INFO_SIZE_1_0 48
/** `struct_size` of a ::dx_kernel_info_t in ABI 1.0 (up to `reserved2`). @since 1.0 */
#define DX_KERNEL_INFO_SIZE_1_0 64
/** `struct_size` of a ::dx_invoke_options_t in ABI 1.0 (up to `next`). @since 1.0 */
#define DX_INVOKE_OPTIONS_SIZE_1_0 32

/* ------------------------------------------------------------------------------------------ */
/* Named 1.1 sizes                                                                             */
/* ------------------------------------------------------------------------------------------ */

/** `struct_size` of a ::dx_connect_options_t in ABI 1.1 (up to `next`). @since 1.1 */
#define DX_CONNECT_OPTIONS_SIZE_1_1 32

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_HOST_H_ */
