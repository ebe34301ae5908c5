// The ABI 1.0 contract of the client API, as bindings rely on it: errors are objects that any
// thread may read, handles detect use after destroy, tensors outlive their runtime handle,
// plugins load while other threads invoke, extensions travel both ways, and bad plugin files
// are refused with a message instead of crashing the process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deepx/host.h"
#include "deepx/safetensors.h"

namespace {

struct Result {
  dx_status_t code;
  std::string message;
};

// Reads and frees an error object (null is success).
Result Take(dx_error_t* e) {
  size_t length = 0;
  const char* text = dx_error_message(e, &length);
  Result r{dx_error_code(e), std::string(text, length)};
  dx_error_destroy(e);
  return r;
}
dx_status_t Code(dx_error_t* e) { return Take(e).code; }

long HostTestCounter(int which) {
  void* lib = dlopen(HOST_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return -1;
  auto fn = reinterpret_cast<long (*)(int)>(dlsym(lib, "hosttest_counter"));
  long v = fn ? fn(which) : -1;
  dlclose(lib);
  return v;
}

dx_runtime_t* NewRuntime() {
  dx_runtime_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  o.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  dx_runtime_t* rt = nullptr;
  EXPECT_EQ(Code(dx_runtime_create(&o, &rt)), DX_OK);
  return rt;
}

class Contract : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = NewRuntime();
    ASSERT_NE(rt_, nullptr);
    ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, HOST_TEST_PLUGIN, nullptr)), DX_OK);
    ASSERT_EQ(Code(dx_runtime_find_device(rt_, "hosttest", &device_)), DX_OK);
  }
  void TearDown() override {
    for (auto* t : tensors_) EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
    if (rt_ != nullptr) EXPECT_EQ(Code(dx_runtime_destroy(rt_)), DX_OK);
  }
  dx_tensor_t* Make(std::vector<float> values, bool keep = true) {
    int64_t n = static_cast<int64_t>(values.size());
    dx_tensor_t* t = nullptr;
    EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, &n, 1, &t)), DX_OK);
    EXPECT_EQ(Code(dx_tensor_write(t, values.data(), values.size() * sizeof(float))), DX_OK);
    if (keep) tensors_.push_back(t);
    return t;
  }
  std::vector<float> Read(const dx_tensor_t* t) {
    int64_t n = 0;
    EXPECT_EQ(Code(dx_tensor_numel(t, &n)), DX_OK);
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_EQ(Code(dx_tensor_read(t, v.data(), v.size() * sizeof(float))), DX_OK);
    return v;
  }
  dx_runtime_t* rt_ = nullptr;
  int32_t device_ = -1;
  std::vector<dx_tensor_t*> tensors_;
};

// ---- errors are objects ---------------------------------------------------------------------

TEST_F(Contract, SuccessIsNullAndAnErrorCarriesCodeAndMessage) {
  int32_t index = -1;
  dx_error_t* e = dx_runtime_find_device(rt_, "no-such-device-7731", &index);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(dx_error_code(e), DX_NOT_FOUND);
  size_t length = 0;
  const char* message = dx_error_message(e, &length);
  EXPECT_EQ(length, std::strlen(message));
  EXPECT_NE(std::string(message).find("no-such-device-7731"), std::string::npos) << message;
  EXPECT_EQ(index, -1) << "out-parameters are untouched on error";
  dx_error_destroy(e);
  EXPECT_EQ(dx_runtime_find_device(rt_, "hosttest", &index), nullptr);
  EXPECT_EQ(dx_error_code(nullptr), DX_OK);
  EXPECT_STREQ(dx_error_message(nullptr, &length), "");
  EXPECT_EQ(length, 0u);
  dx_error_destroy(nullptr);
}

TEST_F(Contract, AnErrorIsReadOnAnotherThreadThanTheCall) {
  dx_error_t* made_there = nullptr;
  int32_t index = 0;
  std::thread([&] { made_there = dx_runtime_find_device(rt_, "made-on-a-thread", &index); })
      .join();
  Result r = Take(made_there);
  EXPECT_EQ(r.code, DX_NOT_FOUND);
  EXPECT_NE(r.message.find("made-on-a-thread"), std::string::npos) << r.message;

  dx_error_t* made_here = dx_runtime_find_device(rt_, "made-on-the-main-thread", &index);
  Result there;
  std::thread([&] { there = Take(made_here); }).join();
  EXPECT_EQ(there.code, DX_NOT_FOUND);
  EXPECT_NE(there.message.find("made-on-the-main-thread"), std::string::npos) << there.message;
}

