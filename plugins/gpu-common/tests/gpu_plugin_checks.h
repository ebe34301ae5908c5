// Checks shared by the tests of every build of the GPU plugin source: the emulated plugin
// (always runs), the CUDA and HIP plugins (run on a machine with that GPU; otherwise every test
// reports "skipped: no GPU"). Two harnesses:
// - PluginUnderTest: dlopens the plugin with the shared test host (deepx::testing::TestHost),
//   which keeps the memory-space descriptors it registers, so the tests call the memory slots
//   (alloc, copy, fill, streams, events, IPC) directly, as the host would;
// - HostPair: the public host API with the plugin and the reference loaded, to run one op on
//   both and compare.
// The including file defines DEEPX_GPU_TEST_PLUGIN_PATH and DEEPX_GPU_TEST_DEVICE.
#ifndef DEEPX_PLUGINS_GPU_COMMON_TESTS_GPU_PLUGIN_CHECKS_H_
#define DEEPX_PLUGINS_GPU_COMMON_TESTS_GPU_PLUGIN_CHECKS_H_

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../../../host/tests/dx_test_util.h"
#include "deepx/host.h"
#include "deepx/plugin.h"
#include "deepx/testing/test_host.h"

namespace deepx::gpu::testing {

// ---- the plugin alone, with the shared test host ---------------------------------------------

/// The plugin loaded with deepx::testing::TestHost (testing/): entry and init on construction,
/// shutdown on destruction.
class PluginUnderTest {
 public:
  explicit PluginUnderTest(const char* path) : load_(path, host_) {}
  PluginUnderTest(const PluginUnderTest&) = delete;
  PluginUnderTest& operator=(const PluginUnderTest&) = delete;

  bool loaded() const { return load_.ok(); }
  const std::string& load_error() const { return load_.error(); }
  const dx_plugin_t* plugin() const { return load_.ok() ? load_.plugin() : nullptr; }
  /// What the plugin registered: kernels, spaces, log lines.
  const deepx::testing::TestHost& registered() const { return host_; }
  /// The memory space called `name`, or null.
  const dx_memory_space_desc_t* space(const std::string& name) const {
    const deepx::testing::RegisteredSpace* s = host_.space(name);
    return s != nullptr ? &s->desc : nullptr;
  }

 private:
  deepx::testing::TestHost host_;
  deepx::testing::PluginLoad load_;
};

/// Turns a slot's error into a test failure message (and frees it).
inline ::testing::AssertionResult ok(dx_error_t* e) {
  if (e == nullptr) return ::testing::AssertionSuccess();
  const deepx::testing::Status s = deepx::testing::TestHost::take(e);
  return ::testing::AssertionFailure() << "status " << s.code << ": " << s.message;
}
inline dx_status_t status_of(dx_error_t* e) { return deepx::testing::TestHost::take(e).code; }

// ---- host pair -----------------------------------------------------------------------------

/// Takes the result of a host (client API) call, an error the caller owns or null: destroys it
/// and returns its code (DX_OK for null); its message goes to `*message` when given and not null.
/// (Errors of the test host above go through status_of() and ok() instead.)
inline dx_status_t host_status(dx_error_t* e, std::string* message = nullptr) {
  return deepx_test::TakeStatus(e, message);
}

/// Throws when a host call failed, with its status and message.
inline void check(dx_error_t* e, const std::string& what) {
  std::string message;
  const dx_status_t s = host_status(e, &message);
  if (s != DX_OK) throw std::runtime_error(what + ": " + dx_status_string(s) + ": " + message);
}

/// A tensor given by host bytes, an optional view (shape, strides, element offset) over a
/// larger base buffer.
struct TensorSpec {
  dx_dtype_t dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;          // the base buffer's elements, row-major
  std::vector<int64_t> base_shape;     // empty: the tensor itself is the base
  std::vector<int64_t> view_strides;   // for a view of the base
  int64_t view_offset = 0;
};

inline size_t dtype_bytes(dx_dtype_t d) { return ((d >> 8) & 0xff) / 8; }

template <class T>
TensorSpec tensor(dx_dtype_t dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  TensorSpec s{dtype, std::move(shape), {}, {}, {}, 0};
  s.bytes.resize(values.size() * sizeof(T));
  if (!s.bytes.empty()) std::memcpy(s.bytes.data(), values.data(), s.bytes.size());  // empty: data() may be null
  return s;
}

/// The plugin and the reference in one runtime.
class HostPair {
 public:
  HostPair(const char* plugin_path, const char* device_name) {
    check(dx_runtime_create(nullptr, &runtime_), "dx_runtime_create");
    check(dx_runtime_load_plugin(runtime_, plugin_path, &plugin_), "load the plugin under test");
    check(dx_runtime_load_plugin(runtime_, "reference", &reference_), "load the reference");
    has_device_ = host_status(dx_runtime_find_device(runtime_, device_name, &device_)) == DX_OK;
    check(dx_runtime_find_device(runtime_, "reference-cpu", &ref_device_), "find reference-cpu");
  }
  ~HostPair() { dx_error_destroy(dx_runtime_destroy(runtime_)); }
  HostPair(const HostPair&) = delete;
  HostPair& operator=(const HostPair&) = delete;

