// The client API entry points for runtimes, plugins, devices, ops, attributes and invocation.
// Every entry point validates its arguments and runs under Guard(): no exception escapes.
#include <cstdlib>

#include "internal.h"
#include "remote.h"

namespace deepx::host {
dx_status_t Invoke(const dx_runtime_t* runtime, dx_op_id_t id, dx_tensor_t* const* inputs,
                   int32_t num_inputs, dx_tensor_t* const* outputs, int32_t num_outputs,
                   const dx_attrs_t* attrs, const dx_invoke_options_t* options);
}

using namespace deepx::host;

#define DX_REQUIRE(cond, ...) \
  do {                        \
    if (!(cond)) return Failf(DX_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

namespace {

// Copies min(known, caller's struct_size) bytes of `full` into `out`, keeping out's struct_size.
template <class T>
dx_status_t FillInfo(const T& full, T* out, size_t known, const char* where) {
  if (out == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: out_info is null", where);
  size_t declared = out->struct_size;
  if (declared < sizeof(size_t) + sizeof(void*)) {
    return Failf(DX_INVALID_ARGUMENT,
                 "%s: out_info->struct_size (%zu) is unset or too small; set it to the "
                 "struct's named size (DX_<STRUCT>_SIZE_1_0)",
                 where, declared);
  }
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
              reinterpret_cast<const char*>(&full) + sizeof(size_t),
              std::min(known, declared) - sizeof(size_t));
  return DX_OK;
}

dx_status_t SetAttr(dx_attrs_t* handle, const char* name, AttrItem item) {
  Attrs* attrs = nullptr;
  if (dx_status_t st = Resolve(handle, "dx_attrs_set", "attrs", &attrs)) return st;
  if (name == nullptr || name[0] == '\0') {
    return Fail(DX_INVALID_ARGUMENT, "dx_attrs_set: name is null or empty");
  }
  item.name = name;
  ++attrs->generation;
  for (auto& existing : attrs->items) {
    if (existing.name == item.name) {
      existing = std::move(item);
      return DX_OK;
    }
  }
  attrs->items.push_back(std::move(item));
  return DX_OK;
}

// Resolves a runtime handle and takes its registry lock shared, for the queries.
struct RuntimeReader {
  Runtime* runtime = nullptr;
  std::shared_lock<RegistryLock> lock;
  dx_status_t Open(const dx_runtime_t* handle, const char* where) {
    if (dx_status_t st = Resolve(handle, where, "runtime", &runtime)) return st;
    lock = std::shared_lock<RegistryLock>(runtime->core->registry);
    return DX_OK;
  }
  Core& core() const { return *runtime->core; }
  // The connection of a remote runtime (its catalogue answers the queries), or null.
  RemoteConnection* remote() const { return runtime->remote.get(); }
};

// What a remote runtime answers to a call it cannot make (host.h, "Remote runtimes").
dx_status_t RefuseRemote(const RemoteConnection& c, const char* where, const char* why) {
  return Failf(DX_UNSUPPORTED, "%s: not available on a runtime connected to deepxd at %s: %s",
               where, c.address().c_str(), why);
}
constexpr const char* kPluginsFromConfig =
    "the daemon loads the plugins its configuration names, never a path sent by a client";

}  // namespace

extern "C" {

DX_EXPORT dx_error_t* dx_runtime_create(const dx_runtime_options_t* options,
                                        dx_runtime_t** out_runtime) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(out_runtime != nullptr, "dx_runtime_create: out_runtime is null");
    dx_runtime_options_t opts;
    std::memset(&opts, 0, sizeof opts);
    if (options != nullptr) {
      if (options->struct_size < DX_STRUCT_SIZE(dx_runtime_options_t, flags)) {
        return Failf(DX_INVALID_ARGUMENT,
                     "dx_runtime_create: options->struct_size (%zu) is too small; set it to "
                     "DX_RUNTIME_OPTIONS_SIZE_1_0",
                     options->struct_size);
      }
      std::memcpy(&opts, options,
                  std::min<size_t>(options->struct_size, DX_RUNTIME_OPTIONS_SIZE_1_0));
    }
    auto rt = std::make_unique<Runtime>();
    rt->core = std::make_shared<Core>();
    const bool ignore_env = (opts.flags & DX_RUNTIME_FLAG_IGNORE_ENV) != 0;
    rt->core->search_dirs = SearchDirs(opts.plugin_path, ignore_env);
    rt->core->certificate_dirs = SplitPath(opts.certificate_path);
    rt->core->require_certified = (opts.flags & DX_RUNTIME_FLAG_REQUIRE_CERTIFIED) != 0;
    rt->core->log = opts.log;
    rt->core->log_user_data = opts.log_user_data;
    if (!ignore_env) {
      for (auto& d : SplitPath(std::getenv("DEEPX_CERTIFICATE_PATH"))) {
        rt->core->certificate_dirs.push_back(d);
      }
      const char* require = std::getenv("DEEPX_REQUIRE_CERTIFIED");
      if (require != nullptr && require[0] != '\0' && std::strcmp(require, "0") != 0) {
        rt->core->require_certified = true;
      }
    }
    return Issue(std::move(rt), out_runtime, "dx_runtime_create");
  });
}