// What a Go program does: many goroutines fail at once, each reads its error later (after a
// yield, possibly on another OS thread). Every error must still be its own call's.
TEST_F(Contract, ManyThreadsEachReadTheirOwnError) {
  constexpr int kThreads = 8, kCalls = 2000;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<dx_error_t*>> handed_over(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int32_t index = 0;
      for (int i = 0; i < kCalls; ++i) {
        std::string name = "dev-" + std::to_string(t) + "-" + std::to_string(i);
        dx_error_t* e = dx_runtime_find_device(rt_, name.c_str(), &index);
        std::this_thread::yield();
        int32_t ok_index = 0;
        dx_error_t* ok = dx_runtime_find_device(rt_, "hosttest", &ok_index);  // a success between
        if (ok != nullptr) ++wrong;
        if (i % 2 == 0) {
          Result r = Take(e);
          if (r.code != DX_NOT_FOUND || r.message.find("'" + name + "'") == std::string::npos) {
            ++wrong;
          }
        } else {
          handed_over[t].push_back(e);  // read later, by another thread
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    int reader = (t + 1) % kThreads;
    std::thread([&, t, reader] {
      for (size_t j = 0; j < handed_over[t].size(); ++j) {
        int i = static_cast<int>(2 * j + 1);
        std::string name = "dev-" + std::to_string(t) + "-" + std::to_string(i);
        Result r = Take(handed_over[t][j]);
        if (r.message.find("'" + name + "'") == std::string::npos) ++wrong;
      }
      (void)reader;
    }).join();
  }
  EXPECT_EQ(wrong.load(), 0);
}

// ---- handles ----------------------------------------------------------------------------------

TEST_F(Contract, UseAfterDestroyAndDoubleDestroyAreRefused) {
  dx_tensor_t* t = Make({1, 2, 3, 4}, /*keep=*/false);
  ASSERT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  int64_t n = -1;
  Result r = Take(dx_tensor_numel(t, &n));
  EXPECT_EQ(r.code, DX_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find("destroyed"), std::string::npos) << r.message;
  EXPECT_EQ(n, -1);
  float buffer[4];
  EXPECT_EQ(Code(dx_tensor_read(t, buffer, sizeof buffer)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_tensor_write(t, buffer, sizeof buffer)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_FAILED_PRECONDITION) << "double destroy";

  dx_tensor_t* live = Make({1, 2, 3, 4});
  dx_tensor_t* out = Make({0, 0, 0, 0});
  dx_tensor_t* in[2] = {t, live};
  dx_op_id_t add = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt_, "dx.add", &add)), DX_OK);
  r = Take(dx_invoke(rt_, add, in, 2, &out, 1, nullptr));
  EXPECT_EQ(r.code, DX_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find("input 0"), std::string::npos) << r.message;
  EXPECT_EQ(Read(out), (std::vector<float>{0, 0, 0, 0})) << "nothing ran";
}

TEST_F(Contract, AReusedSlotDoesNotReviveAStaleHandle) {
  std::vector<dx_tensor_t*> stale;
  for (int i = 0; i < 64; ++i) {
    dx_tensor_t* t = Make({1}, /*keep=*/false);
    stale.push_back(t);
    ASSERT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  }
  std::vector<dx_tensor_t*> fresh;
  for (int i = 0; i < 64; ++i) fresh.push_back(Make({2}));
  for (auto* s : stale) {
    for (auto* f : fresh) ASSERT_NE(s, f);
    int64_t n = 0;
    EXPECT_EQ(Code(dx_tensor_numel(s, &n)), DX_FAILED_PRECONDITION);
  }
  for (auto* f : fresh) EXPECT_EQ(Read(f), std::vector<float>{2});
}

TEST_F(Contract, HandlesOfAnotherKindOrForeignValuesAreRefused) {
  dx_tensor_t* t = Make({1, 2});
  int32_t count = 0;
  Result r = Take(dx_runtime_plugin_count(reinterpret_cast<dx_runtime_t*>(t), &count));
  EXPECT_EQ(r.code, DX_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find("another kind"), std::string::npos) << r.message;
  float not_a_tensor[4] = {0};
  int64_t n = 0;
  r = Take(dx_tensor_numel(reinterpret_cast<dx_tensor_t*>(not_a_tensor), &n));
  EXPECT_EQ(r.code, DX_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find("not a handle"), std::string::npos) << r.message;
  EXPECT_EQ(Code(dx_tensor_numel(nullptr, &n)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_destroy(reinterpret_cast<dx_attrs_t*>(t))), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Read(t), (std::vector<float>{1, 2})) << "the tensor is untouched";
}

