// Host runtime tests: loading, registries, tensors, DLPack ownership, attributes, dispatch,
// error reporting. Driven through the public C API only, with the hosttest plugin.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "deepx/host.h"
#include "deepx/plugin.h"
#include "dx_test_util.h"

namespace {

using deepx_test::Code;
using deepx_test::LastError;

long Counter(int which) {
  void* lib = dlopen(HOST_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -1;
  auto fn = reinterpret_cast<long (*)(int)>(dlsym(lib, "hosttest_counter"));
  long v = fn ? fn(which) : -1;
  dlclose(lib);
  return v;
}

class Host : public ::testing::Test {
 protected:
  void SetUp() override {
    dx_runtime_options_t opts{};
    opts.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, plugin_path);
    opts.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
    opts.plugin_path = HOST_TEST_PLUGIN_DIR;
    ASSERT_EQ(Code(dx_runtime_create(&opts, &rt_)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, "hosttest", &plugin_)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "hosttest", &device_)), DX_OK);
  }
  void TearDown() override {
    for (auto* t : tensors_) Code(dx_tensor_destroy(t));
    EXPECT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK);
  }
  dx_tensor_t* Make(std::vector<int64_t> shape, dx_dtype_t dtype = DX_DTYPE_F32) {
    dx_tensor_t* t = nullptr;
    EXPECT_EQ(Code(dx_tensor_create(rt_, device_, dtype, shape.data(),
                                    static_cast<int32_t>(shape.size()), &t)),
              DX_OK)
        << LastError();
    tensors_.push_back(t);
    return t;
  }
  dx_tensor_t* MakeF32(std::vector<int64_t> shape, std::vector<float> values) {
    dx_tensor_t* t = Make(shape);
    EXPECT_EQ(Code(dx_tensor_write(t, values.data(), values.size() * sizeof(float))), DX_OK)
        << LastError();
    return t;
  }
  std::vector<float> Read(dx_tensor_t* t) {
    int64_t n = 0;
    Code(dx_tensor_numel(t, &n));
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_EQ(Code(dx_tensor_read(t, v.data(), v.size() * sizeof(float))), DX_OK) << LastError();
    return v;
  }
  dx_op_id_t Op(const char* name) {
    dx_op_id_t id = 0;
    EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, name, &id)), DX_OK) << LastError();
    return id;
  }

  dx_runtime_t* rt_ = nullptr;
  int32_t plugin_ = -1;
  int32_t device_ = -1;
  std::vector<dx_tensor_t*> tensors_;
};

TEST(HostBasics, StatusStringsAndVersion) {
  EXPECT_STREQ(dx_status_string(DX_OK), "OK");
  EXPECT_STREQ(dx_status_string(DX_SHAPE_MISMATCH), "SHAPE_MISMATCH");
  EXPECT_STREQ(dx_status_string(9999), "UNKNOWN");
  EXPECT_STREQ(dx_status_string(-1), "UNKNOWN");
  EXPECT_EQ(dx_abi_version(), DX_ABI_VERSION);
  EXPECT_STREQ(dx_dtype_string(DX_DTYPE_BF16), "bf16");
  EXPECT_STREQ(dx_dtype_string(DX_DTYPE_BOOL), "bool");
  EXPECT_STREQ(dx_dtype_string(DX_DTYPE(kDLFloat, 32, 4)), "unknown");
}

