/**
 * @file deepx/plugin.h
 * @brief The plugin-author header: everything a vendor needs to write an executor plugin.
 *
 * A plugin is a shared library that exports exactly one symbol, ::dx_plugin_entry. The host
 * calls it with the range of ABI versions it speaks; the plugin returns a static ::dx_plugin_t
 * describing itself. If the majors agree, the host calls dx_plugin_t::init with its services
 * table (::dx_host_t), and the plugin registers kernels (::dx_kernel_desc_t), memory spaces
 * (::dx_memory_space_desc_t) and network transports (::dx_transport_desc_t).
 *
 * Read docs/abi-conventions.md first: it states the conventions every declaration follows
 * (ownership, errors, strings, threading, versioning). In short:
 * - every growable struct starts with `struct_size`, written by whoever fills it with the
 *   struct's named size (e.g. ::DX_KERNEL_DESC_SIZE_1_0); readers use min(known, struct_size)
 *   and treat missing fields as zero;
 * - optional additions travel as named extensions (::dx_extension_t): in the `next` chain that
 *   ends the descriptors, or through the `get_extension` slots;
 * - a null function slot means "not supported";
 * - errors are objects: a fallible function returns a ::dx_error_t pointer (null on success),
 *   created with dx_host_t::error_create; returning it transfers ownership to the caller;
 * - no C++ exception, abort(), exit() or signal may leave a plugin function;
 * - the host never unloads a plugin library (it is opened with RTLD_NODELETE); each runtime
 *   that loaded the plugin calls dx_plugin_t::shutdown once, after its runtime handle is
 *   destroyed and its last tensor and DLPack export are gone.
 *
 * A plugin builds against these headers alone; it never links the host library.
 * @since 1.0
 */
#ifndef DEEPX_PLUGIN_H_
#define DEEPX_PLUGIN_H_

#include <stdarg.h>
#include <stdio.h>

#include "deepx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Name of the one symbol every plugin exports; see ::dx_plugin_entry_fn. @since 1.0 */
#define DX_PLUGIN_ENTRY_SYMBOL "dx_plugin_entry"

/**
 * @brief Opaque handle the host passes to dx_plugin_t::init; it names the plugin being loaded
 * in every registration and log call. Owned by the host, valid until dx_plugin_t::shutdown.
 * @since 1.0
 */
typedef struct dx_host_context dx_host_context_t;

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * @brief Everything a kernel receives for one call. Built by the host on its stack; borrowed
 * by the kernel for the duration of the call only.
 *
 * Tensors are DLPack views: `data + byte_offset` is element 0; `strides` (in elements) may be
 * null for a compact row-major tensor, may contain 0 for broadcast dimensions, and must always
 * be honoured. Output tensors are allocated by the caller before the call, with the shapes the
 * op defines; the kernel writes their elements and nothing else.
 *
 * For a forward call `inputs` and `outputs` are the op's inputs and outputs. For a backward
 * call (dx_kernel_desc_t::backward) `inputs` are the output gradients, then the forward inputs,
 * then the forward outputs, and `outputs` are the input gradients; a null entry in `outputs`
 * means that gradient is not wanted. docs/ops.md gives each op's inputs, outputs and gradients.
 * @since 1.0
 */
