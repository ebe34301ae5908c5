/* A deliberately wrong plugin ("certify-broken") that the certification tests run deepx-certify
 * against, to prove the runner catches each kind of defect:
 *   dx.add f32  ignores strides and broadcasting (reads inputs as compact arrays, indices taken
 *               modulo their size so it never reads out of bounds) and is 1 ulp off at
 *               element 5: FAIL on views and on larger tensors;
 *   dx.neg f32  claimed, but always returns DX_UNSUPPORTED: UNIMPLEMENTED;
 *   dx.relu f32 returns -0.0 instead of +0.0 for non-positive inputs: FAIL (bit-exact), and
 *               writes its input when it has more than 1000 elements: FAIL (input modified);
 *   dx.exp f32  correct for compact tensors (expf): PASS where layouts are compact, but it
 *               claims DX_KERNEL_FLAG_INPLACE and zero-fills its output first: FAIL in place;
 *   dx.copy f32 claims DX_KERNEL_FLAG_DETERMINISTIC but perturbs element 0 on every other call:
 *               FAIL on the determinism rerun.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "deepx/plugin.h"

static int64_t numel_of(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static float* data_of(const DLTensor* t) { return (float*)((char*)t->data + t->byte_offset); }

static dx_error_t* broken_add(const dx_kernel_call_t* call) {
  const DLTensor* a = call->inputs[0];
  const DLTensor* b = call->inputs[1];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), na = numel_of(a), nb = numel_of(b);
  for (int64_t i = 0; i < n; ++i) {
    float v = data_of(a)[i % na] + data_of(b)[i % nb];
    if (i == 5) v = nextafterf(v, INFINITY);
    data_of(out)[i] = v;
  }
  return NULL;
}

static dx_error_t* broken_neg(const dx_kernel_call_t* call) {
  return call->host->error_create(DX_UNSUPPORTED, "certify-broken: neg is not implemented");
}

static dx_error_t* broken_relu(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), nx = numel_of(x);
  for (int64_t i = 0; i < n && nx > 0; ++i) {
    float v = data_of(x)[i % nx];
    data_of(out)[i] = v > 0 ? v : (v != v ? v : -0.0f);
  }
  if (nx > 1000) data_of(x)[0] = 42.0f; /* scribbles on its input: a violation */
  return NULL;
}

static dx_error_t* plain_exp(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), nx = numel_of(x);
  /* Zero-initialises the output first: right unless the output aliases the input. */
  for (int64_t i = 0; i < n; ++i) data_of(out)[i] = 0.0f;
  for (int64_t i = 0; i < n && nx > 0; ++i) data_of(out)[i] += expf(data_of(x)[i % nx]);
  return NULL;
}

static dx_error_t* flaky_copy(const dx_kernel_call_t* call) {
  static int calls = 0; /* the host serialises this plugin's kernels (no CONCURRENT_KERNELS cap) */
  const DLTensor* x = call->inputs[0];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), nx = numel_of(x);
  for (int64_t i = 0; i < n && nx > 0; ++i) data_of(out)[i] = data_of(x)[i % nx];
  if (n > 0 && (++calls & 1) == 0) data_of(out)[0] = nextafterf(data_of(out)[0], INFINITY);
  return NULL;
}

static dx_error_t* register_one(const dx_host_t* host, dx_host_context_t* context, const char* op, int inputs,
                                dx_kernel_fn fn) {
  static const DLDataType f32[3] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = DX_STRUCT_SIZE(dx_kernel_desc_t, cost);
  desc.op_name = op;
  desc.device_type = kDLCPU;
  desc.num_inputs = inputs;
  desc.num_outputs = 1;
  desc.dtypes = f32;
  desc.forward = fn;
  desc.flags = fn == flaky_copy ? DX_KERNEL_FLAG_DETERMINISTIC : fn == plain_exp ? DX_KERNEL_FLAG_INPLACE : 0;
  return host->register_kernel(context, &desc);
}

static dx_error_t* broken_init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  dx_error_t* e;
  *out_state = NULL;
  if ((e = register_one(host, context, "dx.add", 2, broken_add))) return e;
  if ((e = register_one(host, context, "dx.neg", 1, broken_neg))) return e;
  if ((e = register_one(host, context, "dx.relu", 1, broken_relu))) return e;
  if ((e = register_one(host, context, "dx.exp", 1, plain_exp))) return e;
  if ((e = register_one(host, context, "dx.copy", 1, flaky_copy))) return e;
  return NULL;
}

static const dx_plugin_t kBroken = {
    DX_STRUCT_SIZE(dx_plugin_t, shutdown), DX_ABI_VERSION, 0, "certify-broken", "deepx tests", "0.0.1", "test",
    DX_PLUGIN_CAP_KERNELS, broken_init, NULL};

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  (void)host_abi_min;
  (void)host_abi_max;
  return &kBroken;
}