TEST(ContractRuntime, DoubleDestroyAndUseAfterDestroyOfARuntime) {
  dx_runtime_t* rt = NewRuntime();
  ASSERT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
  int32_t n = 0;
  EXPECT_EQ(Code(dx_runtime_plugin_count(rt, &n)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_runtime_load_plugin(rt, HOST_TEST_PLUGIN, nullptr)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_FAILED_PRECONDITION);
  EXPECT_EQ(Code(dx_runtime_destroy(nullptr)), DX_OK);
}

// ---- lifetimes --------------------------------------------------------------------------------

TEST(ContractLifetime, TensorsOutliveTheirRuntimeHandleAndThenShutItDown) {
  dx_runtime_t* rt = NewRuntime();
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt, HOST_TEST_PLUGIN, nullptr)), DX_OK);
  const long shutdowns = HostTestCounter(2);
  const long allocs = HostTestCounter(0), frees = HostTestCounter(1);
  int32_t device = 0;
  ASSERT_EQ(Code(dx_runtime_find_device(rt, "hosttest", &device)), DX_OK);
  int64_t n = 4;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt, device, DX_DTYPE_F32, &n, 1, &t)), DX_OK);
  float values[4] = {1, 2, 3, 4};
  ASSERT_EQ(Code(dx_tensor_write(t, values, sizeof values)), DX_OK);
  int64_t two = 2;
  dx_tensor_t* view = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(t, &two, nullptr, 1, 2, &view)), DX_OK);

  ASSERT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
  EXPECT_EQ(HostTestCounter(2), shutdowns) << "the plugin must outlive the runtime handle";
  float back[4] = {0};
  ASSERT_EQ(Code(dx_tensor_read(t, back, sizeof back)), DX_OK);
  EXPECT_EQ(std::memcmp(back, values, sizeof back), 0);
  ASSERT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
  EXPECT_EQ(HostTestCounter(2), shutdowns) << "the view still holds the runtime";
  float tail[2] = {0};
  ASSERT_EQ(Code(dx_tensor_read(view, tail, sizeof tail)), DX_OK);
  EXPECT_EQ(tail[0], 3);
  EXPECT_EQ(tail[1], 4);
  ASSERT_EQ(Code(dx_tensor_destroy(view)), DX_OK);
  EXPECT_EQ(HostTestCounter(2), shutdowns + 1) << "the last tensor shuts the plugin down";
  EXPECT_EQ(HostTestCounter(0) - allocs, HostTestCounter(1) - frees) << "every allocation freed";
}

// ---- concurrency ------------------------------------------------------------------------------

TEST_F(Contract, PluginsLoadWhileOtherThreadsInvoke) {
  dx_op_id_t add = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt_, "dx.add", &add)), DX_OK);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, invokes{0};
  auto invoker = [&] {
    int64_t n = 256;
    dx_tensor_t *a = nullptr, *b = nullptr, *c = nullptr;
    if (Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, &n, 1, &a)) != DX_OK ||
        Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, &n, 1, &b)) != DX_OK ||
        Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, &n, 1, &c)) != DX_OK) {
      ++wrong;
      return;
    }
    std::vector<float> x(256, 1.5f), y(256, 2.0f), z(256);
    Code(dx_tensor_write(a, x.data(), 1024));
    Code(dx_tensor_write(b, y.data(), 1024));
    dx_tensor_t* in[2] = {a, b};
    while (!stop.load() || invokes.load() < 200) {
      if (Code(dx_invoke(rt_, add, in, 2, &c, 1, nullptr)) != DX_OK) ++wrong;
      if (Code(dx_tensor_read(c, z.data(), 1024)) != DX_OK || z[17] != 3.5f) ++wrong;
      int32_t count = 0;
      if (Code(dx_runtime_op_count(rt_, &count)) != DX_OK || count < 3) ++wrong;
      ++invokes;
    }
    for (auto* t : {a, b, c}) Code(dx_tensor_destroy(t));
  };
  std::thread t1(invoker), t2(invoker);
  // Two loaders race for the same plugin: exactly one wins.
  std::atomic<int> loaded{0}, already{0};
  auto loader = [&] {
    dx_status_t st = Code(dx_runtime_load_plugin(rt_, EXT_PLUGIN, nullptr));
    if (st == DX_OK) ++loaded;
    if (st == DX_ALREADY_EXISTS) ++already;
  };
  std::thread l1(loader), l2(loader);
  l1.join();
  l2.join();
  stop = true;
  t1.join();
  t2.join();
  EXPECT_EQ(loaded.load(), 1);
  EXPECT_EQ(already.load(), 1);
  EXPECT_EQ(wrong.load(), 0);
  int32_t plugins = 0;
  ASSERT_EQ(Code(dx_runtime_plugin_count(rt_, &plugins)), DX_OK);
  EXPECT_EQ(plugins, 2);
  dx_op_id_t copy = 0;
  EXPECT_EQ(Code(dx_runtime_op_lookup(rt_, "fixture.copy", &copy)), DX_OK);
}

// ---- extensions -------------------------------------------------------------------------------

struct FixtureCounterExt {  // mirrors fixture_counter_ext_t of extension_plugin.c
  dx_extension_t header;
  int64_t (*add)(void* state, int64_t delta);
  void* state;
};

