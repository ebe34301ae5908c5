/* Prints the machine-readable description of the deepx C ABI (abi/deepx-abi.json) from the
 * headers themselves: the version, every status code, dtype, flag, enum value, named struct
 * size, struct field offset and standard op. Binding generators (Go, Java, Python) read the
 * JSON instead of parsing C; the CTest `abi_description_current` rebuilds it and fails when the
 * checked-in copy differs, so the headers stay the one source and the JSON cannot drift.
 * Regenerate on purpose with the build target `abi-description-update`. LP64 only, like the
 * layout pins it reads. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../tests/abi_layout_pins.h"
#include "deepx/host.h"
#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "deepx/safetensors.h"

static int g_first;

static void str(const char* s) {
  putchar('"');
  for (; *s != '\0'; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      printf("\\%c", c);
    } else if (c < 0x20) {
      printf("\\u%04x", c);
    } else {
      putchar(c);
    }
  }
  putchar('"');
}

static void sep(void) {
  printf(g_first ? "\n" : ",\n");
  g_first = 0;
}

static void begin_list(const char* key) {
  printf(",\n  ");
  str(key);
  printf(": [");
  g_first = 1;
}

static void end_list(void) { printf("\n  ]"); }

static void named_value(const char* name, unsigned long long value) {
  sep();
  printf("    {\"name\": ");
  str(name);
  printf(", \"value\": %llu}", value);
}

static void enum_value(const char* type, const char* name, long long value) {
  sep();
  printf("    {\"enum\": ");
  str(type);
  printf(", \"name\": ");
  str(name);
  printf(", \"value\": %lld}", value);
}

static void op(const char* name, int inputs, int outputs, const char* attrs) {
  sep();
  printf("    {\"name\": ");
  str(name);
  printf(", \"inputs\": %d, \"outputs\": %d, \"attrs\": [", inputs, outputs);
  const char* p = attrs;
  int first = 1;
  while (*p != '\0') {
    const char* comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    char buf[64];
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    printf("%s", first ? "" : ", ");
    str(buf);
    first = 0;
    p += n;
    if (*p == ',') ++p;
  }
  printf("]}");
}

int main(void) {
  printf("{\n  \"abi\": {\"major\": %d, \"minor\": %d, \"packed\": %u, \"data_model\": \"LP64\"}",
         DX_ABI_VERSION_MAJOR, DX_ABI_VERSION_MINOR, (unsigned)DX_ABI_VERSION);

  begin_list("status_codes");
#define STATUS_(name, value, desc)           \
  sep();                                     \
  printf("    {\"name\": ");                 \
  str("DX_" #name);                          \
  printf(", \"value\": %d, \"description\": ", value); \
  str(desc);                                 \
  printf("}");
  DX_STATUS_TABLE(STATUS_)
#undef STATUS_
  end_list();

  begin_list("dtypes");
#define DTYPE_(name, code, bits) named_value(#name, (unsigned long long)(name));
  DX_ABI_DTYPE_CONSTANTS(DTYPE_)
#undef DTYPE_
  end_list();

  begin_list("constants");
  named_value("DX_RUNTIME_FLAG_IGNORE_ENV", DX_RUNTIME_FLAG_IGNORE_ENV);
  named_value("DX_RUNTIME_FLAG_REQUIRE_CERTIFIED", DX_RUNTIME_FLAG_REQUIRE_CERTIFIED);
  named_value("DX_INVOKE_FLAG_BACKWARD", DX_INVOKE_FLAG_BACKWARD);
  named_value("DX_INVOKE_FLAG_PLUGIN", DX_INVOKE_FLAG_PLUGIN);
  named_value("DX_KERNEL_FLAG_DETERMINISTIC", DX_KERNEL_FLAG_DETERMINISTIC);
  named_value("DX_KERNEL_FLAG_INPLACE", DX_KERNEL_FLAG_INPLACE);
  named_value("DX_KERNEL_FLAG_VARIADIC", DX_KERNEL_FLAG_VARIADIC);
  named_value("DX_PLUGIN_CAP_KERNELS", DX_PLUGIN_CAP_KERNELS);
  named_value("DX_PLUGIN_CAP_MEMORY", DX_PLUGIN_CAP_MEMORY);
  named_value("DX_PLUGIN_CAP_TRANSPORTS", DX_PLUGIN_CAP_TRANSPORTS);
  named_value("DX_PLUGIN_CAP_CONCURRENT_KERNELS", DX_PLUGIN_CAP_CONCURRENT_KERNELS);
  named_value("DX_DLPACK_FLAG_READ_ONLY", DX_DLPACK_FLAG_READ_ONLY);
  named_value("DX_DLPACK_FLAG_IS_COPIED", DX_DLPACK_FLAG_IS_COPIED);
  named_value("DX_DLPACK_CODE_BOOL", DX_DLPACK_CODE_BOOL);
  end_list();

  begin_list("enums");
  enum_value("dx_log_level", "DX_LOG_DEBUG", DX_LOG_DEBUG);
  enum_value("dx_log_level", "DX_LOG_INFO", DX_LOG_INFO);
  enum_value("dx_log_level", "DX_LOG_WARN", DX_LOG_WARN);
  enum_value("dx_log_level", "DX_LOG_ERROR", DX_LOG_ERROR);
  enum_value("dx_attr_type", "DX_ATTR_NONE", DX_ATTR_NONE);
  enum_value("dx_attr_type", "DX_ATTR_I64", DX_ATTR_I64);
  enum_value("dx_attr_type", "DX_ATTR_F64", DX_ATTR_F64);
  enum_value("dx_attr_type", "DX_ATTR_BOOL", DX_ATTR_BOOL);
  enum_value("dx_attr_type", "DX_ATTR_STRING", DX_ATTR_STRING);
  enum_value("dx_attr_type", "DX_ATTR_I64_ARRAY", DX_ATTR_I64_ARRAY);
  enum_value("dx_attr_type", "DX_ATTR_F64_ARRAY", DX_ATTR_F64_ARRAY);
  enum_value("dx_memory_kind", "DX_MEMORY_DEVICE", DX_MEMORY_DEVICE);
  enum_value("dx_memory_kind", "DX_MEMORY_HOST", DX_MEMORY_HOST);
  enum_value("dx_memory_kind", "DX_MEMORY_PINNED", DX_MEMORY_PINNED);
  enum_value("dx_memory_kind", "DX_MEMORY_MANAGED", DX_MEMORY_MANAGED);
  enum_value("dx_copy_direction", "DX_COPY_HOST_TO_DEVICE", DX_COPY_HOST_TO_DEVICE);
  enum_value("dx_copy_direction", "DX_COPY_DEVICE_TO_HOST", DX_COPY_DEVICE_TO_HOST);
  enum_value("dx_copy_direction", "DX_COPY_DEVICE_TO_DEVICE", DX_COPY_DEVICE_TO_DEVICE);
  enum_value("dx_certification", "DX_CERTIFICATION_NONE", DX_CERTIFICATION_NONE);
  enum_value("dx_certification", "DX_CERTIFICATION_VALID", DX_CERTIFICATION_VALID);
  enum_value("dx_certification", "DX_CERTIFICATION_INVALID", DX_CERTIFICATION_INVALID);
  end_list();

  begin_list("struct_sizes");
#define SIZE_(name, type, field)             \
  sep();                                     \
  printf("    {\"name\": ");                 \
  str(#name);                                \
  printf(", \"struct\": ");                  \
  str(#type);                                \
  printf(", \"last_field\": ");              \
  str(#field);                               \
  printf(", \"value\": %d}", (int)(name));
  DX_ABI_NAMED_SIZES(SIZE_)
#undef SIZE_
  end_list();

  begin_list("struct_fields");
#define FIELD_(type, field, offset)          \
  sep();                                     \
  printf("    {\"struct\": ");               \
  str(#type);                                \
  printf(", \"field\": ");                   \
  str(#field);                               \
  printf(", \"offset\": %d, \"size\": %zu}", offset, sizeof(((type*)0)->field));
#define WHOLE_(type, size) /* whole-struct sizes are in struct_sizes where they are growable */
  DX_ABI_LAYOUT_PINS(FIELD_, WHOLE_)
#undef FIELD_
#undef WHOLE_
  end_list();

  begin_list("ops");
#define OP_(id, name, inputs, outputs, attrs) op(name, inputs, outputs, attrs);
  DX_OP_TABLE(OP_)
#undef OP_
  end_list();
  printf("\n}\n");
  return 0;
}
