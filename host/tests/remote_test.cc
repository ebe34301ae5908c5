// The remote runtime (dx_runtime_connect) against a real deepxd process started here on a
// temporary unix socket with the CPU plugin, never a mock:
//  - SameApi/*: the same program and the same assertions on an in-process runtime (the CPU
//    plugin loaded into this process) and on a remote one (catalogue, tensors, views, copies,
//    dx.add, dx.matmul with a bool attribute, errors, several threads);
//  - Remote.*: what a remote runtime refuses and why; copies and safetensors between this process
//    and the daemon; tensors larger than one message;
//  - RemoteConnect.*: bad addresses and options, nothing listening, an older struct_size;
//  - RemoteFaults.*: a daemon killed with SIGKILL before and during a call (a clear DX_UNAVAILABLE
//    within the timeout, then the same error at once), while four threads invoke (all end), then
//    restarted on the same socket; a stopped daemon (DX_TIMEOUT, and the late reply dropped once
//    it runs again);
//  - RemoteVersion.*: a peer that answers the Hello with protocol major 2 (a daemon of another
//    major cannot be started, so a socket served by this test plays one with deepx::wire).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "deepx/host.h"
#include "deepx/safetensors.h"
#include "deepx/wire/wire.h"
#include "dx_test_util.h"

namespace {

using deepx_test::Code;
using deepx_test::LastError;
using Clock = std::chrono::steady_clock;

std::string TempDir() {
  std::string pattern = ::testing::TempDir() + "deepx-remote-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const char* dir = ::mkdtemp(buffer.data());
  return dir ? std::string(dir) : std::string();
}

bool CanConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

// A deepxd process on a socket of its own, serving the CPU plugin. Stopped (SIGTERM, then
// SIGKILL) when destroyed.
class Daemon {
 public:
  // In a fresh temporary directory, or (`dir` given) on that directory's socket, as a daemon
  // restarted in place would be; the directory is removed by whoever made it.
  explicit Daemon(const std::string& dir = "") {
    owns_dir_ = dir.empty();
    dir_ = owns_dir_ ? TempDir() : dir;
    socket_ = dir_ + "/deepxd.sock";
    ::unlink(socket_.c_str());
    std::vector<std::string> args = {DEEPXD, "--socket", socket_, "--plugin", CPU_PLUGIN};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::access(DEEPXD, X_OK) != 0) {
      error_ = std::string("no deepxd at ") + DEEPXD + ": build the target deepxd";
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      // The daemon dies with this test, however the test ends.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::execv(DEEPXD, argv.data());
      ::_exit(127);
    }
    if (pid_ < 0) {
      error_ = std::string("fork: ") + std::strerror(errno);
      return;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = "deepxd exited before it listened (status " + std::to_string(status) + ")";
        return;
      }
      if (CanConnect(socket_)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    error_ = "deepxd did not listen on " + socket_ + " within 20 s";
  }
  ~Daemon() {
    Stop(SIGTERM);
    if (owns_dir_) {
      ::unlink(socket_.c_str());
      ::rmdir(dir_.c_str());
    }
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  bool ok() const { return error_.empty() && pid_ > 0; }
  const std::string& error() const { return error_; }
  std::string address() const { return "unix:" + socket_; }
  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Sends `sig` and reaps the process (SIGKILL after 10 s).
  void Stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

 private:
  std::string dir_, socket_, error_;
  bool owns_dir_ = true;
  pid_t pid_ = -1;
};

dx_connect_options_t Options(uint32_t request_timeout_ms = 10000) {
  dx_connect_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = DX_CONNECT_OPTIONS_SIZE_1_1;
  o.connect_timeout_ms = 5000;
  o.request_timeout_ms = request_timeout_ms;
  o.client_name = "host_remote_test";
  return o;
}

// The daemon the SameApi and Remote tests share (one per process, started by the first test
// that needs it and stopped by the environment's tear-down).
Daemon*& SharedDaemonSlot() {
  static Daemon* daemon = nullptr;
  return daemon;
}
Daemon& SharedDaemon() {
  if (SharedDaemonSlot() == nullptr) SharedDaemonSlot() = new Daemon();
  return *SharedDaemonSlot();
}
class StopSharedDaemon : public ::testing::Environment {
 public:
  void TearDown() override {
    delete SharedDaemonSlot();
    SharedDaemonSlot() = nullptr;
  }
};
const auto* const kStopSharedDaemon = ::testing::AddGlobalTestEnvironment(new StopSharedDaemon);

struct Tensor {
  dx_tensor_t* t = nullptr;
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK) << LastError(); }
};

enum class Mode { kInProcess, kRemote };

class SameApi : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (GetParam() == Mode::kInProcess) {
      dx_runtime_options_t o;
      std::memset(&o, 0, sizeof o);
      o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
      o.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
      ASSERT_EQ(Code(dx_runtime_create(&o, &rt_)), DX_OK) << LastError();
      ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, CPU_PLUGIN, nullptr)), DX_OK) << LastError();
    } else {
      Daemon& d = SharedDaemon();
      ASSERT_TRUE(d.ok()) << d.error();
      dx_connect_options_t o = Options();
      ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt_)), DX_OK) << LastError();
    }
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "cpu", &cpu_)), DX_OK) << LastError();
  }
  void TearDown() override { EXPECT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK) << LastError(); }

  void Make(Tensor& t, std::vector<int64_t> shape, const std::vector<float>& values = {}) {
    ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape.data(),
                                    static_cast<int32_t>(shape.size()), &t.t)),
              DX_OK)
        << LastError();
    if (!values.empty()) {
      ASSERT_EQ(Code(dx_tensor_write(t.t, values.data(), values.size() * sizeof(float))), DX_OK)
          << LastError();
    }
  }
  std::vector<float> Read(const Tensor& t, size_t n) {
    std::vector<float> out(n, -1.0f);
    EXPECT_EQ(Code(dx_tensor_read(t.t, out.data(), n * sizeof(float))), DX_OK) << LastError();
    return out;
  }

  dx_runtime_t* rt_ = nullptr;
  int32_t cpu_ = -1;
};