typedef struct dx_kernel_call {
  /** ::DX_KERNEL_CALL_SIZE_1_0; written by the host. */
  size_t struct_size;
  /** dx_kernel_desc_t::kernel_data of the kernel being called. */
  void* kernel_data;
  /** `num_inputs` borrowed tensor views. Never null when num_inputs > 0. */
  const DLTensor* const* inputs;
  /** `num_outputs` borrowed tensor views (entries may be null in backward calls). */
  const DLTensor* const* outputs;
  /** `num_attrs` attributes, in the order the op's schema lists them (deepx/ops.h); an attribute
      the caller left unset has type ::DX_ATTR_NONE. Vendor ops get them in the caller's order.
      May be null when `num_attrs` is 0 (no attributes were given): treat every slot as unset. */
  const dx_attr_t* attrs;
  /** Number of entries in `inputs`. */
  int32_t num_inputs;
  /** Number of entries in `outputs`. */
  int32_t num_outputs;
  /** Number of entries in `attrs`. */
  int32_t num_attrs;
  /** Reserved, zero. */
  int32_t reserved;
  /** Stream of the memory space the outputs live in, or null for "run synchronously". When
      non-null the kernel enqueues work and may return before it completes. */
  dx_stream_t stream;
  /** The host services, for creating errors. Same pointer as passed to dx_plugin_t::init. */
  const struct dx_host* host;
  /** Extensions the host passes with this call (see ::dx_extension_t), or null; a kernel
      skips entries it does not know. 1.0 hosts pass null. */
  const dx_extension_t* next;
} dx_kernel_call_t;

/**
 * @brief A kernel: computes the call's outputs from its inputs.
 * @param call borrowed for the duration of the call.
 * @return null on success, or an error created with dx_host_t::error_create (ownership passes
 *         to the host). Data-dependent failures (integer division by zero, out-of-range
 *         indices) are errors, never crashes.
 * Threading: called on any host thread; concurrently with itself only when the plugin declares
 * ::DX_PLUGIN_CAP_CONCURRENT_KERNELS.
 * @since 1.0
 */
typedef dx_error_t* (*dx_kernel_fn)(const dx_kernel_call_t* call);

/**
 * @brief Optional predicate: may this kernel run this call (shapes, strides, attributes)?
 * @return 1 if supported, 0 if not (the host then tries another kernel or reports
 *         ::DX_UNSUPPORTED). Must not fail, allocate or write the outputs.
 * Threading: as ::dx_kernel_fn.
 * @since 1.0
 */
typedef int32_t (*dx_kernel_supports_fn)(const dx_kernel_call_t* call);

/** @brief Cost estimate of one call, filled by ::dx_kernel_cost_fn. @since 1.0 */
typedef struct dx_kernel_cost {
  /** ::DX_KERNEL_COST_SIZE_1_0; written by the host before the call. */
  size_t struct_size;
  /** Floating-point (or integer) operations the call performs. */
  double flops;
  /** Bytes read plus bytes written in the memory space. */
  double bytes_moved;
  /** Scratch memory the call needs, in bytes. */
  uint64_t workspace_bytes;
} dx_kernel_cost_t;

/**
 * @brief Optional cost model of a kernel.
 * @param call borrowed; tensor `data` pointers may be null (shape-only query).
 * @param out_cost filled by the plugin up to min(its known size, out_cost->struct_size).
 * @return null on success or an error (ownership to the host).
 * Threading: any thread, concurrently.
 * @since 1.0
 */
typedef dx_error_t* (*dx_kernel_cost_fn)(const dx_kernel_call_t* call, dx_kernel_cost_t* out_cost);

/* dx_kernel_flags_t and DX_KERNEL_FLAG_* live in deepx/types.h (clients read them too). */

/**
 * @brief Describes one kernel: one op, one device type, one dtype signature.
 *
 * Passed to dx_host_t::register_kernel; the host copies everything it needs (names, dtype
 * arrays) during the call, except `kernel_data`, which is passed back verbatim on every call
 * and must stay valid until dx_plugin_t::shutdown.
 * @since 1.0
 */