  bool has_device() const { return has_device_; }
  dx_runtime_t* runtime() const { return runtime_; }
  int32_t device() const { return device_; }

  /// Runs `op` pinned to the plugin (on its device) or to the reference (on the CPU) and
  /// returns each output's bytes, or the status when the call fails. `backward`: the op's
  /// backward kernel (inputs: output gradients, forward inputs, forward outputs; outputs: the
  /// input gradients).
  struct Outcome {
    dx_status_t status = DX_OK;
    std::string message;
    std::vector<std::vector<uint8_t>> outputs;
  };
  Outcome run(bool on_plugin, const char* op, const std::vector<TensorSpec>& inputs,
              const std::vector<std::pair<dx_dtype_t, std::vector<int64_t>>>& outputs,
              const dx_attrs_t* attrs, bool backward = false) {
    const int32_t dev = on_plugin ? device_ : ref_device_;
    std::vector<dx_tensor_t*> owned, in, out;
    auto make = [&](const TensorSpec& s) {
      const auto& base_shape = s.base_shape.empty() ? s.shape : s.base_shape;
      dx_tensor_t* base = nullptr;
      check(dx_tensor_create(runtime_, dev, s.dtype, base_shape.data(), static_cast<int32_t>(base_shape.size()), &base),
            "dx_tensor_create");
      owned.push_back(base);
      if (!s.bytes.empty()) check(dx_tensor_write(base, s.bytes.data(), s.bytes.size()), "dx_tensor_write");
      if (s.base_shape.empty()) return base;
      dx_tensor_t* view = nullptr;
      check(dx_tensor_view(base, s.shape.data(), s.view_strides.empty() ? nullptr : s.view_strides.data(),
                           static_cast<int32_t>(s.shape.size()), s.view_offset, &view),
            "dx_tensor_view");
      owned.push_back(view);
      return view;
    };
    Outcome result;
    try {
      for (const auto& s : inputs) in.push_back(make(s));
      for (const auto& [dtype, shape] : outputs) out.push_back(make(TensorSpec{dtype, shape, {}, {}, {}, 0}));
      dx_op_id_t id;
      check(dx_runtime_op_lookup(runtime_, op, &id), std::string("lookup ") + op);
      dx_invoke_options_t options{};
      options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
      options.flags = DX_INVOKE_FLAG_PLUGIN | (backward ? DX_INVOKE_FLAG_BACKWARD : 0);
      options.plugin_index = on_plugin ? plugin_ : reference_;
      result.status = host_status(dx_invoke_ex(runtime_, id, in.data(), static_cast<int32_t>(in.size()), out.data(),
                                               static_cast<int32_t>(out.size()), attrs, &options),
                                  &result.message);
      if (result.status == DX_OK) {
        for (dx_tensor_t* t : out) {
          int64_t n = 0;
          dx_dtype_t d = 0;
          check(dx_tensor_numel(t, &n), "numel");
          check(dx_tensor_dtype(t, &d), "dtype");
          std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_bytes(d));
          check(dx_tensor_read(t, bytes.data(), bytes.size()), "dx_tensor_read");
          result.outputs.push_back(std::move(bytes));
        }
      }
    } catch (...) {
      for (dx_tensor_t* t : owned) dx_error_destroy(dx_tensor_destroy(t));
      throw;
    }
    for (dx_tensor_t* t : owned) dx_error_destroy(dx_tensor_destroy(t));
    return result;
  }

 private:
  dx_runtime_t* runtime_ = nullptr;
  int32_t plugin_ = -1, reference_ = -1, device_ = -1, ref_device_ = -1;
  bool has_device_ = false;
};

/// Attribute list RAII.
class Attrs {
 public:
  Attrs() { check(dx_attrs_create(&attrs_), "dx_attrs_create"); }
  ~Attrs() { dx_error_destroy(dx_attrs_destroy(attrs_)); }
  Attrs(const Attrs&) = delete;
  Attrs& operator=(const Attrs&) = delete;
  Attrs& i64(const char* n, int64_t v) { check(dx_attrs_set_i64(attrs_, n, v), n); return *this; }
  Attrs& f64(const char* n, double v) { check(dx_attrs_set_f64(attrs_, n, v), n); return *this; }
  Attrs& boolean(const char* n, bool v) { check(dx_attrs_set_bool(attrs_, n, v ? 1 : 0), n); return *this; }
  Attrs& i64s(const char* n, const std::vector<int64_t>& v) {
    check(dx_attrs_set_i64_array(attrs_, n, v.data(), static_cast<int64_t>(v.size())), n);
    return *this;
  }
  const dx_attrs_t* get() const { return attrs_; }

 private:
  dx_attrs_t* attrs_ = nullptr;
};

template <class T>
std::vector<T> as(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace deepx::gpu::testing

#endif  // DEEPX_PLUGINS_GPU_COMMON_TESTS_GPU_PLUGIN_CHECKS_H_