TEST_P(SameApi, ListsPluginsDevicesOpsAndKernels) {
  int32_t plugins = 0;
  ASSERT_EQ(Code(dx_runtime_plugin_count(rt_, &plugins)), DX_OK) << LastError();
  ASSERT_EQ(plugins, 1);
  dx_plugin_info_t plugin;
  std::memset(&plugin, 0, sizeof plugin);
  plugin.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
  ASSERT_EQ(Code(dx_runtime_plugin_info(rt_, 0, &plugin)), DX_OK) << LastError();
  EXPECT_STREQ(plugin.name, "cpu");
  EXPECT_GT(plugin.num_kernels, 100);
  EXPECT_EQ(Code(dx_runtime_plugin_info(rt_, 1, &plugin)), DX_OUT_OF_RANGE);

  int32_t devices = 0;
  ASSERT_EQ(Code(dx_runtime_device_count(rt_, &devices)), DX_OK) << LastError();
  ASSERT_GE(devices, 1);
  dx_device_info_t device;
  std::memset(&device, 0, sizeof device);
  device.struct_size = DX_DEVICE_INFO_SIZE_1_0;
  ASSERT_EQ(Code(dx_runtime_device_info(rt_, cpu_, &device)), DX_OK) << LastError();
  EXPECT_STREQ(device.name, "cpu");
  EXPECT_EQ(device.device_type, kDLCPU);
  EXPECT_EQ(device.plugin_index, 0);
  int32_t index = 0;
  EXPECT_EQ(Code(dx_runtime_find_device(rt_, "no-such-device", &index)), DX_NOT_FOUND);

  int32_t ops = 0;
  ASSERT_EQ(Code(dx_runtime_op_count(rt_, &ops)), DX_OK) << LastError();
  EXPECT_GT(ops, 50);
  dx_op_id_t add = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt_, "dx.add", &add)), DX_OK) << LastError();
  const char* name = nullptr;
  ASSERT_EQ(Code(dx_runtime_op_name(rt_, add, &name)), DX_OK) << LastError();
  EXPECT_STREQ(name, "dx.add");
  dx_op_id_t missing = 0;
  EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, "example.no_such_op", &missing)), DX_NOT_FOUND);
  EXPECT_NE(LastError().find("example.no_such_op"), std::string::npos) << LastError();
  EXPECT_EQ(Code(dx_runtime_op_name(rt_, static_cast<dx_op_id_t>(ops), &name)), DX_OUT_OF_RANGE);

  int32_t kernels = 0;
  ASSERT_EQ(Code(dx_runtime_kernel_count(rt_, add, &kernels)), DX_OK) << LastError();
  ASSERT_GT(kernels, 0);
  bool f32 = false;
  for (int32_t k = 0; k < kernels; ++k) {
    dx_kernel_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = DX_KERNEL_INFO_SIZE_1_0;
    ASSERT_EQ(Code(dx_runtime_kernel_info(rt_, add, k, &info)), DX_OK) << LastError();
    EXPECT_EQ(info.plugin_index, 0);
    EXPECT_EQ(info.num_inputs, 2);
    EXPECT_EQ(info.num_outputs, 1);
    if (info.num_dtypes == 3 && info.dtypes[0] == DX_DTYPE_F32 &&
        info.dtypes[1] == DX_DTYPE_F32 && info.dtypes[2] == DX_DTYPE_F32 &&
        info.device_type == kDLCPU) {
      f32 = true;
    }
  }
  EXPECT_TRUE(f32) << "no f32 dx.add kernel on the CPU listed";
}

TEST_P(SameApi, WritesInvokesAddAndMatmulAndReads) {
  Tensor a, b, sum, c, product, product_t;
  Make(a, {2, 3}, {1, 2, 3, 4, 5, 6});
  Make(b, {2, 3}, {0.5f, -1, 10, 0.25f, 0, -6});
  Make(sum, {2, 3});
  dx_op_id_t add = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt_, "dx.add", &add)), DX_OK) << LastError();
  dx_tensor_t* in[2] = {a.t, b.t};
  ASSERT_EQ(Code(dx_invoke(rt_, add, in, 2, &sum.t, 1, nullptr)), DX_OK) << LastError();
  EXPECT_EQ(Read(sum, 6), (std::vector<float>{1.5f, 1, 13, 4.25f, 5, 0}));

  // [2,3] @ [3,2], then the same with b given transposed ([2,3]) and transpose_b set: a bool
  // attribute (an integer on the wire).
  Make(c, {3, 2}, {1, 0, 0, 1, 1, 1});
  Make(product, {2, 2});
  dx_tensor_t* mm[2] = {a.t, c.t};
  ASSERT_EQ(Code(dx_invoke_by_name(rt_, "dx.matmul", mm, 2, &product.t, 1, nullptr)), DX_OK)
      << LastError();
  EXPECT_EQ(Read(product, 4), (std::vector<float>{4, 5, 10, 11}));
  Tensor ct;
  Make(ct, {2, 3}, {1, 0, 1, 0, 1, 1});
  Make(product_t, {2, 2});
  dx_attrs_t* attrs = nullptr;
  ASSERT_EQ(Code(dx_attrs_create(&attrs)), DX_OK);
  ASSERT_EQ(Code(dx_attrs_set_bool(attrs, "transpose_b", 1)), DX_OK);
  dx_tensor_t* mmt[2] = {a.t, ct.t};
  EXPECT_EQ(Code(dx_invoke_by_name(rt_, "dx.matmul", mmt, 2, &product_t.t, 1, attrs)), DX_OK)
      << LastError();
  EXPECT_EQ(Code(dx_attrs_destroy(attrs)), DX_OK);
  EXPECT_EQ(Read(product_t, 4), (std::vector<float>{4, 5, 10, 11}));
}

TEST_P(SameApi, ViewsCopiesAndMetadata) {
  Tensor a, row, copy;
  Make(a, {2, 3}, {1, 2, 3, 4, 5, 6});
  const int64_t shape[1] = {3};
  ASSERT_EQ(Code(dx_tensor_view(a.t, shape, nullptr, 1, 3, &row.t)), DX_OK) << LastError();
  EXPECT_EQ(Read(row, 3), (std::vector<float>{4, 5, 6}));
  // A strided view: column 1 of the 2x3 tensor.
  Tensor column;
  const int64_t col_shape[1] = {2}, col_strides[1] = {3};
  ASSERT_EQ(Code(dx_tensor_view(a.t, col_shape, col_strides, 1, 1, &column.t)), DX_OK)
      << LastError();
  EXPECT_EQ(Read(column, 2), (std::vector<float>{2, 5}));
  Make(copy, {3});
  ASSERT_EQ(Code(dx_tensor_copy(rt_, copy.t, row.t)), DX_OK) << LastError();
  EXPECT_EQ(Read(copy, 3), (std::vector<float>{4, 5, 6}));

  int32_t ndim = 0;
  int64_t dims[4] = {0, 0, 0, 0};
  dx_dtype_t dtype = 0;
  int64_t numel = 0;
  int32_t device = -2;
  ASSERT_EQ(Code(dx_tensor_ndim(a.t, &ndim)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_shape(a.t, dims, 4)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_dtype(a.t, &dtype)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_numel(a.t, &numel)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_device(a.t, &device)), DX_OK);
  EXPECT_EQ(ndim, 2);
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 3);
  EXPECT_EQ(dtype, DX_DTYPE_F32);
  EXPECT_EQ(numel, 6);
  EXPECT_EQ(device, cpu_);
}

TEST_P(SameApi, RefusesTheSameBadCalls) {
  Tensor a, b, wrong;
  Make(a, {2, 3}, {1, 2, 3, 4, 5, 6});
  Make(b, {2, 3}, {1, 1, 1, 1, 1, 1});
  Make(wrong, {3, 3});
  dx_tensor_t* in[2] = {a.t, b.t};
  EXPECT_EQ(Code(dx_invoke_by_name(rt_, "dx.add", in, 2, &wrong.t, 1, nullptr)),
            DX_SHAPE_MISMATCH);
  EXPECT_NE(LastError().find("dx.add"), std::string::npos) << LastError();
  float small[2] = {0, 0};
  EXPECT_EQ(Code(dx_tensor_write(a.t, small, sizeof small)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_read(a.t, small, sizeof small)), DX_INVALID_ARGUMENT);
  dx_tensor_t* t = nullptr;
  const int64_t shape[1] = {4};
  EXPECT_EQ(Code(dx_tensor_create(rt_, 99, DX_DTYPE_F32, shape, 1, &t)), DX_OUT_OF_RANGE);
  const int64_t negative[1] = {-1};
  EXPECT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, negative, 1, &t)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, nullptr)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  // A view that reaches outside its storage.
  const int64_t big[1] = {7};
  EXPECT_EQ(Code(dx_tensor_view(a.t, big, nullptr, 1, 0, &t)), DX_OUT_OF_RANGE) << LastError();
  // A handle used after destroy.
  dx_tensor_t* gone = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &gone)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_destroy(gone)), DX_OK);
  float four[4];
  EXPECT_EQ(Code(dx_tensor_read(gone, four, sizeof four)), DX_FAILED_PRECONDITION);
}

