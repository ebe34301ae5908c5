/* Fixture of the concurrency check: plugin "certify-concurrent" declares
 * DX_PLUGIN_CAP_CONCURRENT_KERNELS and registers dx.neg for f32 on the CPU (compact tensors of
 * at most 4096 elements; its `supports` declines the rest). Its kernel keeps a static scratch
 * buffer between the write of its result and the copy to the output, with a pause between the
 * two: alone it is right, called from several threads at once the calls overwrite each other's
 * results. With DEEPX_TEST_CONCURRENT_SAFE=1 in the environment it uses a buffer of its own per
 * call instead (the fixed kernel, which the check must pass). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deepx/plugin.h"

#define CAPACITY 4096

static float g_scratch[CAPACITY]; /* the defect: state shared by every call */

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static int compact(const DLTensor* t) {
  int64_t expected = 1;
  int32_t i;
  if (t->strides == NULL) return 1;
  for (i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

static int32_t neg_supports(const dx_kernel_call_t* call) {
  return compact(call->inputs[0]) && compact(call->outputs[0]) && numel(call->outputs[0]) <= CAPACITY &&
         numel(call->inputs[0]) == numel(call->outputs[0]);
}

static dx_error_t* neg_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  const float* px = (const float*)((const char*)x->data + x->byte_offset);
  float* py = (float*)((char*)y->data + y->byte_offset);
  const int64_t n = numel(y);
  const char* safe = getenv("DEEPX_TEST_CONCURRENT_SAFE");
  float local[CAPACITY];
  float* scratch = (safe != NULL && safe[0] == '1') ? local : g_scratch;
  struct timespec pause = {0, 2000000}; /* 2 ms: long enough for another call to run meanwhile */
  int64_t i;
  if (!neg_supports(call)) return dx_errorf(call->host, DX_UNSUPPORTED, "concurrent fixture: layout");
  for (i = 0; i < n; ++i) scratch[i] = -px[i];
  nanosleep(&pause, NULL);
  for (i = 0; i < n; ++i) py[i] = scratch[i];
  return NULL;
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  static const DLDataType f32x2[2] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t k;
  *out_state = NULL;
  memset(&k, 0, sizeof k);
  k.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  k.op_name = "dx.neg";
  k.device_type = kDLCPU;
  k.num_inputs = 1;
  k.num_outputs = 1;
  k.dtypes = f32x2;
  k.flags = DX_KERNEL_FLAG_DETERMINISTIC;
  k.forward = neg_f32;
  k.supports = neg_supports;
  return host->register_kernel(context, &k);
}

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "certify-concurrent", "deepx tests",
                                     "0.0.1", "test", DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_CONCURRENT_KERNELS,
                                     init, NULL, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