TEST(HostBasics, NullArgumentsAreErrorsNotCrashes) {
  EXPECT_EQ(Code(dx_runtime_create(nullptr, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_destroy(nullptr)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_load_plugin(nullptr, "cpu", nullptr)), DX_INVALID_ARGUMENT);
  int32_t n = 0;
  EXPECT_EQ(Code(dx_runtime_plugin_count(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_device_count(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_op_count(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_create(nullptr, 0, DX_DTYPE_F32, nullptr, 0, nullptr)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_destroy(nullptr)), DX_OK);
  EXPECT_EQ(Code(dx_tensor_ndim(nullptr, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_read(nullptr, nullptr, 0)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_to_dlpack(nullptr, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_from_dlpack(nullptr, nullptr, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_create(nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_i64(nullptr, "x", 1)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke(nullptr, 0, nullptr, 0, nullptr, 0, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke_by_name(nullptr, "dx.add", nullptr, 0, nullptr, 0, nullptr)),
            DX_INVALID_ARGUMENT);
}

TEST(HostBasics, OptionsStructSizeIsChecked) {
  dx_runtime_options_t opts{};
  dx_runtime_t* rt = nullptr;
  EXPECT_EQ(Code(dx_runtime_create(&opts, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("struct_size"), std::string::npos) << LastError();
  EXPECT_EQ(rt, nullptr);
  // An older caller's smaller struct (no plugin_path) is accepted.
  opts.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, flags);
  ASSERT_EQ(Code(dx_runtime_create(&opts, &rt)), DX_OK);
  Code(dx_runtime_destroy(rt));
}

TEST(HostBasics, NotFoundListsEveryPathTried) {
  dx_runtime_options_t opts{};
  opts.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, plugin_path);
  opts.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  opts.plugin_path = "/nonexistent/a:/nonexistent/b";
  dx_runtime_t* rt = nullptr;
  ASSERT_EQ(Code(dx_runtime_create(&opts, &rt)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt, "nosuch", nullptr)), DX_NOT_FOUND);
  std::string msg = LastError();
  EXPECT_NE(msg.find("/nonexistent/a/libdeepx-plugin-nosuch.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/b/libdeepx-plugin-nosuch.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("DEEPX_PLUGIN_PATH"), std::string::npos) << msg;
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt, "Bad Name!", nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt, "/nonexistent/lib.so", nullptr)), DX_NOT_FOUND);
  Code(dx_runtime_destroy(rt));
}

TEST_F(Host, PluginAndRegistryQueries) {
  int32_t n = 0;
  ASSERT_EQ(Code(dx_runtime_plugin_count(rt_, &n)), DX_OK);
  EXPECT_EQ(n, 1);
  dx_plugin_info_t info{};
  EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, 0, &info)), DX_INVALID_ARGUMENT);  // struct_size unset
  info.struct_size = DX_STRUCT_SIZE(dx_plugin_info_t, num_transports);
  ASSERT_EQ(Code(dx_runtime_plugin_info(rt_, 0, &info)), DX_OK);
  EXPECT_STREQ(info.name, "hosttest");
  EXPECT_STREQ(info.vendor, "deepx tests");
  EXPECT_EQ(info.abi_version, DX_ABI_VERSION);
  EXPECT_EQ(info.num_kernels, 3);
  EXPECT_EQ(info.num_memory_spaces, 1);
  EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, 1, &info)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, -1, &info)), DX_OUT_OF_RANGE);

  dx_device_info_t dev{};
  dev.struct_size = DX_DEVICE_INFO_SIZE_1_0;
  ASSERT_EQ(Code(dx_runtime_device_info(rt_, device_, &dev)), DX_OK);
  EXPECT_STREQ(dev.name, "hosttest");
  EXPECT_EQ(dev.device_type, kDLCPU);
  EXPECT_EQ(dev.alignment, 64u);
  EXPECT_EQ(Code(dx_runtime_find_device(rt_, "nope", &n)), DX_NOT_FOUND);

  dx_op_id_t add = Op("dx.add");
  const char* name = nullptr;
  ASSERT_EQ(Code(dx_runtime_op_name(rt_, add, &name)), DX_OK);
  EXPECT_STREQ(name, "dx.add");
  ASSERT_EQ(Code(dx_runtime_kernel_count(rt_, add, &n)), DX_OK);
  EXPECT_EQ(n, 1);
  dx_kernel_info_t k{};
  k.struct_size = DX_STRUCT_SIZE(dx_kernel_info_t, has_backward);
  ASSERT_EQ(Code(dx_runtime_kernel_info(rt_, add, 0, &k)), DX_OK);
  EXPECT_EQ(k.num_inputs, 2);
  EXPECT_EQ(k.num_dtypes, 3);
  EXPECT_EQ(k.dtypes[2], DX_DTYPE_F32);
  EXPECT_EQ(k.has_backward, 1);
  EXPECT_EQ(Code(dx_runtime_kernel_info(rt_, add, 5, &k)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, "dx.nosuch", &add)), DX_NOT_FOUND);
  EXPECT_EQ(Code(dx_runtime_op_name(rt_, 999, &name)), DX_OUT_OF_RANGE);
}