TEST_P(SameApi, SeveralThreadsShareTheRuntime) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      const int64_t shape[1] = {16};
      dx_tensor_t* x = nullptr;
      dx_tensor_t* y = nullptr;
      if (Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &x)) != DX_OK ||
          Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &y)) != DX_OK) {
        ++failures;
        return;
      }
      std::vector<float> values(16, static_cast<float>(w));
      std::vector<float> out(16);
      for (int i = 0; i < 25; ++i) {
        dx_tensor_t* in[2] = {x, x};
        if (Code(dx_tensor_write(x, values.data(), 64)) != DX_OK ||
            Code(dx_invoke_by_name(rt_, "dx.add", in, 2, &y, 1, nullptr)) != DX_OK ||
            Code(dx_tensor_read(y, out.data(), 64)) != DX_OK || out[15] != 2.0f * w) {
          ++failures;
        }
      }
      dx_error_destroy(dx_tensor_destroy(x));
      dx_error_destroy(dx_tensor_destroy(y));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(InProcessAndRemote, SameApi,
                         ::testing::Values(Mode::kInProcess, Mode::kRemote),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kInProcess ? "InProcess" : "Remote";
                         });

// ---- what a remote runtime refuses ------------------------------------------------------------

class Remote : public ::testing::Test {
 protected:
  void SetUp() override {
    Daemon& d = SharedDaemon();
    ASSERT_TRUE(d.ok()) << d.error();
    dx_connect_options_t o = Options();
    ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt_)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "cpu", &cpu_)), DX_OK) << LastError();
  }
  void TearDown() override { EXPECT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK) << LastError(); }
  dx_runtime_t* rt_ = nullptr;
  int32_t cpu_ = -1;
};

bool Says(const std::string& message, const char* what) {
  return message.find(what) != std::string::npos;
}

TEST_F(Remote, RefusesPluginLoadsExtensionsAndStatsSayingWhy) {
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt_, CPU_PLUGIN, nullptr)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "configuration")) << LastError();
  int32_t loaded = -1, failed = -1;
  EXPECT_EQ(Code(dx_runtime_load_search_path(rt_, &loaded, &failed)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "configuration")) << LastError();
  EXPECT_EQ(loaded, -1);
  const dx_extension_t* ext = nullptr;
  EXPECT_EQ(Code(dx_runtime_plugin_extension(rt_, 0, "dx.anything", 1, &ext)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "daemon's process")) << LastError();
  dx_memory_stats_t stats;
  std::memset(&stats, 0, sizeof stats);
  stats.struct_size = DX_MEMORY_STATS_SIZE_1_0;
  EXPECT_EQ(Code(dx_runtime_device_stats(rt_, cpu_, &stats)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "statistics")) << LastError();
}

int g_deleted = 0;
void CountingDeleter(dx_dlpack_versioned_t* self) {
  ++g_deleted;
  delete self;
}

TEST_F(Remote, RefusesRawMemoryAndDlpackSayingWhy) {
  Tensor a;
  const int64_t shape[1] = {4};
  ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &a.t)), DX_OK);
  const DLTensor* dl = nullptr;
  EXPECT_EQ(Code(dx_tensor_dltensor(a.t, &dl)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "not reachable")) << LastError();
  EXPECT_EQ(dl, nullptr);
  dx_dlpack_versioned_t* exported = nullptr;
  EXPECT_EQ(Code(dx_tensor_to_dlpack(a.t, &exported)), DX_UNSUPPORTED);
  EXPECT_EQ(exported, nullptr);
  DLManagedTensor* legacy = nullptr;
  EXPECT_EQ(Code(dx_tensor_to_dlpack_legacy(a.t, &legacy)), DX_UNSUPPORTED);
  EXPECT_EQ(legacy, nullptr);

  // An import is refused and released (ownership passes on every path).
  static float data[4] = {1, 2, 3, 4};
  static int64_t dims[1] = {4};
  auto* managed = new dx_dlpack_versioned_t();
  managed->version.major = 1;
  managed->dl_tensor.data = data;
  managed->dl_tensor.device = {kDLCPU, 0};
  managed->dl_tensor.ndim = 1;
  managed->dl_tensor.dtype = {kDLFloat, 32, 1};
  managed->dl_tensor.shape = dims;
  managed->deleter = CountingDeleter;
  g_deleted = 0;
  dx_tensor_t* imported = nullptr;
  EXPECT_EQ(Code(dx_tensor_from_dlpack(rt_, managed, &imported)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "released")) << LastError();
  EXPECT_EQ(g_deleted, 1);
  EXPECT_EQ(imported, nullptr);
}

TEST_F(Remote, TensorsOfAnotherRuntimeAreRefusedByInvokeAndCopiedByCopy) {
  dx_runtime_t* local = nullptr;
  dx_runtime_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  o.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  ASSERT_EQ(Code(dx_runtime_create(&o, &local)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_load_plugin(local, CPU_PLUGIN, nullptr)), DX_OK) << LastError();
  int32_t local_cpu = -1;
  ASSERT_EQ(Code(dx_runtime_find_device(local, "cpu", &local_cpu)), DX_OK);
  {
    Tensor r, l, out_r, out_l;
    const int64_t shape[1] = {3};
    const float values[3] = {1, 2, 3};
    ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &r.t)), DX_OK);
    ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &out_r.t)), DX_OK);
    ASSERT_EQ(Code(dx_tensor_create(local, local_cpu, DX_DTYPE_F32, shape, 1, &l.t)), DX_OK);
    ASSERT_EQ(Code(dx_tensor_create(local, local_cpu, DX_DTYPE_F32, shape, 1, &out_l.t)), DX_OK);
    ASSERT_EQ(Code(dx_tensor_write(l.t, values, sizeof values)), DX_OK);

    dx_tensor_t* mixed[2] = {r.t, l.t};
    EXPECT_EQ(Code(dx_invoke_by_name(rt_, "dx.add", mixed, 2, &out_r.t, 1, nullptr)),
              DX_INVALID_ARGUMENT);
    EXPECT_TRUE(Says(LastError(), "in-process")) << LastError();
    EXPECT_EQ(Code(dx_invoke_by_name(local, "dx.add", mixed, 2, &out_l.t, 1, nullptr)),
              DX_INVALID_ARGUMENT);
    EXPECT_TRUE(Says(LastError(), "deepxd")) << LastError();

    // Copies stage through this process: local -> remote -> local.
    ASSERT_EQ(Code(dx_tensor_copy(rt_, r.t, l.t)), DX_OK) << LastError();
    ASSERT_EQ(Code(dx_tensor_copy(local, out_l.t, r.t)), DX_OK) << LastError();
    float back[3] = {0, 0, 0};
    ASSERT_EQ(Code(dx_tensor_read(out_l.t, back, sizeof back)), DX_OK);
    EXPECT_EQ(std::vector<float>(back, back + 3), (std::vector<float>{1, 2, 3}));

    // safetensors: a remote tensor is saved (read through the daemon); loading into the remote
    // runtime is refused (it allocates in devices of this process), into the local one works.
    const std::string dir = TempDir();
    const std::string path = dir + "/r.safetensors";
    const char* names[1] = {"r"};
    const dx_tensor_t* tensors[1] = {r.t};
    ASSERT_EQ(Code(dx_safetensors_save(rt_, path.c_str(), names, tensors, 1, nullptr)), DX_OK)
        << LastError();
    dx_safetensors_t* file = nullptr;
    EXPECT_EQ(Code(dx_safetensors_load(rt_, path.c_str(), cpu_, &file)), DX_UNSUPPORTED);
    EXPECT_TRUE(Says(LastError(), "deepxd")) << LastError();
    EXPECT_EQ(file, nullptr);
    ASSERT_EQ(Code(dx_safetensors_load(local, path.c_str(), local_cpu, &file)), DX_OK)
        << LastError();
    EXPECT_EQ(Code(dx_safetensors_destroy(file)), DX_OK);
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  }
  EXPECT_EQ(Code(dx_runtime_destroy(local)), DX_OK);
}

