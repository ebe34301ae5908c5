// The plugin module itself, loaded with dlopen as a host would: entry and version negotiation,
// descriptor, init/shutdown, the exact set of registered kernels, the "reference-cpu" memory
// space, and init failures.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "deepx/reference/register.h"
#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

class Plugin : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(DEEPX_REFERENCE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    entry_ = reinterpret_cast<dx_plugin_entry_fn>(dlsym(handle_, DX_PLUGIN_ENTRY_SYMBOL));
    ASSERT_NE(entry_, nullptr);
    plugin_ = entry_(DX_ABI_VERSION, DX_ABI_VERSION);
    ASSERT_NE(plugin_, nullptr);
  }
  void TearDown() override {
    if (handle_ != nullptr) dlclose(handle_);
    EXPECT_EQ(FakeHost::live_errors(), 0);
  }
  void* handle_ = nullptr;
  dx_plugin_entry_fn entry_ = nullptr;
  const dx_plugin_t* plugin_ = nullptr;
};

TEST_F(Plugin, EntryNegotiatesTheMajorVersion) {
  EXPECT_NE(entry_(DX_MAKE_VERSION(0, 1), DX_MAKE_VERSION(1, 7)), nullptr);
  EXPECT_NE(entry_(DX_MAKE_VERSION(1, 9), DX_MAKE_VERSION(3, 0)), nullptr);
  EXPECT_EQ(entry_(DX_MAKE_VERSION(2, 0), DX_MAKE_VERSION(2, 5)), nullptr);
  EXPECT_EQ(entry_(DX_MAKE_VERSION(0, 0), DX_MAKE_VERSION(0, 9)), nullptr);
}

TEST_F(Plugin, ExportsOnlyTheEntry) {
  EXPECT_EQ(dlsym(handle_, "deepx_reference_register"), nullptr);
  EXPECT_EQ(dlsym(handle_, "deepx_reference_kernel_count"), nullptr);
}

TEST_F(Plugin, Descriptor) {
  EXPECT_EQ(plugin_->struct_size, DX_PLUGIN_SIZE_1_0);
  EXPECT_EQ(plugin_->abi_version, DX_ABI_VERSION);
  EXPECT_STREQ(plugin_->name, "reference");
  EXPECT_STREQ(plugin_->vendor, "deepx");
  EXPECT_NE(plugin_->version, nullptr);
  EXPECT_EQ(plugin_->capabilities, DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY |
                                       DX_PLUGIN_CAP_CONCURRENT_KERNELS);
  EXPECT_NE(plugin_->init, nullptr);
  EXPECT_NE(plugin_->shutdown, nullptr);
}

