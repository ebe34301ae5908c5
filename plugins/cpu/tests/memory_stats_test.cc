// The "cpu" memory space's statistics through the host (dx_runtime_device_stats): live blocks,
// bytes in use and their peak follow tensor creation and destruction.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../../host/tests/dx_test_util.h"
#include "deepx/host.h"

namespace {

using deepx_test::Code;
using deepx_test::LastError;

class CpuMemoryStats : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(Code(dx_runtime_create(nullptr, &rt_)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, "cpu", nullptr)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "cpu", &device_)), DX_OK);
  }
  void TearDown() override { Code(dx_runtime_destroy(rt_)); }

  dx_memory_stats_t Stats() {
    dx_memory_stats_t st{};
    st.struct_size = DX_MEMORY_STATS_SIZE_1_0;
    EXPECT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_OK) << LastError();
    return st;
  }

  dx_runtime_t* rt_ = nullptr;
  int32_t device_ = -1;
};

TEST_F(CpuMemoryStats, FollowAllocationsAndFrees) {
  const dx_memory_stats_t start = Stats();
  EXPECT_EQ(start.reserved_bytes, 0u);  // blocks go back to the C library at once
  std::vector<dx_tensor_t*> tensors;
  const int64_t shape[1] = {1 << 20};  // 4 MiB of f32 each
  for (int i = 0; i < 3; ++i) {
    dx_tensor_t* t = nullptr;
    ASSERT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 1, &t)), DX_OK);
    tensors.push_back(t);
  }
  const dx_memory_stats_t full = Stats();
  EXPECT_EQ(full.live_allocations, start.live_allocations + 3);
  EXPECT_GE(full.in_use_bytes, start.in_use_bytes + 3 * (4u << 20));
  EXPECT_LT(full.in_use_bytes, start.in_use_bytes + 3 * (4u << 20) + 3 * 8192);  // usable sizes
  EXPECT_GE(full.peak_in_use_bytes, full.in_use_bytes);
  for (dx_tensor_t* t : tensors) Code(dx_tensor_destroy(t));
  const dx_memory_stats_t after = Stats();
  EXPECT_EQ(after.live_allocations, start.live_allocations);
  EXPECT_EQ(after.in_use_bytes, start.in_use_bytes);
  EXPECT_GE(after.peak_in_use_bytes, full.in_use_bytes);  // the high-water mark stays

  // An empty tensor allocates nothing.
  const int64_t empty[1] = {0};
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, empty, 1, &t)), DX_OK);
  EXPECT_EQ(Stats().live_allocations, start.live_allocations);
  Code(dx_tensor_destroy(t));
}

}  // namespace