TEST_F(Contract, ExtensionsTravelBothWaysAndUnknownOnesAreSkipped) {
  int32_t index = -1;
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, EXT_PLUGIN, &index)), DX_OK);
  const dx_extension_t* ext = nullptr;
  ASSERT_EQ(Code(dx_runtime_plugin_extension(rt_, index, "fixture.counter", 1, &ext)), DX_OK);
  ASSERT_NE(ext, nullptr);
  EXPECT_STREQ(ext->name, "fixture.counter");
  EXPECT_EQ(ext->version, 2u);
  ASSERT_GE(ext->struct_size, sizeof(FixtureCounterExt));
  auto* counter = reinterpret_cast<const FixtureCounterExt*>(ext);
  EXPECT_EQ(counter->add(counter->state, 5), 5);
  EXPECT_EQ(counter->add(counter->state, 2), 7);

  ext = reinterpret_cast<const dx_extension_t*>(1);
  EXPECT_EQ(Code(dx_runtime_plugin_extension(rt_, index, "fixture.counter", 3, &ext)), DX_OK);
  EXPECT_EQ(ext, nullptr) << "too old a version is 'not offered', not an error";
  EXPECT_EQ(Code(dx_runtime_plugin_extension(rt_, index, "fixture.nope", 1, &ext)), DX_OK);
  EXPECT_EQ(ext, nullptr);
  Result r = Take(dx_runtime_plugin_extension(rt_, index, "fixture.broken", 1, &ext));
  EXPECT_EQ(r.code, DX_PLUGIN_ERROR);
  EXPECT_NE(r.message.find("extfixture"), std::string::npos) << r.message;
  EXPECT_EQ(Code(dx_runtime_plugin_extension(rt_, 99, "fixture.counter", 1, &ext)),
            DX_OUT_OF_RANGE);
  int32_t hosttest = 1 - index;
  EXPECT_EQ(Code(dx_runtime_plugin_extension(rt_, hosttest, "fixture.counter", 1, &ext)), DX_OK);
  EXPECT_EQ(ext, nullptr) << "a plugin without get_extension offers nothing";

  // The kernel registered with an unknown extension in its `next` chain works.
  dx_tensor_t* x = Make({1, 2, 3});
  dx_tensor_t* y = Make({0, 0, 0});
  dx_invoke_options_t options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  options.flags = DX_INVOKE_FLAG_PLUGIN;
  options.plugin_index = index;
  dx_extension_t unknown = {DX_EXTENSION_SIZE_1_0, "client.unknown", 1, 0, nullptr};
  options.next = &unknown;  // skipped by a 1.0 host
  dx_op_id_t copy = 0;
  ASSERT_EQ(Code(dx_runtime_op_lookup(rt_, "fixture.copy", &copy)), DX_OK);
  ASSERT_EQ(Code(dx_invoke_ex(rt_, copy, &x, 1, &y, 1, nullptr, &options)), DX_OK);
  EXPECT_EQ(Read(y), (std::vector<float>{1, 2, 3}));

  void* lib = dlopen(EXT_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto was_null = reinterpret_cast<int (*)()>(dlsym(lib, "extfixture_host_extension_was_null"));
  ASSERT_NE(was_null, nullptr);
  EXPECT_EQ(was_null(), 1) << "a 1.0 host answers an unknown extension with null";
  dlclose(lib);
}

TEST(ContractExtension, ChainWalkerFindsByNameAndVersion) {
  dx_extension_t c = {DX_EXTENSION_SIZE_1_0, "c.ext", 1, 0, nullptr};
  dx_extension_t b = {DX_EXTENSION_SIZE_1_0, "b.ext", 3, 0, &c};
  dx_extension_t a = {DX_EXTENSION_SIZE_1_0, "a.ext", 1, 0, &b};
  EXPECT_EQ(dx_extension_find(&a, "b.ext", 2), &b);
  EXPECT_EQ(dx_extension_find(&a, "b.ext", 4), nullptr);
  EXPECT_EQ(dx_extension_find(&a, "c.ext", 1), &c);
  EXPECT_EQ(dx_extension_find(&a, "c", 1), nullptr);
  EXPECT_EQ(dx_extension_find(nullptr, "a.ext", 1), nullptr);
}

// ---- callbacks: function + user data ----------------------------------------------------------

struct LogSink {
  std::mutex mutex;
  std::vector<std::string> lines;  // "level source: message"
  static void Receive(void* user_data, int32_t level, const char* source, const char* message,
                      size_t length) {
    auto* self = static_cast<LogSink*>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.push_back(std::to_string(level) + " " + source + ": " +
                          std::string(message, length));
  }
  bool Has(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& l : lines) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }
};

TEST(ContractLog, TheRuntimeAndItsPluginsLogThroughTheCallback) {
  LogSink sink;
  dx_runtime_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  o.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  o.log = &LogSink::Receive;
  o.log_user_data = &sink;
  dx_runtime_t* rt = nullptr;
  ASSERT_EQ(Code(dx_runtime_create(&o, &rt)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt, EXT_PLUGIN, nullptr)), DX_OK);
  EXPECT_TRUE(sink.Has("1 extfixture: extfixture initialising")) << "info messages reach it too";
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt, HOST_TEST_PLUGIN, nullptr)), DX_OK);
  int32_t device = 0;
  ASSERT_EQ(Code(dx_runtime_find_device(rt, "hosttest", &device)), DX_OK);
  int64_t n = 1;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt, device, DX_DTYPE_F32, &n, 1, &t)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
  EXPECT_TRUE(sink.Has("2 host: dx_runtime_destroy: 1 tensor handle(s)")) << "the leak warning";
  ASSERT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
}

