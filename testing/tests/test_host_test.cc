// The TestHost's own contract: what it records, what it refuses, how it finds kernels.
#include <gtest/gtest.h>

#include "deepx/testing/test_host.h"

namespace {

using deepx::testing::TestHost;

constexpr DLDataType kF32{kDLFloat, 32, 1}, kI64{kDLInt, 64, 1},
    kBool{DX_DLPACK_CODE_BOOL, 8, 1};

dx_error_t* Forward(const dx_kernel_call_t*) { return nullptr; }

dx_kernel_desc_t Kernel(const char* op, const DLDataType* dtypes, int32_t in, int32_t out,
                        dx_kernel_flags_t flags = 0) {
  dx_kernel_desc_t d{};
  d.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  d.op_name = op;
  d.device_type = kDLCPU;
  d.num_inputs = in;
  d.num_outputs = out;
  d.dtypes = dtypes;
  d.flags = flags;
  d.forward = &Forward;
  return d;
}

TEST(TestHost, RecordsKernelsUnderTheirSignatureAndRefusesASecondOne) {
  TestHost t;
  const DLDataType add[3] = {kF32, kF32, kF32};
  dx_kernel_desc_t d = Kernel("dx.add", add, 2, 1);
  ASSERT_TRUE(TestHost::take(t.host()->register_kernel(t.context(), &d)).ok());
  ASSERT_EQ(t.kernels.count("dx.add(f32,f32)->(f32)@1"), 1u);
  const auto* k = t.find("dx.add", {kF32, kF32}, {kF32});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->op, "dx.add");
  EXPECT_EQ(k->desc.forward, &Forward);
  EXPECT_EQ(k->desc.op_name, nullptr);  // borrowed by the plugin: copied into `op`
  EXPECT_EQ(t.find("dx.add", {kF32, kF32, kF32}), k);
  EXPECT_EQ(t.find("dx.add", {kF32, kF32}, {kF32}, kDLCUDA), nullptr);
  EXPECT_EQ(t.find("dx.add", {kI64, kI64}, {kI64}), nullptr);

  const auto again = TestHost::take(t.host()->register_kernel(t.context(), &d));
  EXPECT_EQ(again.code, DX_ALREADY_EXISTS);
  EXPECT_NE(again.message.find("dx.add(f32,f32)->(f32)@1"), std::string::npos) << again.message;
  EXPECT_EQ(t.kernels.size(), 1u);
  EXPECT_EQ(TestHost::live_errors(), 0);
}

TEST(TestHost, AVariadicKernelIsFoundByItsFirstInputsDtype) {
  TestHost t;
  const DLDataType concat[2] = {kBool, kBool};
  dx_kernel_desc_t d = Kernel("dx.concat", concat, 1, 1, DX_KERNEL_FLAG_VARIADIC);
  ASSERT_TRUE(TestHost::take(t.host()->register_kernel(t.context(), &d)).ok());
  EXPECT_NE(t.find("dx.concat", {kBool, kBool, kBool}, {kBool}), nullptr);
  EXPECT_EQ(t.find("dx.concat", {kF32, kBool}, {kBool}), nullptr);
  EXPECT_EQ(t.find("dx.concat", {kBool}, {kF32}), nullptr);
}

TEST(TestHost, RefusesMalformedDescriptorsAndANullContext) {
  TestHost t;
  const DLDataType add[3] = {kF32, kF32, kF32};
  dx_kernel_desc_t no_forward = Kernel("dx.add", add, 2, 1);
  no_forward.forward = nullptr;
  EXPECT_EQ(TestHost::take(t.host()->register_kernel(t.context(), &no_forward)).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(TestHost::take(t.host()->register_kernel(t.context(), nullptr)).code, DX_INVALID_ARGUMENT);
  dx_kernel_desc_t d = Kernel("dx.add", add, 2, 1);
  EXPECT_EQ(TestHost::take(t.host()->register_kernel(nullptr, &d)).code, DX_INVALID_ARGUMENT);
  dx_memory_space_desc_t nameless{};
  nameless.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  EXPECT_EQ(TestHost::take(t.host()->register_memory_space(t.context(), &nameless)).code,
            DX_INVALID_ARGUMENT);
  EXPECT_TRUE(t.kernels.empty());
  EXPECT_TRUE(t.spaces.empty());
  EXPECT_EQ(TestHost::live_errors(), 0);
}

TEST(TestHost, RecordsSpacesByNameAndLogLines) {
  TestHost t;
  dx_memory_space_desc_t s{};
  s.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  s.name = "fake";
  s.kind = DX_MEMORY_HOST;
  ASSERT_TRUE(TestHost::take(t.host()->register_memory_space(t.context(), &s)).ok());
  EXPECT_EQ(TestHost::take(t.host()->register_memory_space(t.context(), &s)).code, DX_ALREADY_EXISTS);
  ASSERT_NE(t.space("fake"), nullptr);
  EXPECT_EQ(t.space("fake")->desc.kind, DX_MEMORY_HOST);
  EXPECT_EQ(t.space("other"), nullptr);
  t.host()->log(t.context(), DX_LOG_INFO, "hello");
  ASSERT_EQ(t.logs.size(), 1u);
  EXPECT_EQ(t.logs[0], "hello");
}

TEST(TestHost, NamesDtypesAsTheOpsPageDoes) {
  EXPECT_EQ(TestHost::dtype_name(kF32), "f32");
  EXPECT_EQ(TestHost::dtype_name(DLDataType{kDLBfloat, 16, 1}), "bf16");
  EXPECT_EQ(TestHost::dtype_name(kBool), "bool");
  EXPECT_EQ(TestHost::dtype_name(DLDataType{kDLFloat, 32, 4}), "code2b32l4");
  EXPECT_EQ(TestHost::key("dx.sum", {kF32}, {kF32}), "dx.sum(f32)->(f32)");
}

TEST(TestHost, PluginLoadSaysWhyAFileIsNotAPlugin) {
  TestHost t;
  deepx::testing::PluginLoad missing("/nonexistent/libdeepx-plugin-none.so", t);
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.plugin(), nullptr);
  EXPECT_FALSE(missing.error().empty());
}

}  // namespace
