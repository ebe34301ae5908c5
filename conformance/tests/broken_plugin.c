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
 * and, for crash/hang isolation (run with tests/broken_cases.txt), kernels correct for compact
 * tensors except:
 *   dx.mul f32  segfaults (a write through NULL) when the output has exactly 7 elements: CRASH;
 *   dx.sub f32  loops forever when the output has exactly 7 elements: TIMEOUT;
 *   dx.div f32  calls abort() when the output has exactly 7 elements: CRASH;
 *   dx.sum f32  claims DX_KERNEL_FLAG_DETERMINISTIC but a static call counter adds 1 ulp on
 *               every other call: FAIL on the determinism rerun;
 *   dx.max f32  skips NaN instead of propagating it: FAIL on special-tier data;
 * and, for the backward and index checks (tests/broken_cases.txt too):
 *   dx.tanh f32      forward right (compact tensors), backward returns dy unchanged: FAIL;
 *   dx.maximum f32   forward and backward right for same-shape compact tensors, but the
 *                    backward writes both gradients even when one is not wanted (a null
 *                    output): CRASH on the "unwanted gradient" case;
 *   dx.embedding (f32, i64) never checks its indices (it wraps them, so it reads nothing out
 *                    of bounds): PASS in range, FAIL where the reference returns OUT_OF_RANGE;
 *   dx.sum f32       (the nondeterministic forward above) has a backward that is right but adds
 *                    1 ulp to element 0 on every other call, under the kernel's
 *                    DX_KERNEL_FLAG_DETERMINISTIC: FAIL on the backward determinism rerun;
 *   dx.sigmoid f32   forward right (compact tensors, safe in place), DX_KERNEL_FLAG_INPLACE, and
 *                    a backward that zero-fills its gradient before reading dy: right unless the
 *                    gradient aliases dy, so FAIL on the backward in-place rerun;
 *   dx.abs f32       right for compact tensors but writes one element past the end of its
 *                    output when it has 13 elements: FAIL (the guard region after every output
 *                    catches it);
 * and its init segfaults when DEEPX_CERTIFY_BROKEN_CRASH_IN_INIT is set.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

static dx_error_t* crashing_mul(const dx_kernel_call_t* call) {
  const DLTensor* a = call->inputs[0];
  const DLTensor* b = call->inputs[1];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), na = numel_of(a), nb = numel_of(b);
  if (n == 7) {
    volatile float* nowhere = NULL;
    *nowhere = 1.0f; /* SIGSEGV */
  }
  for (int64_t i = 0; i < n; ++i) data_of(out)[i] = data_of(a)[i % na] * data_of(b)[i % nb];
  return NULL;
}

static dx_error_t* hanging_sub(const dx_kernel_call_t* call) {
  const DLTensor* a = call->inputs[0];
  const DLTensor* b = call->inputs[1];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), na = numel_of(a), nb = numel_of(b);
  if (n == 7) {
    volatile int forever = 1;
    while (forever) {
    }
  }
  for (int64_t i = 0; i < n; ++i) data_of(out)[i] = data_of(a)[i % na] - data_of(b)[i % nb];
  return NULL;
}

static dx_error_t* aborting_div(const dx_kernel_call_t* call) {
  const DLTensor* a = call->inputs[0];
  const DLTensor* b = call->inputs[1];
  const DLTensor* out = call->outputs[0];
  const int64_t n = numel_of(out), na = numel_of(a), nb = numel_of(b);
  if (n == 7) abort();
  for (int64_t i = 0; i < n; ++i) data_of(out)[i] = data_of(a)[i % na] / data_of(b)[i % nb];
  return NULL;
}

/* Sums everything (the cases it is run on reduce all axes). */
static dx_error_t* nondeterministic_sum(const dx_kernel_call_t* call) {
  static int calls = 0;
  const DLTensor* x = call->inputs[0];
  const int64_t nx = numel_of(x);
  double acc = 0;
  for (int64_t i = 0; i < nx; ++i) acc += data_of(x)[i];
  float v = (float)acc;
  if ((++calls & 1) == 0) v = nextafterf(v, INFINITY);
  data_of(call->outputs[0])[0] = v;
  return NULL;
}

