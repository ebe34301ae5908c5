/* A fixture plugin ("certify-relaxed") whose only defect is exactly what the test-only
 * relaxation of deepx-certify-relaxation-fixture covers (tests/relaxation_fixture_table.cpp):
 * it claims dx.exp f32 alone, handles every layout (any strides, stride 0, byte offsets, rank 0,
 * empty tensors), and returns exp(x) computed in f64 and rounded once (as the reference does),
 * then moved 6 ulp toward zero. The published table allows 4 ulp for f32 transcendentals, so
 * deepx-certify refuses it (FAIL); the fixture runner's relaxation allows 8 ulp, so it is
 * CERTIFIED-with-relaxations there. Non-finite results (inf, NaN) and zeros are exact. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "deepx/plugin.h"

enum { kUlpsOff = 6 };

static int is_f32(const DLTensor* t) { return t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1; }

/* Address of the element at row-major position `flat` of a tensor with any strides. */
static float* element(const DLTensor* t, int64_t flat) {
  int64_t offset = 0, step = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    const int64_t index = flat % t->shape[d];
    flat /= t->shape[d];
    offset += index * (t->strides ? t->strides[d] : step);
    step *= t->shape[d];
  }
  return (float*)((char*)t->data + t->byte_offset) + offset;
}

static dx_error_t* skewed_exp(const dx_kernel_call_t* call) {
  if (call->num_inputs != 1 || call->num_outputs != 1 || !call->inputs[0] || !call->outputs[0])
    return call->host->error_create(DX_INVALID_ARGUMENT, "certify-relaxed: dx.exp takes one input and one output");
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  if (!is_f32(x) || !is_f32(y)) return call->host->error_create(DX_INVALID_ARGUMENT, "certify-relaxed: f32 only");
  if (x->ndim != y->ndim) return call->host->error_create(DX_SHAPE_MISMATCH, "certify-relaxed: shapes differ");
  int64_t n = 1;
  for (int d = 0; d < x->ndim; ++d) {
    if (x->shape[d] != y->shape[d]) return call->host->error_create(DX_SHAPE_MISMATCH, "certify-relaxed: shapes differ");
    n *= x->shape[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = (float)exp((double)*element(x, i));
    if (isfinite(v))
      for (int k = 0; k < kUlpsOff; ++k) v = nextafterf(v, 0.0f);
    *element(y, i) = v;
  }
  return NULL;
}

static dx_error_t* relaxed_init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  static const DLDataType f32[2] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t desc;
  *out_state = NULL;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  desc.op_name = "dx.exp";
  desc.device_type = kDLCPU;
  desc.num_inputs = 1;
  desc.num_outputs = 1;
  desc.dtypes = f32;
  desc.forward = skewed_exp;
  return host->register_kernel(context, &desc);
}

static const dx_plugin_t kRelaxed = {
    DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "certify-relaxed", "deepx tests", "0.0.1", "test",
    DX_PLUGIN_CAP_KERNELS, relaxed_init, NULL};

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  (void)host_abi_min;
  (void)host_abi_max;
  return &kRelaxed;
}
