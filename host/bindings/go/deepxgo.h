// C helpers of the Go binding (deepxgo.c): the calls that take option structs or fixed arrays,
// written once in C so that the Go side passes only scalars and pointers to C memory.
#ifndef DEEPX_GO_DEEPXGO_H_
#define DEEPX_GO_DEEPXGO_H_

#include <stdint.h>
#include <stdlib.h>

#include <deepx/host.h>

// 1 when the loaded host library exports dx_runtime_connect() (ABI 1.1).
int deepxgo_has_connect(void);
// dx_runtime_connect() looked up at run time; returns 1 without calling anything when the
// loaded library lacks it, else 0 with the call's error in *err.
int deepxgo_connect(const char* address, uint32_t connect_ms, uint32_t request_ms,
                    const char* client_name, dx_runtime_t** out, dx_error_t** err);
dx_error_t* deepxgo_runtime_create(uint64_t flags, const char* plugin_path,
                                   const char* certificate_path, dx_runtime_t** out);
dx_error_t* deepxgo_plugin_info(const dx_runtime_t* rt, int32_t index, dx_plugin_info_t* info);
dx_error_t* deepxgo_device_info(const dx_runtime_t* rt, int32_t index, dx_device_info_t* info);
dx_error_t* deepxgo_device_stats(const dx_runtime_t* rt, int32_t index,
                                 dx_memory_stats_t* stats);
// dx_invoke() with up to 4 inputs and 2 outputs passed by value: the handle arrays live on the
// C stack. The handles travel as integers (they are opaque values, not addresses), so cgo has
// no pointer argument to check and the Go side allocates nothing per call.
dx_error_t* deepxgo_invoke_small(uintptr_t rt, dx_op_id_t op, uintptr_t i0, uintptr_t i1,
                                 uintptr_t i2, uintptr_t i3, int32_t num_inputs, uintptr_t o0,
                                 uintptr_t o1, int32_t num_outputs, uintptr_t attrs);

// dx_invoke_async() and dx_program_add_invoke() with the handle arrays given as integers in C
// memory (the host copies the arrays; the tensors are borrowed until the task is done).
dx_error_t* deepxgo_invoke_async(uintptr_t rt, dx_op_id_t op, const uintptr_t* inputs,
                                 int32_t num_inputs, const uintptr_t* outputs,
                                 int32_t num_outputs, uintptr_t attrs, dx_task_t** out_task);
dx_error_t* deepxgo_program_add(uintptr_t program, dx_op_id_t op, const uintptr_t* inputs,
                                int32_t num_inputs, const uintptr_t* outputs, int32_t num_outputs,
                                uintptr_t attrs);
// dx_task_wait() that also says whether the task is done (a DX_TIMEOUT that is the task's own
// outcome, from a remote request, is told apart from "not done yet" with dx_task_poll()).
dx_error_t* deepxgo_task_wait(uintptr_t task, int32_t timeout_ms, int32_t* done);

#endif  // DEEPX_GO_DEEPXGO_H_