// ---- clients of another minor -----------------------------------------------------------------

// A client built against a later 1.x header passes larger structs; one built before a field
// existed passes smaller ones. The frozen host reads what it knows and writes nothing past
// what either side knows.
TEST(ContractMinors, ClientStructsOfAnOlderAndANewerMinorWork) {
  struct OptionsOfALaterMinor {
    dx_runtime_options_t known;
    uint64_t added_later[4];
  } newer;
  std::memset(&newer, 0, sizeof newer);
  newer.known.struct_size = sizeof newer;  // larger than DX_RUNTIME_OPTIONS_SIZE_1_0
  newer.known.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  newer.added_later[0] = 0xFEEDFACE;  // a field this host does not know: ignored
  dx_runtime_t* rt = nullptr;
  ASSERT_EQ(Code(dx_runtime_create(&newer.known, &rt)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt, HOST_TEST_PLUGIN, nullptr)), DX_OK);

  struct InfoOfALaterMinor {
    dx_plugin_info_t known;
    uint64_t added_later[2];
  } info;
  std::memset(&info, 0xAB, sizeof info);
  info.known.struct_size = sizeof info;
  ASSERT_EQ(Code(dx_runtime_plugin_info(rt, 0, &info.known)), DX_OK);
  EXPECT_STREQ(info.known.name, "hosttest");
  EXPECT_EQ(info.added_later[0], 0xABABABABABABABABull) << "the host wrote past what it knows";

  dx_plugin_info_t older;
  std::memset(&older, 0xCD, sizeof older);
  older.struct_size = DX_STRUCT_SIZE(dx_plugin_info_t, num_transports);  // before certification
  ASSERT_EQ(Code(dx_runtime_plugin_info(rt, 0, &older)), DX_OK);
  EXPECT_STREQ(older.name, "hosttest");
  unsigned char untouched[sizeof older.certification];
  std::memset(untouched, 0xCD, sizeof untouched);
  EXPECT_EQ(std::memcmp(&older.certification, untouched, sizeof untouched), 0)
      << "the host wrote past the older client's struct_size";
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);

  dx_runtime_options_t oldest;
  std::memset(&oldest, 0, sizeof oldest);
  oldest.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, flags);
  oldest.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  oldest.log = reinterpret_cast<dx_log_fn>(1);  // past struct_size: must never be called
  ASSERT_EQ(Code(dx_runtime_create(&oldest, &rt)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt, HOST_TEST_PLUGIN, nullptr)), DX_OK);
  int32_t device = 0;
  ASSERT_EQ(Code(dx_runtime_find_device(rt, "hosttest", &device)), DX_OK);
  int64_t n = 1;
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_create(rt, device, DX_DTYPE_F32, &n, 1, &t)), DX_OK);
  // Destroying a runtime with a live tensor logs a warning: to stderr, not through `log`.
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
  EXPECT_EQ(Code(dx_tensor_destroy(t)), DX_OK);
}

// ---- strings with lengths ---------------------------------------------------------------------

TEST(ContractStrings, AttributeStringsTakeALength) {
  dx_attrs_t* a = nullptr;
  ASSERT_EQ(Code(dx_attrs_create(&a)), DX_OK);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "reduction", "meanXXXX", 4)), DX_OK);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "reduction", "sum", -1)), DX_OK);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "empty", nullptr, 0)), DX_OK);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "nul", "a\0b", 3)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "bad", "x", -2)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_set_string(a, "null", nullptr, 3)), DX_INVALID_ARGUMENT);
  EXPECT_EQ(Code(dx_attrs_destroy(a)), DX_OK);
  EXPECT_EQ(Code(dx_attrs_destroy(a)), DX_FAILED_PRECONDITION);
}

// ---- copies -----------------------------------------------------------------------------------

TEST_F(Contract, CopyBetweenOverlappingViewsReadsAllOfTheSourceFirst) {
  dx_tensor_t* base = Make({0, 1, 2, 3, 4, 5, 6, 7});
  int64_t six = 6;
  dx_tensor_t *front = nullptr, *back = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, &six, nullptr, 1, 0, &front)), DX_OK);
  ASSERT_EQ(Code(dx_tensor_view(base, &six, nullptr, 1, 2, &back)), DX_OK);
  tensors_.push_back(front);
  tensors_.push_back(back);
  ASSERT_EQ(Code(dx_tensor_copy(rt_, back, front)), DX_OK);
  EXPECT_EQ(Read(base), (std::vector<float>{0, 1, 0, 1, 2, 3, 4, 5}));
}

