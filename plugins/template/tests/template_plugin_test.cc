// The template plugin through the plugin ABI, with the shared test host: it loads, fills every
// descriptor slot, registers nothing, says so, and refuses a host of another ABI major.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "deepx/testing/test_host.h"

namespace {

using deepx::testing::PluginLoad;
using deepx::testing::TestHost;

TEST(TemplatePlugin, LoadsWithEverySlotAndRegistersNothing) {
  TestHost host;
  {
    PluginLoad load(DEEPX_TEMPLATE_PLUGIN_PATH, host);
    ASSERT_TRUE(load.ok()) << load.error();
    const dx_plugin_t* p = load.plugin();
    EXPECT_STREQ(p->name, "template");
    EXPECT_EQ(p->struct_size, size_t{DX_PLUGIN_SIZE_1_0});
    EXPECT_EQ(p->abi_version, DX_ABI_VERSION);
    EXPECT_EQ(p->capabilities, 0u);  // claims nothing
    EXPECT_NE(p->shutdown, nullptr);
    ASSERT_NE(p->get_extension, nullptr);
    EXPECT_EQ(p->get_extension(load.state(), "vendor.anything", 1), nullptr);
    EXPECT_NE(load.state(), nullptr);  // per-runtime state, released by shutdown
    EXPECT_TRUE(host.kernels.empty());
    EXPECT_TRUE(host.spaces.empty());
    EXPECT_TRUE(host.transports.empty());
    ASSERT_EQ(host.logs.size(), 1u);
    EXPECT_NE(host.logs[0].find("registers no memory space and no kernel"), std::string::npos)
        << host.logs[0];
  }  // shutdown
  EXPECT_EQ(TestHost::live_errors(), 0);
}

TEST(TemplatePlugin, RefusesAHostOfAnotherMajor) {
  TestHost host;
  host.mutable_host()->abi_version = DX_MAKE_VERSION(2, 0);
  PluginLoad load(DEEPX_TEMPLATE_PLUGIN_PATH, host);
  EXPECT_FALSE(load.ok());
  EXPECT_EQ(load.init_status(), DX_FAILED_PRECONDITION);
  EXPECT_NE(load.error().find("not ABI 1.x"), std::string::npos) << load.error();
  EXPECT_TRUE(host.logs.empty());
  EXPECT_EQ(TestHost::live_errors(), 0);
}

TEST(TemplatePlugin, TheEntryAnswersOnlyItsMajor) {
  TestHost host;
  PluginLoad load(DEEPX_TEMPLATE_PLUGIN_PATH, host);
  ASSERT_NE(load.library(), nullptr) << load.error();
  auto entry = reinterpret_cast<dx_plugin_entry_fn>(dlsym(load.library(), DX_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(DX_MAKE_VERSION(2, 0), DX_MAKE_VERSION(2, 3)), nullptr);
  EXPECT_NE(entry(DX_MAKE_VERSION(1, 0), DX_MAKE_VERSION(2, 0)), nullptr);
}

}  // namespace