TEST_F(Host, DeviceStatsComeFromTheSpacesSlot) {
  dx_memory_stats_t st{};
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_INVALID_ARGUMENT);  // size unset
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, device_, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_device_stats(nullptr, device_, &st)), DX_INVALID_ARGUMENT);
  st.struct_size = DX_MEMORY_STATS_SIZE_1_0;
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, 7, &st)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, -1, &st)), DX_OUT_OF_RANGE);
  ASSERT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_OK) << LastError();
  EXPECT_EQ(st.reserved_bytes, 12345u);  // the test plugin's marker: the slot was called
  const uint64_t before = st.live_allocations;
  dx_tensor_t* t = Make({4, 4});
  ASSERT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_OK);
  EXPECT_EQ(st.live_allocations, before + 1);
  Code(dx_tensor_destroy(t));
  tensors_.pop_back();
  ASSERT_EQ(Code(dx_runtime_device_stats(rt_, device_, &st)), DX_OK);
  EXPECT_EQ(st.live_allocations, before);
  // A caller built against a smaller struct gets only the fields it declared.
  dx_memory_stats_t small{};
  small.struct_size = DX_STRUCT_SIZE(dx_memory_stats_t, in_use_bytes);
  small.reserved_bytes = 77;
  ASSERT_EQ(Code(dx_runtime_device_stats(rt_, device_, &small)), DX_OK);
  EXPECT_EQ(small.reserved_bytes, 77u);
}

TEST_F(Host, LoadingTwiceIsRefused) {
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt_, "hosttest", nullptr)), DX_ALREADY_EXISTS);
  EXPECT_NE(LastError().find("already loaded"), std::string::npos) << LastError();
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt_, HOST_TEST_PLUGIN, nullptr)), DX_ALREADY_EXISTS);
}

TEST_F(Host, TensorCreateValidates) {
  dx_tensor_t* t = nullptr;
  int64_t shape[2] = {2, -1};
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 2, &t)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("negative"), std::string::npos);
  EXPECT_EQ(Code(dx_tensor_create(rt_, 7, DX_DTYPE_F32, shape, 1, &t)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE(kDLFloat, 8, 1), shape, 1, &t)),
            DX_UNSUPPORTED);
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 40, &t)), DX_INVALID_ARGUMENT);
  int64_t huge[3] = {1LL << 40, 1LL << 40, 1LL << 40};
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, huge, 3, &t)), DX_OUT_OF_RANGE);
  int64_t big[1] = {1LL << 43};  // 32 TiB: the plugin refuses with OUT_OF_MEMORY
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, big, 1, &t)), DX_OUT_OF_MEMORY);
  EXPECT_NE(LastError().find("too big"), std::string::npos) << LastError();
  EXPECT_EQ(t, nullptr);
}