DX_EXPORT dx_error_t* dx_runtime_destroy(dx_runtime_t* runtime) {
  return Guard([&]() -> dx_status_t {
    if (runtime == nullptr) return DX_OK;
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_runtime_destroy", "runtime", &rt)) return st;
    int64_t live = rt->core->live_tensors.load(std::memory_order_relaxed);
    if (live > 0) {
      std::string message = "dx_runtime_destroy: " + std::to_string(live) +
                            " tensor handle(s) of this runtime are still alive; its plugins stay "
                            "loaded until they are destroyed";
      LogTo(rt->core.get(), DX_LOG_WARN, "host", message);
    }
    // Tasks first, while the handle still resolves: the queued ones are cancelled and the running
    // one finishes (its kernel resolves this runtime). Then the handle goes; the Core (and each
    // plugin's shutdown) goes when its last tensor or storage releases it.
    rt->StopExecutor();
    return Retire<Runtime>(runtime, "dx_runtime_destroy", "runtime");
  });
}

DX_EXPORT dx_error_t* dx_runtime_load_plugin(dx_runtime_t* runtime, const char* name_or_path,
                                             int32_t* out_plugin_index) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_runtime_load_plugin", "runtime", &rt)) return st;
    if (rt->remote) return RefuseRemote(*rt->remote, "dx_runtime_load_plugin", kPluginsFromConfig);
    DX_REQUIRE(name_or_path != nullptr && name_or_path[0] != '\0',
               "dx_runtime_load_plugin: name_or_path is null or empty");
    return LoadPlugin(rt->core, name_or_path, out_plugin_index);
  });
}

