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