typedef struct dx_kernel_desc {
  /** ::DX_KERNEL_DESC_SIZE_1_0 for 1.0 (at least up to `forward`); written by the plugin. */
  size_t struct_size;
  /** Namespaced op name, NUL-terminated: "dx.add" for the standard set, "vendor.op" for vendor
      ops. Borrowed for the call. */
  const char* op_name;
  /** A DLDeviceType: the kernel runs on tensors of this device type. */
  int32_t device_type;
  /** Number of inputs (minimum number for ::DX_KERNEL_FLAG_VARIADIC). */
  int32_t num_inputs;
  /** Number of outputs. */
  int32_t num_outputs;
  /** Reserved, zero. */
  int32_t reserved;
  /** Dtype signature: the inputs' dtypes then the outputs' dtypes (num_inputs + num_outputs
      entries, or 1 + num_outputs for variadic kernels). Borrowed for the call. */
  const DLDataType* dtypes;
  /** DX_KERNEL_FLAG_* bits. */
  dx_kernel_flags_t flags;
  /** Plugin data passed back in dx_kernel_call_t::kernel_data. Borrowed for the plugin's life. */
  void* kernel_data;
  /** Forward kernel. Mandatory. */
  dx_kernel_fn forward;
  /** Backward kernel, or null when the kernel does not provide gradients. */
  dx_kernel_fn backward;
  /** Shape/attribute predicate, or null for "supports every valid call". */
  dx_kernel_supports_fn supports;
  /** Cost model, or null for "unknown" (the host estimates from byte traffic). */
  dx_kernel_cost_fn cost;
  /** Extensions of this kernel (see ::dx_extension_t), or null; borrowed for the call. A host
      skips entries it does not know. */
  const dx_extension_t* next;
} dx_kernel_desc_t;

/* ------------------------------------------------------------------------------------------ */
/* Memory spaces                                                                               */
/* ------------------------------------------------------------------------------------------ */

/** @brief What kind of memory a space serves. Values are stable. @since 1.0 */
typedef enum dx_memory_kind {
  DX_MEMORY_DEVICE = 0,  /**< Device memory, not addressable by the host CPU. */
  DX_MEMORY_HOST = 1,    /**< Ordinary host memory. */
  DX_MEMORY_PINNED = 2,  /**< Page-locked host memory, addressable by host and device. */
  DX_MEMORY_MANAGED = 3  /**< Unified memory migrated on demand. */
} dx_memory_kind_t;

/** @brief Direction of a dx_memory_space_desc_t::copy, seen from the space that serves it.
    @since 1.0 */
typedef enum dx_copy_direction {
  DX_COPY_HOST_TO_DEVICE = 0,  /**< `src` is host memory, `dst` is in this space. */
  DX_COPY_DEVICE_TO_HOST = 1,  /**< `src` is in this space, `dst` is host memory. */
  DX_COPY_DEVICE_TO_DEVICE = 2 /**< Both in this space. */
} dx_copy_direction_t;

/**
 * @brief Describes one memory space (one DLPack device) and its operations.
 *
 * Every function takes `space_data` first; a plugin that creates errors in these slots keeps
 * the ::dx_host_t pointer it got in dx_plugin_t::init in its `space_data`. Copied by the host at
 * registration except
 * `space_data`, which stays valid until dx_plugin_t::shutdown. Stream arguments may be null,
 * meaning "synchronous": the call completes before returning. With a non-null stream the call
 * is enqueued; memory freed on a stream may be reused by work enqueued after it on that stream.
 *
 * Threading: every slot may be called concurrently from any host thread.
 * @since 1.0
 */