// The registration docs/ops.md specifies, spelled out independently of the plugin's table: every
// kernel key, mapped to whether it has a backward kernel.
std::map<std::string, bool> expected_kernels() {
  const std::vector<DType> F = kF, I = kI;
  std::vector<DType> all = F;
  all.insert(all.end(), I.begin(), I.end());
  all.push_back(DType::kBool);
  std::vector<DType> int_and_bool = I;
  int_and_bool.push_back(DType::kBool);
  const DType B = DType::kBool;
  std::map<std::string, bool> keys;
  const auto add = [&](const std::string& op, std::vector<DType> in, std::vector<DType> out,
                       bool backward = false) {
    std::vector<DLDataType> i, o;
    for (DType d : in) i.push_back(to_dlpack(d));
    for (DType d : out) o.push_back(to_dlpack(d));
    keys[FakeHost::key(op, i, o) + "@" + std::to_string(kDLCPU)] = backward;
  };
  for (const char* op : {"dx.add", "dx.sub", "dx.mul", "dx.div", "dx.maximum", "dx.minimum"}) {
    for (DType d : F) add(op, {d, d}, {d}, true);
    for (DType d : I) add(op, {d, d}, {d});
  }
  for (DType d : F) add("dx.pow", {d, d}, {d}, true);
  for (const char* op : {"dx.eq", "dx.ne", "dx.lt", "dx.le", "dx.gt", "dx.ge"}) {
    for (DType d : all) add(op, {d, d}, {B});
  }
  for (const char* op : {"dx.logical_and", "dx.logical_or", "dx.logical_xor"}) add(op, {B, B}, {B});
  for (DType d : all) add("dx.where", {B, d, d}, {d}, d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16);
  for (const char* op : {"dx.neg", "dx.abs", "dx.sign", "dx.clamp"}) {
    for (DType d : F) add(op, {d}, {d}, true);
    for (DType d : I) add(op, {d}, {d});
  }
  for (const char* op : {"dx.exp", "dx.relu", "dx.reciprocal", "dx.sqrt", "dx.rsqrt", "dx.expm1",
                         "dx.log", "dx.log1p", "dx.sin", "dx.cos", "dx.tan", "dx.tanh", "dx.erf",
                         "dx.sigmoid", "dx.silu", "dx.gelu"}) {
    for (DType d : F) add(op, {d}, {d}, true);
  }
  for (const char* op : {"dx.floor", "dx.ceil", "dx.round"}) {
    for (DType d : F) add(op, {d}, {d});
  }
  add("dx.logical_not", {B}, {B});
  for (DType d : int_and_bool) add("dx.bitwise_not", {d}, {d});
  for (DType from : all) {
    for (DType to : all) {
      const bool ff = std::find(F.begin(), F.end(), from) != F.end() &&
                      std::find(F.begin(), F.end(), to) != F.end();
      add("dx.cast", {from}, {to}, ff);
    }
  }
  for (DType d : F) add("dx.sum", {d}, {d}, true);
  for (DType d : I) add("dx.sum", {d}, {DType::kI64});
  for (DType d : F) add("dx.mean", {d}, {d}, true);
  for (DType d : I) add("dx.mean", {d}, {DType::kF64});
  for (DType d : F) add("dx.prod", {d}, {d}, true);
  for (DType d : I) add("dx.prod", {d}, {DType::kI64});
  for (const char* op : {"dx.max", "dx.min"}) {
    for (DType d : F) add(op, {d}, {d}, true);
    for (DType d : I) add(op, {d}, {d});
  }
  for (const char* op : {"dx.argmax", "dx.argmin"}) {
    for (DType d : F) add(op, {d}, {DType::kI64});
    for (DType d : I) add(op, {d}, {DType::kI64});
  }
  for (DType d : F) add("dx.matmul", {d, d}, {d}, true);
  add("dx.matmul", {DType::kI8, DType::kI8}, {DType::kI32});
  for (DType d : F) add("dx.softmax", {d}, {d}, true);
  for (DType d : F) {
    add("dx.log_softmax", {d}, {d}, true);
    add("dx.linear", {d, d, d}, {d}, true);
    add("dx.layer_norm", {d, d, d}, {d, d, d}, true);
    add("dx.rms_norm", {d, d}, {d}, true);
    add("dx.embedding", {d, DType::kI32}, {d}, true);
    add("dx.embedding", {d, DType::kI64}, {d}, true);
    add("dx.cross_entropy", {d, DType::kI64}, {d}, true);
    add("dx.conv2d", {d, d, d}, {d}, true);
    add("dx.max_pool2d", {d}, {d}, true);
    add("dx.avg_pool2d", {d}, {d}, true);
    add("dx.batch_norm", {d, d, d, d, d}, {d}, true);
    add("dx.scaled_dot_product_attention", {d, d, d, d}, {d}, true);
    add("dx.scaled_dot_product_attention", {d, d, d, DType::kBool}, {d}, true);
  }
  for (DType d : all) add("dx.transpose", {d}, {d}, is_float(d));
  for (DType d : all) add("dx.copy", {d}, {d}, is_float(d));
  for (DType d : all) add("dx.fill", {}, {d});
  for (const char* op : {"dx.reshape", "dx.broadcast_to", "dx.slice", "dx.pad", "dx.tile"}) {
    for (DType d : all) add(op, {d}, {d}, is_float(d));
  }
  for (DType d : all) {
    add("dx.concat", {d}, {d}, is_float(d));  // variadic: one shared input dtype
    for (int n = 1; n <= 8; ++n) add("dx.split", {d}, std::vector<DType>(n, d), is_float(d));
    add("dx.index_select", {d, DType::kI32}, {d}, is_float(d));
    add("dx.index_select", {d, DType::kI64}, {d}, is_float(d));
    add("dx.gather", {d, DType::kI64}, {d}, is_float(d));
    if (d != B) add("dx.scatter_add", {d, DType::kI64, d}, {d}, is_float(d));
  }
  for (DType d : F) add("dx.arange", {}, {d});
  for (DType d : I) add("dx.arange", {}, {d});
  for (DType d : F) {
    add("dx.uniform", {}, {d});
    add("dx.normal", {}, {d});
    add("dx.dropout", {d}, {d, B}, true);
  }
  return keys;
}

std::set<std::string> expected_kernel_keys() {
  std::set<std::string> keys;
  for (const auto& [key, backward] : expected_kernels()) keys.insert(key);
  return keys;
}