TEST_F(Host, ReadWriteRoundTripAndSizeChecks) {
  dx_tensor_t* t = MakeF32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(Read(t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  float small[2];
  EXPECT_EQ(Code(dx_tensor_read(t, small, sizeof small)), DX_INVALID_ARGUMENT);
  int32_t ndim = 0;
  ASSERT_EQ(Code(dx_tensor_ndim(t, &ndim)), DX_OK);
  EXPECT_EQ(ndim, 2);
  int64_t shape[1];
  EXPECT_EQ(Code(dx_tensor_shape(t, shape, 1)), DX_OUT_OF_RANGE);
  dx_tensor_t* scalar = Make({});
  float v = 42;
  EXPECT_EQ(Code(dx_tensor_write(scalar, &v, sizeof v)), DX_OK);
  EXPECT_EQ(Read(scalar), std::vector<float>{42});
  dx_tensor_t* empty = Make({0, 5});
  EXPECT_EQ(Code(dx_tensor_write(empty, nullptr, 0)), DX_OK);
}

TEST_F(Host, ViewsAreBoundsCheckedAndStrided) {
  dx_tensor_t* t = MakeF32({2, 3}, {1, 2, 3, 4, 5, 6});
  // The transpose as a view: shape [3,2], strides [1,3].
  int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
  dx_tensor_t* tt = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(t, shape, strides, 2, 0, &tt)), DX_OK) << LastError();
  tensors_.push_back(tt);
  EXPECT_EQ(Read(tt), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // Column 2 via offset.
  int64_t col_shape[1] = {2}, col_strides[1] = {3};
  dx_tensor_t* col = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(t, col_shape, col_strides, 1, 2, &col)), DX_OK);
  tensors_.push_back(col);
  EXPECT_EQ(Read(col), (std::vector<float>{3, 6}));
  // Out of bounds: offset 5 + 2 elements.
  int64_t two[1] = {2};
  dx_tensor_t* bad = nullptr;
  EXPECT_EQ(Code(dx_tensor_view(t, two, nullptr, 1, 5, &bad)), DX_OUT_OF_RANGE);
  EXPECT_EQ(Code(dx_tensor_view(t, two, nullptr, 1, -1, &bad)), DX_OUT_OF_RANGE);
  int64_t neg[1] = {-1};
  EXPECT_EQ(Code(dx_tensor_view(t, two, neg, 1, 3, &bad)), DX_INVALID_ARGUMENT);
  // Strided write through the view lands in the right places.
  std::vector<float> w{10, 40, 20, 50, 30, 60};
  ASSERT_EQ(Code(dx_tensor_write(tt, w.data(), w.size() * 4)), DX_OK);
  EXPECT_EQ(Read(t), (std::vector<float>{10, 20, 30, 40, 50, 60}));
  // The storage outlives the base handle while a view exists.
  dx_tensor_t* base = Make({4});
  dx_tensor_t* view = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, two, nullptr, 1, 1, &view)), DX_OK);
  long frees_before = Counter(1);
  tensors_.pop_back();
  Code(dx_tensor_destroy(base));
  EXPECT_EQ(Counter(1), frees_before);
  Code(dx_tensor_destroy(view));
  EXPECT_EQ(Counter(1), frees_before + 1);
}

TEST_F(Host, CopyBetweenLayouts) {
  dx_tensor_t* t = MakeF32({2, 3}, {1, 2, 3, 4, 5, 6});
  int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
  dx_tensor_t* tt = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(t, shape, strides, 2, 0, &tt)), DX_OK);
  tensors_.push_back(tt);
  dx_tensor_t* dst = Make({3, 2});
  ASSERT_EQ(Code(dx_tensor_copy(rt_, dst, tt)), DX_OK) << LastError();
  EXPECT_EQ(Read(dst), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  dx_tensor_t* wrong = Make({2, 3});
  EXPECT_EQ(Code(dx_tensor_copy(rt_, wrong, tt)), DX_SHAPE_MISMATCH);
  dx_tensor_t* wrong_dtype = Make({3, 2}, DX_DTYPE_I32);
  EXPECT_EQ(Code(dx_tensor_copy(rt_, wrong_dtype, tt)), DX_SHAPE_MISMATCH);
}

TEST_F(Host, InvokeByIdAndByName) {
  dx_tensor_t* a = MakeF32({4}, {1, 2, 3, 4});
  dx_tensor_t* b = MakeF32({4}, {10, 20, 30, 40});
  dx_tensor_t* y = Make({4});
  dx_tensor_t* in[2] = {a, b};
  ASSERT_EQ(Code(dx_invoke(rt_, Op("dx.add"), in, 2, &y, 1, nullptr)), DX_OK) << LastError();
  EXPECT_EQ(Read(y), (std::vector<float>{11, 22, 33, 44}));
  ASSERT_EQ(Code(dx_invoke_by_name(rt_, "dx.add", in, 2, &y, 1, nullptr)), DX_OK);
  EXPECT_EQ(Code(dx_invoke_by_name(rt_, "dx.nosuch", in, 2, &y, 1, nullptr)), DX_NOT_FOUND);
  EXPECT_EQ(Code(dx_invoke(rt_, 12345, in, 2, &y, 1, nullptr)), DX_NOT_FOUND);
}