typedef struct dx_memory_space_desc {
  /** ::DX_MEMORY_SPACE_DESC_SIZE_1_0 for 1.0 (at least up to `copy`: every slot after it is
      optional); written by the plugin. */
  size_t struct_size;
  /** Short unique name, NUL-terminated, e.g. "cpu" or "cuda:0". Borrowed for the call. */
  const char* name;
  /** The DLPack device this space serves. */
  DLDevice device;
  /** A ::dx_memory_kind_t value. */
  int32_t kind;
  /** Reserved, zero. */
  int32_t reserved;
  /** Capacity in bytes, or 0 when unknown. */
  uint64_t capacity;
  /** Alignment in bytes that every allocation honours; a power of two, at least 64 for host. */
  uint64_t alignment;
  /** Plugin data passed back to every slot. */
  void* space_data;

  /** Mandatory. Allocates `size` bytes (size 0 may return null). On failure returns an error
      with ::DX_OUT_OF_MEMORY and leaves `*out_ptr` unchanged. */
  dx_error_t* (*alloc)(void* space_data, uint64_t size, dx_stream_t stream, void** out_ptr);
  /** Mandatory. Frees memory from `alloc`; null `ptr` is a no-op. */
  dx_error_t* (*free)(void* space_data, void* ptr, dx_stream_t stream);
  /** Mandatory. Copies `size` contiguous bytes in the given ::dx_copy_direction_t. */
  dx_error_t* (*copy)(void* space_data, void* dst, const void* src, uint64_t size,
                      int32_t direction, dx_stream_t stream);
  /** Optional. Fills `size` bytes at `dst` by repeating `pattern` (`pattern_size` is 1, 2, 4
      or 8 and divides `size`). */
  dx_error_t* (*fill)(void* space_data, void* dst, uint64_t size, const void* pattern,
                      uint32_t pattern_size, dx_stream_t stream);
  /** Optional. Creates a stream; the host destroys it with `stream_destroy`. */
  dx_error_t* (*stream_create)(void* space_data, dx_stream_t* out_stream);
  /** Optional (mandatory with stream_create). Destroys a stream after its work completes. */
  dx_error_t* (*stream_destroy)(void* space_data, dx_stream_t stream);
  /** Optional (mandatory with stream_create). Blocks until all work on `stream` completes. */
  dx_error_t* (*stream_synchronize)(void* space_data, dx_stream_t stream);
  /** Optional. Creates an event; destroyed with `event_destroy`. */
  dx_error_t* (*event_create)(void* space_data, dx_event_t* out_event);
  /** Optional (mandatory with event_create). Destroys an event. */
  dx_error_t* (*event_destroy)(void* space_data, dx_event_t event);
  /** Optional (mandatory with event_create). Records `event` at the current end of `stream`. */
  dx_error_t* (*event_record)(void* space_data, dx_event_t event, dx_stream_t stream);
  /** Optional (mandatory with event_create). Makes future work on `stream` wait for `event`. */
  dx_error_t* (*stream_wait_event)(void* space_data, dx_stream_t stream, dx_event_t event);
  /** Optional (mandatory with event_create). Blocks the calling thread until `event` fires. */
  dx_error_t* (*event_synchronize)(void* space_data, dx_event_t event);
  /** Optional. Exports the allocation at `ptr` as an opaque handle another process on this
      machine can import. Writes at most `capacity` bytes to `out_handle` and the handle's size to
      `*out_size`; ::DX_OUT_OF_RANGE when `capacity` is too small. */
  dx_error_t* (*ipc_export)(void* space_data, void* ptr, uint64_t size, void* out_handle,
                            uint64_t capacity, uint64_t* out_size);
  /** Optional (mandatory with ipc_export). Maps a handle from another process; the mapping is
      released with `ipc_close`, never with `free`. */
  dx_error_t* (*ipc_import)(void* space_data, const void* handle, uint64_t handle_size,
                            void** out_ptr, uint64_t* out_size);
  /** Optional (mandatory with ipc_export). Unmaps memory from `ipc_import`. */
  dx_error_t* (*ipc_close)(void* space_data, void* ptr);
  /** Optional. Writes the space's allocation statistics to `*out_stats` (see
      ::dx_memory_stats_t for who sets what); called by dx_runtime_device_stats(). Must not
      block on outstanding work. Part of 1.0 like the other optional slots. */
  dx_error_t* (*stats)(void* space_data, dx_memory_stats_t* out_stats);
  /** Extensions of this space (see ::dx_extension_t), or null; borrowed for the call. */
  const dx_extension_t* next;
} dx_memory_space_desc_t;

/* ------------------------------------------------------------------------------------------ */
/* Network transports                                                                          */
/* ------------------------------------------------------------------------------------------ */

/** @brief Opaque listening endpoint of a transport; owned by the plugin.
    @since 1.0 */
