/*
 * The plugin side of the ABI, made visible to abidw.
 *
 * libdeepx_host.so exports the client API (deepx/host.h, deepx/safetensors.h) only; the structs
 * a plugin and the host exchange (dx_plugin_t, dx_host_t, the kernel / memory-space / transport
 * descriptors, dx_attr_t, the DLPack mirror, ...) never appear in a signature it exports, and the
 * enums and scalar typedefs appear in none at all. abidw describes only what exported functions
 * reach. Its --load-all-types (with abidiff --non-reachable-types) is no substitute with Debian
 * 12's abigail-tools 2.2: on libdeepx_host.so it records every type of every C++ translation
 * unit (the std:: internals included), and only the types the host's sources happen to use, so
 * a plugin struct the host stopped using would drop out of the baseline unnoticed. So this tiny
 * C library (built with -g -O0, never installed) exports one function per public type, taking
 * a pointer to each struct and each enum or scalar typedef by value: every declaration of the
 * public headers is then reachable, abidw records it with the layout the headers define, and
 * abidiff reports a change as a change of the functions that reach it.
 *
 * A public struct, enum or typedef added in a later minor gets its line here in the same commit
 * (it is then an added function: compatible; docs/versioning.md). What no signature can carry
 * is not here: macros (the named sizes, DX_DTYPE_*, flag bits: abi_test pins those) and the
 * anonymous schema-slot enums of ops.h, which have no type to take.
 */
#include "deepx/host.h"
#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "deepx/safetensors.h"
#include "deepx/status.h"
#include "deepx/types.h"
#include "deepx/version.h"

/* One exported function per struct, taking a pointer to it. */
#define DX_SURFACE_STRUCT(type)                 \
  DX_EXPORT void surface_##type(const type* p); \
  DX_EXPORT void surface_##type(const type* p) { (void)p; }
/* One per opaque handle type, taking a pointer to it (its layout is the host's own). */
#define DX_SURFACE_HANDLE(type)           \
  DX_EXPORT void surface_##type(type* p); \
  DX_EXPORT void surface_##type(type* p) { (void)p; }
/* One per enum, pointer typedef or scalar typedef, taking it by value. */
#define DX_SURFACE_VALUE(type)                 \
  DX_EXPORT void surface_##type(type value); \
  DX_EXPORT void surface_##type(type value) { (void)value; }

/* deepx/types.h */
DX_SURFACE_STRUCT(dx_attr_t)
DX_SURFACE_STRUCT(dx_dlpack_versioned_t)
DX_SURFACE_STRUCT(dx_extension_t)
DX_SURFACE_STRUCT(dx_memory_stats_t)
DX_SURFACE_HANDLE(dx_error_t)
DX_SURFACE_VALUE(dx_stream_t)
DX_SURFACE_VALUE(dx_event_t)
DX_SURFACE_VALUE(dx_log_level_t)
DX_SURFACE_VALUE(dx_attr_type_t)
DX_SURFACE_VALUE(dx_dlpack_flags_t)
DX_SURFACE_VALUE(dx_kernel_flags_t)
DX_SURFACE_VALUE(dx_plugin_caps_t)

/* deepx/status.h */
DX_SURFACE_VALUE(dx_status_code_t)
DX_SURFACE_VALUE(dx_status_t)

/* deepx/plugin.h */
DX_SURFACE_STRUCT(dx_kernel_call_t)
DX_SURFACE_STRUCT(dx_kernel_cost_t)
DX_SURFACE_STRUCT(dx_kernel_desc_t)
DX_SURFACE_STRUCT(dx_memory_space_desc_t)
DX_SURFACE_STRUCT(dx_transport_desc_t)
DX_SURFACE_STRUCT(dx_host_t)
DX_SURFACE_STRUCT(dx_plugin_t)
DX_SURFACE_HANDLE(dx_host_context_t)
DX_SURFACE_VALUE(dx_kernel_fn)
DX_SURFACE_VALUE(dx_kernel_supports_fn)
DX_SURFACE_VALUE(dx_kernel_cost_fn)
DX_SURFACE_VALUE(dx_memory_kind_t)
DX_SURFACE_VALUE(dx_copy_direction_t)
DX_SURFACE_VALUE(dx_listener_t)
DX_SURFACE_VALUE(dx_connection_t)
DX_SURFACE_VALUE(dx_request_t)
DX_SURFACE_VALUE(dx_memory_region_t)
DX_SURFACE_VALUE(dx_plugin_entry_fn)

/* deepx/host.h */
DX_SURFACE_STRUCT(dx_runtime_options_t)
DX_SURFACE_STRUCT(dx_plugin_info_t)
DX_SURFACE_STRUCT(dx_device_info_t)
DX_SURFACE_STRUCT(dx_kernel_info_t)
DX_SURFACE_STRUCT(dx_invoke_options_t)
DX_SURFACE_STRUCT(dx_connect_options_t)
DX_SURFACE_HANDLE(dx_runtime_t)
DX_SURFACE_HANDLE(dx_tensor_t)
DX_SURFACE_HANDLE(dx_attrs_t)
DX_SURFACE_HANDLE(dx_task_t)
DX_SURFACE_HANDLE(dx_program_t)
DX_SURFACE_VALUE(dx_op_id_t)
DX_SURFACE_VALUE(dx_dtype_t)
DX_SURFACE_VALUE(dx_runtime_flags_t)
DX_SURFACE_VALUE(dx_log_fn)
DX_SURFACE_VALUE(dx_certification_t)
DX_SURFACE_VALUE(dx_invoke_flags_t)

/* deepx/safetensors.h */
DX_SURFACE_STRUCT(dx_safetensors_save_options_t)
DX_SURFACE_STRUCT(dx_safetensors_tensor_info_t)
DX_SURFACE_HANDLE(dx_safetensors_t)