TEST_F(Plugin, InitRegistersEveryKernelAndTheMemorySpace) {
  FakeHost fake;
  void* state = nullptr;
  ASSERT_TRUE(take(fake.host(), plugin_->init(fake.host(), fake.context(), &state)).ok());
  ASSERT_NE(state, nullptr);

  std::set<std::string> got;
  for (const auto& [key, kernel] : fake.kernels) {
    got.insert(key);
    EXPECT_EQ(kernel.desc.device_type, kDLCPU) << key;
    EXPECT_TRUE(kernel.desc.flags & DX_KERNEL_FLAG_DETERMINISTIC) << key;
    EXPECT_EQ((kernel.desc.flags & DX_KERNEL_FLAG_VARIADIC) != 0, key.rfind("dx.concat(", 0) == 0) << key;
    EXPECT_NE(kernel.desc.forward, nullptr) << key;
    static const auto expected = expected_kernels();
    EXPECT_EQ(kernel.desc.backward != nullptr, expected.count(key) && expected.at(key)) << key;
    EXPECT_EQ(kernel.desc.struct_size, DX_KERNEL_DESC_SIZE_1_0) << key;
  }
  EXPECT_EQ(got, expected_kernel_keys());
  EXPECT_EQ(got.size(), 704u);
  EXPECT_EQ(deepx_reference_kernel_count(), 704);

  ASSERT_EQ(fake.spaces.size(), 1u);
  const RegisteredSpace& space = fake.spaces[0];
  EXPECT_EQ(space.name, "reference-cpu");
  EXPECT_EQ(space.desc.device.device_type, kDLCPU);
  EXPECT_EQ(space.desc.device.device_id, 0);
  EXPECT_EQ(space.desc.kind, DX_MEMORY_HOST);
  EXPECT_EQ(space.desc.alignment, 64u);
  EXPECT_EQ(space.desc.struct_size, DX_MEMORY_SPACE_DESC_SIZE_1_0);
  EXPECT_NE(space.desc.alloc, nullptr);
  EXPECT_NE(space.desc.free, nullptr);
  EXPECT_NE(space.desc.copy, nullptr);
  EXPECT_NE(space.desc.fill, nullptr);
  EXPECT_EQ(space.desc.stream_create, nullptr);
  EXPECT_EQ(space.desc.event_create, nullptr);
  EXPECT_EQ(space.desc.ipc_export, nullptr);

  // A kernel registered by the module runs through the ABI.
  const TestTensor a = TestTensor::of(DType::kF32, {2}, {1.5, 2});
  const TestTensor b = TestTensor::of(DType::kF32, {}, {4});
  TestTensor out(DType::kF32, {2});
  const std::vector<DLDataType> f32x2 = {to_dlpack(DType::kF32), to_dlpack(DType::kF32)};
  const auto it = fake.kernels.find(FakeHost::key("dx.mul", f32x2, {to_dlpack(DType::kF32)}) + "@1");
  ASSERT_NE(it, fake.kernels.end());
  const DLTensor* ins[] = {a.dl(), b.dl()};
  const DLTensor* outs[] = {out.dl()};
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.kernel_data = it->second.desc.kernel_data;
  call.inputs = ins;
  call.outputs = outs;
  call.num_inputs = 2;
  call.num_outputs = 1;
  call.host = fake.host();
  ASSERT_TRUE(take(fake.host(), it->second.desc.forward(&call)).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{6, 8}));

  plugin_->shutdown(state);
}