typedef struct dx_listener* dx_listener_t;
/** @brief Opaque connection of a transport; owned by the plugin.
    @since 1.0 */
typedef struct dx_connection* dx_connection_t;
/** @brief Opaque pending send or receive; owned by the plugin, freed when `test` reports done.
    @since 1.0 */
typedef struct dx_request* dx_request_t;
/** @brief Opaque memory registration for zero-copy sends; owned by the plugin.
    @since 1.0 */
typedef struct dx_memory_region* dx_memory_region_t;

/**
 * @brief Describes a network transport (modelled on NCCL's net plugins: non-blocking calls,
 * request + test completion, memory registration).
 *
 * Copied by the host at registration except `transport_data`. Every slot is non-blocking: it
 * returns at once, with a null out-handle when nothing is ready yet.
 *
 * Completion and failure: a request completes only through `test`. A peer that dies, or a
 * connection that breaks, never leaves a request pending forever: every pending and later
 * request on that connection completes through `test` with an error of code ::DX_UNAVAILABLE
 * (the message says what the transport saw), and `send`/`recv` on it may refuse at once with
 * the same code. A message is delivered whole or not at all; `out_size` of a receive is the
 * size the sender sent (never more than the receive's `size`; a larger message is
 * ::DX_OUT_OF_RANGE on the receiver).
 *
 * Event loops: a transport that can offer a file descriptor fills `event_fd`, so that a host
 * running an event loop (libuv's `uv_poll_t`, epoll) sleeps until progress is possible and then
 * calls `test`, `accept` or `connect`, instead of spinning on them.
 *
 * Threading: slots may be called from any thread, but calls on one connection are serialised
 * by the caller.
 * @since 1.0
 */
typedef struct dx_transport_desc {
  /** ::DX_TRANSPORT_DESC_SIZE_1_0 for 1.0 (at least up to `test`); written by the plugin. */
  size_t struct_size;
  /** Unique name, NUL-terminated, e.g. "tcp". Borrowed for the call. */
  const char* name;
  /** Typical one-way latency in microseconds, for scheduling; 0 when unknown. */
  double latency_us;
  /** Typical bandwidth in GB/s; 0 when unknown. */
  double bandwidth_gbps;
  /** Bit (1 << ::dx_memory_kind_t) set for each memory kind it can send from and receive into. */
  uint64_t memory_kinds;
  /** Plugin data passed back to every slot. */
  void* transport_data;
  /** Starts listening on `address` (transport-specific, NUL-terminated, borrowed). */
  dx_error_t* (*listen)(void* transport_data, const char* address, dx_listener_t* out_listener);
  /** Accepts one pending connection, or sets `*out_connection` to null when none is pending. */
  dx_error_t* (*accept)(void* transport_data, dx_listener_t listener,
                        dx_connection_t* out_connection);
  /** Starts connecting to `address`; `*out_connection` is null until the connection is up
      (call again with the same address to poll). */
  dx_error_t* (*connect)(void* transport_data, const char* address,
                         dx_connection_t* out_connection);
  /** Closes a listener. */
  dx_error_t* (*close_listener)(void* transport_data, dx_listener_t listener);
  /** Closes a connection; pending requests on it complete with an error. */
  dx_error_t* (*close_connection)(void* transport_data, dx_connection_t connection);
  /** Optional. Registers memory of the given kind for zero-copy transfers. */
  dx_error_t* (*register_memory)(void* transport_data, void* ptr, uint64_t size, int32_t kind,
                                 dx_memory_region_t* out_region);
  /** Optional (mandatory with register_memory). Releases a registration. */
  dx_error_t* (*deregister_memory)(void* transport_data, dx_memory_region_t region);
  /** Starts sending `size` bytes; `data` stays borrowed until the request completes. `region`
      may be null. */
  dx_error_t* (*send)(void* transport_data, dx_connection_t connection, const void* data,
                      uint64_t size, dx_memory_region_t region, dx_request_t* out_request);
  /** Starts receiving up to `size` bytes into `data` (borrowed until completion). */
  dx_error_t* (*recv)(void* transport_data, dx_connection_t connection, void* data,
                      uint64_t size, dx_memory_region_t region, dx_request_t* out_request);
  /** Polls a request: sets `*out_done` to 1 and `*out_size` to the bytes moved when complete
      (the request is then freed), else 0. */
  dx_error_t* (*test)(void* transport_data, dx_request_t request, int32_t* out_done,
                      uint64_t* out_size);
  /** Optional. Writes to `*out_fd` a file descriptor that becomes readable whenever `test`,
      `accept` or a pending `connect` may make progress on this transport (level-triggered;
      readable does not promise completion). The descriptor stays owned by the plugin and open
      until shutdown; the host only polls it. Null slot: the host polls by calling `test`. */
  dx_error_t* (*event_fd)(void* transport_data, int32_t* out_fd);
  /** Extensions of this transport (see ::dx_extension_t), or null; borrowed for the call. */
  const dx_extension_t* next;
} dx_transport_desc_t;