struct Producer {
  static inline int deleted = 0;
  static void Delete(dx_dlpack_versioned_t* self) {
    ++deleted;
    delete[] static_cast<float*>(self->dl_tensor.data);
    delete[] self->dl_tensor.shape;
    delete self;
  }
  static dx_dlpack_versioned_t* Make(int64_t n, float value, uint64_t flags) {
    auto* m = new dx_dlpack_versioned_t();
    m->version.major = 1;
    m->flags = flags;
    m->deleter = Delete;
    auto* data = new float[n];
    for (int64_t i = 0; i < n; ++i) data[i] = value;
    m->dl_tensor.data = data;
    m->dl_tensor.device = DLDevice{kDLCPU, 0};
    m->dl_tensor.ndim = 1;
    m->dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    m->dl_tensor.shape = new int64_t[1]{n};
    return m;
  }
};

TEST_F(Contract, CopyIntoAReadOnlyImportIsRefusedAndLeavesItAlone) {
  dx_tensor_t* ro = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack(rt_, Producer::Make(4, 9.0f, DX_DLPACK_FLAG_READ_ONLY),
                                       &ro)),
            DX_OK);
  tensors_.push_back(ro);
  dx_tensor_t* src = Make({1, 2, 3, 4});
  Result r = Take(dx_tensor_copy(rt_, ro, src));
  EXPECT_EQ(r.code, DX_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("read-only"), std::string::npos) << r.message;
  EXPECT_EQ(Read(ro), (std::vector<float>{9, 9, 9, 9}));
}

TEST_F(Contract, ALegacyExportOfAReadOnlyTensorIsRefused) {
  dx_tensor_t* ro = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack(rt_, Producer::Make(2, 1.0f, DX_DLPACK_FLAG_READ_ONLY),
                                       &ro)),
            DX_OK);
  tensors_.push_back(ro);
  DLManagedTensor* legacy = nullptr;
  Result r = Take(dx_tensor_to_dlpack_legacy(ro, &legacy));
  EXPECT_EQ(r.code, DX_UNSUPPORTED) << r.message;
  EXPECT_EQ(legacy, nullptr);
  dx_dlpack_versioned_t* versioned = nullptr;
  ASSERT_EQ(Code(dx_tensor_to_dlpack(ro, &versioned)), DX_OK);
  EXPECT_NE(versioned->flags & DX_DLPACK_FLAG_READ_ONLY, 0u) << "the versioned form says so";
  versioned->deleter(versioned);
}

// An import of memory in a device space that a loaded plugin serves is read and written
// through that space's copy (the "scrambled" space stores every byte XOR 0x5A).
TEST_F(Contract, ImportsOfAServedDeviceGoThroughItsSpace) {
  ASSERT_EQ(Code(dx_runtime_load_plugin(rt_, SAFETENSORS_DEVICE_PLUGIN, nullptr)), DX_OK);
  dx_dlpack_versioned_t* m = Producer::Make(2, 0.0f, 0);
  m->dl_tensor.device = DLDevice{kDLExtDev, 0};
  const float values[2] = {1.5f, -2.0f};
  auto* bytes = static_cast<unsigned char*>(m->dl_tensor.data);
  std::memcpy(bytes, values, sizeof values);
  for (size_t i = 0; i < sizeof values; ++i) bytes[i] ^= 0x5A;  // as the device stores them
  dx_tensor_t* t = nullptr;
  ASSERT_EQ(Code(dx_tensor_from_dlpack(rt_, m, &t)), DX_OK);
  tensors_.push_back(t);
  int32_t device = -1, scrambled = -2;
  ASSERT_EQ(Code(dx_tensor_device(t, &device)), DX_OK);
  ASSERT_EQ(Code(dx_runtime_find_device(rt_, "scrambled", &scrambled)), DX_OK);
  EXPECT_EQ(device, scrambled);
  EXPECT_EQ(Read(t), (std::vector<float>{1.5f, -2.0f}));
  const float next[2] = {4.0f, 8.0f};
  ASSERT_EQ(Code(dx_tensor_write(t, next, sizeof next)), DX_OK);
  EXPECT_EQ(Read(t), (std::vector<float>{4.0f, 8.0f}));
  EXPECT_EQ(bytes[0], static_cast<unsigned char>(reinterpret_cast<const unsigned char*>(next)[0] ^ 0x5A));
}

// ---- the boundary: views, imports and shapes whose arithmetic overflows -----------------------