TEST_F(Remote, LargeTensorsCrossInChunks) {
  // 96 MiB: more than one 64 MiB message each way, each cut into 4 MiB bulk frames.
  const int64_t n = 24 << 20;
  Tensor a;
  ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, &n, 1, &a.t)), DX_OK) << LastError();
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 1000003);
  ASSERT_EQ(Code(dx_tensor_write(a.t, values.data(), values.size() * 4)), DX_OK) << LastError();
  std::vector<float> back(values.size(), -1.0f);
  ASSERT_EQ(Code(dx_tensor_read(a.t, back.data(), back.size() * 4)), DX_OK) << LastError();
  EXPECT_TRUE(back == values);
}

// ---- connecting --------------------------------------------------------------------------------

TEST(RemoteConnect, BadAddressesAndOptionsAreRefusedClearly) {
  dx_runtime_t* rt = nullptr;
  const std::string dir = TempDir();
  const std::string missing = dir + "/nothing.sock";
  dx_connect_options_t o = Options();
  o.connect_timeout_ms = 2000;
  auto start = Clock::now();
  EXPECT_EQ(Code(dx_runtime_connect(("unix:" + missing).c_str(), &o, &rt)), DX_UNAVAILABLE);
  EXPECT_TRUE(Says(LastError(), missing.c_str())) << LastError();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(Code(dx_runtime_connect(missing.c_str(), nullptr, &rt)), DX_UNAVAILABLE);

  // A regular file where the socket should be.
  const std::string file = dir + "/plain-file";
  int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(Code(dx_runtime_connect(file.c_str(), &o, &rt)), DX_UNAVAILABLE);
  EXPECT_TRUE(Says(LastError(), file.c_str())) << LastError();
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());

  EXPECT_EQ(Code(dx_runtime_connect("tcp:127.0.0.1:7000", &o, &rt)), DX_UNSUPPORTED);
  EXPECT_TRUE(Says(LastError(), "TCP")) << LastError();
  EXPECT_EQ(Code(dx_runtime_connect("ftp://host/x", &o, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_TRUE(Says(LastError(), "ftp")) << LastError();
  EXPECT_EQ(Code(dx_runtime_connect("unix:", &o, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_connect(("unix:/" + std::string(200, 'x')).c_str(), &o, &rt)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_connect(nullptr, &o, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_connect("", &o, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_runtime_connect(missing.c_str(), &o, nullptr)), DX_INVALID_ARGUMENT);
  dx_connect_options_t zero;
  std::memset(&zero, 0, sizeof zero);
  EXPECT_EQ(Code(dx_runtime_connect(missing.c_str(), &zero, &rt)), DX_INVALID_ARGUMENT);
  EXPECT_TRUE(Says(LastError(), "DX_CONNECT_OPTIONS_SIZE_1_1")) << LastError();
  EXPECT_EQ(rt, nullptr);
}

TEST(RemoteConnect, AnOlderStructSizeAndDefaultsConnect) {
  Daemon& d = SharedDaemon();
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  // Only up to the connect timeout: the rest reads as zero, the defaults.
  dx_connect_options_t o = Options();
  o.struct_size = DX_STRUCT_SIZE(dx_connect_options_t, connect_timeout_ms);
  o.request_timeout_ms = 1;  // past struct_size: never read
  ASSERT_EQ(Code(dx_runtime_connect(d.socket().c_str(), &o, &rt)), DX_OK) << LastError();
  int32_t ops = 0;
  EXPECT_EQ(Code(dx_runtime_op_count(rt, &ops)), DX_OK);
  Tensor t;
  const int64_t shape[1] = {1 << 20};
  EXPECT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &t.t)), DX_OK) << LastError();
  std::vector<float> bytes(1 << 20, 1.0f);
  EXPECT_EQ(Code(dx_tensor_write(t.t, bytes.data(), bytes.size() * 4)), DX_OK) << LastError();
  dx_tensor_t* keep = t.t;
  t.t = nullptr;
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
  // The tensor outlives the runtime handle and keeps the connection.
  EXPECT_EQ(Code(dx_tensor_read(keep, bytes.data(), bytes.size() * 4)), DX_OK) << LastError();
  EXPECT_EQ(Code(dx_tensor_destroy(keep)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_connect(d.socket().c_str(), nullptr, &rt)), DX_OK) << LastError();
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

// ---- a daemon that dies or stops ----------------------------------------------------------------

TEST(RemoteFaults, ADaemonKilledBetweenCallsGivesAClearErrorAtOnceThenTheSame) {
  Daemon d;
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options(3000);
  ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt)), DX_OK) << LastError();
  dx_tensor_t* t = nullptr;
  const int64_t shape[1] = {4};
  ASSERT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &t)), DX_OK) << LastError();
  d.Stop(SIGKILL);

  float out[4];
  auto start = Clock::now();
  EXPECT_EQ(Code(dx_tensor_read(t, out, sizeof out)), DX_UNAVAILABLE);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(3000));
  const std::string first = LastError();
  EXPECT_TRUE(Says(first, "lost")) << first;
  EXPECT_TRUE(Says(first, d.socket().c_str())) << first;
  EXPECT_TRUE(Says(first, "dx_tensor_read")) << first;

  // Every later request fails at once with the same reason.
  start = Clock::now();
  dx_tensor_t* more = nullptr;
  EXPECT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &more)), DX_UNAVAILABLE);
  EXPECT_EQ(Code(dx_invoke_by_name(rt, "dx.add", &t, 1, &t, 1, nullptr)), DX_UNAVAILABLE);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_TRUE(Says(LastError(), "lost during dx_tensor_read")) << LastError();
  EXPECT_EQ(more, nullptr);
  EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