/* ------------------------------------------------------------------------------------------ */
/* Host services                                                                               */
/* ------------------------------------------------------------------------------------------ */

/**
 * @brief The services the host offers a plugin. Owned by the host; valid from
 * dx_plugin_t::init until dx_plugin_t::shutdown returns. A plugin built against a newer minor
 * checks DX_STRUCT_HAS(dx_host_t, host->struct_size, slot) before using a slot newer than 1.0.
 * @since 1.0
 */
typedef struct dx_host {
  /** ::DX_HOST_SIZE_1_0 for 1.0; written by the host. */
  size_t struct_size;
  /** The host's packed ABI version (DX_MAKE_VERSION). */
  uint32_t abi_version;
  /** Reserved, zero. */
  uint32_t reserved;
  /** Creates an error; `message` (NUL-terminated, may be null) is copied. Never returns null:
      on allocation failure it returns a static out-of-memory error that is safe to destroy.
      Any thread. */
  dx_error_t* (*error_create)(dx_status_t code, const char* message);
  /** Frees an error the plugin created or received and does not pass on. Null is a no-op.
      Any thread. */
  void (*error_destroy)(dx_error_t* error);
  /** Code of an error (null gives ::DX_OK). Any thread. */
  dx_status_t (*error_code)(const dx_error_t* error);
  /** Message of an error, NUL-terminated, owned by the error. Any thread. */
  const char* (*error_message)(const dx_error_t* error);
  /** Logs a NUL-terminated message (copied) tagged with the plugin's name. Any thread. */
  void (*log)(dx_host_context_t* context, int32_t level, const char* message);
  /** Allocates host memory with the given power-of-two alignment (0 = default 64); null on
      failure. Freed with `host_free`. Any thread. */
  void* (*host_alloc)(uint64_t size, uint64_t alignment);
  /** Frees memory from `host_alloc`; null is a no-op. Any thread. */
  void (*host_free)(void* ptr);
  /** Registers a kernel. Only during dx_plugin_t::init, on its thread. Refuses with
      ::DX_ALREADY_EXISTS a second kernel with the same op, device type and dtypes, and with
      ::DX_INVALID_ARGUMENT a malformed descriptor; returns null on success. */
  dx_error_t* (*register_kernel)(dx_host_context_t* context, const dx_kernel_desc_t* desc);
  /** Registers a memory space. Only during dx_plugin_t::init, on its thread. Refuses a
      duplicate name with ::DX_ALREADY_EXISTS; several plugins may serve the same DLPack device
      under different names (kernels dispatch by device type, not by space). */
  dx_error_t* (*register_memory_space)(dx_host_context_t* context,
                                       const dx_memory_space_desc_t* desc);
  /** Registers a network transport. Only during dx_plugin_t::init, on its thread. Refuses a
      duplicate name with ::DX_ALREADY_EXISTS. */
  dx_error_t* (*register_transport)(dx_host_context_t* context, const dx_transport_desc_t* desc);
  /** Returns the host extension named `name` with a version of at least `min_version` (see
      ::dx_extension_t), or null when this host does not offer it. The struct is owned by the
      host and valid until shutdown returns. Any thread. */
  const dx_extension_t* (*get_extension)(dx_host_context_t* context, const char* name,
                                         uint32_t min_version);
} dx_host_t;

