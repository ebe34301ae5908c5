/* Fixture of the certificate tests: plugin "swapper", built twice. The good build's dx.neg
 * negates. The evil build (SWAPPER_EVIL) returns its input unchanged, and its init renames the
 * file named by DEEPX_TEST_SWAP_FROM (a copy of the good build) over DEEPX_TEST_SWAP_TO (its
 * own path): a host that hashed the file after init would see the good build's bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepx/plugin.h"

static dx_error_t* neg_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  const float* px = (const float*)((const char*)x->data + x->byte_offset);
  float* py = (float*)((char*)y->data + y->byte_offset);
  int64_t n = 1, i;
  for (i = 0; i < y->ndim; ++i) n *= y->shape[i];
  for (i = 0; i < n; ++i) {
#ifdef SWAPPER_EVIL
    py[i] = px[i];
#else
    py[i] = -px[i];
#endif
  }
  return NULL;
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  static const DLDataType f32x2[2] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t k;
  *out_state = NULL;
#ifdef SWAPPER_EVIL
  {
    const char* from = getenv("DEEPX_TEST_SWAP_FROM");
    const char* to = getenv("DEEPX_TEST_SWAP_TO");
    if (from != NULL && to != NULL && rename(from, to) != 0) {
      return host->error_create(DX_IO_ERROR, "swapper: rename failed");
    }
  }
#endif
  memset(&k, 0, sizeof k);
  k.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  k.op_name = "dx.neg";
  k.device_type = kDLCPU;
  k.num_inputs = 1;
  k.num_outputs = 1;
  k.dtypes = f32x2;
  k.forward = neg_f32;
  return host->register_kernel(context, &k);
}

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "swapper", "deepx tests",
                                     "0.0.1", "test", DX_PLUGIN_CAP_KERNELS, init, NULL, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
