/**
 * @file deepx/types.h
 * @brief Types shared by the client API (deepx/host.h) and the plugin API (deepx/plugin.h).
 *
 * Conventions (ownership, errors, strings, threading, versioning) are written once in
 * docs/abi-conventions.md; every declaration here states the parts that apply to it. Every
 * declaration carries the ABI version it appeared in (`@since`); struct members without a tag
 * date from their struct's version.
 *
 * @since 1.0
 */
#ifndef DEEPX_TYPES_H_
#define DEEPX_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "deepx/status.h"
#include "deepx/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Marks a symbol exported from a shared library (the host, or a plugin's entry).
    @since 1.0 */
#if defined(_WIN32)
#define DX_EXPORT __declspec(dllexport)
#else
#define DX_EXPORT __attribute__((visibility("default")))
#endif

/**
 * @brief Marks a function whose result must not be ignored: every fallible function, since its
 * result is an error object the caller owns (ignoring it leaks it). In C++17 and later this is
 * `[[nodiscard]]` (a `(void)` cast silences it); in C with GCC or Clang it is
 * `warn_unused_result`, which GCC does not let a cast silence: pass the result to
 * dx_error_destroy() instead, which is also what frees it.
 * @since 1.0
 */
#if defined(__cplusplus) && __cplusplus >= 201703L
#define DX_MUST_USE [[nodiscard]]
#elif defined(__GNUC__) || defined(__clang__)
#define DX_MUST_USE __attribute__((warn_unused_result))
#else
#define DX_MUST_USE
#endif

/**
 * @brief The size of a struct up to and including `last_field`: what a writer that knows the
 * struct only up to that field stores in `struct_size`. Using the offset rather than sizeof()
 * keeps trailing padding out of the contract. Writers normally store the named size of the
 * version they were built for (`DX_<STRUCT>_SIZE_1_0`, below), which cannot name the wrong
 * field; this macro is for readers and for tests of older writers.
 * @since 1.0
 */
#define DX_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/**
 * @brief True when a struct of declared size `size` contains `field` of `type`.
 * Readers use it before touching any field appended after 1.0.
 * @since 1.0
 */
#define DX_STRUCT_HAS(type, size, field) \
  ((size_t)(size) >= offsetof(type, field) + sizeof(((type*)0)->field))

/**
 * @brief DLPack type code for bool (one byte, 0 or 1), as DLPack >= 0.8 spells `kDLBool`.
 * Debian 12 ships DLPack 0.6, which predates the enumerator; the value is DLPack's own.
 * @since 1.0
 */
#define DX_DLPACK_CODE_BOOL 6

/**
 * @brief An error: a ::dx_status_t code plus a message, created by the host and owned by
 * whoever holds the pointer.
 *
 * Every fallible function of both sides of the ABI returns one: null means success, anything
 * else is an error the caller now owns and frees exactly once. Client programs read it with
 * dx_error_code() and dx_error_message() and free it with dx_error_destroy() (deepx/host.h);
 * plugins create errors with dx_host_t::error_create, read them with dx_host_t::error_code and
 * dx_host_t::error_message, and free the ones they do not pass on with dx_host_t::error_destroy.
 * An error is not tied to a thread: it may be read and freed on any thread (so a goroutine that
 * moves between OS threads still reads its own call's error). The layout is private to the host.
 * See docs/error-model.md.
 * @since 1.0
 */
typedef struct dx_error dx_error_t;

/** @brief An opaque stream of a memory space, created and owned by the plugin that serves it.
    @since 1.0 */
typedef struct dx_stream* dx_stream_t;

/** @brief An opaque event of a memory space, created and owned by the plugin that serves it.
    @since 1.0 */
typedef struct dx_event* dx_event_t;

/** @brief Severity of a log message passed to dx_host_t::log. @since 1.0 */
typedef enum dx_log_level {
  DX_LOG_DEBUG = 0, /**< Detail useful only when debugging deepx or a plugin. */
  DX_LOG_INFO = 1,  /**< Normal but noteworthy events (a plugin loaded). */
  DX_LOG_WARN = 2,  /**< Something unexpected that deepx worked around. */
  DX_LOG_ERROR = 3  /**< A failure; also reported through a status. */
} dx_log_level_t;