/* ------------------------------------------------------------------------------------------ */
/* The plugin itself                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* dx_plugin_caps_t and DX_PLUGIN_CAP_* live in deepx/types.h (clients read them too). */

/**
 * @brief The plugin's descriptor and lifecycle, returned by ::dx_plugin_entry. Static storage
 * in the plugin; the host reads it (min of its known size and `struct_size`) and copies the
 * strings.
 *
 * The first two fields (`struct_size`, `abi_version`) are frozen for every major version, so
 * any host can read them and refuse a plugin of another major before touching anything else.
 * @since 1.0
 */
typedef struct dx_plugin {
  /** ::DX_PLUGIN_SIZE_1_0 for 1.0 (at least up to `init`); written by the plugin. Frozen
      position. */
  size_t struct_size;
  /** DX_ABI_VERSION the plugin was built against. Frozen position. */
  uint32_t abi_version;
  /** Reserved, zero. */
  uint32_t reserved;
  /** Plugin name: 1 to 63 characters of [a-z0-9_.-], NUL-terminated. Unique per runtime. */
  const char* name;
  /** Vendor name, NUL-terminated, may be null. */
  const char* vendor;
  /** The plugin's own version, e.g. "1.4.2", NUL-terminated, may be null. */
  const char* version;
  /** Build identifier (commit hash, build date), NUL-terminated, may be null. */
  const char* build_id;
  /** DX_PLUGIN_CAP_* bits. */
  dx_plugin_caps_t capabilities;
  /**
   * Mandatory. Initialises the plugin and registers what it offers.
   * @param host services, borrowed until shutdown returns.
   * @param context names this plugin in registration calls; borrowed until shutdown returns.
   * @param out_state receives plugin state passed back to shutdown (may stay null).
   * @return null on success; on error the host calls nothing else, discards whatever was
   *         registered, and reports the error.
   * Threading: called once per runtime that loads the plugin, on the loading thread.
   */
  dx_error_t* (*init)(const dx_host_t* host, dx_host_context_t* context, void** out_state);
  /** Optional. Releases `state`; called when the runtime is destroyed, after all of the
      plugin's work has drained. The library itself stays mapped. */
  void (*shutdown)(void* state);
  /** Optional. Returns the plugin's extension named `name` with a version of at least
      `min_version` (see ::dx_extension_t), or null when it offers none. `state` is what init
      stored. The struct is owned by the plugin and valid until shutdown; clients reach it
      through dx_runtime_plugin_extension(). Any thread; must not block. */
  const dx_extension_t* (*get_extension)(void* state, const char* name, uint32_t min_version);
} dx_plugin_t;

/**
 * @brief Signature of the entry symbol ::DX_PLUGIN_ENTRY_SYMBOL.
 *
 * @param host_abi_min oldest packed ABI version the host speaks (DX_MAKE_VERSION).
 * @param host_abi_max newest packed ABI version the host speaks.
 * @return the plugin's static descriptor (never freed), or null when the plugin cannot serve
 *         any version in the range. A plugin that speaks several majors returns the descriptor
 *         of the newest major in the range.
 * Threading: may be called from any thread, several times; must not block or allocate.
 * @since 1.0
 */
typedef const dx_plugin_t* (*dx_plugin_entry_fn)(uint32_t host_abi_min, uint32_t host_abi_max);

/** @brief Declaration of the entry symbol a plugin defines (see ::dx_plugin_entry_fn).
    @since 1.0 */
DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max);