TEST_F(Host, InvokeChecksShapesArityAndDtypes) {
  dx_tensor_t* a = MakeF32({4}, {1, 2, 3, 4});
  dx_tensor_t* b = MakeF32({3}, {1, 2, 3});
  dx_tensor_t* y = Make({4});
  dx_tensor_t* in[2] = {a, b};
  dx_op_id_t add = Op("dx.add");
  EXPECT_EQ(Code(dx_invoke(rt_, add, in, 2, &y, 1, nullptr)), DX_SHAPE_MISMATCH);
  EXPECT_NE(LastError().find("do not broadcast"), std::string::npos) << LastError();
  in[1] = a;
  dx_tensor_t* y_wrong = Make({5});
  EXPECT_EQ(Code(dx_invoke(rt_, add, in, 2, &y_wrong, 1, nullptr)), DX_SHAPE_MISMATCH);
  EXPECT_EQ(Code(dx_invoke(rt_, add, in, 1, &y, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("takes 2 inputs"), std::string::npos) << LastError();
  dx_tensor_t* null_out = nullptr;
  EXPECT_EQ(Code(dx_invoke(rt_, add, in, 2, &null_out, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke(rt_, add, in, -1, &y, 1, nullptr)), DX_INVALID_ARGUMENT);
  dx_tensor_t* ai = Make({4}, DX_DTYPE_I32);
  dx_tensor_t* yi = Make({4}, DX_DTYPE_I32);
  dx_tensor_t* in_i[2] = {ai, ai};
  EXPECT_EQ(Code(dx_invoke(rt_, add, in_i, 2, &yi, 1, nullptr)), DX_UNSUPPORTED);
  std::string msg = LastError();
  EXPECT_NE(msg.find("(i32, i32) -> (i32)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hosttest"), std::string::npos) << msg;
  // Backward requested with the forward's arity: no backward kernel matches.
  dx_invoke_options_t opts{};
  opts.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  opts.flags = DX_INVOKE_FLAG_BACKWARD;
  EXPECT_EQ(Code(dx_invoke_ex(rt_, add, in, 2, &y, 1, nullptr, &opts)), DX_UNSUPPORTED);
  EXPECT_NE(LastError().find("no backward kernel"), std::string::npos) << LastError();
  // dx.sum has no backward at all.
  dx_tensor_t* s_out = Make({});
  EXPECT_EQ(Code(dx_invoke_ex(rt_, Op("dx.sum"), &a, 1, &s_out, 1, nullptr, &opts)),
            DX_UNSUPPORTED);
  // Pinned to a plugin index that has no such kernel.
  opts.flags = DX_INVOKE_FLAG_PLUGIN;
  opts.plugin_index = 3;
  EXPECT_EQ(Code(dx_invoke_ex(rt_, add, in, 2, &y, 1, nullptr, &opts)), DX_UNSUPPORTED);
  opts.plugin_index = plugin_;
  EXPECT_EQ(Code(dx_invoke_ex(rt_, add, in, 2, &y, 1, nullptr, &opts)), DX_OK) << LastError();
  opts.struct_size = 4;
  EXPECT_EQ(Code(dx_invoke_ex(rt_, add, in, 2, &y, 1, nullptr, &opts)), DX_INVALID_ARGUMENT);
}

TEST_F(Host, BackwardDispatchUsesTheBackwardArity) {
  dx_tensor_t* dy = MakeF32({3}, {1, 2, 3});
  dx_tensor_t* a = MakeF32({3}, {0, 0, 0});
  dx_tensor_t* da = Make({3});
  dx_tensor_t* db = Make({3});
  dx_invoke_options_t opts{};
  opts.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  opts.flags = DX_INVOKE_FLAG_BACKWARD;
  dx_op_id_t add = Op("dx.add");
  dx_tensor_t* in[4] = {dy, a, a, dy};  // dy, a, b, y
  dx_tensor_t* out[2] = {da, db};
  ASSERT_EQ(Code(dx_invoke_ex(rt_, add, in, 4, out, 2, nullptr, &opts)), DX_OK) << LastError();
  EXPECT_EQ(Read(da), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Read(db), (std::vector<float>{2, 4, 6}));
  // A gradient that is not wanted is a null output.
  dx_tensor_t* only_b[2] = {nullptr, db};
  ASSERT_EQ(Code(dx_invoke_ex(rt_, add, in, 4, only_b, 2, nullptr, &opts)), DX_OK) << LastError();
  // A wrong dtype in the forward-input position does not match.
  dx_tensor_t* ai = Make({3}, DX_DTYPE_I32);
  dx_tensor_t* bad[4] = {dy, ai, a, dy};
  EXPECT_EQ(Code(dx_invoke_ex(rt_, add, bad, 4, out, 2, nullptr, &opts)), DX_UNSUPPORTED);
  // A null output outside backward is refused.
  dx_tensor_t* y = Make({3});
  dx_tensor_t* fwd_in[2] = {a, a};
  dx_tensor_t* null_out = nullptr;
  EXPECT_EQ(Code(dx_invoke(rt_, add, fwd_in, 2, &null_out, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke(rt_, add, fwd_in, 2, &y, 1, nullptr)), DX_OK);
}

TEST_F(Host, AttributesArriveInSchemaOrder) {
  dx_tensor_t* x = MakeF32({2, 2}, {1, 2, 3, 4});
  dx_tensor_t* y = Make({});
  dx_op_id_t sum = Op("dx.sum");
  // No attrs: the kernel sees no attributes at all and refuses (it wants 2 slots).
  EXPECT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y, 1, nullptr)), DX_INTERNAL);
  dx_attrs_t* attrs = nullptr;
  ASSERT_EQ(Code(dx_attrs_create(&attrs)), DX_OK);
  // Set keepdims only: the kernel still gets [axes (unset), keepdims].
  ASSERT_EQ(Code(dx_attrs_set_bool(attrs, "keepdims", 0)), DX_OK);
  ASSERT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y, 1, attrs)), DX_OK) << LastError();
  EXPECT_EQ(Read(y), std::vector<float>{10});
  // keepdims=1 needs a [1,1] output.
  ASSERT_EQ(Code(dx_attrs_set_bool(attrs, "keepdims", 1)), DX_OK);
  EXPECT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y, 1, attrs)), DX_SHAPE_MISMATCH);
  dx_tensor_t* y11 = Make({1, 1});
  ASSERT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y11, 1, attrs)), DX_OK) << LastError();
  // Bad axes are refused before the kernel runs.
  int64_t axes[2] = {0, 0};
  ASSERT_EQ(Code(dx_attrs_set_i64_array(attrs, "axes", axes, 2)), DX_OK);
  EXPECT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y11, 1, attrs)), DX_OUT_OF_RANGE);
  axes[1] = 5;
  ASSERT_EQ(Code(dx_attrs_set_i64_array(attrs, "axes", axes, 2)), DX_OK);
  EXPECT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y11, 1, attrs)), DX_OUT_OF_RANGE);
  // Unknown attribute names are refused for standard ops.
  dx_attrs_t* bad = nullptr;
  ASSERT_EQ(Code(dx_attrs_create(&bad)), DX_OK);
  ASSERT_EQ(Code(dx_attrs_set_f64(bad, "alpha", 2.0)), DX_OK);
  EXPECT_EQ(Code(dx_invoke(rt_, sum, &x, 1, &y, 1, bad)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("no attribute 'alpha'"), std::string::npos) << LastError();
  EXPECT_EQ(Code(dx_attrs_set_bool(bad, "flag", 2)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_i64_array(bad, "a", nullptr, 3)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_string(bad, "s", nullptr, -1)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_i64(bad, "", 1)), DX_INVALID_ARGUMENT);
  Code(dx_attrs_destroy(bad));
  Code(dx_attrs_destroy(attrs));
}