DX_EXPORT dx_error_t* dx_runtime_load_search_path(dx_runtime_t* runtime, int32_t* out_loaded,
                                                  int32_t* out_failed) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_runtime_load_search_path", "runtime", &rt)) {
      return st;
    }
    if (rt->remote) {
      return RefuseRemote(*rt->remote, "dx_runtime_load_search_path", kPluginsFromConfig);
    }
    int32_t loaded = 0, failed = 0;
    std::vector<std::string> paths;
    {
      std::shared_lock<RegistryLock> registry(rt->core->registry);
      paths = DiscoverPlugins(*rt->core);
    }
    for (const auto& path : paths) {
      bool already = false;
      {
        std::shared_lock<RegistryLock> registry(rt->core->registry);
        for (const auto& p : rt->core->plugins) already = already || p->path == path;
      }
      if (already) continue;
      if (LoadPlugin(rt->core, path.c_str(), nullptr) == DX_OK) {
        ++loaded;
      } else {
        ++failed;
        LogTo(rt->core.get(), DX_LOG_WARN, "host", PendingMessage());
        ClearPendingMessage();
      }
    }
    if (out_loaded) *out_loaded = loaded;
    if (out_failed) *out_failed = failed;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_plugin_count(const dx_runtime_t* runtime, int32_t* out_count) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_plugin_count")) return st;
    DX_REQUIRE(out_count != nullptr, "dx_runtime_plugin_count: out_count is null");
    *out_count = static_cast<int32_t>(r.remote() ? r.remote()->plugins().size()
                                                 : r.core().plugins.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_plugin_info(const dx_runtime_t* runtime, int32_t index,
                                             dx_plugin_info_t* out_info) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_plugin_info")) return st;
    if (const RemoteConnection* c = r.remote()) {
      if (index < 0 || index >= static_cast<int32_t>(c->plugins().size())) {
        return Failf(DX_OUT_OF_RANGE,
                     "dx_runtime_plugin_info: index %d out of range (%zu plugins in deepxd)", index,
                     c->plugins().size());
      }
      const RemotePlugin& p = c->plugins()[index];
      dx_plugin_info_t full;
      std::memset(&full, 0, sizeof full);
      full.name = p.name.c_str();
      full.vendor = "";
      full.version = p.version.c_str();
      full.build_id = "";
      full.path = "";  // a file of the daemon's host
      full.num_kernels = p.num_kernels;
      full.num_memory_spaces = p.num_devices;
      full.certification = p.certification;
      full.certificate = "";
      full.certification_note = "";
      return FillInfo(full, out_info, DX_PLUGIN_INFO_SIZE_1_0, "dx_runtime_plugin_info");
    }
    const auto& plugins = r.core().plugins;
    if (index < 0 || index >= static_cast<int32_t>(plugins.size())) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_plugin_info: index %d out of range (%zu plugins)",
                   index, plugins.size());
    }
    const Plugin& p = *plugins[index];
    dx_plugin_info_t full;
    std::memset(&full, 0, sizeof full);
    full.name = p.name.c_str();
    full.vendor = p.vendor.c_str();
    full.version = p.version.c_str();
    full.build_id = p.build_id.c_str();
    full.path = p.path.c_str();
    full.abi_version = p.abi_version;
    full.capabilities = p.capabilities;
    full.num_kernels = p.num_kernels;
    full.num_memory_spaces = p.num_memory_spaces;
    full.num_transports = p.num_transports;
    full.certification = p.certification;
    full.certificate = p.certificate.c_str();
    full.certification_note = p.certification_note.c_str();
    return FillInfo(full, out_info, DX_PLUGIN_INFO_SIZE_1_0, "dx_runtime_plugin_info");
  });
}