/** @brief Type tag of a ::dx_attr_t. Values are stable and never reused. @since 1.0 */
typedef enum dx_attr_type {
  DX_ATTR_NONE = 0,      /**< Absent: a slot of a standard op's schema that the caller left unset. */
  DX_ATTR_I64 = 1,       /**< One int64_t in `value.i64`. */
  DX_ATTR_F64 = 2,       /**< One double in `value.f64`. */
  DX_ATTR_BOOL = 3,      /**< One bool in `value.i64` (0 or 1). */
  DX_ATTR_STRING = 4,    /**< `count` bytes at `value.str` (UTF-8, also NUL-terminated). */
  DX_ATTR_I64_ARRAY = 5, /**< `count` int64_t at `value.i64s`. */
  DX_ATTR_F64_ARRAY = 6  /**< `count` doubles at `value.f64s`. */
} dx_attr_type_t;

/**
 * @brief One typed attribute of an op call.
 *
 * Attributes passed to a kernel are borrowed for the duration of the call: the kernel must copy
 * what it wants to keep. Fixed layout (not growable): 32 bytes on LP64.
 * @since 1.0
 */
typedef struct dx_attr {
  /** Attribute name, NUL-terminated, e.g. "axes". Never null. */
  const char* name;
  /** A ::dx_attr_type_t value. */
  int32_t type;
  /** Reserved, zero. */
  int32_t reserved;
  /** Element count for arrays, byte length for strings, 1 for scalars, 0 when absent. */
  int64_t count;
  /** The value; the member used is given by `type`. */
  union {
    int64_t i64;          /**< ::DX_ATTR_I64 and ::DX_ATTR_BOOL. */
    double f64;           /**< ::DX_ATTR_F64. */
    const char* str;      /**< ::DX_ATTR_STRING. */
    const int64_t* i64s;  /**< ::DX_ATTR_I64_ARRAY. */
    const double* f64s;   /**< ::DX_ATTR_F64_ARRAY. */
  } value;
} dx_attr_t;

/** @brief Flags of a ::dx_dlpack_versioned_t (the values of DLPack >= 1.0). @since 1.0 */
typedef uint64_t dx_dlpack_flags_t;
/** The consumer must not write through the tensor. @since 1.0 */
#define DX_DLPACK_FLAG_READ_ONLY ((dx_dlpack_flags_t)1u << 0)
/** The producer copied the data to make this tensor (it does not alias the producer's). @since 1.0 */
#define DX_DLPACK_FLAG_IS_COPIED ((dx_dlpack_flags_t)1u << 1)

/**
 * @brief Layout-identical mirror of DLPack 1.0's `DLManagedTensorVersioned`.
 *
 * Debian 12 ships DLPack 0.6, which lacks the versioned form; this struct has exactly its
 * layout so deepx speaks DLPack >= 1.0 producers and consumers (PyTorch, NumPy, CuPy) with
 * either header. Ownership: whoever holds the pointer owns it until it calls `deleter` once.
 * @since 1.0
 */
typedef struct dx_dlpack_versioned {
  /** DLPack version of this tensor: major then minor (1, 0 or later). */
  struct {
    uint32_t major; /**< DLPack major; a consumer seeing an unknown major calls deleter and refuses. */
    uint32_t minor; /**< DLPack minor. */
  } version;
  /** Producer's context for `deleter`. */
  void* manager_ctx;
  /** Frees the tensor and its data reference; may be null when there is nothing to free. */
  void (*deleter)(struct dx_dlpack_versioned* self);
  /** DX_DLPACK_FLAG_* bits. */
  dx_dlpack_flags_t flags;
  /** The tensor itself. */
  DLTensor dl_tensor;
} dx_dlpack_versioned_t;


/**
 * @brief The header every extension struct starts with: a named, versioned, optional addition
 * to the ABI that one side offers and the other may ask for.
 *
 * Extensions reach the other side in two ways:
 * - **chains**: the growable structs that take optional inputs (::dx_kernel_desc_t,
 *   ::dx_memory_space_desc_t, ::dx_transport_desc_t, ::dx_kernel_call_t and the client's
 *   option structs) end with a `next` pointer to a chain of extension structs; a reader walks
 *   the chain with dx_extension_find() and skips every entry it does not know;
 * - **queries**: dx_plugin_t::get_extension, dx_host_t::get_extension and
 *   dx_runtime_plugin_extension() (deepx/host.h) return the extension of a given name, or null
 *   when it is not offered.
 *
 * An extension struct is `dx_extension_t` followed by the extension's own fields (data and
 * function pointers); its `struct_size` covers the whole struct, so an extension grows by
 * appending like any other struct. Names are namespaced like ops: `dx.*` for extensions deepx
 * defines, `vendor.*` for a vendor's own. The provider owns the struct (usually static
 * storage); the reader borrows it for as long as the provider lives (a plugin's until its
 * shutdown, a chain's for the call that passes it). docs/versioning.md says how extensions
 * relate to minor versions.
 * @since 1.0
 */