TEST_F(Plugin, MemorySpaceAllocCopyFillFree) {
  FakeHost fake;
  void* state = nullptr;
  ASSERT_TRUE(take(fake.host(), plugin_->init(fake.host(), fake.context(), &state)).ok());
  const dx_memory_space_desc_t& s = fake.spaces.at(0).desc;
  void* sd = s.space_data;

  void* p = nullptr;
  ASSERT_TRUE(take(fake.host(), s.alloc(sd, 100, nullptr, &p)).ok());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  void* q = nullptr;
  ASSERT_TRUE(take(fake.host(), s.alloc(sd, 100, nullptr, &q)).ok());
  void* empty = nullptr;
  ASSERT_TRUE(take(fake.host(), s.alloc(sd, 0, nullptr, &empty)).ok());

  unsigned char host_buffer[100];
  for (int i = 0; i < 100; ++i) host_buffer[i] = static_cast<unsigned char>(i);
  ASSERT_TRUE(take(fake.host(), s.copy(sd, p, host_buffer, 100, DX_COPY_HOST_TO_DEVICE, nullptr)).ok());
  ASSERT_TRUE(take(fake.host(), s.copy(sd, q, p, 100, DX_COPY_DEVICE_TO_DEVICE, nullptr)).ok());
  unsigned char back[100] = {};
  ASSERT_TRUE(take(fake.host(), s.copy(sd, back, q, 100, DX_COPY_DEVICE_TO_HOST, nullptr)).ok());
  EXPECT_EQ(std::memcmp(back, host_buffer, 100), 0);
  EXPECT_EQ(take(fake.host(), s.copy(sd, back, q, 100, 7, nullptr)).code, DX_INVALID_ARGUMENT);

  for (std::uint32_t size : {1u, 2u, 4u, 8u}) {
    const std::uint64_t pattern = 0x0807060504030201ull;
    ASSERT_TRUE(take(fake.host(), s.fill(sd, p, 96, &pattern, size, nullptr)).ok()) << size;
    for (int i = 0; i < 96; ++i) {
      ASSERT_EQ(static_cast<unsigned char*>(p)[i], static_cast<unsigned char>(i % size + 1)) << size;
    }
  }
  const std::uint32_t pattern = 7;
  EXPECT_EQ(take(fake.host(), s.fill(sd, p, 96, &pattern, 3, nullptr)).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(take(fake.host(), s.fill(sd, p, 98, &pattern, 4, nullptr)).code, DX_INVALID_ARGUMENT);

  void* untouched = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(take(fake.host(), s.alloc(sd, UINT64_MAX, nullptr, &untouched)).code, DX_OUT_OF_MEMORY);
  EXPECT_EQ(take(fake.host(), s.alloc(sd, std::uint64_t{1} << 62, nullptr, &untouched)).code, DX_OUT_OF_MEMORY);
  EXPECT_EQ(untouched, reinterpret_cast<void*>(0x1234));

  EXPECT_TRUE(take(fake.host(), s.free(sd, p, nullptr)).ok());
  EXPECT_TRUE(take(fake.host(), s.free(sd, q, nullptr)).ok());
  EXPECT_TRUE(take(fake.host(), s.free(sd, empty, nullptr)).ok());
  EXPECT_TRUE(take(fake.host(), s.free(sd, nullptr, nullptr)).ok());
  plugin_->shutdown(state);
}

TEST_F(Plugin, InitRefusesAnotherMajorAndAnIncompleteHostTable) {
  FakeHost other_major;
  other_major.mutable_host()->abi_version = DX_MAKE_VERSION(2, 0);
  void* state = nullptr;
  EXPECT_EQ(take(other_major.host(), plugin_->init(other_major.host(), other_major.context(), &state)).code,
            DX_VERSION_MISMATCH);
  EXPECT_TRUE(other_major.kernels.empty());
  EXPECT_EQ(state, nullptr);

  FakeHost newer_minor;  // a newer minor of major 1 is fine
  newer_minor.mutable_host()->abi_version = DX_MAKE_VERSION(1, 3);
  ASSERT_TRUE(take(newer_minor.host(), plugin_->init(newer_minor.host(), newer_minor.context(), &state)).ok());
  plugin_->shutdown(state);
  state = nullptr;

  FakeHost truncated;
  truncated.mutable_host()->struct_size = DX_STRUCT_SIZE(dx_host_t, host_free);
  EXPECT_EQ(take(truncated.host(), plugin_->init(truncated.host(), truncated.context(), &state)).code,
            DX_INVALID_ARGUMENT);
  EXPECT_TRUE(truncated.kernels.empty());
  EXPECT_EQ(state, nullptr);
}

TEST_F(Plugin, InitPropagatesRegistrationErrors) {
  // Initialising twice into the same host: the second registration collides.
  FakeHost fake;
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_TRUE(take(fake.host(), plugin_->init(fake.host(), fake.context(), &first)).ok());
  EXPECT_EQ(take(fake.host(), plugin_->init(fake.host(), fake.context(), &second)).code,
            DX_ALREADY_EXISTS);
  EXPECT_EQ(second, nullptr);
  plugin_->shutdown(first);
  // Two independent hosts (two runtimes) each get everything.
  FakeHost a, b;
  void* sa = nullptr;
  void* sb = nullptr;
  ASSERT_TRUE(take(a.host(), plugin_->init(a.host(), a.context(), &sa)).ok());
  ASSERT_TRUE(take(b.host(), plugin_->init(b.host(), b.context(), &sb)).ok());
  EXPECT_EQ(a.kernels.size(), b.kernels.size());
  plugin_->shutdown(sa);
  plugin_->shutdown(sb);
}

TEST(ReferenceRegister, StaticLibraryRegistersTheSameKernels) {
  FakeHost fake;
  ASSERT_TRUE(take(fake.host(), deepx_reference_register(fake.host(), fake.context())).ok());
  std::set<std::string> got;
  for (const auto& [key, kernel] : fake.kernels) got.insert(key);
  EXPECT_EQ(got, expected_kernel_keys());
  EXPECT_TRUE(fake.spaces.empty());  // the memory space belongs to the plugin module
  FakeHost old;
  old.mutable_host()->abi_version = DX_MAKE_VERSION(0, 9);
  EXPECT_EQ(take(old.host(), deepx_reference_register(old.host(), old.context())).code,
            DX_VERSION_MISMATCH);
  EXPECT_EQ(deepx_reference_register(nullptr, nullptr), nullptr);  // nothing to report with
}

}  // namespace
}  // namespace deepx::ref::testing