TEST(RemoteFaults, ADaemonKilledDuringACallEndsItWithinTheTimeout) {
  Daemon d;
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options(5000);
  ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt)), DX_OK) << LastError();
  dx_tensor_t* t = nullptr;
  const int64_t shape[1] = {4};
  ASSERT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &t)), DX_OK) << LastError();
  // Stopped, the daemon takes the request but never answers; killed 300 ms later, it closes the
  // connection under the call.
  d.Signal(SIGSTOP);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    d.Signal(SIGKILL);
  });
  float out[4];
  const auto start = Clock::now();
  const dx_status_t code = Code(dx_tensor_read(t, out, sizeof out));
  const auto took = Clock::now() - start;
  killer.join();
  d.Stop(SIGKILL);
  EXPECT_EQ(code, DX_UNAVAILABLE) << LastError();
  EXPECT_TRUE(Says(LastError(), "closed the connection")) << LastError();
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::milliseconds(5000));
  EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

TEST(RemoteFaults, AStoppedDaemonTimesOutAndItsLateReplyIsDropped) {
  Daemon d;
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options(400);
  ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt)), DX_OK) << LastError();
  dx_tensor_t* t = nullptr;
  const int64_t shape[1] = {4};
  ASSERT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &t)), DX_OK) << LastError();
  const float values[4] = {1, 2, 3, 4};
  ASSERT_EQ(Code(dx_tensor_write(t, values, sizeof values)), DX_OK) << LastError();

  d.Signal(SIGSTOP);
  float out[4] = {0, 0, 0, 0};
  const auto start = Clock::now();
  EXPECT_EQ(Code(dx_tensor_read(t, out, sizeof out)), DX_TIMEOUT);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(350));
  EXPECT_LT(took, std::chrono::milliseconds(2000));
  EXPECT_TRUE(Says(LastError(), "400 ms")) << LastError();
  d.Signal(SIGCONT);

  // The stopped read's reply arrives first and is dropped; this read gets its own.
  const float other[4] = {5, 6, 7, 8};
  ASSERT_EQ(Code(dx_tensor_write(t, other, sizeof other)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_tensor_read(t, out, sizeof out)), DX_OK) << LastError();
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

TEST(RemoteFaults, ThreadsInFlightWhenTheDaemonDiesAllEndAndARestartedDaemonServesANewRuntime) {
  Daemon d;
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options(5000);
  ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt)), DX_OK) << LastError();
  std::atomic<int> ok{0}, unavailable{0}, other{0};
  // Each thread invokes until a call fails; a call that neither succeeds nor fails in time is
  // what this test is about, so the loop ends at a deadline too.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&] {
      const int64_t shape[1] = {256};
      dx_tensor_t* x = nullptr;
      if (Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &x)) != DX_OK) {
        ++other;
        return;
      }
      std::vector<float> values(256, 1.0f);
      while (Clock::now() < deadline) {
        dx_tensor_t* in[2] = {x, x};
        const dx_status_t code = Code(dx_invoke_by_name(rt, "dx.add", in, 2, &x, 1, nullptr));
        if (code == DX_OK) {
          ++ok;
        } else {
          (code == DX_UNAVAILABLE ? unavailable : other)++;
          break;
        }
      }
      dx_error_destroy(dx_tensor_destroy(x));
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto killed = Clock::now();
  d.Stop(SIGKILL);
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - killed, std::chrono::milliseconds(5000));
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(unavailable.load(), 4) << "other failures: " << other.load();
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);

  // A daemon started again on the same socket: the old runtime stays lost, a new one works.
  Daemon again(d.dir());
  ASSERT_TRUE(again.ok()) << again.error();
  ASSERT_EQ(Code(dx_runtime_connect(again.address().c_str(), &o, &rt)), DX_OK) << LastError();
  int32_t devices = 0;
  EXPECT_EQ(Code(dx_runtime_device_count(rt, &devices)), DX_OK);
  EXPECT_GE(devices, 1);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

// ---- another protocol major --------------------------------------------------------------------

TEST(RemoteVersion, APeerOfAnotherProtocolMajorIsRefusedNamingBoth) {
  const std::string dir = TempDir();
  const std::string path = dir + "/major2.sock";
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  // The peer reads the Hello and answers with a HelloReply of protocol 2.0.
  std::thread peer([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    deepx::wire::Limits limits;
    deepx::wire::StreamDecoder decoder(deepx::wire::Role::kServer, limits);
    std::vector<deepx::wire::Event> events;
    uint8_t buffer[4096];
    while (events.empty()) {
      ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      decoder.Feed(std::span<const uint8_t>(buffer, static_cast<size_t>(n)), events);
    }
    std::vector<uint8_t> out;
    auto header = deepx::wire::reply::Hello(0, "major-two", 2, 0);
    if (deepx::wire::EncodeReply(out, header, {}, limits).ok()) {
      (void)!::write(fd, out.data(), out.size());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(fd);
  });
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options();
  EXPECT_EQ(Code(dx_runtime_connect(path.c_str(), &o, &rt)), DX_VERSION_MISMATCH);
  EXPECT_TRUE(Says(LastError(), "2.0")) << LastError();
  EXPECT_TRUE(Says(LastError(), "1.0")) << LastError();
  EXPECT_EQ(rt, nullptr);
  peer.join();
  ::close(listener);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

// ---- asynchronous invoke, tasks and programs (ABI 1.1) ------------------------------------------
// The same assertions on an in-process runtime (its executor thread) and on a remote one (each
// task one request to the real deepxd): many tasks in flight, poll, wait with a timeout on a long
// matmul, cancelling queued tasks, a program of three ops against the three synchronous calls, a
// program whose step fails, the conventions for bad arguments and handles, tasks from several
// threads; then a daemon killed with tasks in flight (AsyncFaults).

class Async : public SameApi {
 protected:
  dx_op_id_t Op(const char* name) {
    dx_op_id_t id = 0;
    EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, name, &id)), DX_OK) << name << ": " << LastError();
    return id;
  }
  // Submits `op` on (in...) -> (out) asynchronously.
  dx_task_t* Submit(dx_op_id_t op, std::vector<dx_tensor_t*> in, dx_tensor_t* out) {
    dx_task_t* task = nullptr;
    EXPECT_EQ(Code(dx_invoke_async(rt_, op, in.data(), static_cast<int32_t>(in.size()), &out, 1,
                                   nullptr, nullptr, &task)),
              DX_OK)
        << LastError();
    EXPECT_NE(task, nullptr);
    return task;
  }
  dx_status_t Wait(dx_task_t* task, int32_t timeout_ms = -1) {
    return Code(dx_task_wait(task, timeout_ms));
  }
  void Destroy(dx_task_t* task) { EXPECT_EQ(Code(dx_task_destroy(task)), DX_OK) << LastError(); }
  // Two n×n matrices of ones and their product's tensor: a matmul long enough to be in flight.
  void BigMatmul(Tensor& a, Tensor& b, Tensor& c, int64_t n) {
    std::vector<float> ones(static_cast<size_t>(n * n), 1.0f);
    Make(a, {n, n}, ones);
    Make(b, {n, n}, ones);
    Make(c, {n, n});
  }
};