TEST_F(Contract, ViewsThatReachOutsideTheirStorageAreRefusedWhateverTheArithmetic) {
  dx_tensor_t* base = Make({0, 1, 2, 3});
  struct Case {
    const char* what;
    int64_t size, stride, offset;
    dx_status_t code;
  } cases[] = {
      {"offset INT64_MIN", 1, 1, INT64_MIN, DX_OUT_OF_RANGE},
      {"offset INT64_MAX", 1, 1, INT64_MAX, DX_OUT_OF_RANGE},
      {"offset 2^62 + 1 (wraps to element 1 in bytes)", 1, 1, (int64_t{1} << 62) + 1,
       DX_OUT_OF_RANGE},
      {"offset -1", 1, 1, -1, DX_OUT_OF_RANGE},
      {"empty view at offset -1", 0, 1, -1, DX_OUT_OF_RANGE},
      {"empty view past the end", 0, 1, 5, DX_OUT_OF_RANGE},
      {"stride 2^62", 2, int64_t{1} << 62, 0, DX_OUT_OF_RANGE},
      {"stride INT64_MAX", 2, INT64_MAX, 0, DX_OUT_OF_RANGE},
      {"one element too many", 5, 1, 0, DX_OUT_OF_RANGE},
      {"last element one past", 2, 3, 1, DX_OUT_OF_RANGE},
      {"negative stride", 2, -1, 3, DX_INVALID_ARGUMENT},
      {"empty view at the end", 0, 1, 4, DX_OK},
      {"the last element", 1, 1, 3, DX_OK},
      {"stride 3 from 0", 2, 3, 0, DX_OK},
      {"broadcast", 7, 0, 2, DX_OK},
  };
  for (const auto& c : cases) {
    dx_tensor_t* v = nullptr;
    Result r = Take(dx_tensor_view(base, &c.size, &c.stride, 1, c.offset, &v));
    EXPECT_EQ(r.code, c.code) << c.what << ": " << r.message;
    if (r.code == DX_OK) {
      std::vector<float> got = Read(v);
      EXPECT_EQ(got.size(), static_cast<size_t>(c.size)) << c.what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], static_cast<float>(c.offset + static_cast<int64_t>(i) * c.stride))
            << c.what;
      }
      EXPECT_EQ(Code(dx_tensor_destroy(v)), DX_OK);
    } else {
      EXPECT_EQ(v, nullptr) << c.what;
    }
  }
  // A view of a view: the offset is checked against the storage, not against the parent.
  int64_t two = 2, one = 1;
  dx_tensor_t* tail = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(base, &two, nullptr, 1, 2, &tail)), DX_OK);
  tensors_.push_back(tail);
  dx_tensor_t* back = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(tail, &one, nullptr, 1, -2, &back)), DX_OK);
  EXPECT_EQ(Read(back), std::vector<float>{0});
  EXPECT_EQ(Code(dx_tensor_destroy(back)), DX_OK);
  EXPECT_EQ(Code(dx_tensor_view(tail, &one, nullptr, 1, -3, &back)), DX_OUT_OF_RANGE);
}

TEST_F(Contract, ShapesWhoseCompactStridesOverflowAreRefusedEvenWhenEmpty) {
  int64_t shape[3] = {0, int64_t{1} << 62, int64_t{1} << 62};
  dx_tensor_t* t = nullptr;
  EXPECT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, shape, 3, &t)), DX_OUT_OF_RANGE);
  int64_t fine[3] = {0, 1 << 20, 1 << 20};
  ASSERT_EQ(Code(dx_tensor_create(rt_, device_, DX_DTYPE_F32, fine, 3, &t)), DX_OK);
  tensors_.push_back(t);
  int64_t n = -1;
  ASSERT_EQ(Code(dx_tensor_numel(t, &n)), DX_OK);
  EXPECT_EQ(n, 0);
}

TEST_F(Contract, ImportsWhoseOffsetsWrapTheAddressSpaceAreRefusedAndReleased) {
  Producer::deleted = 0;
  dx_dlpack_versioned_t* m = Producer::Make(4, 1.0f, 0);
  m->dl_tensor.byte_offset = ~uint64_t{0} - 3;  // 2^64 - 4
  dx_tensor_t* t = nullptr;
  Result r = Take(dx_tensor_from_dlpack(rt_, m, &t));
  EXPECT_EQ(r.code, DX_OUT_OF_RANGE) << r.message;
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(Producer::deleted, 1) << "a refused import is released exactly once";

  m = Producer::Make(4, 1.0f, 0);
  int64_t* strides = new int64_t[1]{int64_t{1} << 62};
  m->dl_tensor.strides = strides;
  r = Take(dx_tensor_from_dlpack(rt_, m, &t));
  EXPECT_EQ(r.code, DX_OUT_OF_RANGE) << r.message;
  EXPECT_EQ(Producer::deleted, 2);
  delete[] strides;
}

