/* minimal: the smallest complete deepx executor plugin, in plain C99.
 *
 * It implements one standard op, dx.add, for f32 tensors on the CPU (kDLCPU), with NumPy
 * broadcasting, any strides (including 0 and negative), byte offsets, rank-0 and empty tensors.
 * It registers no memory space: tensors on kDLCPU are allocated by whichever loaded plugin
 * serves that device (the bundled "cpu" or "reference" plugin), and kernels dispatch by device
 * type, not by memory space.
 *
 * To make your own plugin: copy this folder, rename the plugin (MINIMAL_PLUGIN_NAME below and
 * NAME in CMakeLists.txt), and register your kernels in minimal_init(). See
 * docs/plugin-author-guide.md. */
#include <string.h>

#include "deepx/plugin.h"

#define MINIMAL_PLUGIN_NAME "minimal"
#define MINIMAL_MAX_RANK 32

static int is_f32(DLDataType t) { return t.code == kDLFloat && t.bits == 32 && t.lanes == 1; }

/* Element strides of `t` aligned to an output of rank `out_rank` under NumPy broadcasting:
 * missing leading dims and dims of size 1 (against a larger output dim) get stride 0.
 * Returns 0 when `t` does not broadcast to `out_shape`. */
static int broadcast_strides(const DLTensor* t, int32_t out_rank, const int64_t* out_shape,
                             int64_t* out_strides) {
  int32_t lead = out_rank - t->ndim;
  int64_t compact = 1;
  int32_t d;
  if (lead < 0) return 0;
  for (d = out_rank - 1; d >= 0; --d) {
    int32_t j = d - lead;
    if (j < 0) {
      out_strides[d] = 0;
      continue;
    }
    if (t->shape[j] == out_shape[d]) {
      out_strides[d] = t->strides != NULL ? t->strides[j] : compact;
    } else if (t->shape[j] == 1) {
      out_strides[d] = 0;
    } else {
      return 0;
    }
    compact *= t->shape[j];
  }
  return 1;
}

/* The output shape must be exactly the broadcast of the input shapes (NumPy's rule). */
static int is_broadcast_result(const DLTensor* a, const DLTensor* b, const DLTensor* out) {
  int32_t d;
  if (out->ndim != (a->ndim > b->ndim ? a->ndim : b->ndim)) return 0;
  for (d = 0; d < out->ndim; ++d) {
    int32_t ja = d - (out->ndim - a->ndim);
    int32_t jb = d - (out->ndim - b->ndim);
    int64_t da = ja >= 0 ? a->shape[ja] : 1;
    int64_t db = jb >= 0 ? b->shape[jb] : 1;
    int64_t expected;
    if (da != db && da != 1 && db != 1) return 0;
    expected = da == 1 ? db : da;
    if (out->shape[d] != expected) return 0;
  }
  return 1;
}