DX_EXPORT dx_error_t* dx_runtime_plugin_extension(const dx_runtime_t* runtime, int32_t index,
                                                  const char* name, uint32_t min_version,
                                                  const dx_extension_t** out_extension) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_plugin_extension")) return st;
    if (r.remote()) {
      return RefuseRemote(*r.remote(), "dx_runtime_plugin_extension",
                          "an extension is a struct of pointers into a plugin loaded in the "
                          "daemon's process");
    }
    DX_REQUIRE(name != nullptr && out_extension != nullptr,
               "dx_runtime_plugin_extension: name or out_extension is null");
    const auto& plugins = r.core().plugins;
    if (index < 0 || index >= static_cast<int32_t>(plugins.size())) {
      return Failf(DX_OUT_OF_RANGE,
                   "dx_runtime_plugin_extension: index %d out of range (%zu plugins)", index,
                   plugins.size());
    }
    const Plugin& p = *plugins[index];
    const dx_extension_t* ext =
        p.get_extension ? p.get_extension(p.state, name, min_version) : nullptr;
    if (ext != nullptr) {
      if (ext->struct_size < DX_EXTENSION_SIZE_1_0 || ext->name == nullptr ||
          std::strcmp(ext->name, name) != 0 || ext->version < min_version) {
        return Failf(DX_PLUGIN_ERROR,
                     "dx_runtime_plugin_extension: plugin '%s' answered '%s' (version >= %u) "
                     "with a malformed extension header",
                     p.name.c_str(), name, min_version);
      }
    }
    *out_extension = ext;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_device_count(const dx_runtime_t* runtime, int32_t* out_count) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_device_count")) return st;
    DX_REQUIRE(out_count != nullptr, "dx_runtime_device_count: out_count is null");
    *out_count = static_cast<int32_t>(r.remote() ? r.remote()->devices().size()
                                                 : r.core().spaces.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_device_info(const dx_runtime_t* runtime, int32_t index,
                                             dx_device_info_t* out_info) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_device_info")) return st;
    if (const RemoteConnection* c = r.remote()) {
      if (index < 0 || index >= static_cast<int32_t>(c->devices().size())) {
        return Failf(DX_OUT_OF_RANGE,
                     "dx_runtime_device_info: index %d out of range (%zu devices in deepxd)", index,
                     c->devices().size());
      }
      const RemoteDevice& d = c->devices()[index];
      dx_device_info_t full;
      std::memset(&full, 0, sizeof full);
      full.name = d.name.c_str();
      full.device_type = d.device_type;
      full.device_id = d.device_id;
      full.kind = d.kind;
      full.plugin_index = d.plugin_index;
      return FillInfo(full, out_info, DX_DEVICE_INFO_SIZE_1_0, "dx_runtime_device_info");
    }
    const auto& spaces = r.core().spaces;
    if (index < 0 || index >= static_cast<int32_t>(spaces.size())) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_device_info: index %d out of range (%zu devices)",
                   index, spaces.size());
    }
    const MemorySpace& s = spaces[index];
    dx_device_info_t full;
    std::memset(&full, 0, sizeof full);
    full.name = s.name.c_str();
    full.device_type = s.desc.device.device_type;
    full.device_id = s.desc.device.device_id;
    full.kind = s.desc.kind;
    full.plugin_index = s.plugin_index;
    full.capacity = s.desc.capacity;
    full.alignment = s.desc.alignment;
    return FillInfo(full, out_info, DX_DEVICE_INFO_SIZE_1_0, "dx_runtime_device_info");
  });
}

DX_EXPORT dx_error_t* dx_runtime_device_stats(const dx_runtime_t* runtime, int32_t index,
                                              dx_memory_stats_t* out_stats) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_device_stats")) return st;
    if (r.remote()) {
      return RefuseRemote(*r.remote(), "dx_runtime_device_stats",
                          "wire protocol 1.0 has no per-device statistics");
    }
    const auto& spaces = r.core().spaces;
    if (index < 0 || index >= static_cast<int32_t>(spaces.size())) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_device_stats: index %d out of range (%zu devices)",
                   index, spaces.size());
    }
    const MemorySpace& s = spaces[index];
    if (s.desc.stats == nullptr) {
      return Failf(DX_UNSUPPORTED,
                   "dx_runtime_device_stats: device '%s' (plugin '%s') reports no statistics",
                   s.name.c_str(), r.core().plugins[s.plugin_index]->name.c_str());
    }
    dx_memory_stats_t full;
    std::memset(&full, 0, sizeof full);
    full.struct_size = DX_MEMORY_STATS_SIZE_1_0;
    if (dx_error_t* e = s.desc.stats(s.desc.space_data, &full)) {
      return FailFromError(e, "dx_runtime_device_stats: ");
    }
    return FillInfo(full, out_stats, DX_MEMORY_STATS_SIZE_1_0, "dx_runtime_device_stats");
  });
}

DX_EXPORT dx_error_t* dx_runtime_find_device(const dx_runtime_t* runtime, const char* name,
                                             int32_t* out_index) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_find_device")) return st;
    DX_REQUIRE(name != nullptr && out_index != nullptr, "dx_runtime_find_device: null argument");
    if (const RemoteConnection* c = r.remote()) {
      for (size_t i = 0; i < c->devices().size(); ++i) {
        if (c->devices()[i].name == name) {
          *out_index = static_cast<int32_t>(i);
          return DX_OK;
        }
      }
      return Failf(DX_NOT_FOUND, "no device named '%s' in deepxd at %s", name,
                   c->address().c_str());
    }
    for (const auto& s : r.core().spaces) {
      if (s.name == name) {
        *out_index = s.index;
        return DX_OK;
      }
    }
    return Failf(DX_NOT_FOUND, "no device named '%s' (load the plugin that serves it)", name);
  });
}

