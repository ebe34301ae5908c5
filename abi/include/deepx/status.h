/**
 * @file deepx/status.h
 * @brief The one status-code enum shared by every deepx interface.
 *
 * Every fallible function of the ABI, client and plugin side alike, returns a ::dx_error_t
 * pointer (see deepx/types.h) whose code is one of these values; the code alone crosses as a
 * ::dx_status_t.
 * ::DX_OK is 0; codes are stable and never reused. Codes, names and descriptions come from the
 * single table DX_STATUS_TABLE(), so that bindings and plugins can generate their own name tables
 * without linking the host.
 *
 * Threading: declarations only; the table is constant.
 * @since 1.0
 */
#ifndef DEEPX_STATUS_H_
#define DEEPX_STATUS_H_

#include <stdint.h>

/**
 * @brief The status table: X(NAME, value, "description").
 *
 * Each description says where the code ends and its neighbours begin, so that two
 * implementations pick the same code for the same failure.
 * @since 1.0
 */
#define DX_STATUS_TABLE(X) \
  X(OK, 0, "success") \
  X(INVALID_ARGUMENT, 1, "an argument is malformed in itself, whatever the state: a null pointer, a bad struct_size, an unknown flag, a malformed name, an attribute of the wrong type, a read-only tensor where the call writes. A well-formed index or size outside its range is OUT_OF_RANGE; well-formed tensors that do not fit the op are SHAPE_MISMATCH") \
  X(OUT_OF_RANGE, 2, "a well-formed index, axis, offset or size lies outside the valid range: a device index past the count, a view reaching outside its storage, an extent whose arithmetic overflows, a buffer too small") \
  X(NOT_FOUND, 3, "a named thing does not exist: a plugin file, an op, a device name, a tensor name, a file. A handle that no longer exists is FAILED_PRECONDITION") \
  X(ALREADY_EXISTS, 4, "a registration or a name collides with an existing one (a second plugin of the same name, a duplicate kernel, space or transport, a repeated key). A name that is malformed is INVALID_ARGUMENT") \
  X(UNSUPPORTED, 5, "a valid request this implementation does not serve: no kernel for the dtypes or device, a null optional slot, a rank or size beyond a plugin's limit. A request no implementation could serve is INVALID_ARGUMENT or SHAPE_MISMATCH") \
  X(OUT_OF_MEMORY, 6, "an allocation failed. A configured quota that refuses an allocation is RESOURCE_EXHAUSTED") \
  X(VERSION_MISMATCH, 7, "an ABI, protocol or file-format version cannot be used by this reader (another major, a DLPack major other than 1). A struct_size below a struct's minimum is INVALID_ARGUMENT or PLUGIN_ERROR") \
  X(FAILED_PRECONDITION, 8, "the call is valid but an object is in the wrong state for it: a destroyed, stale or foreign handle, a plugin registration outside init. A null handle is INVALID_ARGUMENT") \
  X(SHAPE_MISMATCH, 9, "tensor shapes, ranks or dtypes do not fit the op (the tensors are well-formed; the combination is not)") \
  X(DEVICE_ERROR, 10, "the device or its driver reported a failure; retrying may work. Data that is gone for good because of it is DATA_LOSS") \
  X(IO_ERROR, 11, "reading or writing a file or socket failed, or a plugin library cannot be loaded as a file (not a regular file, truncated, not ELF for this machine). A data file that reads fine but is malformed (safetensors, certificate) is INVALID_ARGUMENT; a peer that is gone is UNAVAILABLE") \
  X(TIMEOUT, 12, "an operation did not complete within its deadline (the caller's or a configured one). A cancellation by the caller is CANCELLED") \
  X(PLUGIN_ERROR, 13, "a plugin broke the ABI contract: a bad descriptor, a bad return value, a crash caught. A bug on deepx's side of the boundary is INTERNAL") \
  X(INTERNAL, 14, "a bug in deepx itself; please report it. A plugin at fault is PLUGIN_ERROR") \
  X(ARITHMETIC_ERROR, 15, "an arithmetic fault in the data, e.g. integer division by zero. An index in the data outside its range is OUT_OF_RANGE") \
  X(PERMISSION_DENIED, 16, "a policy refused the call: an uncertified kernel under trust-gated dispatch, a peer not allowed") \
  X(UNKNOWN, 17, "an error whose code is not known to this reader") \
  X(CANCELLED, 18, "the caller cancelled the operation before it completed. A deadline that passed is TIMEOUT") \
  X(UNAVAILABLE, 19, "a peer (daemon, worker, connection) is gone or not reachable now; the same call may succeed later. A deadline that passed while waiting for it is TIMEOUT") \
  X(RESOURCE_EXHAUSTED, 20, "a quota or limit was reached (tensors, bytes, in-flight tasks); freeing something makes room") \
  X(DATA_LOSS, 21, "data the call needed is lost for good, e.g. device memory that died with its worker; retrying cannot bring it back (unlike DEVICE_ERROR or UNAVAILABLE)")

