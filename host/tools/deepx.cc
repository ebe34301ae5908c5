// deepx: the command-line face of the host runtime.
//
//   deepx plugins [PATH|NAME...]   what loaded (versions, capabilities) or why not
//   deepx ops [PATH|NAME...]       op x dtype x device table
//   deepx certify ARGS...          runs the conformance runner (deepx-certify)
//   deepx keygen NAME              a new Ed25519 key pair for signing certificates
//   deepx version
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "certificate.h"
#include "deepx/host.h"
#include "deepx/plugin.h"

namespace {

const char* kUsage =
    "usage: deepx <command> [args]\n"
    "  plugins [PATH|NAME...]  load plugins (default: every plugin on the search path) and show\n"
    "                          what loaded, their versions and capabilities, or why not\n"
    "  ops [PATH|NAME...]      show the op x dtype x device table of the loaded plugins\n"
    "  certify PLUGIN [ARGS]   certify a plugin with the conformance suite (deepx-certify);\n"
    "                          --sign KEY signs the certificate\n"
    "  keygen NAME             write a new Ed25519 signing key: NAME.key (private, mode 0600)\n"
    "                          and NAME.pub (public: goes into a host's trust store)\n"
    "  version                 show the host's ABI version\n"
    "The search path is DEEPX_PLUGIN_PATH (colon-separated), then the bundled plugin dir.\n"
    "Certificates are looked up in DEEPX_CERTIFICATE_PATH as <name>.certificate, then next to\n"
    "the library as <file>.certificate; DEEPX_REQUIRE_CERTIFIED=1 runs only the kernels a\n"
    "certificate signed by a key of the trust store lists (DEEPX_TRUST_DIR, else the installed\n"
    "share/deepx/trusted-keys).\n";

std::string Version(uint32_t v) {
  return std::to_string(DX_VERSION_MAJOR(v)) + "." + std::to_string(DX_VERSION_MINOR(v));
}

std::string DtypeName(dx_dtype_t d) {
  std::string name = dx_dtype_string(d);
  return name == "unknown" ? "?" + std::to_string(d) : name;
}

std::string DeviceName(int32_t type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLROCM: return "rocm";
    default: return "device" + std::to_string(type);
  }
}

std::string Caps(uint64_t caps) {
  std::string s;
  auto add = [&](uint64_t bit, const char* name) {
    if (caps & bit) s += (s.empty() ? "" : ",") + std::string(name);
  };
  add(DX_PLUGIN_CAP_KERNELS, "kernels");
  add(DX_PLUGIN_CAP_MEMORY, "memory");
  add(DX_PLUGIN_CAP_TRANSPORTS, "transports");
  add(DX_PLUGIN_CAP_CONCURRENT_KERNELS, "concurrent");
  return s.empty() ? "-" : s;
}

