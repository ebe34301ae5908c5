// deepx::testing::TestHost: the one fake host of deepx's tests and benchmarks. A dx_host_t whose
// slots record what a plugin registers (kernels, memory spaces, transports, log lines), create
// error objects it counts, and hand out host memory; and PluginLoad, which dlopens a plugin file
// and runs its entry and init against a TestHost, as the real host would. It depends on the ABI
// headers alone (deepx::abi), never on host/ internals, so a plugin's unit tests drive it
// exactly through the contract. Not thread-safe except where a slot says so.
#ifndef DEEPX_TESTING_TEST_HOST_H_
#define DEEPX_TESTING_TEST_HOST_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "deepx/plugin.h"

namespace deepx::testing {

// A kernel as registered. `desc` is the plugin's descriptor with its borrowed fields (op_name,
// dtypes, next) cleared: `op` and `dtypes` hold copies of them.
struct RegisteredKernel {
  dx_kernel_desc_t desc{};
  std::string op;
  std::vector<DLDataType> dtypes;  // inputs then outputs (1 + outputs for a variadic kernel)
  bool variadic() const { return (desc.flags & DX_KERNEL_FLAG_VARIADIC) != 0; }
};

// A memory space as registered (`desc.name` and `desc.next` cleared; `name` holds the name).
struct RegisteredSpace {
  dx_memory_space_desc_t desc{};
  std::string name;
};

// A transport as registered (`desc.name` and `desc.next` cleared).
struct RegisteredTransport {
  dx_transport_desc_t desc{};
  std::string name;
};

// The outcome of a call that returned an error object or null: the code and message, with the
// error destroyed.
struct Status {
  dx_status_t code = DX_OK;
  std::string message;
  bool ok() const { return code == DX_OK; }
};

class TestHost {
 public:
  TestHost();
  TestHost(const TestHost&) = delete;
  TestHost& operator=(const TestHost&) = delete;

  // The services table to pass to dx_plugin_t::init, and the context that names this host in
  // its registration slots. mutable_host() lets a test break the table on purpose (an older
  // struct_size, another ABI version).
  const dx_host_t* host() const { return &host_; }
  dx_host_t* mutable_host() { return &host_; }
  dx_host_context_t* context() { return reinterpret_cast<dx_host_context_t*>(this); }

  // "dx.add(f32,f32)->(f32)": an op and its dtype signature, the dtypes named as in docs/ops.md
  // ("code<c>b<bits>l<lanes>" for a dtype deepx does not know).
  static std::string key(const std::string& op, const std::vector<DLDataType>& inputs,
                         const std::vector<DLDataType>& outputs);
  static std::string dtype_name(DLDataType t);

  // What the plugin registered. Kernels are keyed by key() + "@" + device type; a second kernel
  // with the same key is refused with DX_ALREADY_EXISTS, as is a second space of one name.
  std::map<std::string, RegisteredKernel> kernels;
  std::vector<RegisteredSpace> spaces;
  std::vector<RegisteredTransport> transports;

  // The kernel of `op` on `device_type` for these dtypes, or null. A variadic kernel is found
  // by its first input's dtype (checking the others is the kernel's job, as with the host).
  const RegisteredKernel* find(const std::string& op, const std::vector<DLDataType>& inputs,
                               const std::vector<DLDataType>& outputs,
                               int32_t device_type = kDLCPU) const;
  // The kernel of `op` on `device_type` whose dtypes (inputs then outputs) are `signature`.
  const RegisteredKernel* find(const std::string& op, const std::vector<DLDataType>& signature,
                               int32_t device_type = kDLCPU) const;
  // The memory space called `name`, or null.
  const RegisteredSpace* space(const std::string& name) const;

  // The messages the plugin logged, oldest first. The log slot appends under a lock (plugins
  // may log from any thread); read it while the plugin is not logging.
  std::vector<std::string> logs;

  // Error objects of every TestHost: made by the error_create slot, read and destroyed here.
  static dx_error_t* make_error(dx_status_t code, const std::string& message);
  static dx_status_t error_code(const dx_error_t* error);        // DX_OK for null
  static const char* error_message(const dx_error_t* error);    // "" for null
  static void destroy_error(dx_error_t* error);                 // null: no-op
  // Reads and destroys `error` (null: DX_OK).
  static Status take(dx_error_t* error);
  // Errors created and not yet destroyed, across all TestHosts (a leak check for tests).
  static int live_errors();

 private:
  friend struct TestHostSlots;
  dx_host_t host_{};
  std::mutex log_mutex_;
};

// A plugin file loaded against a TestHost: dlopen (RTLD_NOW | RTLD_LOCAL), dx_plugin_entry
// (DX_ABI_VERSION as both the host's version and the newest it speaks), then init. Whatever
// fails is in error() and plugin() stays null when the entry refused or failed. The library is
// never dlclose'd (a plugin's threads may outlive it, as with the real host); shutdown runs on
// destruction when init succeeded.
class PluginLoad {
 public:
  PluginLoad(const char* path, TestHost& host);
  ~PluginLoad();
  PluginLoad(const PluginLoad&) = delete;
  PluginLoad& operator=(const PluginLoad&) = delete;

  // True when the entry returned a descriptor and its init succeeded.
  bool ok() const { return initialised_; }
  // Why the load failed ("" when it did not): dlopen's message, a missing entry symbol, the
  // entry's refusal, or init's error message.
  const std::string& error() const { return error_; }
  // The init error's status (DX_OK when init succeeded or was not reached).
  dx_status_t init_status() const { return init_status_; }
  void* library() const { return library_; }
  const dx_plugin_t* plugin() const { return plugin_; }
  void* state() const { return state_; }

 private:
  TestHost& host_;
  void* library_ = nullptr;
  const dx_plugin_t* plugin_ = nullptr;
  void* state_ = nullptr;
  bool initialised_ = false;
  dx_status_t init_status_ = DX_OK;
  std::string error_;
};

}  // namespace deepx::testing

#endif  // DEEPX_TESTING_TEST_HOST_H_