constexpr int64_t kBig = 1024;
constexpr int kChain = 4;  // matmuls queued back to back: the last is far from done at once

TEST_P(Async, ManyTasksInFlightThenWaitAllGiveTheRightValues) {
  const dx_op_id_t add = Op("dx.add");
  constexpr int kTasks = 32;
  std::vector<Tensor> in(kTasks), out(kTasks);
  std::vector<dx_task_t*> tasks;
  for (int i = 0; i < kTasks; ++i) {
    Make(in[i], {4}, std::vector<float>(4, static_cast<float>(i)));
    Make(out[i], {4});
  }
  for (int i = 0; i < kTasks; ++i) tasks.push_back(Submit(add, {in[i].t, in[i].t}, out[i].t));
  for (int i = 0; i < kTasks; ++i) {
    EXPECT_EQ(Wait(tasks[i]), DX_OK) << i << ": " << LastError();
    int32_t steps = -1;
    EXPECT_EQ(Code(dx_task_steps_completed(tasks[i], &steps)), DX_OK);
    EXPECT_EQ(steps, 1);
    // A done task gives the same outcome again, at once.
    EXPECT_EQ(Wait(tasks[i], 0), DX_OK);
    Destroy(tasks[i]);
  }
  for (int i = 0; i < kTasks; ++i) {
    EXPECT_EQ(Read(out[i], 4), std::vector<float>(4, 2.0f * i)) << i;
  }
}

TEST_P(Async, PollUntilDone) {
  Tensor a, b, c;
  BigMatmul(a, b, c, kBig);
  std::vector<dx_task_t*> chain;
  for (int i = 0; i < kChain; ++i) chain.push_back(Submit(Op("dx.matmul"), {a.t, b.t}, c.t));
  dx_task_t* task = chain.back();
  chain.pop_back();
  int32_t done = 0;
  int polls = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!done && Clock::now() < deadline) {
    ASSERT_EQ(Code(dx_task_poll(task, &done)), DX_OK) << LastError();
    ++polls;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(done, 1);
  EXPECT_GT(polls, 1);  // not done at the first look: it ran on the executor
  EXPECT_EQ(Wait(task, 0), DX_OK) << LastError();
  Destroy(task);
  for (dx_task_t* t : chain) {  // done before the last: they ran first
    int32_t earlier = 0;
    EXPECT_EQ(Code(dx_task_poll(t, &earlier)), DX_OK);
    EXPECT_EQ(earlier, 1);
    EXPECT_EQ(Wait(t, 0), DX_OK) << LastError();
    Destroy(t);
  }
  const std::vector<float> all = Read(c, static_cast<size_t>(kBig * kBig));
  EXPECT_EQ(std::count(all.begin(), all.end(), static_cast<float>(kBig)),
            static_cast<std::ptrdiff_t>(all.size()));
}

TEST_P(Async, AShortWaitOnALongMatmulTimesOutAndALaterWaitSucceeds) {
  Tensor a, b, c;
  BigMatmul(a, b, c, kBig);
  std::vector<dx_task_t*> chain;
  for (int i = 0; i < kChain; ++i) chain.push_back(Submit(Op("dx.matmul"), {a.t, b.t}, c.t));
  dx_task_t* task = chain.back();
  EXPECT_EQ(Wait(task, 1), DX_TIMEOUT) << LastError();
  EXPECT_TRUE(Says(LastError(), "not done after 1 ms")) << LastError();
  EXPECT_EQ(Wait(task, 0), DX_TIMEOUT);
  EXPECT_EQ(Wait(task, 60000), DX_OK) << LastError();
  for (dx_task_t* t : chain) {
    EXPECT_EQ(Wait(t, 0), DX_OK) << LastError();
    Destroy(t);
  }
  const std::vector<float> all = Read(c, static_cast<size_t>(kBig * kBig));
  EXPECT_EQ(all.front(), static_cast<float>(kBig));
  EXPECT_EQ(all.back(), static_cast<float>(kBig));
}

TEST_P(Async, QueuedTasksAreCancelledAndNeverRun) {
  Tensor a, b, c, x, y;
  BigMatmul(a, b, c, kBig);
  Make(x, {4}, {1, 2, 3, 4});
  Make(y, {4}, {-7, -7, -7, -7});
  dx_task_t* blocker = Submit(Op("dx.matmul"), {a.t, b.t}, c.t);
  // Queued behind the matmul: cancelled before the executor reaches them.
  std::vector<dx_task_t*> queued;
  for (int i = 0; i < 4; ++i) queued.push_back(Submit(Op("dx.add"), {x.t, x.t}, y.t));
  for (dx_task_t* t : queued) EXPECT_EQ(Code(dx_task_cancel(t)), DX_OK) << LastError();
  EXPECT_EQ(Code(dx_task_cancel(queued[0])), DX_OK);  // cancelled already: still fine
  for (dx_task_t* t : queued) {
    EXPECT_EQ(Wait(t), DX_CANCELLED) << LastError();
    EXPECT_TRUE(Says(LastError(), "cancelled before it ran")) << LastError();
    int32_t done = 0;
    EXPECT_EQ(Code(dx_task_poll(t, &done)), DX_OK);
    EXPECT_EQ(done, 1);
    Destroy(t);
  }
  EXPECT_EQ(Wait(blocker), DX_OK) << LastError();
  // Done: nothing left to cancel.
  EXPECT_EQ(Code(dx_task_cancel(blocker)), DX_FAILED_PRECONDITION);
  EXPECT_TRUE(Says(LastError(), "done already")) << LastError();
  Destroy(blocker);
  // The cancelled adds never wrote y.
  EXPECT_EQ(Read(y, 4), (std::vector<float>{-7, -7, -7, -7}));
  // A task destroyed while queued is cancelled too: y stays as it is.
  dx_task_t* blocker2 = Submit(Op("dx.matmul"), {a.t, b.t}, c.t);
  Destroy(Submit(Op("dx.add"), {x.t, x.t}, y.t));
  EXPECT_EQ(Wait(blocker2), DX_OK) << LastError();
  Destroy(blocker2);
  EXPECT_EQ(Read(y, 4), (std::vector<float>{-7, -7, -7, -7}));
}