DX_EXPORT dx_error_t* dx_runtime_op_count(const dx_runtime_t* runtime, int32_t* out_count) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_op_count")) return st;
    DX_REQUIRE(out_count != nullptr, "dx_runtime_op_count: out_count is null");
    *out_count =
        static_cast<int32_t>(r.remote() ? r.remote()->ops().size() : r.core().ops.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_op_name(const dx_runtime_t* runtime, dx_op_id_t id,
                                         const char** out_name) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_op_name")) return st;
    DX_REQUIRE(out_name != nullptr, "dx_runtime_op_name: out_name is null");
    if (const RemoteConnection* c = r.remote()) {
      if (id >= c->ops().size()) {
        return Failf(DX_OUT_OF_RANGE, "dx_runtime_op_name: op id %u out of range", id);
      }
      *out_name = c->ops()[id].name.c_str();
      return DX_OK;
    }
    if (id >= r.core().ops.size()) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_op_name: op id %u out of range", id);
    }
    *out_name = r.core().ops[id].name.c_str();
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_op_lookup(const dx_runtime_t* runtime, const char* name,
                                           dx_op_id_t* out_id) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_op_lookup")) return st;
    DX_REQUIRE(name != nullptr && out_id != nullptr, "dx_runtime_op_lookup: null argument");
    if (const RemoteConnection* c = r.remote()) {
      if (!c->FindOp(name, out_id)) {
        return Failf(DX_NOT_FOUND, "no plugin of deepxd at %s implements op '%s'",
                     c->address().c_str(), name);
      }
      return DX_OK;
    }
    auto it = r.core().op_ids.find(name);
    if (it == r.core().op_ids.end()) {
      return Failf(DX_NOT_FOUND, "no loaded plugin implements op '%s'", name);
    }
    *out_id = it->second;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_kernel_count(const dx_runtime_t* runtime, dx_op_id_t id,
                                              int32_t* out_count) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_kernel_count")) return st;
    DX_REQUIRE(out_count != nullptr, "dx_runtime_kernel_count: out_count is null");
    if (const RemoteConnection* c = r.remote()) {
      if (id >= c->ops().size()) {
        return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_count: op id %u out of range", id);
      }
      *out_count = static_cast<int32_t>(c->ops()[id].kernels.size());
      return DX_OK;
    }
    if (id >= r.core().ops.size()) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_count: op id %u out of range", id);
    }
    *out_count = static_cast<int32_t>(r.core().ops[id].kernels.size());
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_runtime_kernel_info(const dx_runtime_t* runtime, dx_op_id_t id,
                                             int32_t index, dx_kernel_info_t* out_info) {
  return Guard([&]() -> dx_status_t {
    RuntimeReader r;
    if (dx_status_t st = r.Open(runtime, "dx_runtime_kernel_info")) return st;
    if (const RemoteConnection* c = r.remote()) {
      if (id >= c->ops().size()) {
        return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_info: op id %u out of range", id);
      }
      const auto& kernels = c->ops()[id].kernels;
      if (index < 0 || index >= static_cast<int32_t>(kernels.size())) {
        return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_info: kernel index %d out of range",
                     index);
      }
      const RemoteKernel& k = kernels[index];
      dx_kernel_info_t full;
      std::memset(&full, 0, sizeof full);
      full.plugin_index = k.plugin_index;
      full.device_type = k.device_type;
      full.num_inputs = k.num_inputs;
      full.num_outputs = k.num_outputs;
      full.num_dtypes = static_cast<int32_t>(k.dtypes.size());
      full.dtypes = k.dtypes.data();
      full.certified = k.certified ? 1 : 0;
      return FillInfo(full, out_info, DX_KERNEL_INFO_SIZE_1_0, "dx_runtime_kernel_info");
    }
    if (id >= r.core().ops.size()) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_info: op id %u out of range", id);
    }
    const auto& kernels = r.core().ops[id].kernels;
    if (index < 0 || index >= static_cast<int32_t>(kernels.size())) {
      return Failf(DX_OUT_OF_RANGE, "dx_runtime_kernel_info: kernel index %d out of range",
                   index);
    }
    const Kernel& k = kernels[index];
    dx_kernel_info_t full;
    std::memset(&full, 0, sizeof full);
    full.plugin_index = k.plugin_index;
    full.device_type = k.device_type;
    full.num_inputs = k.num_inputs;
    full.num_outputs = k.num_outputs;
    full.num_dtypes = static_cast<int32_t>(k.dtypes.size());
    full.dtypes = k.dtypes.data();
    full.flags = k.flags;
    full.has_backward = k.backward != nullptr ? 1 : 0;
    full.has_supports = k.supports != nullptr ? 1 : 0;
    full.certified = k.certified ? 1 : 0;
    return FillInfo(full, out_info, DX_KERNEL_INFO_SIZE_1_0, "dx_runtime_kernel_info");
  });
}