// The result of a host call: an error owned until scope exit, or null (success).
class Result {
 public:
  explicit Result(dx_error_t* error) : error_(error) {}
  ~Result() { dx_error_destroy(error_); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;

  bool ok() const { return error_ == nullptr; }
  dx_status_t code() const { return dx_error_code(error_); }
  const char* message() const { return dx_error_message(error_, nullptr); }

 private:
  dx_error_t* error_;
};

// True when a host call succeeded; a failure's error is freed. For the queries whose failure
// only means "skip this entry".
bool Succeeded(dx_error_t* error) { return Result(error).ok(); }

struct Runtime {
  dx_runtime_t* rt = nullptr;
  Runtime() {
    Result r(dx_runtime_create(nullptr, &rt));
    if (!r.ok()) {
      std::fprintf(stderr, "deepx: cannot create a runtime: %s: %s\n", dx_status_string(r.code()),
                   r.message());
      std::exit(2);
    }
  }
  ~Runtime() { dx_error_destroy(dx_runtime_destroy(rt)); }
};

// Loads the given plugins, or the whole search path. Returns the number of failures.
int Load(Runtime& r, const std::vector<std::string>& args, bool verbose) {
  int failures = 0;
  if (args.empty()) {
    int32_t loaded = 0, failed = 0;
    Result search(dx_runtime_load_search_path(r.rt, &loaded, &failed));
    if (!search.ok()) {
      std::fprintf(stderr, "deepx: cannot scan the search path: %s: %s\n",
                   dx_status_string(search.code()), search.message());
      return 1;
    }
    if (failed > 0) {
      // The host logged each refused file with its reason (above, on stderr).
      std::fprintf(stderr, "deepx: %d plugin file%s on the search path could not be loaded\n",
                   failed, failed == 1 ? "" : "s");
    }
    if (loaded == 0) {
      std::fprintf(stderr, "deepx: no plugin found on the search path (set DEEPX_PLUGIN_PATH)\n");
      return 1;
    }
    return 0;
  }
  for (const auto& a : args) {
    int32_t index = -1;
    Result load(dx_runtime_load_plugin(r.rt, a.c_str(), &index));
    if (!load.ok()) {
      ++failures;
      std::printf("FAILED  %s\n  %s: %s\n", a.c_str(), dx_status_string(load.code()),
                  load.message());
    } else if (verbose) {
      (void)index;
    }
  }
  return failures;
}

int Plugins(const std::vector<std::string>& args) {
  Runtime r;
  int failures = Load(r, args, true);
  int32_t count = 0;
  if (!Succeeded(dx_runtime_plugin_count(r.rt, &count))) count = 0;
  for (int32_t i = 0; i < count; ++i) {
    dx_plugin_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    if (!Succeeded(dx_runtime_plugin_info(r.rt, i, &info))) continue;
    std::printf("LOADED  %s %s (vendor: %s, build: %s)\n", info.name,
                info.version[0] ? info.version : "-", info.vendor[0] ? info.vendor : "-",
                info.build_id[0] ? info.build_id : "-");
    std::printf("  path: %s\n  abi: %s (host %s)  capabilities: %s\n", info.path,
                Version(info.abi_version).c_str(), Version(dx_abi_version()).c_str(),
                Caps(info.capabilities).c_str());
    std::printf("  kernels: %d  memory spaces: %d  transports: %d\n", info.num_kernels,
                info.num_memory_spaces, info.num_transports);
    if (info.certification == DX_CERTIFICATION_VALID) {
      std::printf("  certified: yes (%s)\n", info.certificate);
    } else {
      std::printf("  certified: no (%s)\n", info.certification_note);
    }
  }
  int32_t devices = 0;
  if (!Succeeded(dx_runtime_device_count(r.rt, &devices))) devices = 0;
  for (int32_t i = 0; i < devices; ++i) {
    dx_device_info_t d;
    std::memset(&d, 0, sizeof d);
    d.struct_size = DX_DEVICE_INFO_SIZE_1_0;
    if (!Succeeded(dx_runtime_device_info(r.rt, i, &d))) continue;
    std::printf("DEVICE  %s (%s:%d, plugin #%d, alignment %llu)\n", d.name,
                DeviceName(d.device_type).c_str(), d.device_id, d.plugin_index,
                static_cast<unsigned long long>(d.alignment));
    dx_memory_stats_t st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = DX_MEMORY_STATS_SIZE_1_0;
    Result stats(dx_runtime_device_stats(r.rt, i, &st));
    if (stats.ok()) {
      std::printf("  memory: %llu B in use (peak %llu) in %llu blocks, %llu B reserved (peak %llu)\n",
                  static_cast<unsigned long long>(st.in_use_bytes),
                  static_cast<unsigned long long>(st.peak_in_use_bytes),
                  static_cast<unsigned long long>(st.live_allocations),
                  static_cast<unsigned long long>(st.reserved_bytes),
                  static_cast<unsigned long long>(st.peak_reserved_bytes));
    } else {
      std::printf("  memory: no statistics (%s)\n", stats.message());
    }
  }
  if (count == 0 && failures == 0) return 1;
  return failures == 0 ? 0 : 1;
}

int Ops(const std::vector<std::string>& args) {
  Runtime r;
  int failures = Load(r, args, false);
  int32_t plugins = 0;
  if (!Succeeded(dx_runtime_plugin_count(r.rt, &plugins))) plugins = 0;
  std::vector<std::string> plugin_names;
  for (int32_t i = 0; i < plugins; ++i) {
    dx_plugin_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    plugin_names.push_back(Succeeded(dx_runtime_plugin_info(r.rt, i, &info)) ? info.name : "?");
  }
  int32_t ops = 0;
  if (!Succeeded(dx_runtime_op_count(r.rt, &ops))) ops = 0;
  std::map<std::string, dx_op_id_t> sorted;
  for (int32_t id = 0; id < ops; ++id) {
    const char* name = nullptr;
    if (Succeeded(dx_runtime_op_name(r.rt, static_cast<dx_op_id_t>(id), &name))) {
      sorted[name] = static_cast<dx_op_id_t>(id);
    }
  }
  std::printf("%-34s %-10s %-6s %-44s %s\n", "op", "plugin", "device", "dtypes (in -> out)",
              "flags");
  for (const auto& [name, id] : sorted) {
    int32_t kernels = 0;
    if (!Succeeded(dx_runtime_kernel_count(r.rt, id, &kernels))) kernels = 0;
    for (int32_t k = 0; k < kernels; ++k) {
      dx_kernel_info_t info;
      std::memset(&info, 0, sizeof info);
      info.struct_size = DX_KERNEL_INFO_SIZE_1_0;
      if (!Succeeded(dx_runtime_kernel_info(r.rt, id, k, &info))) continue;
      std::string sig;
      int32_t nin = (info.flags & DX_KERNEL_FLAG_VARIADIC) ? 1 : info.num_inputs;
      for (int32_t i = 0; i < info.num_dtypes; ++i) {
        if (i == nin) sig += " -> ";
        else if (i) sig += ",";
        sig += DtypeName(info.dtypes[i]);
        if (i == 0 && (info.flags & DX_KERNEL_FLAG_VARIADIC)) sig += "...";
      }
      if (nin == 0) sig = "-> " + sig;
      std::string flags;
      if (info.flags & DX_KERNEL_FLAG_DETERMINISTIC) flags += "det ";
      if (info.flags & DX_KERNEL_FLAG_INPLACE) flags += "inplace ";
      if (info.has_backward) flags += "backward ";
      if (info.has_supports) flags += "supports() ";
      if (info.certified) flags += "certified";
      std::printf("%-34s %-10s %-6s %-44s %s\n", name.c_str(),
                  plugin_names[info.plugin_index].c_str(), DeviceName(info.device_type).c_str(),
                  sig.c_str(), flags.c_str());
    }
  }
  return failures == 0 ? 0 : 1;
}

int Certify(int argc, char** argv) {
  // The runner lives next to this binary; fall back to PATH.
  std::string self(4096, '\0');
  ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  std::string runner = "deepx-certify";
  if (n > 0) {
    self.resize(static_cast<size_t>(n));
    std::string candidate = self.substr(0, self.rfind('/')) + "/deepx-certify";
    if (::access(candidate.c_str(), X_OK) == 0) runner = candidate;
  }
  std::vector<char*> args;
  args.push_back(runner.data());
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execvp(runner.c_str(), args.data());
  std::fprintf(stderr,
               "deepx certify: cannot run the conformance runner '%s': %s\n"
               "It is installed next to `deepx`; reinstall deepx or put deepx-certify on PATH.\n",
               runner.c_str(), std::strerror(errno));
  return 2;
}

int Keygen(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') {
    std::fprintf(stderr,
                 "usage: deepx keygen NAME\n"
                 "writes NAME.key (the private key, mode 0600: keep it secret) and NAME.pub\n");
    return 2;
  }
  const std::string priv = args[0] + ".key", pub = args[0] + ".pub";
  std::string why;
  std::optional<std::string> id = deepx::cert::GenerateKey(priv, pub, &why);
  if (!id) {
    std::fprintf(stderr, "deepx keygen: %s\n", why.c_str());
    return 1;
  }
  std::printf("private key: %s (mode 0600; sign with `deepx certify PLUGIN --sign %s`)\n"
              "public key:  %s (copy it into the trust store of the hosts that should trust it)\n"
              "key id:      %s\n",
              priv.c_str(), priv.c_str(), pub.c_str(), id->c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "plugins") return Plugins(rest);
  if (cmd == "ops") return Ops(rest);
  if (cmd == "certify") return Certify(argc, argv);
  if (cmd == "keygen") return Keygen(rest);
  if (cmd == "version" || cmd == "--version") {
    std::printf("deepx host, ABI %s\n", Version(dx_abi_version()).c_str());
    return 0;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "deepx: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
