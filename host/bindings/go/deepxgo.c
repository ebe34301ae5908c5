// C helpers of the Go binding; see deepxgo.h.
#define _GNU_SOURCE
#include "deepxgo.h"

#include <dlfcn.h>
#include <string.h>

// The layout of dx_connect_options_t (DX_CONNECT_OPTIONS_SIZE_1_1: 32 bytes on LP64), so that
// this file compiles against 1.0 headers too.
typedef struct deepxgo_connect_options {
  size_t struct_size;
  uint32_t connect_timeout_ms;
  uint32_t request_timeout_ms;
  const char* client_name;
  const void* next;
} deepxgo_connect_options;
typedef dx_error_t* (*deepxgo_connect_fn)(const char*, const deepxgo_connect_options*,
                                          dx_runtime_t**);

int deepxgo_has_connect(void) { return dlsym(RTLD_DEFAULT, "dx_runtime_connect") != NULL; }

int deepxgo_connect(const char* address, uint32_t connect_ms, uint32_t request_ms,
                    const char* client_name, dx_runtime_t** out, dx_error_t** err) {
  deepxgo_connect_fn fn = (deepxgo_connect_fn)dlsym(RTLD_DEFAULT, "dx_runtime_connect");
  deepxgo_connect_options options;
  if (fn == NULL) return 1;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.connect_timeout_ms = connect_ms;
  options.request_timeout_ms = request_ms;
  options.client_name = client_name;
  *err = fn(address, &options, out);
  return 0;
}

dx_error_t* deepxgo_runtime_create(uint64_t flags, const char* plugin_path,
                                   const char* certificate_path, dx_runtime_t** out) {
  dx_runtime_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  options.flags = flags;
  options.plugin_path = plugin_path;
  options.certificate_path = certificate_path;
  return dx_runtime_create(&options, out);
}

dx_error_t* deepxgo_plugin_info(const dx_runtime_t* rt, int32_t index, dx_plugin_info_t* info) {
  memset(info, 0, sizeof *info);
  info->struct_size = DX_PLUGIN_INFO_SIZE_1_0;
  return dx_runtime_plugin_info(rt, index, info);
}

dx_error_t* deepxgo_device_info(const dx_runtime_t* rt, int32_t index, dx_device_info_t* info) {
  memset(info, 0, sizeof *info);
  info->struct_size = DX_DEVICE_INFO_SIZE_1_0;
  return dx_runtime_device_info(rt, index, info);
}

dx_error_t* deepxgo_device_stats(const dx_runtime_t* rt, int32_t index,
                                 dx_memory_stats_t* stats) {
  memset(stats, 0, sizeof *stats);
  stats->struct_size = DX_MEMORY_STATS_SIZE_1_0;
  return dx_runtime_device_stats(rt, index, stats);
}

dx_error_t* deepxgo_invoke_small(uintptr_t rt, dx_op_id_t op, uintptr_t i0, uintptr_t i1,
                                 uintptr_t i2, uintptr_t i3, int32_t num_inputs, uintptr_t o0,
                                 uintptr_t o1, int32_t num_outputs, uintptr_t attrs) {
  dx_tensor_t* inputs[4];
  dx_tensor_t* outputs[2];
  inputs[0] = (dx_tensor_t*)i0;
  inputs[1] = (dx_tensor_t*)i1;
  inputs[2] = (dx_tensor_t*)i2;
  inputs[3] = (dx_tensor_t*)i3;
  outputs[0] = (dx_tensor_t*)o0;
  outputs[1] = (dx_tensor_t*)o1;
  return dx_invoke((dx_runtime_t*)rt, op, inputs, num_inputs, outputs, num_outputs,
                   (const dx_attrs_t*)attrs);
}

dx_error_t* deepxgo_invoke_async(uintptr_t rt, dx_op_id_t op, const uintptr_t* inputs,
                                 int32_t num_inputs, const uintptr_t* outputs,
                                 int32_t num_outputs, uintptr_t attrs, dx_task_t** out_task) {
  return dx_invoke_async((dx_runtime_t*)rt, op, (dx_tensor_t* const*)inputs, num_inputs,
                         (dx_tensor_t* const*)outputs, num_outputs, (const dx_attrs_t*)attrs,
                         NULL, out_task);
}

dx_error_t* deepxgo_program_add(uintptr_t program, dx_op_id_t op, const uintptr_t* inputs,
                                int32_t num_inputs, const uintptr_t* outputs, int32_t num_outputs,
                                uintptr_t attrs) {
  return dx_program_add_invoke((dx_program_t*)program, op, (dx_tensor_t* const*)inputs,
                               num_inputs, (dx_tensor_t* const*)outputs, num_outputs,
                               (const dx_attrs_t*)attrs, NULL);
}

dx_error_t* deepxgo_task_wait(uintptr_t task, int32_t timeout_ms, int32_t* done) {
  dx_error_t* e = dx_task_wait((dx_task_t*)task, timeout_ms);
  *done = 1;
  if (e != NULL && dx_error_code(e) == DX_TIMEOUT) {
    dx_error_t* p = dx_task_poll((dx_task_t*)task, done);
    if (p != NULL) {
      dx_error_destroy(p);
      *done = 1;
    } else if (!*done) {
      dx_error_destroy(e);
      return NULL;
    }
  }
  return e;
}
