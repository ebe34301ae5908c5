// ABI layout and macro tests. The pins are static_asserts (a reordering fails the build); the
// tests check the helper macros and the status table at run time.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <set>
#include <string>

#include "abi_layout_pins.h"
#include "deepx/host.h"
#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "deepx/safetensors.h"

#define PIN_CXX(type, field, offset) \
  static_assert(offsetof(type, field) == (offset), #type "." #field " moved");
#define SIZE_CXX(type, size) static_assert(sizeof(type) == (size), #type " resized");
#if defined(__LP64__)
DX_ABI_LAYOUT_PINS(PIN_CXX, SIZE_CXX)
#endif

#define NAMED_SIZE_CXX(name, type, field) \
  static_assert(name == DX_STRUCT_SIZE(type, field), #name " is not the size up to " #field);
#define DTYPE_CXX(name, code, bits) \
  static_assert(name == DX_DTYPE(code, bits, 1), #name " differs from DX_DTYPE()");
#if defined(__LP64__)
DX_ABI_NAMED_SIZES(NAMED_SIZE_CXX)
#endif
DX_ABI_DTYPE_CONSTANTS(DTYPE_CXX)

static_assert(DX_ABI_VERSION_PACKED == DX_ABI_VERSION, "DX_ABI_VERSION_PACKED differs from DX_ABI_VERSION");

extern "C" int dx_abi_layout_c11_checked(void);

namespace {

TEST(AbiLayout, C11PinsCompiled) { EXPECT_EQ(dx_abi_layout_c11_checked(), 1); }

TEST(AbiVersion, PackAndUnpack) {
  EXPECT_EQ(DX_VERSION_MAJOR(DX_MAKE_VERSION(3, 7)), 3u);
  EXPECT_EQ(DX_VERSION_MINOR(DX_MAKE_VERSION(3, 7)), 7u);
  EXPECT_EQ(DX_ABI_VERSION, DX_MAKE_VERSION(DX_ABI_VERSION_MAJOR, DX_ABI_VERSION_MINOR));
  EXPECT_LT(DX_MAKE_VERSION(1, 65535), DX_MAKE_VERSION(2, 0));
}

TEST(AbiStructSize, CoversLastFieldWithoutTrailingPadding) {
  EXPECT_EQ(DX_STRUCT_SIZE(dx_kernel_desc_t, cost),
            offsetof(dx_kernel_desc_t, cost) + sizeof(void*));
  EXPECT_TRUE(DX_STRUCT_HAS(dx_kernel_desc_t, DX_STRUCT_SIZE(dx_kernel_desc_t, cost), cost));
  EXPECT_FALSE(DX_STRUCT_HAS(dx_kernel_desc_t, offsetof(dx_kernel_desc_t, cost), cost));
  EXPECT_TRUE(DX_STRUCT_HAS(dx_kernel_desc_t, offsetof(dx_kernel_desc_t, cost), supports));
}

TEST(AbiStatus, TableIsDenseUniqueAndStartsAtOk) {
  std::set<int> values;
  std::set<std::string> names;
#define COLLECT(name, value, desc)          \
  values.insert(value);                     \
  names.insert(#name);                      \
  EXPECT_GT(std::strlen(desc), 5u) << #name;
  DX_STATUS_TABLE(COLLECT)
#undef COLLECT
  EXPECT_EQ(DX_OK, 0);
  EXPECT_EQ(values.size(), static_cast<size_t>(DX_STATUS_COUNT_));
  EXPECT_EQ(*values.begin(), 0);
  EXPECT_EQ(*values.rbegin(), DX_STATUS_COUNT_ - 1);
  EXPECT_EQ(names.size(), values.size());
}

TEST(AbiOps, TableNamesAreNamespacedAndUnique) {
  std::set<std::string> names;
  int count = 0;
#define COLLECT_OP(id, name, nin, nout, attrs)                  \
  ++count;                                                      \
  names.insert(name);                                           \
  EXPECT_EQ(std::string(name).rfind("dx.", 0), 0u) << name;     \
  EXPECT_GE(nin, -1);                                           \
  EXPECT_GE(nout, -1);
  DX_OP_TABLE(COLLECT_OP)
#undef COLLECT_OP
  EXPECT_EQ(names.size(), static_cast<size_t>(count));
  EXPECT_GE(count, 70);
}

TEST(AbiDtype, PackedDtypeMatchesDLDataTypeLayout) {
  DLDataType t;
  t.code = kDLFloat;
  t.bits = 32;
  t.lanes = 1;
  dx_dtype_t packed = 0;
  static_assert(sizeof(packed) == sizeof(t));
  std::memcpy(&packed, &t, sizeof t);
  EXPECT_EQ(packed, DX_DTYPE_F32);
  EXPECT_EQ(DX_DTYPE_BOOL & 0xFFu, 6u);
}

TEST(AbiHelpers, FindAttrSkipsUnsetSlots) {
  dx_attr_t attrs[2];
  std::memset(attrs, 0, sizeof attrs);
  attrs[0].name = "axes";
  attrs[0].type = DX_ATTR_NONE;
  attrs[1].name = "keepdims";
  attrs[1].type = DX_ATTR_BOOL;
  attrs[1].value.i64 = 1;
  dx_kernel_call_t call;
  std::memset(&call, 0, sizeof call);
  call.attrs = attrs;
  call.num_attrs = 2;
  EXPECT_EQ(dx_call_find_attr(&call, "axes"), nullptr);
  ASSERT_NE(dx_call_find_attr(&call, "keepdims"), nullptr);
  EXPECT_EQ(dx_call_find_attr(&call, "keepdims")->value.i64, 1);
  EXPECT_EQ(dx_call_find_attr(&call, "keep"), nullptr);
  EXPECT_EQ(dx_call_find_attr(&call, "keepdimsx"), nullptr);
}

}  // namespace
