/**
 * @file deepx/reference/register.h
 * @brief C entry point of the reference kernels: registers every reference kernel with a host.
 *
 * The reference plugin (libdeepx-plugin-reference.so) calls this from its init; tests and tools
 * that link the static library `deepx::reference` call it with their own ::dx_host_t to run the
 * reference kernels through the real plugin ABI (descriptors, dx_kernel_call_t, errors).
 */
#ifndef DEEPX_REFERENCE_REGISTER_H_
#define DEEPX_REFERENCE_REGISTER_H_

#include "deepx/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Registers every reference kernel (op x dtype signature, device type kDLCPU) with
 * `host->register_kernel(context, ...)`.
 *
 * Every kernel carries ::DX_KERNEL_FLAG_DETERMINISTIC; the elementwise ops and dx.copy also
 * carry ::DX_KERNEL_FLAG_INPLACE. `kernel_data` points at static storage, valid for the life of
 * the process.
 * @param host services; must provide error_create and register_kernel (ABI major 1).
 * @param context passed through to register_kernel.
 * @return null on success, else the first registration error (ownership to the caller), or a
 *         ::DX_VERSION_MISMATCH / ::DX_INVALID_ARGUMENT error for an unusable host table.
 * Threading: as dx_plugin_t::init (the loading thread, during init).
 */
dx_error_t* deepx_reference_register(const dx_host_t* host, dx_host_context_t* context);

/** @brief Number of kernels deepx_reference_register() registers. Any thread. */
int32_t deepx_reference_kernel_count(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPX_REFERENCE_REGISTER_H_ */
