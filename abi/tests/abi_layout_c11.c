/* The layout pins, checked by a C11 compiler: a reordered or resized field fails the build. */
#include <stddef.h>

#include "abi_layout_pins.h"
#include "deepx/host.h"
#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "deepx/safetensors.h"

#define PIN_C(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), #type "." #field " moved");
#define SIZE_C(type, size) _Static_assert(sizeof(type) == (size), #type " resized");
#if defined(__LP64__)
DX_ABI_LAYOUT_PINS(PIN_C, SIZE_C)
#endif

#define NAMED_SIZE_C(name, type, field) \
  _Static_assert(name == DX_STRUCT_SIZE(type, field), #name " is not the size up to " #field);
#define DTYPE_C(name, code, bits) \
  _Static_assert(name == DX_DTYPE(code, bits, 1), #name " differs from DX_DTYPE()");
#if defined(__LP64__)
DX_ABI_NAMED_SIZES(NAMED_SIZE_C)
#endif
DX_ABI_DTYPE_CONSTANTS(DTYPE_C)

/* The frozen header of dx_plugin_t: readable by a host of any major. */
_Static_assert(offsetof(dx_plugin_t, struct_size) == 0, "frozen");
_Static_assert(offsetof(dx_plugin_t, abi_version) == sizeof(size_t), "frozen");

_Static_assert(DX_ABI_VERSION_PACKED == DX_ABI_VERSION, "DX_ABI_VERSION_PACKED differs from DX_ABI_VERSION");

int dx_abi_layout_c11_checked(void);
int dx_abi_layout_c11_checked(void) { return 1; }