/* Max over everything, but NaN never wins a comparison, so it disappears. */
static dx_error_t* nan_swallowing_max(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const int64_t nx = numel_of(x);
  if (nx == 0) return call->host->error_create(DX_INVALID_ARGUMENT, "certify-broken: max of an empty set");
  float m = -INFINITY;
  for (int64_t i = 0; i < nx; ++i)
    if (data_of(x)[i] > m) m = data_of(x)[i];
  data_of(call->outputs[0])[0] = m;
  return NULL;
}

static dx_error_t* plain_tanh(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->outputs[0]);
  for (int64_t i = 0; i < n; ++i) data_of(call->outputs[0])[i] = tanhf(data_of(call->inputs[0])[i]);
  return NULL;
}

/* Backward inputs: dy, x, y; output: dx. Wrong: dx = dy (the derivative is 1 - y^2). */
static dx_error_t* wrong_tanh_backward(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->inputs[0]);
  if (call->outputs[0] == NULL) return NULL;
  for (int64_t i = 0; i < n; ++i) data_of(call->outputs[0])[i] = data_of(call->inputs[0])[i];
  return NULL;
}

static dx_error_t* plain_maximum(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->outputs[0]);
  for (int64_t i = 0; i < n; ++i) {
    const float a = data_of(call->inputs[0])[i], b = data_of(call->inputs[1])[i];
    data_of(call->outputs[0])[i] = isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
  }
  return NULL;
}

/* Backward inputs: dy, a, b, y; outputs: da, db. Writes both even when one is null. */
static dx_error_t* careless_maximum_backward(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->inputs[0]);
  for (int64_t i = 0; i < n; ++i) {
    const float dy = data_of(call->inputs[0])[i], a = data_of(call->inputs[1])[i], b = data_of(call->inputs[2])[i];
    const float share_a = a > b ? 1.0f : (a < b ? 0.0f : 0.5f);
    data_of(call->outputs[0])[i] = dy * share_a;
    data_of(call->outputs[1])[i] = dy * (1.0f - share_a);
  }
  return NULL;
}

/* Backward of the all-axes sum: inputs dy (one element), x, y; output dx = dy everywhere. */
static dx_error_t* nondeterministic_sum_backward(const dx_kernel_call_t* call) {
  static int calls = 0;
  if (call->outputs[0] == NULL) return NULL;
  const int64_t n = numel_of(call->outputs[0]);
  const float dy = data_of(call->inputs[0])[0];
  for (int64_t i = 0; i < n; ++i) data_of(call->outputs[0])[i] = dy;
  if (n > 0 && (++calls & 1) == 0) data_of(call->outputs[0])[0] = nextafterf(dy, INFINITY);
  return NULL;
}

static dx_error_t* plain_sigmoid(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->outputs[0]);
  for (int64_t i = 0; i < n; ++i)
    data_of(call->outputs[0])[i] = (float)(1.0 / (1.0 + exp(-(double)data_of(call->inputs[0])[i])));
  return NULL;
}

/* Backward inputs: dy, x, y; output: dx = dy * y * (1 - y). Zero-fills dx first: right unless
 * dx is dy itself (then every dy it reads is already 0). */
static dx_error_t* alias_unsafe_sigmoid_backward(const dx_kernel_call_t* call) {
  if (call->outputs[0] == NULL) return NULL;
  const int64_t n = numel_of(call->outputs[0]);
  float* dx = data_of(call->outputs[0]);
  for (int64_t i = 0; i < n; ++i) dx[i] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const double dy = data_of(call->inputs[0])[i], y = data_of(call->inputs[2])[i];
    dx[i] += (float)(dy * y * (1.0 - y));
  }
  return NULL;
}

static dx_error_t* overrunning_abs(const dx_kernel_call_t* call) {
  const int64_t n = numel_of(call->outputs[0]);
  for (int64_t i = 0; i < n; ++i) data_of(call->outputs[0])[i] = fabsf(data_of(call->inputs[0])[i]);
  if (n == 13) data_of(call->outputs[0])[n] = 42.0f; /* one past the end: out of bounds */
  return NULL;
}