typedef struct dx_extension {
  /** Size of the whole extension struct, header included; written by the provider. */
  size_t struct_size;
  /** Namespaced name, NUL-terminated, e.g. "acme.tuning". */
  const char* name;
  /** The extension's own version (1 for its first); readers ask for a minimum. */
  uint32_t version;
  /** Reserved, zero. */
  uint32_t reserved;
  /** The next entry of a chain, or null. Ignored in a struct returned by a query. */
  const struct dx_extension* next;
} dx_extension_t;

/**
 * @brief Finds the first entry named `name` with a version of at least `min_version` in the
 * chain starting at `chain`. @return a borrowed pointer, or null when the chain has none.
 * Any thread.
 * @since 1.0
 */
static inline const dx_extension_t* dx_extension_find(const dx_extension_t* chain,
                                                      const char* name, uint32_t min_version) {
  for (; chain != NULL; chain = chain->next) {
    const char* a = chain->name;
    const char* b = name;
    if (a == NULL || b == NULL) continue;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == *b && chain->version >= min_version) return chain;
  }
  return NULL;
}

/* Named 1.0 sizes of the structs of this header (plain constants, LP64; pinned against
   DX_STRUCT_SIZE() by abi/tests/abi_layout_pins.h). */
/** `struct_size` of a ::dx_memory_stats_t as ABI 1.0 defines it. @since 1.0 */
#define DX_MEMORY_STATS_SIZE_1_0 48
/** `struct_size` of a ::dx_extension_t header alone, as ABI 1.0 defines it. @since 1.0 */
#define DX_EXTENSION_SIZE_1_0 32

/* Flags that plugins declare and clients read back (dx_kernel_info_t, dx_plugin_info_t). */

/**
 * @brief Allocation statistics of a memory space, as its `stats` slot
 * (deepx/plugin.h) reports them and dx_runtime_device_stats() (deepx/host.h) returns them.
 *
 * The host zero-fills the struct and sets `struct_size` before calling the slot; the plugin
 * writes the fields it knows that lie within `struct_size`. A field a space cannot measure stays
 * 0. Byte counts are what the space's allocator accounts (a pool counts whole blocks; the CPU
 * plugin counts the allocator's usable sizes), so they may exceed the sum of requested sizes.
 * @since 1.0
 */
typedef struct dx_memory_stats {
  /** ::DX_MEMORY_STATS_SIZE_1_0 for 1.0; written by the caller. */
  size_t struct_size;
  /** Bytes in allocations not yet freed. */
  uint64_t in_use_bytes;
  /** High-water mark of `in_use_bytes` since the space was registered. */
  uint64_t peak_in_use_bytes;
  /** Bytes the space holds from the driver or the system, in use or cached for reuse (a memory
      pool's size); 0 when the space caches nothing beyond what is in use. */
  uint64_t reserved_bytes;
  /** High-water mark of `reserved_bytes`. */
  uint64_t peak_reserved_bytes;
  /** Number of allocations not yet freed. */
  uint64_t live_allocations;
} dx_memory_stats_t;

/** @brief Bit set of DX_KERNEL_FLAG_* values. @since 1.0 */
typedef uint64_t dx_kernel_flags_t;
/** Same inputs give bit-identical outputs on every run. @since 1.0 */
#define DX_KERNEL_FLAG_DETERMINISTIC ((dx_kernel_flags_t)1u << 0)
/** An output may alias an input exactly (same data, shape and strides). @since 1.0 */
#define DX_KERNEL_FLAG_INPLACE ((dx_kernel_flags_t)1u << 1)
/** Variadic inputs: `dtypes` holds one input dtype (shared by any number of inputs) then the
    outputs' dtypes; `num_inputs` is the minimum number of inputs. @since 1.0 */
#define DX_KERNEL_FLAG_VARIADIC ((dx_kernel_flags_t)1u << 2)

/** @brief Bit set of DX_PLUGIN_CAP_* values. @since 1.0 */
typedef uint64_t dx_plugin_caps_t;
/** The plugin registers kernels. @since 1.0 */
#define DX_PLUGIN_CAP_KERNELS ((dx_plugin_caps_t)1u << 0)
/** The plugin registers memory spaces. @since 1.0 */
#define DX_PLUGIN_CAP_MEMORY ((dx_plugin_caps_t)1u << 1)
/** The plugin registers network transports. @since 1.0 */
#define DX_PLUGIN_CAP_TRANSPORTS ((dx_plugin_caps_t)1u << 2)
/** Its kernels may run concurrently from several host threads (else the host serialises). @since 1.0 */
#define DX_PLUGIN_CAP_CONCURRENT_KERNELS ((dx_plugin_caps_t)1u << 3)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_TYPES_H_ */