TEST_F(Host, KernelErrorsCarryCodeAndMessage) {
  dx_tensor_t* x = MakeF32({1}, {1});
  dx_tensor_t* y = Make({1});
  dx_op_id_t fail = Op("test.fail");
  EXPECT_EQ(Code(dx_invoke(rt_, fail, &x, 1, &y, 1, nullptr)), DX_ARITHMETIC_ERROR);
  EXPECT_NE(LastError().find("boom from test.fail"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("hosttest"), std::string::npos) << LastError();
}

// ---- DLPack -----------------------------------------------------------------------------------

struct Producer {
  static int deleted;
  static void Delete(dx_dlpack_versioned_t* self) {
    ++deleted;
    delete[] static_cast<float*>(self->dl_tensor.data);
    delete[] self->dl_tensor.shape;
    delete self;
  }
  static dx_dlpack_versioned_t* Make(uint32_t major, int64_t n, uint64_t flags = 0) {
    auto* m = new dx_dlpack_versioned_t{};
    m->version.major = major;
    m->version.minor = 0;
    m->deleter = Delete;
    m->flags = flags;
    auto* data = new float[static_cast<size_t>(n)];
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
    m->dl_tensor.data = data;
    m->dl_tensor.device = DLDevice{kDLCPU, 0};
    m->dl_tensor.ndim = 1;
    m->dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    m->dl_tensor.shape = new int64_t[1]{n};
    return m;
  }
};
int Producer::deleted = 0;

TEST_F(Host, DlpackImportIsZeroCopyAndDeletesOnce) {
  Producer::deleted = 0;
  dx_dlpack_versioned_t* m = Producer::Make(1, 4);
  void* data = m->dl_tensor.data;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack(rt_, m, &t)), DX_OK) << LastError();
  const DLTensor* dl = nullptr;
  ASSERT_EQ(Code(dx_tensor_dltensor(t, &dl)), DX_OK);
  EXPECT_EQ(dl->data, data);  // zero-copy
  int32_t dev = -2;
  ASSERT_EQ(Code(dx_tensor_device(t, &dev)), DX_OK);
  EXPECT_EQ(dev, device_);  // the hosttest space serves kDLCPU:0
  EXPECT_EQ(Read(t), (std::vector<float>{0, 1, 2, 3}));
  // The import can be an input of an op.
  dx_tensor_t* y = Make({4});
  dx_tensor_t* in[2] = {t, t};
  ASSERT_EQ(Code(dx_invoke(rt_, Op("dx.add"), in, 2, &y, 1, nullptr)), DX_OK);
  EXPECT_EQ(Read(y), (std::vector<float>{0, 2, 4, 6}));
  // A view keeps it alive past the handle.
  int64_t two[1] = {2};
  dx_tensor_t* v = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(t, two, nullptr, 1, 2, &v)), DX_OK);
  Code(dx_tensor_destroy(t));
  EXPECT_EQ(Producer::deleted, 0);
  EXPECT_EQ(Read(v), (std::vector<float>{2, 3}));
  Code(dx_tensor_destroy(v));
  EXPECT_EQ(Producer::deleted, 1);
}