/** @brief Status codes. ::DX_OK is 0; all other values are errors. Values are never reused.
    @since 1.0 */
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
    @brief An argument is malformed in itself, whatever the state: a null pointer, a bad struct_size, an unknown flag, a malformed name, an attribute of the wrong type, a read-only tensor where the call writes. A well-formed index or size outside its range is OUT_OF_RANGE; well-formed tensors that do not fit the op are SHAPE_MISMATCH. */
/** @var dx_status_code::DX_OUT_OF_RANGE
    @brief A well-formed index, axis, offset or size lies outside the valid range: a device index past the count, a view reaching outside its storage, an extent whose arithmetic overflows, a buffer too small. */
/** @var dx_status_code::DX_NOT_FOUND
    @brief A named thing does not exist: a plugin file, an op, a device name, a tensor name, a file. A handle that no longer exists is FAILED_PRECONDITION. */
/** @var dx_status_code::DX_ALREADY_EXISTS
    @brief A registration or a name collides with an existing one (a second plugin of the same name, a duplicate kernel, space or transport, a repeated key). A name that is malformed is INVALID_ARGUMENT. */
/** @var dx_status_code::DX_UNSUPPORTED
    @brief A valid request this implementation does not serve: no kernel for the dtypes or device, a null optional slot, a rank or size beyond a plugin's limit. A request no implementation could serve is INVALID_ARGUMENT or SHAPE_MISMATCH. */
/** @var dx_status_code::DX_OUT_OF_MEMORY
    @brief An allocation failed. A configured quota that refuses an allocation is RESOURCE_EXHAUSTED. */
/** @var dx_status_code::DX_VERSION_MISMATCH
    @brief An ABI, protocol or file-format version cannot be used by this reader (another major, a DLPack major other than 1). A struct_size below a struct's minimum is INVALID_ARGUMENT or PLUGIN_ERROR. */
/** @var dx_status_code::DX_FAILED_PRECONDITION
    @brief The call is valid but an object is in the wrong state for it: a destroyed, stale or foreign handle, a plugin registration outside init. A null handle is INVALID_ARGUMENT. */
/** @var dx_status_code::DX_SHAPE_MISMATCH
    @brief Tensor shapes, ranks or dtypes do not fit the op (the tensors are well-formed; the combination is not). */
/** @var dx_status_code::DX_DEVICE_ERROR
    @brief The device or its driver reported a failure; retrying may work. Data that is gone for good because of it is DATA_LOSS. */
/** @var dx_status_code::DX_IO_ERROR
    @brief Reading or writing a file or socket failed, or a plugin library cannot be loaded as a file (not a regular file, truncated, not ELF for this machine). A data file that reads fine but is malformed (safetensors, certificate) is INVALID_ARGUMENT; a peer that is gone is UNAVAILABLE. */
/** @var dx_status_code::DX_TIMEOUT
    @brief An operation did not complete within its deadline (the caller's or a configured one). A cancellation by the caller is CANCELLED. */
/** @var dx_status_code::DX_PLUGIN_ERROR
    @brief A plugin broke the ABI contract: a bad descriptor, a bad return value, a crash caught. A bug on deepx's side of the boundary is INTERNAL. */
/** @var dx_status_code::DX_INTERNAL
    @brief A bug in deepx itself; please report it. A plugin at fault is PLUGIN_ERROR. */
/** @var dx_status_code::DX_ARITHMETIC_ERROR
    @brief An arithmetic fault in the data, e.g. integer division by zero. An index in the data outside its range is OUT_OF_RANGE. */
/** @var dx_status_code::DX_PERMISSION_DENIED
    @brief A policy refused the call: an uncertified kernel under trust-gated dispatch, a peer not allowed. */
/** @var dx_status_code::DX_UNKNOWN
    @brief An error whose code is not known to this reader. */
/** @var dx_status_code::DX_CANCELLED
    @brief The caller cancelled the operation before it completed. A deadline that passed is TIMEOUT. */
/** @var dx_status_code::DX_UNAVAILABLE
    @brief A peer (daemon, worker, connection) is gone or not reachable now; the same call may succeed later. A deadline that passed while waiting for it is TIMEOUT. */
/** @var dx_status_code::DX_RESOURCE_EXHAUSTED
    @brief A quota or limit was reached (tensors, bytes, in-flight tasks); freeing something makes room. */
/** @var dx_status_code::DX_DATA_LOSS
    @brief Data the call needed is lost for good, e.g. device memory that died with its worker; retrying cannot bring it back (unlike DEVICE_ERROR or UNAVAILABLE). */

/** @brief A status code as it crosses the ABI: always a fixed-width integer, never an enum.
    @since 1.0 */
typedef int32_t dx_status_t;

#endif /* DEEPX_STATUS_H_ */
