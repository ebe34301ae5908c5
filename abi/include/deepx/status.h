/**
 * @file deepx/status.h
 * @brief The one status-code enum shared by every deepx interface.
 *
 * Every fallible function of the client API returns a ::dx_status_t; every fallible plugin
 * function returns a ::dx_error_t pointer whose code is one of these values (see deepx/types.h).
 * ::DX_OK is 0; codes are stable and never reused. Codes, names and descriptions come from the
 * single table DX_STATUS_TABLE(), so that bindings and plugins can generate their own name tables
 * without linking the host.
 *
 * Threading: declarations only; the table is constant.
 */
#ifndef DEEPX_STATUS_H_
#define DEEPX_STATUS_H_

#include <stdint.h>

/**
 * @brief The status table: X(NAME, value, "description").
 *
 * Each description says when to use the code rather than its neighbour.
 */
#define DX_STATUS_TABLE(X)                                                                        \
  X(OK, 0, "success")                                                                            \
  X(INVALID_ARGUMENT, 1, "an argument is malformed: null pointer, bad struct_size, bad value")   \
  X(OUT_OF_RANGE, 2, "an index, axis or size lies outside the valid range")                      \
  X(NOT_FOUND, 3, "a named thing (plugin file, op, device, tensor) does not exist")              \
  X(ALREADY_EXISTS, 4, "a registration or name collides with an existing one")                   \
  X(UNSUPPORTED, 5, "valid request that this implementation does not support (null slot, dtype)")\
  X(OUT_OF_MEMORY, 6, "an allocation failed")                                                    \
  X(VERSION_MISMATCH, 7, "an ABI or format version cannot be used by this reader")               \
  X(FAILED_PRECONDITION, 8, "the object is in the wrong state for this call (e.g. destroyed)")   \
  X(SHAPE_MISMATCH, 9, "tensor shapes, ranks or dtypes do not fit the op")                       \
  X(DEVICE_ERROR, 10, "the device or its driver reported a failure")                             \
  X(IO_ERROR, 11, "reading or writing a file or socket failed")                                  \
  X(TIMEOUT, 12, "an operation did not complete within its deadline")                            \
  X(PLUGIN_ERROR, 13, "a plugin broke the ABI contract (bad descriptor, crash caught)")          \
  X(INTERNAL, 14, "a bug in deepx itself; please report it")                                     \
  X(ARITHMETIC_ERROR, 15, "an arithmetic fault in the data, e.g. integer division by zero")      \
  X(PERMISSION_DENIED, 16, "a policy refused the call, e.g. an uncertified kernel")              \
  X(UNKNOWN, 17, "an error whose code is not known to this reader")

/** @brief Status codes. ::DX_OK is 0; all other values are errors. Values are never reused. */
typedef enum dx_status_code {
#define DX_STATUS_ENUM_(name, value, desc) DX_##name = value,
  DX_STATUS_TABLE(DX_STATUS_ENUM_)
#undef DX_STATUS_ENUM_
  /** One past the largest code known to this header version. Readers map larger codes to
      ::DX_UNKNOWN. */
  DX_STATUS_COUNT_
} dx_status_code_t;

/* Per-code documentation for Doxygen (the enumerators come from the X-macro above). */
/** @var dx_status_code::DX_OK
    @brief Success. */
/** @var dx_status_code::DX_INVALID_ARGUMENT
    @brief An argument is malformed: null pointer, bad struct_size, bad value. */
/** @var dx_status_code::DX_OUT_OF_RANGE
    @brief An index, axis or size lies outside the valid range. */
/** @var dx_status_code::DX_NOT_FOUND
    @brief A named thing (plugin file, op, device, tensor) does not exist. */
/** @var dx_status_code::DX_ALREADY_EXISTS
    @brief A registration or name collides with an existing one. */
/** @var dx_status_code::DX_UNSUPPORTED
    @brief Valid request that this implementation does not support (null slot, dtype). */
/** @var dx_status_code::DX_OUT_OF_MEMORY
    @brief An allocation failed. */
/** @var dx_status_code::DX_VERSION_MISMATCH
    @brief An ABI or format version cannot be used by this reader. */
/** @var dx_status_code::DX_FAILED_PRECONDITION
    @brief The object is in the wrong state for this call (e.g. destroyed). */
/** @var dx_status_code::DX_SHAPE_MISMATCH
    @brief Tensor shapes, ranks or dtypes do not fit the op. */
/** @var dx_status_code::DX_DEVICE_ERROR
    @brief The device or its driver reported a failure. */
/** @var dx_status_code::DX_IO_ERROR
    @brief Reading or writing a file or socket failed. */
/** @var dx_status_code::DX_TIMEOUT
    @brief An operation did not complete within its deadline. */
/** @var dx_status_code::DX_PLUGIN_ERROR
    @brief A plugin broke the ABI contract (bad descriptor, crash caught). */
/** @var dx_status_code::DX_INTERNAL
    @brief A bug in deepx itself; please report it. */
/** @var dx_status_code::DX_ARITHMETIC_ERROR
    @brief An arithmetic fault in the data, e.g. integer division by zero. */
/** @var dx_status_code::DX_PERMISSION_DENIED
    @brief A policy refused the call, e.g. an uncertified kernel. */
/** @var dx_status_code::DX_UNKNOWN
    @brief An error whose code is not known to this reader. */

/** @brief A status code as it crosses the ABI: always a fixed-width integer, never an enum. */
typedef int32_t dx_status_t;

#endif /* DEEPX_STATUS_H_ */