TEST_F(Host, DlpackUnknownMajorIsRefusedAndReleased) {
  Producer::deleted = 0;
  dx_tensor_t* t = nullptr;
  EXPECT_EQ(Code(dx_tensor_from_dlpack(rt_, Producer::Make(2, 4), &t)), DX_VERSION_MISMATCH);
  EXPECT_EQ(Producer::deleted, 1);
  EXPECT_EQ(t, nullptr);
  // Null out-parameter: still released exactly once.
  EXPECT_EQ(Code(dx_tensor_from_dlpack(rt_, Producer::Make(1, 4), nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Producer::deleted, 2);
  // Data null with elements.
  dx_dlpack_versioned_t* m = Producer::Make(1, 4);
  delete[] static_cast<float*>(m->dl_tensor.data);
  m->dl_tensor.data = nullptr;
  EXPECT_EQ(Code(dx_tensor_from_dlpack(rt_, m, &t)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Producer::deleted, 3);
  // Unsupported dtype.
  m = Producer::Make(1, 4);
  m->dl_tensor.dtype.lanes = 4;
  EXPECT_EQ(Code(dx_tensor_from_dlpack(rt_, m, &t)), DX_UNSUPPORTED);
  EXPECT_EQ(Producer::deleted, 4);
}

TEST_F(Host, DlpackReadOnlyImportIsNotAnOutput) {
  Producer::deleted = 0;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack(rt_, Producer::Make(1, 4, DX_DLPACK_FLAG_READ_ONLY), &t)),
            DX_OK);
  tensors_.push_back(t);
  dx_tensor_t* in[2] = {t, t};
  EXPECT_EQ(Code(dx_invoke(rt_, Op("dx.add"), in, 2, &t, 1, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("read-only"), std::string::npos);
  float w[4] = {0};
  EXPECT_EQ(Code(dx_tensor_write(t, w, sizeof w)), DX_INVALID_ARGUMENT);
  dx_dlpack_versioned_t* out = nullptr;
  ASSERT_EQ(Code(dx_tensor_to_dlpack(t, &out)), DX_OK);
  EXPECT_TRUE(out->flags & DX_DLPACK_FLAG_READ_ONLY);
  out->deleter(out);
}

TEST_F(Host, DlpackExportIsZeroCopyAndOutlivesTheRuntime) {
  dx_tensor_t* t = MakeF32({2, 2}, {1, 2, 3, 4});
  dx_dlpack_versioned_t* out = nullptr;
  ASSERT_EQ(Code(dx_tensor_to_dlpack(t, &out)), DX_OK);
  const DLTensor* dl = nullptr;
  Code(dx_tensor_dltensor(t, &dl));
  EXPECT_EQ(out->dl_tensor.data, dl->data);
  EXPECT_EQ(out->version.major, 1u);
  EXPECT_EQ(out->dl_tensor.ndim, 2);
  EXPECT_EQ(out->dl_tensor.shape[1], 2);
  DLManagedTensor* legacy = nullptr;
  ASSERT_EQ(Code(dx_tensor_to_dlpack_legacy(t, &legacy)), DX_OK);
  EXPECT_EQ(legacy->dl_tensor.data, dl->data);

  // Round trip: our export imported back is the same memory, freed exactly once at the end.
  dx_tensor_t* back = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack_legacy(rt_, legacy, &back)), DX_OK);
  EXPECT_EQ(Read(back), (std::vector<float>{1, 2, 3, 4}));

  long frees = Counter(1);
  long shutdowns = Counter(2);
  // Destroy everything deepx-side, including the runtime: the export still holds the storage.
  for (auto* x : tensors_) Code(dx_tensor_destroy(x));
  tensors_.clear();
  Code(dx_tensor_destroy(back));
  EXPECT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK);
  rt_ = nullptr;
  EXPECT_EQ(Counter(1), frees);          // still alive
  EXPECT_EQ(Counter(2), shutdowns);      // plugin not shut down while memory is out
  EXPECT_EQ(static_cast<float*>(out->dl_tensor.data)[3], 4.0f);
  out->deleter(out);
  EXPECT_EQ(Counter(1), frees + 1);
  EXPECT_EQ(Counter(2), shutdowns + 1);
  // TearDown destroys a null runtime: a no-op.
}

TEST_F(Host, ConcurrentInvokesOnANonConcurrentPluginAreSerialised) {
  // The hosttest plugin does not declare CONCURRENT_KERNELS: the host serialises its kernels.
  dx_op_id_t add = Op("dx.add");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      dx_tensor_t *a = nullptr, *y = nullptr;
      int64_t shape[1] = {256};
      if (Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 1, &a)) != DX_OK ||
          Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 1, &y)) != DX_OK) {
        ++failures;
        return;
      }
      std::vector<float> v(256, static_cast<float>(t));
      Code(dx_tensor_write(a, v.data(), v.size() * 4));
      dx_tensor_t* in[2] = {a, a};
      for (int i = 0; i < 200; ++i) {
        if (Code(dx_invoke(rt_, add, in, 2, &y, 1, nullptr)) != DX_OK) ++failures;
      }
      Code(dx_tensor_read(y, v.data(), v.size() * 4));
      if (v[17] != 2.0f * t) ++failures;
      Code(dx_tensor_destroy(a));
      Code(dx_tensor_destroy(y));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
