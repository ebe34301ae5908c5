/**
 * @file deepx/host.h
 * @brief The client-facing host API: what C programs, the Go/Java/Python bindings and the CLI
 * call to load plugins, make tensors and run ops.
 *
 * Conventions (abi/README.md has the full page):
 * - Handles are opaque pointers; every create has its destroy. Nothing is returned by value
 *   except from the few infallible queries.
 * - Every fallible function returns a ::dx_status_t: ::DX_OK (0) or an error code. On error the
 *   calling thread's last error message (dx_last_error_message()) says what went wrong; the
 *   out-parameters are left unchanged.
 * - Null pointers, wrong `struct_size`, out-of-range indices and bad shapes are reported as
 *   errors, never as crashes. Nothing of deepx or of a plugin throws, aborts or exits through
 *   this API.
 * - Strings returned by the API are borrowed: valid for the lifetime of the object they
 *   describe (usually the runtime). Strings passed in are NUL-terminated and copied.
 * - Threading: unless a function says otherwise, it may be called concurrently from any thread,
 *   except that dx_runtime_load_plugin(), dx_runtime_load_search_path() and
 *   dx_runtime_destroy() must not run concurrently with any other call on the same runtime.
 */
#ifndef DEEPX_HOST_H_
#define DEEPX_HOST_H_

#include "deepx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A host runtime: its plugins, registries and tensors. */
typedef struct dx_runtime dx_runtime_t;
/** @brief A tensor: a DLTensor plus the storage it views, allocated in a memory space. */
typedef struct dx_tensor dx_tensor_t;
/** @brief A reusable list of named, typed op attributes. */
typedef struct dx_attrs dx_attrs_t;
/** @brief An interned op id: dense, stable for the runtime's lifetime. */
typedef uint32_t dx_op_id_t;

/**
 * @brief A dtype packed into 32 bits exactly as DLDataType lays it out in memory on a
 * little-endian machine: code | bits << 8 | lanes << 16. Used where a binding would otherwise
 * have to pass a struct by value.
 */
typedef uint32_t dx_dtype_t;
/** Packs a DLPack type code, bit width and lane count into a ::dx_dtype_t. */
#define DX_DTYPE(code, bits, lanes) \
  ((dx_dtype_t)(((uint32_t)(code)) | ((uint32_t)(bits) << 8) | ((uint32_t)(lanes) << 16)))
#define DX_DTYPE_F64 DX_DTYPE(kDLFloat, 64, 1)            /**< 64-bit IEEE float. */
#define DX_DTYPE_F32 DX_DTYPE(kDLFloat, 32, 1)            /**< 32-bit IEEE float. */
#define DX_DTYPE_F16 DX_DTYPE(kDLFloat, 16, 1)            /**< 16-bit IEEE float. */
#define DX_DTYPE_BF16 DX_DTYPE(kDLBfloat, 16, 1)          /**< bfloat16. */
#define DX_DTYPE_I64 DX_DTYPE(kDLInt, 64, 1)              /**< int64_t. */
#define DX_DTYPE_I32 DX_DTYPE(kDLInt, 32, 1)              /**< int32_t. */
#define DX_DTYPE_I16 DX_DTYPE(kDLInt, 16, 1)              /**< int16_t. */
#define DX_DTYPE_I8 DX_DTYPE(kDLInt, 8, 1)                /**< int8_t. */
#define DX_DTYPE_U8 DX_DTYPE(kDLUInt, 8, 1)               /**< uint8_t. */
#define DX_DTYPE_BOOL DX_DTYPE(DX_DLPACK_CODE_BOOL, 8, 1) /**< bool stored as one byte, 0 or 1. */

/* ------------------------------------------------------------------------------------------ */
/* Versions and errors                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** @brief The packed ABI version (DX_MAKE_VERSION) of the host library actually loaded.
    Compare with DX_ABI_VERSION to detect a header/library mismatch. Any thread. */
DX_EXPORT uint32_t dx_abi_version(void);

/** @brief Static name of a status code ("INVALID_ARGUMENT"); "UNKNOWN" for unknown codes.
    Never null; the string is static. Any thread. */
DX_EXPORT const char* dx_status_string(dx_status_t code);