TEST_P(Async, AProgramOfThreeOpsGivesWhatTheThreeSyncCallsGive) {
  Tensor a, w, bias, p1, q1, r1, p2, q2, r2;
  Make(a, {2, 3}, {1, -2, 3, -4, 5, -6});
  Make(w, {3, 2}, {1, 0.5f, -1, 2, 0.25f, -3});
  Make(bias, {2, 2}, {0.5f, -10, 20, -1});
  for (Tensor* t : {&p1, &q1, &r1, &p2, &q2, &r2}) Make(*t, {2, 2});
  const dx_op_id_t matmul = Op("dx.matmul"), add = Op("dx.add"), relu = Op("dx.relu");
  dx_tensor_t* mm1[2] = {a.t, w.t};
  ASSERT_EQ(Code(dx_invoke(rt_, matmul, mm1, 2, &p1.t, 1, nullptr)), DX_OK) << LastError();
  dx_tensor_t* add1[2] = {p1.t, bias.t};
  ASSERT_EQ(Code(dx_invoke(rt_, add, add1, 2, &q1.t, 1, nullptr)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_invoke(rt_, relu, &q1.t, 1, &r1.t, 1, nullptr)), DX_OK) << LastError();

  dx_program_t* program = nullptr;
  ASSERT_EQ(Code(dx_program_create(rt_, &program)), DX_OK) << LastError();
  dx_tensor_t* mm2[2] = {a.t, w.t};
  ASSERT_EQ(Code(dx_program_add_invoke(program, matmul, mm2, 2, &p2.t, 1, nullptr, nullptr)),
            DX_OK) << LastError();
  dx_tensor_t* add2[2] = {p2.t, bias.t};
  ASSERT_EQ(Code(dx_program_add_invoke(program, add, add2, 2, &q2.t, 1, nullptr, nullptr)),
            DX_OK) << LastError();
  ASSERT_EQ(Code(dx_program_add_invoke(program, relu, &q2.t, 1, &r2.t, 1, nullptr, nullptr)),
            DX_OK) << LastError();
  dx_task_t* task = nullptr;
  ASSERT_EQ(Code(dx_program_submit(program, &task)), DX_OK) << LastError();
  EXPECT_EQ(Wait(task), DX_OK) << LastError();
  int32_t steps = 0;
  EXPECT_EQ(Code(dx_task_steps_completed(task, &steps)), DX_OK);
  EXPECT_EQ(steps, 3);
  Destroy(task);
  EXPECT_EQ(Read(r2, 4), Read(r1, 4));
  EXPECT_EQ(Read(q2, 4), Read(q1, 4));
  // [[3.75, -12.5], [-10.5, 26]] + bias, then relu: the negative entry becomes 0.
  EXPECT_EQ(Read(r2, 4), (std::vector<float>{4.25f, 0, 9.5f, 25}));
  // The program may be submitted again.
  ASSERT_EQ(Code(dx_program_submit(program, &task)), DX_OK) << LastError();
  EXPECT_EQ(Wait(task), DX_OK) << LastError();
  Destroy(task);
  EXPECT_EQ(Code(dx_program_destroy(program)), DX_OK);
}

TEST_P(Async, AProgramWithABadStepSaysWhichStepAndHowManyCompleted) {
  Tensor a, b, sum, wrong, out;
  Make(a, {2, 3}, {1, 2, 3, 4, 5, 6});
  Make(b, {2, 3}, {1, 1, 1, 1, 1, 1});
  Make(sum, {2, 3});
  Make(wrong, {3, 3});
  Make(out, {2, 3}, {9, 9, 9, 9, 9, 9});
  const dx_op_id_t add = Op("dx.add");
  dx_program_t* program = nullptr;
  ASSERT_EQ(Code(dx_program_create(rt_, &program)), DX_OK) << LastError();
  dx_tensor_t* in[2] = {a.t, b.t};
  ASSERT_EQ(Code(dx_program_add_invoke(program, add, in, 2, &sum.t, 1, nullptr, nullptr)), DX_OK);
  ASSERT_EQ(Code(dx_program_add_invoke(program, add, in, 2, &wrong.t, 1, nullptr, nullptr)),
            DX_OK);
  ASSERT_EQ(Code(dx_program_add_invoke(program, add, in, 2, &out.t, 1, nullptr, nullptr)), DX_OK);
  dx_task_t* task = nullptr;
  ASSERT_EQ(Code(dx_program_submit(program, &task)), DX_OK) << LastError();
  EXPECT_EQ(Wait(task), DX_SHAPE_MISMATCH) << LastError();
  EXPECT_TRUE(Says(LastError(), "step 1 (dx.add) failed after 1 steps completed")) << LastError();
  int32_t steps = -1;
  EXPECT_EQ(Code(dx_task_steps_completed(task, &steps)), DX_OK);
  EXPECT_EQ(steps, 1);
  Destroy(task);
  EXPECT_EQ(Read(sum, 6), (std::vector<float>{2, 3, 4, 5, 6, 7}));  // step 0 ran
  EXPECT_EQ(Read(out, 6), std::vector<float>(6, 9.0f));              // step 2 did not
  EXPECT_EQ(Code(dx_program_destroy(program)), DX_OK);
}

TEST_P(Async, BadArgumentsAndHandlesAreRefusedPerTheConventions) {
  Tensor x, y;
  Make(x, {4}, {1, 2, 3, 4});
  Make(y, {4});
  const dx_op_id_t add = Op("dx.add");
  dx_tensor_t* in[2] = {x.t, x.t};
  dx_task_t* task = nullptr;
  EXPECT_EQ(Code(dx_invoke_async(rt_, add, in, 2, &y.t, 1, nullptr, nullptr, nullptr)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke_async(nullptr, add, in, 2, &y.t, 1, nullptr, nullptr, &task)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke_async(rt_, add, nullptr, 2, &y.t, 1, nullptr, nullptr, &task)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_invoke_async(rt_, 100000, in, 2, &y.t, 1, nullptr, nullptr, &task)),
            DX_NOT_FOUND);
  dx_invoke_options_t small;
  std::memset(&small, 0, sizeof small);
  small.struct_size = 4;
  EXPECT_EQ(Code(dx_invoke_async(rt_, add, in, 2, &y.t, 1, nullptr, &small, &task)),
            DX_INVALID_ARGUMENT);
  EXPECT_TRUE(Says(LastError(), "struct_size")) << LastError();
  EXPECT_EQ(task, nullptr);
  // A handle of another kind where a runtime or task belongs.
  EXPECT_EQ(Code(dx_invoke_async(reinterpret_cast<dx_runtime_t*>(x.t), add, in, 2, &y.t, 1,
                                 nullptr, nullptr, &task)),
            DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_task_wait(reinterpret_cast<dx_task_t*>(x.t), 0)), DX_FAILED_PRECONDITION);
  // Full options are accepted and copied.
  dx_invoke_options_t opts;
  std::memset(&opts, 0, sizeof opts);
  opts.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  ASSERT_EQ(Code(dx_invoke_async(rt_, add, in, 2, &y.t, 1, nullptr, &opts, &task)), DX_OK)
      << LastError();
  EXPECT_EQ(Code(dx_task_wait(task, -2)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Wait(task), DX_OK) << LastError();
  int32_t done = 0;
  EXPECT_EQ(Code(dx_task_poll(task, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_task_steps_completed(task, nullptr)), DX_INVALID_ARGUMENT);
  Destroy(task);
  // Destroyed twice, then used.
  EXPECT_EQ(Code(dx_task_destroy(task)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_task_wait(task, 0)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_task_poll(task, &done)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_task_cancel(task)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_task_destroy(nullptr)), DX_OK);
  EXPECT_EQ(Code(dx_task_wait(nullptr, 0)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_task_poll(nullptr, &done)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_task_cancel(nullptr)), DX_INVALID_ARGUMENT);
  // Programs.
  dx_program_t* program = nullptr;
  EXPECT_EQ(Code(dx_program_create(rt_, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_program_create(nullptr, &program)), DX_INVALID_ARGUMENT);
  ASSERT_EQ(Code(dx_program_create(rt_, &program)), DX_OK) << LastError();
  EXPECT_EQ(Code(dx_program_submit(program, &task)), DX_INVALID_ARGUMENT);  // empty
  EXPECT_TRUE(Says(LastError(), "empty")) << LastError();
  EXPECT_EQ(Code(dx_program_add_invoke(program, add, in, -1, &y.t, 1, nullptr, nullptr)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_program_add_invoke(program, add, in, 2, &y.t, 1, nullptr, &small)),
            DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_program_add_invoke(program, 100000, in, 2, &y.t, 1, nullptr, nullptr)),
            DX_NOT_FOUND);
  EXPECT_EQ(Code(dx_program_submit(program, nullptr)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_program_destroy(program)), DX_OK);
  EXPECT_EQ(Code(dx_program_destroy(program)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_program_add_invoke(program, add, in, 2, &y.t, 1, nullptr, nullptr)),
            DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_program_destroy(nullptr)), DX_OK);
  // A task whose tensor was destroyed before it ran fails clearly.
  Tensor a, b, c;
  BigMatmul(a, b, c, kBig);
  dx_task_t* blocker = Submit(Op("dx.matmul"), {a.t, b.t}, c.t);
  dx_tensor_t* gone = nullptr;
  const int64_t shape[1] = {4};
  ASSERT_EQ(Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &gone)), DX_OK);
  dx_task_t* late = Submit(add, {x.t, gone}, y.t);
  ASSERT_EQ(Code(dx_tensor_destroy(gone)), DX_OK);
  EXPECT_EQ(Wait(blocker), DX_OK) << LastError();
  EXPECT_EQ(Wait(late), DX_FAILED_PRECONDITION) << LastError();
  Destroy(blocker);
  Destroy(late);
}

