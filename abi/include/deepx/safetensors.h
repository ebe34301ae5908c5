/**
 * @file deepx/safetensors.h
 * @brief Tensors on disk: reading and writing safetensors files through a deepx runtime.
 *
 * A safetensors file holds an 8-byte little-endian header length, a JSON header naming each
 * tensor's dtype, shape and byte range, then the tensors' bytes. deepx writes such files
 * atomically and reads them only after checking every byte of the header against the file.
 * The conventions of deepx/host.h (errors as objects, handles, lifetimes, threading) apply.
 *
 * @since 1.0
 */
#ifndef DEEPX_SAFETENSORS_H_
#define DEEPX_SAFETENSORS_H_

#include "deepx/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Options of dx_safetensors_save(). Zero-initialise, then set `struct_size`; a zeroed
 * field means the default. Borrowed for the call.
 * @since 1.0
 */
typedef struct dx_safetensors_save_options {
  /** ::DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0; written by the caller. */
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
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_save(dx_runtime_t* runtime, const char* path,
                                          const char* const* names,
                                          const dx_tensor_t* const* tensors, int64_t count,
                                          const dx_safetensors_save_options_t* options);

/** @brief The tensors and metadata read from one safetensors file, by dx_safetensors_load(). @since 1.0 */
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
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_load(dx_runtime_t* runtime, const char* path,
                                          int32_t device_index, dx_safetensors_t** out_file);

/**
 * @brief Destroys a loaded file and the tensor handles it holds. Tensors obtained with
 * dx_safetensors_get_tensor() stay valid (they are handles of their own). Null is a no-op.
 * Not concurrently with other uses of the same `file`.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_destroy(dx_safetensors_t* file);

/** @brief Number of tensors in a loaded file. Any thread. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_tensor_count(const dx_safetensors_t* file,
                                                  int64_t* out_count);

/** @brief What a loaded file says of one tensor. Pointers are borrowed for the lifetime of the
    ::dx_safetensors_t. @since 1.0 */
typedef struct dx_safetensors_tensor_info {
  /** ::DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0; written by the caller. */
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
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_tensor_info(const dx_safetensors_t* file, int64_t index,
                                                 dx_safetensors_tensor_info_t* out_info);

/**
 * @brief Finds a tensor of a loaded file by name.
 * @param file the loaded file.
 * @param name NUL-terminated; borrowed for the call.
 * @param out_index receives its index.
 * @return ::DX_NOT_FOUND when the file has no tensor of that name. Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_find(const dx_safetensors_t* file, const char* name,
                                          int64_t* out_index);

/**
 * @brief Gives the caller a tensor of a loaded file as a new handle of its own: it views the
 * same storage (no copy), outlives `file`, and is destroyed with dx_tensor_destroy(). Calling
 * it twice for one index gives two handles of the same storage.
 * @param file the loaded file.
 * @param index 0 .. dx_safetensors_tensor_count() - 1.
 * @param out_tensor receives the new handle.
 * Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_get_tensor(const dx_safetensors_t* file, int64_t index,
                                                dx_tensor_t** out_tensor);

/** @brief Number of `__metadata__` entries in a loaded file (0 when it has none). Any thread. @since 1.0 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_metadata_count(const dx_safetensors_t* file,
                                                    int64_t* out_count);

/**
 * @brief Metadata entry `index` of a loaded file, in file order.
 * @param file the loaded file.
 * @param index 0 .. dx_safetensors_metadata_count() - 1.
 * @param out_key receives the key, borrowed for the lifetime of `file`; may be null.
 * @param out_value receives the value, borrowed for the lifetime of `file`; may be null.
 * Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_metadata(const dx_safetensors_t* file, int64_t index,
                                              const char** out_key, const char** out_value);

/**
 * @brief The metadata value stored under `key`.
 * @param file the loaded file.
 * @param key NUL-terminated; borrowed for the call.
 * @param out_value receives the value, borrowed for the lifetime of `file`.
 * @return ::DX_NOT_FOUND when the file has no such key. Any thread.
 * @since 1.0
 */
DX_MUST_USE DX_EXPORT dx_error_t* dx_safetensors_metadata_find(const dx_safetensors_t* file,
                                                   const char* key, const char** out_value);

/** `struct_size` of a ::dx_safetensors_save_options_t in ABI 1.0 (up to `metadata_values`).
    @since 1.0 */
#define DX_SAFETENSORS_SAVE_OPTIONS_SIZE_1_0 32
/** `struct_size` of a ::dx_safetensors_tensor_info_t in ABI 1.0 (up to `byte_size`).
    @since 1.0 */
#define DX_SAFETENSORS_TENSOR_INFO_SIZE_1_0 48

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_SAFETENSORS_H_ */