/** @brief Static short name of a dtype ("f32", "bf16", "bool"), or "unknown" for a dtype deepx
    does not know. Never null. Any thread. */
DX_EXPORT const char* dx_dtype_string(dx_dtype_t dtype);

/** @brief The message of the last error on the calling thread, or "" when there was none.
    Borrowed: valid until the next deepx call on this thread. Any thread (thread-local). */
DX_EXPORT const char* dx_last_error_message(void);

/* ------------------------------------------------------------------------------------------ */
/* Runtime and plugins                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** @brief Bit set of DX_RUNTIME_FLAG_* values. */
typedef uint64_t dx_runtime_flags_t;
/** Ignore DEEPX_PLUGIN_PATH: neither dx_runtime_load_plugin() (by name) nor
    dx_runtime_load_search_path() look there. */
#define DX_RUNTIME_FLAG_IGNORE_ENV ((dx_runtime_flags_t)1u << 0)
/** Trust-gated dispatch: run a kernel only if a valid certificate (written by `deepx certify`)
    covers its plugin binary (by SHA-256), op, device type and dtypes; otherwise dx_invoke()
    refuses with ::DX_PERMISSION_DENIED. Also turned on by DEEPX_REQUIRE_CERTIFIED=1 in the
    environment (unless ::DX_RUNTIME_FLAG_IGNORE_ENV). */
#define DX_RUNTIME_FLAG_REQUIRE_CERTIFIED ((dx_runtime_flags_t)1u << 1)

/** @brief Options of dx_runtime_create(). Zero-initialise, then set `struct_size`. */
typedef struct dx_runtime_options {
  /** DX_STRUCT_SIZE(dx_runtime_options_t, certificate_path); written by the caller. */
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
} dx_runtime_options_t;

/**
 * @brief Creates a runtime with no plugins loaded.
 * @param options may be null for defaults; borrowed for the call.
 * @param out_runtime receives the runtime; destroy it with dx_runtime_destroy().
 */
DX_EXPORT dx_status_t dx_runtime_create(const dx_runtime_options_t* options,
                                        dx_runtime_t** out_runtime);

/**
 * @brief Destroys a runtime: frees its remaining tensors' storage once no DLPack export still
 * references it, calls each plugin's shutdown, and frees the runtime. Null is a no-op.
 * Libraries stay mapped (plugins are never unloaded). Not concurrently with other calls on it.
 */
DX_EXPORT dx_status_t dx_runtime_destroy(dx_runtime_t* runtime);

/**
 * @brief Loads one plugin.
 * @param runtime the runtime to load into.
 * @param name_or_path a path containing '/', opened as is; or a plugin name such as "cpu",
 *        looked up as `libdeepx-plugin-<name>.so` in the options' plugin_path, then
 *        DEEPX_PLUGIN_PATH, then the installed plugin directory. Copied.
 * @param out_plugin_index receives the plugin's index; may be null.
 * @return ::DX_NOT_FOUND (with every path tried in the message), ::DX_VERSION_MISMATCH (with
 *         both versions and what to do), ::DX_PLUGIN_ERROR for a malformed plugin,
 *         ::DX_ALREADY_EXISTS if a plugin of that name is loaded, or the plugin's init error.
 *         On any error nothing of the plugin stays registered.
 */
DX_EXPORT dx_status_t dx_runtime_load_plugin(dx_runtime_t* runtime, const char* name_or_path,
                                             int32_t* out_plugin_index);

/**
 * @brief Loads every `libdeepx-plugin-*.so` found in the options' plugin_path and
 * DEEPX_PLUGIN_PATH (first occurrence of a name wins). Plugins that fail to load are skipped and
 * logged; the last failure's message is kept as the thread's last error message.
 * @param runtime the runtime to load into.
 * @param out_loaded receives how many plugins loaded; may be null.
 */
DX_EXPORT dx_status_t dx_runtime_load_search_path(dx_runtime_t* runtime, int32_t* out_loaded);

/** @brief Number of loaded plugins. */
DX_EXPORT dx_status_t dx_runtime_plugin_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief Certification state of a loaded plugin (dx_plugin_info_t::certification). */
typedef enum dx_certification {
  DX_CERTIFICATION_NONE = 0,    /**< No certificate file was found. */
  DX_CERTIFICATION_VALID = 1,   /**< A certificate matches the plugin binary's SHA-256. */
  DX_CERTIFICATION_INVALID = 2  /**< A certificate was found but is malformed, names another
                                     plugin, or was issued for another binary. */
} dx_certification_t;