static dx_error_t* unchecked_embedding(const dx_kernel_call_t* call) {
  const DLTensor* w = call->inputs[0];
  const DLTensor* idx = call->inputs[1];
  const int64_t rows = w->shape[0], dim = w->shape[1], n = numel_of(idx);
  const int64_t* ids = (const int64_t*)((const char*)idx->data + idx->byte_offset);
  for (int64_t i = 0; i < n && rows > 0; ++i) {
    const int64_t row = ((ids[i] % rows) + rows) % rows;
    for (int64_t j = 0; j < dim; ++j) data_of(call->outputs[0])[i * dim + j] = data_of(w)[row * dim + j];
  }
  return NULL;
}

static dx_error_t* register_signature(const dx_host_t* host, dx_host_context_t* context, const char* op, int inputs,
                                      const DLDataType* dtypes, dx_kernel_fn fn, dx_kernel_fn backward,
                                      dx_kernel_flags_t flags) {
  dx_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  desc.op_name = op;
  desc.device_type = kDLCPU;
  desc.num_inputs = inputs;
  desc.num_outputs = 1;
  desc.dtypes = dtypes;
  desc.forward = fn;
  desc.backward = backward;
  desc.flags = flags;
  return host->register_kernel(context, &desc);
}

static dx_error_t* register_one(const dx_host_t* host, dx_host_context_t* context, const char* op, int inputs,
                                dx_kernel_fn fn) {
  static const DLDataType f32[3] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
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
  /* For certify_plugin_crashing_in_init: a plugin whose init crashes must not take the runner down. */
  if (getenv("DEEPX_CERTIFY_BROKEN_CRASH_IN_INIT")) {
    volatile int* nowhere = NULL;
    *nowhere = 1;
  }
  if ((e = register_one(host, context, "dx.add", 2, broken_add))) return e;
  if ((e = register_one(host, context, "dx.neg", 1, broken_neg))) return e;
  if ((e = register_one(host, context, "dx.relu", 1, broken_relu))) return e;
  if ((e = register_one(host, context, "dx.exp", 1, plain_exp))) return e;
  if ((e = register_one(host, context, "dx.copy", 1, flaky_copy))) return e;
  if ((e = register_one(host, context, "dx.mul", 2, crashing_mul))) return e;
  if ((e = register_one(host, context, "dx.sub", 2, hanging_sub))) return e;
  if ((e = register_one(host, context, "dx.div", 2, aborting_div))) return e;
  if ((e = register_one(host, context, "dx.max", 1, nan_swallowing_max))) return e;
  if ((e = register_one(host, context, "dx.abs", 1, overrunning_abs))) return e;
  {
    static const DLDataType f32[3] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
    static const DLDataType f32_i64[3] = {{kDLFloat, 32, 1}, {kDLInt, 64, 1}, {kDLFloat, 32, 1}};
    if ((e = register_signature(host, context, "dx.sum", 1, f32, nondeterministic_sum, nondeterministic_sum_backward,
                                DX_KERNEL_FLAG_DETERMINISTIC)))
      return e;
    if ((e = register_signature(host, context, "dx.tanh", 1, f32, plain_tanh, wrong_tanh_backward, 0))) return e;
    if ((e = register_signature(host, context, "dx.maximum", 2, f32, plain_maximum, careless_maximum_backward, 0)))
      return e;
    if ((e = register_signature(host, context, "dx.embedding", 2, f32_i64, unchecked_embedding, NULL, 0))) return e;
    if ((e = register_signature(host, context, "dx.sigmoid", 1, f32, plain_sigmoid, alias_unsafe_sigmoid_backward,
                                DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE)))
      return e;
  }
  return NULL;
}

static const dx_plugin_t kBroken = {
    DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "certify-broken", "deepx tests", "0.0.1", "test",
    DX_PLUGIN_CAP_KERNELS, broken_init, NULL};

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  (void)host_abi_min;
  (void)host_abi_max;
  return &kBroken;
}