/* ------------------------------------------------------------------------------------------ */
/* Named 1.0 sizes                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* What a writer built against ABI 1.0 stores in `struct_size`: plain constants (LP64, the only
   data model deepx supports) that cgo and binding generators read as they are; each is pinned
   to DX_STRUCT_SIZE(type, last 1.0 field) by abi/tests/abi_layout_pins.h. A later minor adds
   `DX_<STRUCT>_SIZE_1_<minor>` beside them and never changes these. */

/** `struct_size` of a ::dx_kernel_call_t as ABI 1.0 defines it (up to `next`). @since 1.0 */
#define DX_KERNEL_CALL_SIZE_1_0 80
/** `struct_size` of a ::dx_kernel_cost_t as ABI 1.0 defines it (up to `workspace_bytes`).
    @since 1.0 */
#define DX_KERNEL_COST_SIZE_1_0 32
/** `struct_size` of a ::dx_kernel_desc_t as ABI 1.0 defines it (up to `next`). @since 1.0 */
#define DX_KERNEL_DESC_SIZE_1_0 96
/** `struct_size` of a ::dx_memory_space_desc_t as ABI 1.0 defines it (up to `next`).
    @since 1.0 */
#define DX_MEMORY_SPACE_DESC_SIZE_1_0 192
/** `struct_size` of a ::dx_transport_desc_t as ABI 1.0 defines it (up to `next`). @since 1.0 */
#define DX_TRANSPORT_DESC_SIZE_1_0 144
/** `struct_size` of a ::dx_host_t as ABI 1.0 defines it (up to `get_extension`). @since 1.0 */
#define DX_HOST_SIZE_1_0 104
/** `struct_size` of a ::dx_plugin_t as ABI 1.0 defines it (up to `get_extension`). @since 1.0 */
#define DX_PLUGIN_SIZE_1_0 80
/** The smallest `struct_size` of a ::dx_plugin_t any 1.x host accepts (up to `init`).
    @since 1.0 */
#define DX_PLUGIN_MIN_SIZE_1_0 64
/** The smallest `struct_size` of a ::dx_kernel_desc_t any 1.x host accepts (up to `forward`).
    @since 1.0 */
#define DX_KERNEL_DESC_MIN_SIZE_1_0 64
/** The smallest `struct_size` of a ::dx_memory_space_desc_t any 1.x host accepts (up to
    `copy`). @since 1.0 */
#define DX_MEMORY_SPACE_DESC_MIN_SIZE_1_0 80
/** The smallest `struct_size` of a ::dx_transport_desc_t any 1.x host accepts (up to `test`).
    @since 1.0 */
#define DX_TRANSPORT_DESC_MIN_SIZE_1_0 128

/* ------------------------------------------------------------------------------------------ */
/* Inline helpers (header-only, so plugins need nothing but these headers)                     */
/* ------------------------------------------------------------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define DX_PRINTF_LIKE_(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DX_PRINTF_LIKE_(fmt, args)
#endif

/**
 * @brief Creates an error with a printf-style message (truncated to 1023 bytes).
 * @return an error owned by the caller (return it to pass ownership on). Any thread.
 * @since 1.0
 */
static inline DX_PRINTF_LIKE_(3, 4) dx_error_t* dx_errorf(const dx_host_t* host,
                                                          dx_status_t code, const char* fmt,
                                                          ...) {
  char buffer[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return host->error_create(code, buffer);
}

/**
 * @brief Finds an attribute by name in a kernel call (a linear scan; standard ops should index
 * their schema slots instead). @return a borrowed pointer, or null when absent or unset.
 * Any thread.
 * @since 1.0
 */
static inline const dx_attr_t* dx_call_find_attr(const dx_kernel_call_t* call, const char* name) {
  int32_t i;
  for (i = 0; i < call->num_attrs; ++i) {
    const char* a = call->attrs[i].name;
    const char* b = name;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == *b) return call->attrs[i].type == DX_ATTR_NONE ? NULL : &call->attrs[i];
  }
  return NULL;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_PLUGIN_H_ */
