/**
 * @file deepx/types.h
 * @brief Types shared by the client API (deepx/host.h) and the plugin API (deepx/plugin.h).
 *
 * Conventions (ownership, errors, strings, threading, versioning) are written once in
 * abi/README.md; every declaration here states the parts that apply to it.
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

/** @brief Marks a symbol exported from a shared library (the host, or a plugin's entry). */
#if defined(_WIN32)
#define DX_EXPORT __declspec(dllexport)
#else
#define DX_EXPORT __attribute__((visibility("default")))
#endif

/**
 * @brief The value to store in a struct's `struct_size` field: the size up to and including
 * `last_field`, the last field this header version knows. Using the offset rather than sizeof()
 * keeps trailing padding out of the contract.
 */
#define DX_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/**
 * @brief True when a struct of declared size `size` contains `field` of `type`.
 * Readers use it before touching any field appended after 1.0.
 */
#define DX_STRUCT_HAS(type, size, field) \
  ((size_t)(size) >= offsetof(type, field) + sizeof(((type*)0)->field))

/**
 * @brief DLPack type code for bool (one byte, 0 or 1), as DLPack >= 0.8 spells `kDLBool`.
 * Debian 12 ships DLPack 0.6, which predates the enumerator; the value is DLPack's own.
 */
#define DX_DLPACK_CODE_BOOL 6

/**
 * @brief An error: a ::dx_status_t code plus a message, created and owned by the host.
 *
 * Plugins create errors with dx_host_t::error_create and return them; returning transfers
 * ownership to the caller, which frees the error with dx_host_t::error_destroy. A null
 * `dx_error_t*` means success. The layout is private to the host.
 */
typedef struct dx_error dx_error_t;

/** @brief An opaque stream of a memory space, created and owned by the plugin that serves it. */
typedef struct dx_stream* dx_stream_t;

/** @brief An opaque event of a memory space, created and owned by the plugin that serves it. */
typedef struct dx_event* dx_event_t;

/** @brief Severity of a log message passed to dx_host_t::log. */
typedef enum dx_log_level {
  DX_LOG_DEBUG = 0, /**< Detail useful only when debugging deepx or a plugin. */
  DX_LOG_INFO = 1,  /**< Normal but noteworthy events (a plugin loaded). */
  DX_LOG_WARN = 2,  /**< Something unexpected that deepx worked around. */
  DX_LOG_ERROR = 3  /**< A failure; also reported through a status. */
} dx_log_level_t;

/** @brief Type tag of a ::dx_attr_t. Values are stable and never reused. */
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

/** @brief Flags of a ::dx_dlpack_versioned_t (the values of DLPack >= 1.0). */
typedef uint64_t dx_dlpack_flags_t;
/** The consumer must not write through the tensor. */
#define DX_DLPACK_FLAG_READ_ONLY ((dx_dlpack_flags_t)1u << 0)
/** The producer copied the data to make this tensor (it does not alias the producer's). */
#define DX_DLPACK_FLAG_IS_COPIED ((dx_dlpack_flags_t)1u << 1)

/**
 * @brief Layout-identical mirror of DLPack 1.0's `DLManagedTensorVersioned`.
 *
 * Debian 12 ships DLPack 0.6, which lacks the versioned form; this struct has exactly its
 * layout so deepx speaks DLPack >= 1.0 producers and consumers (PyTorch, NumPy, CuPy) with
 * either header. Ownership: whoever holds the pointer owns it until it calls `deleter` once.
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

/* Flags that plugins declare and clients read back (dx_kernel_info_t, dx_plugin_info_t). */

/**
 * @brief Allocation statistics of a memory space, as its `stats` slot
 * (deepx/plugin.h) reports them and dx_runtime_device_stats() (deepx/host.h) returns them.
 *
 * The host zero-fills the struct and sets `struct_size` before calling the slot; the plugin
 * writes the fields it knows that lie within `struct_size`. A field a space cannot measure stays
 * 0. Byte counts are what the space's allocator accounts (a pool counts whole blocks; the CPU
 * plugin counts the allocator's usable sizes), so they may exceed the sum of requested sizes.
 */
typedef struct dx_memory_stats {
  /** DX_STRUCT_SIZE(dx_memory_stats_t, live_allocations) for 1.0; written by the caller. */
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

/** @brief Bit set of DX_KERNEL_FLAG_* values. */
typedef uint64_t dx_kernel_flags_t;
/** Same inputs give bit-identical outputs on every run. */
#define DX_KERNEL_FLAG_DETERMINISTIC ((dx_kernel_flags_t)1u << 0)
/** An output may alias an input exactly (same data, shape and strides). */
#define DX_KERNEL_FLAG_INPLACE ((dx_kernel_flags_t)1u << 1)
/** Variadic inputs: `dtypes` holds one input dtype (shared by any number of inputs) then the
    outputs' dtypes; `num_inputs` is the minimum number of inputs. */
#define DX_KERNEL_FLAG_VARIADIC ((dx_kernel_flags_t)1u << 2)

/** @brief Bit set of DX_PLUGIN_CAP_* values. */
typedef uint64_t dx_plugin_caps_t;
/** The plugin registers kernels. */
#define DX_PLUGIN_CAP_KERNELS ((dx_plugin_caps_t)1u << 0)
/** The plugin registers memory spaces. */
#define DX_PLUGIN_CAP_MEMORY ((dx_plugin_caps_t)1u << 1)
/** The plugin registers network transports. */
#define DX_PLUGIN_CAP_TRANSPORTS ((dx_plugin_caps_t)1u << 2)
/** Its kernels may run concurrently from several host threads (else the host serialises). */
#define DX_PLUGIN_CAP_CONCURRENT_KERNELS ((dx_plugin_caps_t)1u << 3)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_TYPES_H_ */