DX_EXPORT dx_error_t* dx_attrs_create(dx_attrs_t** out_attrs) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(out_attrs != nullptr, "dx_attrs_create: out_attrs is null");
    return Issue(std::make_unique<Attrs>(), out_attrs, "dx_attrs_create");
  });
}

DX_EXPORT dx_error_t* dx_attrs_destroy(dx_attrs_t* attrs) {
  return Guard([&]() -> dx_status_t {
    return Retire<Attrs>(attrs, "dx_attrs_destroy", "attrs");
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_i64(dx_attrs_t* attrs, const char* name, int64_t value) {
  return Guard([&]() -> dx_status_t {
    AttrItem item;
    item.type = DX_ATTR_I64;
    item.scalar_i = value;
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_f64(dx_attrs_t* attrs, const char* name, double value) {
  return Guard([&]() -> dx_status_t {
    AttrItem item;
    item.type = DX_ATTR_F64;
    item.scalar_f = value;
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_bool(dx_attrs_t* attrs, const char* name, int32_t value) {
  return Guard([&]() -> dx_status_t {
    if (value != 0 && value != 1) {
      return Fail(DX_INVALID_ARGUMENT, "dx_attrs_set_bool: value must be 0 or 1");
    }
    AttrItem item;
    item.type = DX_ATTR_BOOL;
    item.scalar_i = value;
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_string(dx_attrs_t* attrs, const char* name,
                                          const char* value, int64_t length) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(value != nullptr || length == 0, "dx_attrs_set_string: value is null");
    DX_REQUIRE(length >= -1 && length <= (int64_t{1} << 30),
               "dx_attrs_set_string: length %lld is neither -1 nor a size up to 2^30",
               static_cast<long long>(length));
    AttrItem item;
    item.type = DX_ATTR_STRING;
    if (length == -1) {
      item.str = value;
    } else if (length > 0) {
      item.str.assign(value, static_cast<size_t>(length));
    }
    if (item.str.find('\0') != std::string::npos) {
      return Fail(DX_INVALID_ARGUMENT, "dx_attrs_set_string: the value contains a NUL byte");
    }
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_i64_array(dx_attrs_t* attrs, const char* name,
                                             const int64_t* values, int64_t count) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(count >= 0 && count <= (1 << 20), "dx_attrs_set_i64_array: bad count");
    DX_REQUIRE(values != nullptr || count == 0, "dx_attrs_set_i64_array: values is null");
    AttrItem item;
    item.type = DX_ATTR_I64_ARRAY;
    if (count > 0) item.ints.assign(values, values + count);
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_attrs_set_f64_array(dx_attrs_t* attrs, const char* name,
                                             const double* values, int64_t count) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(count >= 0 && count <= (1 << 20), "dx_attrs_set_f64_array: bad count");
    DX_REQUIRE(values != nullptr || count == 0, "dx_attrs_set_f64_array: values is null");
    AttrItem item;
    item.type = DX_ATTR_F64_ARRAY;
    if (count > 0) item.floats.assign(values, values + count);
    return SetAttr(attrs, name, std::move(item));
  });
}

DX_EXPORT dx_error_t* dx_invoke(dx_runtime_t* runtime, dx_op_id_t op, dx_tensor_t* const* inputs,
                                int32_t num_inputs, dx_tensor_t* const* outputs,
                                int32_t num_outputs, const dx_attrs_t* attrs) {
  return Guard([&]() -> dx_status_t {
    return Invoke(runtime, op, inputs, num_inputs, outputs, num_outputs, attrs, nullptr);
  });
}

DX_EXPORT dx_error_t* dx_invoke_ex(dx_runtime_t* runtime, dx_op_id_t op,
                                   dx_tensor_t* const* inputs, int32_t num_inputs,
                                   dx_tensor_t* const* outputs, int32_t num_outputs,
                                   const dx_attrs_t* attrs, const dx_invoke_options_t* options) {
  return Guard([&]() -> dx_status_t {
    return Invoke(runtime, op, inputs, num_inputs, outputs, num_outputs, attrs, options);
  });
}

DX_EXPORT dx_error_t* dx_invoke_by_name(dx_runtime_t* runtime, const char* op_name,
                                        dx_tensor_t* const* inputs, int32_t num_inputs,
                                        dx_tensor_t* const* outputs, int32_t num_outputs,
                                        const dx_attrs_t* attrs) {
  return Guard([&]() -> dx_status_t {
    dx_op_id_t id = 0;
    {
      RuntimeReader r;
      if (dx_status_t st = r.Open(runtime, "dx_invoke_by_name")) return st;
      DX_REQUIRE(op_name != nullptr, "dx_invoke_by_name: op_name is null");
      if (RemoteConnection* c = r.remote()) {
        return c->Invoke(op_name, inputs, num_inputs, outputs, num_outputs, attrs, nullptr,
                         "dx_invoke_by_name");
      }
      auto it = r.core().op_ids.find(op_name);
      if (it == r.core().op_ids.end()) {
        return Failf(DX_NOT_FOUND, "no loaded plugin implements op '%s'", op_name);
      }
      id = it->second;
    }
    return Invoke(runtime, id, inputs, num_inputs, outputs, num_outputs, attrs, nullptr);
  });
}

}  // extern "C"

extern "C" DX_EXPORT dx_error_t* dx_runtime_connect(const char* address,
                                                    const dx_connect_options_t* options,
                                                    dx_runtime_t** out_runtime) {
  return Guard([&]() -> dx_status_t {
    constexpr const char* kWhere = "dx_runtime_connect";
    DX_REQUIRE(address != nullptr && address[0] != '\0', "%s: address is null or empty", kWhere);
    DX_REQUIRE(out_runtime != nullptr, "%s: out_runtime is null", kWhere);
    dx_connect_options_t opts;
    std::memset(&opts, 0, sizeof opts);
    if (options != nullptr) {
      if (options->struct_size < DX_STRUCT_SIZE(dx_connect_options_t, connect_timeout_ms)) {
        return Failf(DX_INVALID_ARGUMENT,
                     "%s: options->struct_size (%zu) is too small; set it to "
                     "DX_CONNECT_OPTIONS_SIZE_1_1",
                     kWhere, options->struct_size);
      }
      std::memcpy(&opts, options,
                  std::min<size_t>(options->struct_size, DX_CONNECT_OPTIONS_SIZE_1_1));
    }
    ConnectSettings settings;
    settings.address = address;
    if (opts.connect_timeout_ms != 0) settings.connect_timeout_ms = opts.connect_timeout_ms;
    if (opts.request_timeout_ms != 0) settings.request_timeout_ms = opts.request_timeout_ms;
    if (opts.client_name != nullptr) {
      settings.client_name = opts.client_name;
      DX_REQUIRE(settings.client_name.size() <= 256, "%s: client_name is longer than 256 bytes",
                 kWhere);
    }
    auto rt = std::make_unique<Runtime>();
    rt->core = std::make_shared<Core>();
    rt->core->remote = true;
    if (dx_status_t st = RemoteConnection::Connect(settings, &rt->remote, kWhere)) return st;
    return Issue(std::move(rt), out_runtime, kWhere);
  });
}