TEST_P(Async, TasksFromSeveralThreads) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const dx_op_id_t add = Op("dx.add");
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      constexpr int kPerThread = 16;
      const int64_t shape[1] = {8};
      std::vector<dx_tensor_t*> outs(kPerThread, nullptr);
      dx_tensor_t* x = nullptr;
      if (Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &x)) != DX_OK) {
        ++failures;
        return;
      }
      std::vector<float> values(8, static_cast<float>(w + 1));
      if (Code(dx_tensor_write(x, values.data(), 32)) != DX_OK) ++failures;
      std::vector<dx_task_t*> tasks;
      for (int i = 0; i < kPerThread; ++i) {
        if (Code(dx_tensor_create(rt_, cpu_, DX_DTYPE_F32, shape, 1, &outs[i])) != DX_OK) {
          ++failures;
          continue;
        }
        dx_tensor_t* in[2] = {x, x};
        dx_task_t* t = nullptr;
        if (Code(dx_invoke_async(rt_, add, in, 2, &outs[i], 1, nullptr, nullptr, &t)) != DX_OK) {
          ++failures;
          continue;
        }
        tasks.push_back(t);
      }
      for (dx_task_t* t : tasks) {
        if (Code(dx_task_wait(t, -1)) != DX_OK) ++failures;
        dx_error_destroy(dx_task_destroy(t));
      }
      std::vector<float> out(8);
      for (dx_tensor_t* o : outs) {
        if (o == nullptr) continue;
        if (Code(dx_tensor_read(o, out.data(), 32)) != DX_OK || out[7] != 2.0f * (w + 1)) {
          ++failures;
        }
        dx_error_destroy(dx_tensor_destroy(o));
      }
      dx_error_destroy(dx_tensor_destroy(x));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(Async, DestroyingTheRuntimeCancelsQueuedTasksAndKeepsTheirHandles) {
  Tensor a, b, c, x, y;
  BigMatmul(a, b, c, kBig);
  Make(x, {4}, {1, 2, 3, 4});
  Make(y, {4});
  dx_task_t* blocker = Submit(Op("dx.matmul"), {a.t, b.t}, c.t);
  dx_task_t* queued = Submit(Op("dx.add"), {x.t, x.t}, y.t);
  // The tensors outlive the runtime handle (destroyed with the fixture's Tensor objects).
  ASSERT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK) << LastError();
  rt_ = nullptr;
  // Done at once: run to the end (waited for) if the executor had started it, else cancelled.
  const dx_status_t first = Wait(blocker, 0);
  EXPECT_TRUE(first == DX_OK || first == DX_CANCELLED) << LastError();
  EXPECT_EQ(Wait(queued, 0), DX_CANCELLED) << LastError();
  EXPECT_TRUE(Says(LastError(), "runtime was destroyed")) << LastError();
  Destroy(blocker);
  Destroy(queued);
}

INSTANTIATE_TEST_SUITE_P(InProcessAndRemote, Async,
                         ::testing::Values(Mode::kInProcess, Mode::kRemote),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kInProcess ? "InProcess" : "Remote";
                         });

TEST(AsyncFaults, ADaemonKilledWithTasksInFlightFailsThemAllWithUnavailablePromptly) {
  Daemon d;
  ASSERT_TRUE(d.ok()) << d.error();
  dx_runtime_t* rt = nullptr;
  dx_connect_options_t o = Options(30000);
  ASSERT_EQ(Code(dx_runtime_connect(d.address().c_str(), &o, &rt)), DX_OK) << LastError();
  dx_op_id_t add = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt, "dx.add", &add)), DX_OK) << LastError();
  const int64_t shape[1] = {4};
  dx_tensor_t* x = nullptr;
  dx_tensor_t* y = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &x)), DX_OK) << LastError();
  ASSERT_EQ(Code(dx_tensor_create(rt, 0, DX_DTYPE_F32, shape, 1, &y)), DX_OK) << LastError();
  // Stopped, the daemon takes the first request and never answers; the rest queue behind it.
  d.Signal(SIGSTOP);
  std::vector<dx_task_t*> tasks(8, nullptr);
  dx_tensor_t* in[2] = {x, x};
  for (auto& t : tasks) {
    ASSERT_EQ(Code(dx_invoke_async(rt, add, in, 2, &y, 1, nullptr, nullptr, &t)), DX_OK)
        << LastError();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int32_t done = 1;
  ASSERT_EQ(Code(dx_task_poll(tasks[0], &done)), DX_OK);
  EXPECT_EQ(done, 0);
  const auto start = Clock::now();
  d.Signal(SIGKILL);
  for (dx_task_t* t : tasks) {
    EXPECT_EQ(Code(dx_task_wait(t, -1)), DX_UNAVAILABLE) << LastError();
    EXPECT_TRUE(Says(LastError(), "closed the connection")) << LastError();
  }
  const auto took = Clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(3000));  // the request timeout is 30 s
  d.Stop(SIGKILL);
  // New work on the lost connection fails at once too.
  dx_task_t* after = nullptr;
  ASSERT_EQ(Code(dx_invoke_async(rt, add, in, 2, &y, 1, nullptr, nullptr, &after)), DX_OK);
  EXPECT_EQ(Code(dx_task_wait(after, 5000)), DX_UNAVAILABLE) << LastError();
  tasks.push_back(after);
  for (dx_task_t* t : tasks) EXPECT_EQ(Code(dx_task_destroy(t)), DX_OK);
  EXPECT_EQ(Code(dx_tensor_destroy(x)), DX_OK);
  EXPECT_EQ(Code(dx_tensor_destroy(y)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}
