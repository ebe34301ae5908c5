/* Fixture of the failure classes (conformance/src/diagnosis.cpp): plugin "certify-diagnosis",
 * f32 on the CPU, two planted bugs:
 *   dx.neg never writes the last element of its output (classified "never written");
 *   dx.abs reads its input as if it were compact, ignoring its strides (right for compact and
 *   offset views, wrong for stride-0 broadcast, sliced and transposed ones: classified "depends
 *   on the input layout"). Outputs are written through their strides. */
#include <math.h>
#include <string.h>

#include "deepx/plugin.h"

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* The element offset of the i-th element (row-major order) of `t`, through its strides. */
static int64_t offset_of(const DLTensor* t, int64_t i) {
  int64_t off = 0, stride = 1;
  int32_t d;
  for (d = t->ndim - 1; d >= 0; --d) {
    const int64_t idx = i % t->shape[d];
    i /= t->shape[d];
    off += idx * (t->strides ? t->strides[d] : stride);
    stride *= t->shape[d];
  }
  return off;
}

static dx_error_t* neg_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  const float* px = (const float*)((const char*)x->data + x->byte_offset);
  float* py = (float*)((char*)y->data + y->byte_offset);
  const int64_t n = numel(y);
  int64_t i;
  for (i = 0; i + 1 < n; ++i) py[offset_of(y, i)] = -px[offset_of(x, i)]; /* the bug: i + 1 < n */
  return NULL;
}

static dx_error_t* abs_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  const float* px = (const float*)((const char*)x->data + x->byte_offset);
  float* py = (float*)((char*)y->data + y->byte_offset);
  const int64_t n = numel(y);
  int64_t i;
  for (i = 0; i < n; ++i) py[offset_of(y, i)] = fabsf(px[i]); /* the bug: px[i], not px[offset_of(x, i)] */
  return NULL;
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  static const DLDataType f32x2[2] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t k;
  dx_error_t* e;
  *out_state = NULL;
  memset(&k, 0, sizeof k);
  k.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  k.device_type = kDLCPU;
  k.num_inputs = 1;
  k.num_outputs = 1;
  k.dtypes = f32x2;
  k.op_name = "dx.neg";
  k.forward = neg_f32;
  if ((e = host->register_kernel(context, &k)) != NULL) return e;
  k.op_name = "dx.abs";
  k.forward = abs_f32;
  return host->register_kernel(context, &k);
}

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "certify-diagnosis", "deepx tests",
                                     "0.0.1", "test", DX_PLUGIN_CAP_KERNELS, init, NULL, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