TEST_F(Contract, AttributesOfTheWrongTypeAreRefusedBeforeAnyKernelRuns) {
  dx_tensor_t* x = Make({1, 2, 3});
  dx_tensor_t* y = Make({0});
  int64_t one = 1;
  dx_tensor_t* y1 = nullptr;
  ASSERT_EQ(Code(dx_tensor_view(y, &one, nullptr, 0, 0, &y1)), DX_OK);  // a scalar view
  tensors_.push_back(y1);
  dx_attrs_t* attrs = nullptr;
  ASSERT_EQ(Code(dx_attrs_create(&attrs)), DX_OK);
  ASSERT_EQ(Code(dx_attrs_set_string(attrs, "keepdims", "yes", -1)), DX_OK);
  Result r = Take(dx_invoke_by_name(rt_, "dx.sum", &x, 1, &y1, 1, attrs));
  EXPECT_EQ(r.code, DX_INVALID_ARGUMENT) << r.message;
  EXPECT_NE(r.message.find("keepdims"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("string"), std::string::npos) << r.message;
  ASSERT_EQ(Code(dx_attrs_set_bool(attrs, "keepdims", 0)), DX_OK);
  ASSERT_EQ(Code(dx_attrs_set_string(attrs, "axes", "0", -1)), DX_OK);
  r = Take(dx_invoke_by_name(rt_, "dx.sum", &x, 1, &y1, 1, attrs));
  EXPECT_EQ(r.code, DX_INVALID_ARGUMENT) << r.message;
  EXPECT_NE(r.message.find("axes"), std::string::npos) << r.message;
  EXPECT_EQ(Code(dx_attrs_destroy(attrs)), DX_OK);
}

// ---- safetensors files that are not what they claim -------------------------------------------

TEST_F(Contract, SafetensorsLoadRefusesAFifoAtOnceAndAnEmptyName) {
  char templ[] = "/tmp/deepx-st-XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  std::string dir = templ;
  std::string fifo = dir + "/pipe.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  dx_safetensors_t* f = nullptr;
  Result r = Take(dx_safetensors_load(rt_, fifo.c_str(), device_, &f));  // must not block
  EXPECT_EQ(r.code, DX_INVALID_ARGUMENT) << r.message;
  EXPECT_NE(r.message.find("not a regular file"), std::string::npos) << r.message;

  std::string header = R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  bytes += header;
  bytes += std::string(4, '\0');
  std::string empty_name = dir + "/empty-name.safetensors";
  std::ofstream(empty_name, std::ios::binary) << bytes;
  r = Take(dx_safetensors_load(rt_, empty_name.c_str(), device_, &f));
  EXPECT_EQ(r.code, DX_INVALID_ARGUMENT) << r.message;
  EXPECT_NE(r.message.find("empty name"), std::string::npos) << r.message;
  std::remove(fifo.c_str());
  std::remove(empty_name.c_str());
  rmdir(dir.c_str());
}

// ---- bad plugin files -------------------------------------------------------------------------

class BadPluginFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/deepx-badplugins-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    // A truncated copy of a real plugin: the ELF header is whole, its segments are not.
    std::ifstream in(HOST_TEST_PLUGIN, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 4096u);
    std::ofstream(dir_ + "/libdeepx-plugin-truncated.so", std::ios::binary)
        << bytes.substr(0, 2048);
    std::ofstream(dir_ + "/libdeepx-plugin-text.so") << "this is not a shared library\n";
    ASSERT_EQ(mkdir((dir_ + "/libdeepx-plugin-adir.so").c_str(), 0700), 0);
    ASSERT_EQ(mkfifo((dir_ + "/libdeepx-plugin-fifo.so").c_str(), 0600), 0);
  }
  void TearDown() override {
    for (const char* f : {"truncated", "text", "fifo"}) {
      std::remove((dir_ + "/libdeepx-plugin-" + f + ".so").c_str());
    }
    rmdir((dir_ + "/libdeepx-plugin-adir.so").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(BadPluginFiles, EachIsRefusedWithAMessageThatNamesIt) {
  dx_runtime_t* rt = NewRuntime();
  struct Case {
    const char* file;
    dx_status_t code;
    const char* needle;
  } cases[] = {{"truncated", DX_IO_ERROR, "truncated"},
               {"text", DX_IO_ERROR, "not an ELF"},
               {"adir", DX_IO_ERROR, "directory"},
               {"fifo", DX_IO_ERROR, "FIFO"}};
  for (const auto& c : cases) {
    std::string path = dir_ + "/libdeepx-plugin-" + c.file + ".so";
    Result r = Take(dx_runtime_load_plugin(rt, path.c_str(), nullptr));
    EXPECT_EQ(r.code, c.code) << c.file << ": " << r.message;
    EXPECT_NE(r.message.find(c.needle), std::string::npos) << c.file << ": " << r.message;
    EXPECT_NE(r.message.find(path), std::string::npos) << c.file << ": " << r.message;
  }
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

TEST_F(BadPluginFiles, ASearchPathScanSkipsThemAndCountsThem) {
  dx_runtime_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  o.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  std::string path = dir_ + ":" + HOST_TEST_PLUGIN_DIR;
  o.plugin_path = path.c_str();
  dx_runtime_t* rt = nullptr;
  ASSERT_EQ(Code(dx_runtime_create(&o, &rt)), DX_OK);
  int32_t loaded = -1, failed = -1;
  ASSERT_EQ(Code(dx_runtime_load_search_path(rt, &loaded, &failed)), DX_OK);
  EXPECT_GE(loaded, 1) << "the good plugins after the bad files still load";
  EXPECT_GE(failed, 2) << "the truncated and the text file";
  int32_t device = -1;
  EXPECT_EQ(Code(dx_runtime_find_device(rt, "hosttest", &device)), DX_OK);
  EXPECT_EQ(Code(dx_runtime_destroy(rt)), DX_OK);
}

}  // namespace