/** @brief What a loaded plugin declared. Strings are borrowed for the runtime's lifetime. */
typedef struct dx_plugin_info {
  /** DX_STRUCT_SIZE(dx_plugin_info_t, certification_note); written by the caller. */
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
 */
DX_EXPORT dx_status_t dx_runtime_plugin_info(const dx_runtime_t* runtime, int32_t index,
                                             dx_plugin_info_t* out_info);

/* ------------------------------------------------------------------------------------------ */
/* Devices (memory spaces)                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of registered memory spaces ("devices"), over all plugins. */
DX_EXPORT dx_status_t dx_runtime_device_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief What a memory space declared. Strings are borrowed for the runtime's lifetime. */
typedef struct dx_device_info {
  /** DX_STRUCT_SIZE(dx_device_info_t, alignment); written by the caller. */
  size_t struct_size;
  const char* name;     /**< Space name, e.g. "cpu". */
  int32_t device_type;  /**< DLDeviceType. */
  int32_t device_id;    /**< DLPack device id. */
  int32_t kind;         /**< dx_memory_kind_t (deepx/plugin.h). */
  int32_t plugin_index; /**< Index of the plugin that serves it. */
  uint64_t capacity;    /**< Bytes, 0 when unknown. */
  uint64_t alignment;   /**< Alignment of every allocation, in bytes. */
} dx_device_info_t;

/** @brief Describes device `index`; set `out_info->struct_size` first. */
DX_EXPORT dx_status_t dx_runtime_device_info(const dx_runtime_t* runtime, int32_t index,
                                             dx_device_info_t* out_info);

/**
 * @brief Reads device `index`'s allocation statistics (bytes in use and reserved, their peaks,
 * live allocations) from the memory space that serves it.
 *
 * Set `out_stats->struct_size` (DX_STRUCT_SIZE(dx_memory_stats_t, live_allocations)) first;
 * fields beyond it are left alone. Any thread; the plugin's slot must tolerate being called while
 * kernels and copies run. ::DX_OUT_OF_RANGE for a bad index; ::DX_UNSUPPORTED when the space's plugin has no
 * `stats` slot; otherwise the plugin's error, if any.
 */
DX_EXPORT dx_status_t dx_runtime_device_stats(const dx_runtime_t* runtime, int32_t index,
                                              dx_memory_stats_t* out_stats);

/** @brief Finds a device by name ("cpu", "cuda:0"); ::DX_NOT_FOUND when absent. */
DX_EXPORT dx_status_t dx_runtime_find_device(const dx_runtime_t* runtime, const char* name,
                                             int32_t* out_index);

/* ------------------------------------------------------------------------------------------ */
/* Ops and kernels                                                                             */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of interned ops; ids are 0 .. count-1. */
DX_EXPORT dx_status_t dx_runtime_op_count(const dx_runtime_t* runtime, int32_t* out_count);

/** @brief Name of op `id`; borrowed for the runtime's lifetime. */
DX_EXPORT dx_status_t dx_runtime_op_name(const dx_runtime_t* runtime, dx_op_id_t id,
                                         const char** out_name);

/**
 * @brief Interns an op name: resolve once, then call dx_invoke() with the id on the hot path.
 * @return ::DX_NOT_FOUND when no kernel of any loaded plugin implements the op.
 */
DX_EXPORT dx_status_t dx_runtime_op_lookup(const dx_runtime_t* runtime, const char* name,
                                           dx_op_id_t* out_id);

/** @brief Number of kernels registered for op `id`, over all plugins. */
DX_EXPORT dx_status_t dx_runtime_kernel_count(const dx_runtime_t* runtime, dx_op_id_t id,
                                              int32_t* out_count);

/** @brief What a registered kernel declared. Pointers are borrowed for the runtime's life. */
typedef struct dx_kernel_info {
  /** DX_STRUCT_SIZE(dx_kernel_info_t, certified); written by the caller. */
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

/** @brief Describes kernel `index` of op `id`; set `out_info->struct_size` first. */
DX_EXPORT dx_status_t dx_runtime_kernel_info(const dx_runtime_t* runtime, dx_op_id_t id,
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
 */
DX_EXPORT dx_status_t dx_tensor_create(dx_runtime_t* runtime, int32_t device_index,
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
 */
DX_EXPORT dx_status_t dx_tensor_view(const dx_tensor_t* base, const int64_t* shape,
                                     const int64_t* strides, int32_t ndim, int64_t elem_offset,
                                     dx_tensor_t** out_tensor);

/** @brief Destroys a tensor handle; its storage is freed when no other view or DLPack export
    references it. Null is a no-op. Not concurrently with other uses of the same tensor. */
DX_EXPORT dx_status_t dx_tensor_destroy(dx_tensor_t* tensor);

/** @brief The tensor's DLTensor view, borrowed for the tensor's lifetime. */
DX_EXPORT dx_status_t dx_tensor_dltensor(const dx_tensor_t* tensor, const DLTensor** out);

/** @brief Rank of the tensor. */
DX_EXPORT dx_status_t dx_tensor_ndim(const dx_tensor_t* tensor, int32_t* out_ndim);

/** @brief Copies the shape into `out_shape` (capacity `capacity` entries, >= ndim). */
DX_EXPORT dx_status_t dx_tensor_shape(const dx_tensor_t* tensor, int64_t* out_shape,
                                      int32_t capacity);

/** @brief Dtype of the tensor. */
DX_EXPORT dx_status_t dx_tensor_dtype(const dx_tensor_t* tensor, dx_dtype_t* out_dtype);

/** @brief Index of the device (memory space) holding the tensor, or -1 for an imported tensor
    whose device no loaded plugin serves. */
DX_EXPORT dx_status_t dx_tensor_device(const dx_tensor_t* tensor, int32_t* out_device_index);

/** @brief Number of elements (product of the shape). */
DX_EXPORT dx_status_t dx_tensor_numel(const dx_tensor_t* tensor, int64_t* out_numel);

/**
 * @brief Copies `size` bytes of host memory into the tensor, in row-major element order,
 * through the tensor's memory space. `size` must equal numel × element size.
 * Works for any strides and any memory space.
 */
DX_EXPORT dx_status_t dx_tensor_write(dx_tensor_t* tensor, const void* data, uint64_t size);

/** @brief Copies the tensor's elements, in row-major order, into `size` bytes of host memory. */
DX_EXPORT dx_status_t dx_tensor_read(const dx_tensor_t* tensor, void* data, uint64_t size);

/**
 * @brief Copies the elements of `src` into `dst`: same dtype and shape, any devices, any
 * strides. Synchronous.
 */
DX_EXPORT dx_status_t dx_tensor_copy(dx_runtime_t* runtime, dx_tensor_t* dst,
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
 */
DX_EXPORT dx_status_t dx_tensor_from_dlpack(dx_runtime_t* runtime,
                                            dx_dlpack_versioned_t* managed,
                                            dx_tensor_t** out_tensor);

/** @brief Imports a legacy (unversioned) DLPack tensor; ownership as dx_tensor_from_dlpack(). */
DX_EXPORT dx_status_t dx_tensor_from_dlpack_legacy(dx_runtime_t* runtime,
                                                   DLManagedTensor* managed,
                                                   dx_tensor_t** out_tensor);

/**
 * @brief Exports a tensor as DLPack 1.0 without copying. The export keeps the storage alive
 * independently of `tensor`; the consumer calls `deleter` exactly once. Any thread.
 */
DX_EXPORT dx_status_t dx_tensor_to_dlpack(const dx_tensor_t* tensor,
                                          dx_dlpack_versioned_t** out_managed);

/** @brief Exports a tensor as a legacy DLManagedTensor; as dx_tensor_to_dlpack(). */
DX_EXPORT dx_status_t dx_tensor_to_dlpack_legacy(const dx_tensor_t* tensor,
                                                 DLManagedTensor** out_managed);

/* ------------------------------------------------------------------------------------------ */
/* Attributes                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** @brief Creates an empty attribute list; destroy with dx_attrs_destroy(). */
DX_EXPORT dx_status_t dx_attrs_create(dx_attrs_t** out_attrs);
/** @brief Destroys an attribute list. Null is a no-op. */
DX_EXPORT dx_status_t dx_attrs_destroy(dx_attrs_t* attrs);
/** @brief Sets (or replaces) an i64 attribute. Not concurrently with other uses of `attrs`. */
DX_EXPORT dx_status_t dx_attrs_set_i64(dx_attrs_t* attrs, const char* name, int64_t value);
/** @brief Sets (or replaces) an f64 attribute. */
DX_EXPORT dx_status_t dx_attrs_set_f64(dx_attrs_t* attrs, const char* name, double value);
/** @brief Sets (or replaces) a bool attribute (`value` 0 or 1). */
DX_EXPORT dx_status_t dx_attrs_set_bool(dx_attrs_t* attrs, const char* name, int32_t value);
/** @brief Sets (or replaces) a string attribute; `value` is NUL-terminated and copied. */
DX_EXPORT dx_status_t dx_attrs_set_string(dx_attrs_t* attrs, const char* name,
                                          const char* value);
/** @brief Sets (or replaces) an i64-array attribute; `count` values copied (may be 0). */
DX_EXPORT dx_status_t dx_attrs_set_i64_array(dx_attrs_t* attrs, const char* name,
                                             const int64_t* values, int64_t count);
/** @brief Sets (or replaces) an f64-array attribute; `count` values copied (may be 0). */
DX_EXPORT dx_status_t dx_attrs_set_f64_array(dx_attrs_t* attrs, const char* name,
                                             const double* values, int64_t count);

/* ------------------------------------------------------------------------------------------ */
/* Invocation                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** @brief Bit set of DX_INVOKE_FLAG_* values. */
typedef uint64_t dx_invoke_flags_t;
/** Run the op's backward kernel. Inputs: the output gradients, then the forward inputs, then
    the forward outputs; outputs: the input gradients (null entries for unwanted ones). */
#define DX_INVOKE_FLAG_BACKWARD ((dx_invoke_flags_t)1u << 0)
/** Run only kernels of the plugin `plugin_index` (else any plugin, in load order). */
#define DX_INVOKE_FLAG_PLUGIN ((dx_invoke_flags_t)1u << 1)

/** @brief Options of dx_invoke_ex(). Zero-initialise, then set `struct_size`; a zeroed field
    means the default. */
typedef struct dx_invoke_options {
  /** DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index); written by the caller. */
  size_t struct_size;
  /** DX_INVOKE_FLAG_* bits. */
  dx_invoke_flags_t flags;
  /** Plugin whose kernels may run, when ::DX_INVOKE_FLAG_PLUGIN is set. */
  int32_t plugin_index;
} dx_invoke_options_t;

/**
 * @brief Runs op `op` synchronously on the given tensors.
 *
 * Picks the first kernel (in plugin load order) whose device type matches the tensors, whose
 * dtype signature matches, and whose supports() predicate accepts the call. Output tensors are
 * allocated by the caller with the op's output shapes (OPS.md); they are checked for standard
 * ops before any kernel runs.
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
 */
DX_EXPORT dx_status_t dx_invoke(dx_runtime_t* runtime, dx_op_id_t op,
                                dx_tensor_t* const* inputs, int32_t num_inputs,
                                dx_tensor_t* const* outputs, int32_t num_outputs,
                                const dx_attrs_t* attrs);

/** @brief As dx_invoke(), resolving the op by name first (a string lookup per call). */
DX_EXPORT dx_status_t dx_invoke_by_name(dx_runtime_t* runtime, const char* op_name,
                                        dx_tensor_t* const* inputs, int32_t num_inputs,
                                        dx_tensor_t* const* outputs, int32_t num_outputs,
                                        const dx_attrs_t* attrs);

/** @brief As dx_invoke(), with options (a plugin to use, the backward pass); `options` may be
    null for the defaults. */
DX_EXPORT dx_status_t dx_invoke_ex(dx_runtime_t* runtime, dx_op_id_t op,
                                   dx_tensor_t* const* inputs, int32_t num_inputs,
                                   dx_tensor_t* const* outputs, int32_t num_outputs,
                                   const dx_attrs_t* attrs, const dx_invoke_options_t* options);

/* ------------------------------------------------------------------------------------------ */
/* Tensors on disk: safetensors                                                                */
/* ------------------------------------------------------------------------------------------ */

/**
 * @brief Options of dx_safetensors_save(). Zero-initialise, then set `struct_size`; a zeroed
 * field means the default. Borrowed for the call.
 */
typedef struct dx_safetensors_save_options {
  /** DX_STRUCT_SIZE(dx_safetensors_save_options_t, metadata_values); written by the caller. */
  size_t struct_size;
  /** Number of entries in `metadata_keys` and `metadata_values` (0 for no `__metadata__`). */
  int64_t metadata_count;
  /** `metadata_count` NUL-terminated UTF-8 keys, pairwise distinct; copied into the file's
      `__metadata__` object. May be null when `metadata_count` is 0. */
  const char* const* metadata_keys;
  /** `metadata_count` NUL-terminated UTF-8 values, one per key. May be null when
      `metadata_count` is 0. */
  const char* const* metadata_values;
} dx_safetensors_save_options_t;

/**
 * @brief Writes tensors to a safetensors file (https://github.com/huggingface/safetensors).
 *
 * The file holds an 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, then the tensors' bytes, packed (largest element size first,
 * then by name, each range aligned to its element size). The tensors may have any strides
 * (they are written compactly, in row-major order) and live in any memory space (device
 * tensors are copied to the host through their space). Dtypes: f64, f32, f16, bf16, i64, i32,
 * i16, i8, u8 and bool (the file's F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL).
 *
 * The file is written atomically: to a temporary file in the same directory, flushed, then
 * renamed over `path`, so a reader sees the old file or the complete new one, never a partial
 * one; on any error the temporary file is removed and `path` is untouched.
 *
 * @param runtime the runtime owning the tensors.
 * @param path the file to create or replace; NUL-terminated, borrowed for the call.
 * @param names `count` NUL-terminated UTF-8 names, non-empty, pairwise distinct and not
 *        `__metadata__`; borrowed for the call.
 * @param tensors `count` tensors, borrowed for the call; not modified.
 * @param count 0 or more (0 writes a file with no tensors).
 * @param options may be null (no metadata); borrowed for the call.
 * @return ::DX_INVALID_ARGUMENT for a null argument, a bad name or metadata key,
 *         ::DX_ALREADY_EXISTS for a repeated name or key, ::DX_UNSUPPORTED for a dtype the
 *         format has no name for, ::DX_IO_ERROR when the file cannot be written (the message
 *         names the path and the system error).
 *
 * Threading: any thread; the tensors must not be written concurrently.
 */
DX_EXPORT dx_status_t dx_safetensors_save(dx_runtime_t* runtime, const char* path,
                                          const char* const* names,
                                          const dx_tensor_t* const* tensors, int64_t count,
                                          const dx_safetensors_save_options_t* options);

/** @brief The tensors and metadata read from one safetensors file, by dx_safetensors_load(). */
typedef struct dx_safetensors dx_safetensors_t;

/**
 * @brief Reads a safetensors file: checks it completely, then creates each of its tensors
 * (compact, row-major) in device `device_index` and copies the data in.
 *
 * Nothing of a malformed file is trusted: the header length must fit the file and a 100 MB
 * limit, the header must be strict JSON (an object, UTF-8, no duplicate keys, optionally
 * padded with trailing spaces), every entry must have a known dtype, a shape of non-negative
 * integers, and `data_offsets` [begin, end] with end - begin = product(shape) × element size;
 * the byte ranges must not overlap and must cover the data section exactly (no holes, nothing
 * after the last tensor); names and metadata must not contain NUL characters; `__metadata__`
 * must map strings to strings; bool elements must be 0 or 1. Such a file is refused with a
 * message naming the tensor and what is wrong.
 *
 * @param runtime the runtime; the tensors are allocated in its device `device_index`.
 * @param path the file; NUL-terminated, borrowed for the call.
 * @param device_index 0 .. dx_runtime_device_count() - 1; any memory space (device spaces
 *        receive the data through their copy function).
 * @param out_file receives the result; destroy it with dx_safetensors_destroy(). Its tensors
 *        are listed in file order (by ascending byte offset).
 * @return ::DX_NOT_FOUND when the file does not exist, ::DX_IO_ERROR when it cannot be read,
 *         ::DX_INVALID_ARGUMENT for a malformed or truncated file, ::DX_UNSUPPORTED for a dtype
 *         deepx has no equivalent for (U16, U32, U64, F8_*), ::DX_OUT_OF_RANGE for a device
 *         index out of range, or the device's allocation or copy error.
 *
 * Threading: any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_load(dx_runtime_t* runtime, const char* path,
                                          int32_t device_index, dx_safetensors_t** out_file);

/**
 * @brief Destroys a loaded file and the tensor handles it holds. Tensors obtained with
 * dx_safetensors_get_tensor() stay valid (they are handles of their own). Null is a no-op.
 * Not concurrently with other uses of the same `file`.
 */
DX_EXPORT dx_status_t dx_safetensors_destroy(dx_safetensors_t* file);

/** @brief Number of tensors in a loaded file. Any thread. */
DX_EXPORT dx_status_t dx_safetensors_tensor_count(const dx_safetensors_t* file,
                                                  int64_t* out_count);

/** @brief What a loaded file says of one tensor. Pointers are borrowed for the lifetime of the
    ::dx_safetensors_t. */
typedef struct dx_safetensors_tensor_info {
  /** DX_STRUCT_SIZE(dx_safetensors_tensor_info_t, byte_size); written by the caller. */
  size_t struct_size;
  const char* name;     /**< Name, NUL-terminated UTF-8. */
  dx_dtype_t dtype;     /**< Element type, e.g. ::DX_DTYPE_F32. */
  int32_t ndim;         /**< Rank (0 for a scalar). */
  const int64_t* shape; /**< `ndim` sizes; null when `ndim` is 0. */
  uint64_t data_offset; /**< Offset of its bytes from the start of the file's data section. */
  uint64_t byte_size;   /**< Its size in bytes: product(shape) × element size. */
} dx_safetensors_tensor_info_t;

/**
 * @brief Describes tensor `index` of a loaded file.
 * @param file the loaded file.
 * @param index 0 .. dx_safetensors_tensor_count() - 1.
 * @param out_info caller-owned; set `struct_size` first; filled up to min(known, struct_size).
 * Any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_tensor_info(const dx_safetensors_t* file, int64_t index,
                                                 dx_safetensors_tensor_info_t* out_info);

/**
 * @brief Finds a tensor of a loaded file by name.
 * @param file the loaded file.
 * @param name NUL-terminated; borrowed for the call.
 * @param out_index receives its index.
 * @return ::DX_NOT_FOUND when the file has no tensor of that name. Any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_find(const dx_safetensors_t* file, const char* name,
                                          int64_t* out_index);

/**
 * @brief Gives the caller a tensor of a loaded file as a new handle of its own: it views the
 * same storage (no copy), outlives `file`, and is destroyed with dx_tensor_destroy(). Calling
 * it twice for one index gives two handles of the same storage.
 * @param file the loaded file.
 * @param index 0 .. dx_safetensors_tensor_count() - 1.
 * @param out_tensor receives the new handle.
 * Any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_get_tensor(const dx_safetensors_t* file, int64_t index,
                                                dx_tensor_t** out_tensor);

/** @brief Number of `__metadata__` entries in a loaded file (0 when it has none). Any thread. */
DX_EXPORT dx_status_t dx_safetensors_metadata_count(const dx_safetensors_t* file,
                                                    int64_t* out_count);

/**
 * @brief Metadata entry `index` of a loaded file, in file order.
 * @param file the loaded file.
 * @param index 0 .. dx_safetensors_metadata_count() - 1.
 * @param out_key receives the key, borrowed for the lifetime of `file`; may be null.
 * @param out_value receives the value, borrowed for the lifetime of `file`; may be null.
 * Any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_metadata(const dx_safetensors_t* file, int64_t index,
                                              const char** out_key, const char** out_value);

/**
 * @brief The metadata value stored under `key`.
 * @param file the loaded file.
 * @param key NUL-terminated; borrowed for the call.
 * @param out_value receives the value, borrowed for the lifetime of `file`.
 * @return ::DX_NOT_FOUND when the file has no such key. Any thread.
 */
DX_EXPORT dx_status_t dx_safetensors_metadata_find(const dx_safetensors_t* file,
                                                   const char* key, const char** out_value);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_HOST_H_ */