/* dx.add, f32 + f32 -> f32. */
static dx_error_t* minimal_add_f32(const dx_kernel_call_t* call) {
  const DLTensor* a;
  const DLTensor* b;
  const DLTensor* out;
  int64_t stride_a[MINIMAL_MAX_RANK], stride_b[MINIMAL_MAX_RANK], stride_out[MINIMAL_MAX_RANK];
  int64_t index[MINIMAL_MAX_RANK];
  int64_t numel = 1, i, off_a = 0, off_b = 0, off_out = 0;
  const float* pa;
  const float* pb;
  float* po;
  int32_t d, rank;

  if (call->num_inputs != 2 || call->num_outputs != 1 || call->inputs[0] == NULL ||
      call->inputs[1] == NULL || call->outputs[0] == NULL) {
    return dx_errorf(call->host, DX_INVALID_ARGUMENT,
                     "minimal dx.add: expects 2 inputs and 1 output, got %d and %d",
                     (int)call->num_inputs, (int)call->num_outputs);
  }
  a = call->inputs[0];
  b = call->inputs[1];
  out = call->outputs[0];
  if (!is_f32(a->dtype) || !is_f32(b->dtype) || !is_f32(out->dtype)) {
    return dx_errorf(call->host, DX_SHAPE_MISMATCH, "minimal dx.add: only f32 is supported");
  }
  rank = out->ndim;
  if (rank > MINIMAL_MAX_RANK || a->ndim > MINIMAL_MAX_RANK || b->ndim > MINIMAL_MAX_RANK) {
    return dx_errorf(call->host, DX_UNSUPPORTED, "minimal dx.add: rank above %d",
                     MINIMAL_MAX_RANK);
  }
  if (!is_broadcast_result(a, b, out) || !broadcast_strides(a, rank, out->shape, stride_a) ||
      !broadcast_strides(b, rank, out->shape, stride_b) ||
      !broadcast_strides(out, rank, out->shape, stride_out)) {
    return dx_errorf(call->host, DX_SHAPE_MISMATCH,
                     "minimal dx.add: the output shape is not the broadcast of the inputs");
  }
  for (d = 0; d < rank; ++d) {
    numel *= out->shape[d];
    index[d] = 0;
  }
  if (numel == 0) return NULL; /* an empty tensor: nothing to write */

  pa = (const float*)((const char*)a->data + a->byte_offset);
  pb = (const float*)((const char*)b->data + b->byte_offset);
  po = (float*)((char*)out->data + out->byte_offset);
  /* Walk the output in row-major order, moving three element offsets like an odometer. */
  for (i = 0; i < numel; ++i) {
    po[off_out] = pa[off_a] + pb[off_b];
    for (d = rank - 1; d >= 0; --d) {
      if (++index[d] < out->shape[d]) {
        off_a += stride_a[d];
        off_b += stride_b[d];
        off_out += stride_out[d];
        break;
      }
      index[d] = 0;
      off_a -= stride_a[d] * (out->shape[d] - 1);
      off_b -= stride_b[d] * (out->shape[d] - 1);
      off_out -= stride_out[d] * (out->shape[d] - 1);
    }
  }
  return NULL;
}

/* Called once per runtime that loads the plugin: register everything the plugin offers. */
static dx_error_t* minimal_init(const dx_host_t* host, dx_host_context_t* context,
                                void** out_state) {
  static const DLDataType f32_f32_to_f32[3] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1},
                                               {kDLFloat, 32, 1}};
  dx_kernel_desc_t add;
  (void)out_state; /* no per-runtime state */

  memset(&add, 0, sizeof add); /* every slot this plugin does not fill is "absent" */
  add.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  add.op_name = "dx.add";
  add.device_type = kDLCPU;
  add.num_inputs = 2;
  add.num_outputs = 1;
  add.dtypes = f32_f32_to_f32; /* inputs' dtypes, then outputs' */
  add.flags = DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;
  add.forward = minimal_add_f32;
  return host->register_kernel(context, &add); /* null on success; else pass the error on */
}

static const dx_plugin_t minimal_plugin = {
    DX_PLUGIN_SIZE_1_0, /* struct_size */
    DX_ABI_VERSION,                        /* abi_version: the headers this was built with */
    0,                                     /* reserved */
    MINIMAL_PLUGIN_NAME,                   /* name: [a-z0-9_.-], unique per runtime */
    "Example Vendor",                      /* vendor */
    "0.1.0",                               /* the plugin's own version */
    "example",                             /* build id */
    DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_CONCURRENT_KERNELS, /* capabilities */
    minimal_init,                          /* init: mandatory */
    NULL,                                  /* shutdown: nothing to release */
    NULL,                                  /* get_extension: offers no extension */
};

/* The one exported symbol. Answer null if the host speaks no version of our major. */
DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  if (DX_VERSION_MAJOR(host_abi_min) > DX_ABI_VERSION_MAJOR ||
      DX_VERSION_MAJOR(host_abi_max) < DX_ABI_VERSION_MAJOR) {
    return NULL;
  }
  return &minimal_plugin;
}
