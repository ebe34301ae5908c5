// The plugin loader: discovery, dlopen, version negotiation, staged registration.
//
// Libraries are opened with RTLD_LOCAL | RTLD_NODELETE and never unloaded: a plugin's code stays
// mapped for the life of the process, so no pointer into it can dangle (docs/abi-conventions.md,
// "Unloading").
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "certificate.h"
#include "internal.h"

namespace deepx::host {
namespace {

constexpr uint32_t kHostAbiMin = DX_MAKE_VERSION(DX_ABI_VERSION_MAJOR, 0);
constexpr uint32_t kHostAbiMax = DX_ABI_VERSION;
constexpr const char* kPrefix = "libdeepx-plugin-";
constexpr const char* kSuffix = ".so";

std::string VersionString(uint32_t v) {
  return std::to_string(DX_VERSION_MAJOR(v)) + "." + std::to_string(DX_VERSION_MINOR(v));
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool ValidPluginName(const char* name) {
  if (name == nullptr) return false;
  size_t n = std::strlen(name);
  if (n == 0 || n > 63) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// "ns.op": lowercase namespace and name of [a-z0-9_], separated by one or more dots.
bool ValidOpName(const char* name) {
  if (name == nullptr) return false;
  size_t n = std::strlen(name);
  if (n < 3 || n > 127) return false;
  bool dot = false;
  for (size_t i = 0; i < n; ++i) {
    char c = name[i];
    if (c == '.') {
      if (i == 0 || i + 1 == n || name[i - 1] == '.') return false;
      dot = true;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return dot;
}

std::string CopyString(const char* s) { return s ? std::string(s) : std::string(); }

// Reads min(known, declared) bytes of a plugin struct into a zeroed copy: fields beyond what
// the plugin declared read as zero/absent, fields beyond what we know are ignored.
template <class T>
T ReadStruct(const T* in, size_t known) {
  T out;
  std::memset(&out, 0, sizeof out);
  size_t declared = in->struct_size;
  std::memcpy(&out, in, std::min(known, declared));
  out.struct_size = declared;
  return out;
}

}  // namespace

std::vector<std::string> SplitPath(const char* value) {
  std::vector<std::string> out;
  if (value == nullptr) return out;
  std::string s(value);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string BundledPluginDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&BundledPluginDir), &info) != 0 && info.dli_fname) {
    std::string lib(info.dli_fname);
    size_t slash = lib.rfind('/');
    std::string dir = slash == std::string::npos ? "." : lib.substr(0, slash);
    return dir + "/deepx/plugins";
  }
  return DEEPX_INSTALL_PLUGIN_DIR;
}

std::vector<std::string> SearchDirs(const char* option_path, bool ignore_env) {
  std::vector<std::string> dirs = SplitPath(option_path);
  if (!ignore_env) {
    for (auto& d : SplitPath(std::getenv("DEEPX_PLUGIN_PATH"))) dirs.push_back(d);
  }
  dirs.push_back(BundledPluginDir());
  dirs.push_back(DEEPX_INSTALL_PLUGIN_DIR);
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (auto& d : dirs) {
    if (seen.insert(d).second) unique.push_back(d);
  }
  return unique;
}

std::vector<std::string> DiscoverPlugins(const Core& core) {
  std::vector<std::string> found;
  std::set<std::string> names;
  for (const auto& dir : core.search_dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> files;
    while (struct dirent* e = ::readdir(d)) {
      std::string f(e->d_name);
      if (f.size() > std::strlen(kPrefix) + std::strlen(kSuffix) && f.rfind(kPrefix, 0) == 0 &&
          f.compare(f.size() - 3, 3, kSuffix) == 0) {
        files.push_back(f);
      }
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      std::string name = f.substr(std::strlen(kPrefix), f.size() - std::strlen(kPrefix) - 3);
      if (names.insert(name).second) found.push_back(dir + "/" + f);
    }
  }
  return found;
}

// ---- registration callbacks (called by plugins during init) -----------------------------------

dx_error_t* RegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* desc) {
  try {
    if (context == nullptr) return MakeError(DX_INVALID_ARGUMENT, "register_kernel: context is null");
    if (!context->registering) {
      return MakeError(DX_FAILED_PRECONDITION, "register_kernel: called outside dx_plugin_t::init");
    }
    if (desc == nullptr) return MakeError(DX_INVALID_ARGUMENT, "register_kernel: desc is null");
    const std::string& plugin = context->plugin->name;
    constexpr size_t kKnown = DX_KERNEL_DESC_SIZE_1_0;
    constexpr size_t kMinimum = DX_KERNEL_DESC_MIN_SIZE_1_0;
    if (desc->struct_size < kMinimum) {
      return MakeError(DX_INVALID_ARGUMENT,
                       "register_kernel (plugin '" + plugin + "'): struct_size " +
                           std::to_string(desc->struct_size) + " is smaller than the 1.0 minimum " +
                           std::to_string(kMinimum) + "; set it to DX_KERNEL_DESC_SIZE_1_0");
    }
    dx_kernel_desc_t d = ReadStruct(desc, kKnown);
    if (!ValidOpName(d.op_name)) {
      return MakeError(DX_INVALID_ARGUMENT,
                       "register_kernel (plugin '" + plugin + "'): op name '" +
                           CopyString(d.op_name) +
                           "' is not a namespaced lowercase name like 'dx.add' or 'vendor.op'");
    }
    std::string where = "register_kernel (plugin '" + plugin + "', op '" + d.op_name + "'): ";
    if (d.forward == nullptr) return MakeError(DX_INVALID_ARGUMENT, where + "forward is null");
    if (d.device_type <= 0) {
      return MakeError(DX_INVALID_ARGUMENT, where + "device_type must be a DLDeviceType (> 0)");
    }
    bool variadic = (d.flags & DX_KERNEL_FLAG_VARIADIC) != 0;
    if (d.num_inputs < 0 || d.num_outputs < 0 || d.num_inputs > 64 || d.num_outputs > 64 ||
        (variadic && d.num_inputs < 1)) {
      return MakeError(DX_INVALID_ARGUMENT, where + "num_inputs/num_outputs out of range");
    }
    int32_t num_dtypes = (variadic ? 1 : d.num_inputs) + d.num_outputs;
    if (num_dtypes > 0 && d.dtypes == nullptr) {
      return MakeError(DX_INVALID_ARGUMENT, where + "dtypes is null");
    }
    Kernel k;
    k.device_type = d.device_type;
    k.num_inputs = d.num_inputs;
    k.num_outputs = d.num_outputs;
    k.variadic = variadic;
    k.flags = d.flags;
    k.kernel_data = d.kernel_data;
    k.forward = d.forward;
    k.backward = d.backward;
    k.supports = d.supports;
    k.cost = d.cost;
    for (int32_t i = 0; i < num_dtypes; ++i) {
      dx_dtype_t t = PackDtype(d.dtypes[i]);
      if (d.dtypes[i].lanes == 0 || d.dtypes[i].bits == 0) {
        return MakeError(DX_INVALID_ARGUMENT,
                         where + "dtype " + std::to_string(i) + " has zero bits or lanes");
      }
      k.dtypes.push_back(t);
    }
    for (const auto& p : context->kernels) {
      if (p.op_name == d.op_name && p.kernel.device_type == k.device_type &&
          p.kernel.dtypes == k.dtypes && p.kernel.num_inputs == k.num_inputs &&
          p.kernel.num_outputs == k.num_outputs && p.kernel.variadic == k.variadic) {
        std::string sig;
        for (auto t : k.dtypes) sig += (sig.empty() ? "" : ",") + DtypeName(t);
        return MakeError(DX_ALREADY_EXISTS,
                         where + "a kernel for this device type and dtypes (" + sig +
                             ") is already registered by this plugin");
      }
    }
    context->kernels.push_back(PendingKernel{d.op_name, std::move(k)});
    return nullptr;
  } catch (const std::bad_alloc&) {
    return MakeError(DX_OUT_OF_MEMORY, "register_kernel: out of memory");
  } catch (...) {
    return MakeError(DX_INTERNAL, "register_kernel: internal error");
  }
}

dx_error_t* RegisterMemorySpace(dx_host_context_t* context, const dx_memory_space_desc_t* desc) {
  try {
    if (context == nullptr) {
      return MakeError(DX_INVALID_ARGUMENT, "register_memory_space: context is null");
    }
    if (!context->registering) {
      return MakeError(DX_FAILED_PRECONDITION,
                       "register_memory_space: called outside dx_plugin_t::init");
    }
    if (desc == nullptr) {
      return MakeError(DX_INVALID_ARGUMENT, "register_memory_space: desc is null");
    }
    const std::string& plugin = context->plugin->name;
    constexpr size_t kKnown = DX_MEMORY_SPACE_DESC_SIZE_1_0;
    constexpr size_t kMinimum = DX_MEMORY_SPACE_DESC_MIN_SIZE_1_0;
    if (desc->struct_size < kMinimum) {
      return MakeError(DX_INVALID_ARGUMENT, "register_memory_space (plugin '" + plugin +
                                                "'): struct_size " +
                                                std::to_string(desc->struct_size) +
                                                " is smaller than the 1.0 minimum " +
                                                std::to_string(kMinimum));
    }
    dx_memory_space_desc_t d = ReadStruct(desc, kKnown);
    d.next = nullptr;  // borrowed for the registration call only
    if (d.name == nullptr || !ValidPluginName(d.name) ) {
      // Space names follow plugin-name rules plus ':' for device ids ("cuda:0").
      bool ok = d.name != nullptr && std::strlen(d.name) > 0 && std::strlen(d.name) < 64;
      for (const char* c = d.name; ok && *c; ++c) {
        ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' ||
             *c == '.' || *c == ':';
      }
      if (!ok) {
        return MakeError(DX_INVALID_ARGUMENT,
                         "register_memory_space (plugin '" + plugin + "'): name '" +
                             CopyString(d.name) + "' must be 1-63 chars of [a-z0-9_.:-]");
      }
    }
    std::string where = "register_memory_space (plugin '" + plugin + "', space '" + d.name + "'): ";
    if (d.alloc == nullptr || d.free == nullptr || d.copy == nullptr) {
      return MakeError(DX_INVALID_ARGUMENT, where + "alloc, free and copy are mandatory");
    }
    if (d.kind < DX_MEMORY_DEVICE || d.kind > DX_MEMORY_MANAGED) {
      return MakeError(DX_INVALID_ARGUMENT, where + "unknown memory kind " + std::to_string(d.kind));
    }
    if (d.alignment == 0 || (d.alignment & (d.alignment - 1)) != 0) {
      return MakeError(DX_INVALID_ARGUMENT, where + "alignment must be a power of two");
    }
    if (d.device.device_type <= 0) {
      return MakeError(DX_INVALID_ARGUMENT, where + "device type must be a DLDeviceType (> 0)");
    }
    bool has_streams = d.stream_create != nullptr;
    if (has_streams && (!d.stream_destroy || !d.stream_synchronize)) {
      return MakeError(DX_INVALID_ARGUMENT,
                       where + "stream_create needs stream_destroy and stream_synchronize");
    }
    if (d.event_create && (!d.event_destroy || !d.event_record || !d.stream_wait_event ||
                           !d.event_synchronize)) {
      return MakeError(DX_INVALID_ARGUMENT, where + "event_create needs the other event slots");
    }
    if (d.ipc_export && (!d.ipc_import || !d.ipc_close)) {
      return MakeError(DX_INVALID_ARGUMENT, where + "ipc_export needs ipc_import and ipc_close");
    }
    for (const auto& s : context->spaces) {
      if (s.name == d.name) {
        return MakeError(DX_ALREADY_EXISTS, where + "registered twice by this plugin");
      }
    }
    MemorySpace space;
    space.name = d.name;
    space.desc = d;
    space.desc.name = nullptr;  // the runtime's copy of the name is `space.name`
    context->spaces.push_back(std::move(space));
    return nullptr;
  } catch (const std::bad_alloc&) {
    return MakeError(DX_OUT_OF_MEMORY, "register_memory_space: out of memory");
  } catch (...) {
    return MakeError(DX_INTERNAL, "register_memory_space: internal error");
  }
}

dx_error_t* RegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* desc) {
  try {
    if (context == nullptr) {
      return MakeError(DX_INVALID_ARGUMENT, "register_transport: context is null");
    }
    if (!context->registering) {
      return MakeError(DX_FAILED_PRECONDITION,
                       "register_transport: called outside dx_plugin_t::init");
    }
    if (desc == nullptr) return MakeError(DX_INVALID_ARGUMENT, "register_transport: desc is null");
    const std::string& plugin = context->plugin->name;
    constexpr size_t kKnown = DX_TRANSPORT_DESC_SIZE_1_0;
    if (desc->struct_size < DX_TRANSPORT_DESC_MIN_SIZE_1_0) {
      return MakeError(DX_INVALID_ARGUMENT, "register_transport (plugin '" + plugin +
                                                "'): struct_size too small for ABI 1.0");
    }
    dx_transport_desc_t d = ReadStruct(desc, kKnown);
    d.next = nullptr;  // borrowed for the registration call only
    if (!ValidPluginName(d.name)) {
      return MakeError(DX_INVALID_ARGUMENT, "register_transport (plugin '" + plugin +
                                                "'): name must be 1-63 chars of [a-z0-9_.-]");
    }
    std::string where = "register_transport (plugin '" + plugin + "', '" + d.name + "'): ";
    if (!d.listen || !d.accept || !d.connect || !d.close_listener || !d.close_connection ||
        !d.send || !d.recv || !d.test) {
      return MakeError(DX_INVALID_ARGUMENT, where +
                                                "listen, accept, connect, close_listener, "
                                                "close_connection, send, recv, test are mandatory");
    }
    if (d.register_memory && !d.deregister_memory) {
      return MakeError(DX_INVALID_ARGUMENT, where + "register_memory needs deregister_memory");
    }
    for (const auto& t : context->transports) {
      if (t.name == d.name) {
        return MakeError(DX_ALREADY_EXISTS, where + "registered twice by this plugin");
      }
    }
    Transport t;
    t.name = d.name;
    t.desc = d;
    t.desc.name = nullptr;
    context->transports.push_back(std::move(t));
    return nullptr;
  } catch (const std::bad_alloc&) {
    return MakeError(DX_OUT_OF_MEMORY, "register_transport: out of memory");
  } catch (...) {
    return MakeError(DX_INTERNAL, "register_transport: internal error");
  }
}

// ---- loading ----------------------------------------------------------------------------------

namespace {

#if defined(__x86_64__)
constexpr uint16_t kElfMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kElfMachine = EM_AARCH64;
#else
constexpr uint16_t kElfMachine = EM_NONE;  // not checked
#endif

// ---- what runs is what is hashed ----------------------------------------------------------------
//
// The plugin's bytes are hashed before any of its code runs. With certification required, the
// file is read once into a sealed memfd (no write, grow, shrink or further seals), the memfd is
// hashed, and the dynamic loader maps /proc/self/fd/N of that memfd: whatever the file on disk
// becomes afterwards (a plugin's own init renaming another binary over its path, say), the code
// that runs is the code that was hashed. Without the requirement the file is hashed through the
// descriptor that is then closed and dlopen maps the path as before: the certification state is
// then a report, not a guarantee (nothing is enforced).
//
// A memfd has no directory, so `$ORIGIN` in the plugin's RUNPATH/RPATH would name /proc/self/fd.
// Before mapping the memfd, the plugin's direct dependencies (DT_NEEDED) that its `$ORIGIN`
// entries find in the plugin's real directory are loaded from there by absolute path; the
// dynamic loader then matches the plugin's DT_NEEDED names against their sonames. Those libraries
// are not hashed: the certificate records them by name and version (see certificate.cc).

// A sealed copy of a plugin file: the descriptor (kept open for the life of the process: the
// dynamic loader knows the library by the name /proc/self/fd/N, which must keep naming it) and
// its SHA-256. One per distinct content: loading the same bytes again reuses it, so dlopen
// returns the already-loaded library as it does for a path.
struct SealedImage {
  int fd = -1;
  std::string sha256;
};

dx_status_t SealPluginFile(const std::string& path, SealedImage* out) {
  int file = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) {
    return Failf(DX_IO_ERROR, "cannot open plugin file '%s': %s", path.c_str(),
                 std::strerror(errno));
  }
  std::string base = path.substr(path.rfind('/') + 1);
  int fd = ::memfd_create(("deepx-plugin:" + base).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    int e = errno;
    ::close(file);
    return Failf(DX_IO_ERROR, "cannot create a sealed copy of plugin '%s' (memfd_create: %s)",
                 path.c_str(), std::strerror(e));
  }
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(file, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(file);
      ::close(fd);
      return Failf(DX_IO_ERROR, "cannot read plugin file '%s': %s", path.c_str(), std::strerror(e));
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(fd, buffer + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int e = errno;
        ::close(file);
        ::close(fd);
        return Failf(DX_IO_ERROR, "cannot copy plugin file '%s' into memory: %s", path.c_str(),
                     std::strerror(e));
      }
      done += w;
    }
  }
  ::close(file);
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    int e = errno;
    ::close(fd);
    return Failf(DX_IO_ERROR, "cannot seal the copy of plugin '%s': %s", path.c_str(),
                 std::strerror(e));
  }
  std::optional<std::string> sha = cert::Sha256Fd(fd);
  if (!sha) {
    ::close(fd);
    return Failf(DX_IO_ERROR, "cannot hash the copy of plugin '%s'", path.c_str());
  }
  static std::mutex mutex;
  static std::map<std::string, int> by_hash;  // never shrinks: the libraries stay mapped too
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = by_hash.emplace(*sha, fd);
  if (!inserted) ::close(fd);
  out->fd = it->second;
  out->sha256 = *sha;
  return DX_OK;
}

// Loads the direct dependencies of the ELF shared object in `fd` that its RUNPATH/RPATH finds
// through `$ORIGIN`, with `$ORIGIN` taken as `origin` (the plugin's real directory). Best
// effort: anything it cannot read is left to the dynamic loader (which then reports it).
void PreloadOriginDependencies(int fd, const std::string& origin) {
  cert::DynamicSection dynamic;
  if (!cert::ReadDynamicSection(fd, &dynamic)) return;
  std::vector<std::string> dirs;  // only the entries that name $ORIGIN, expanded
  for (std::string dir : dynamic.search_path) {
    bool named = false;
    for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
      for (size_t at; (at = dir.find(token)) != std::string::npos; named = true) {
        dir.replace(at, std::strlen(token), origin);
      }
    }
    if (named) dirs.push_back(dir);
  }
  for (const std::string& name : dynamic.needed) {
    if (name.empty() || name.find('/') != std::string::npos) continue;
    for (const auto& dir : dirs) {
      const std::string candidate = dir + "/" + name;
      if (FileExists(candidate)) {
        ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);  // stays loaded
        break;
      }
    }
  }
}

// Checks, before the dynamic loader maps it, that `path` is a whole ELF shared object for this
// machine: a truncated or foreign file would otherwise crash the process (SIGBUS on a page
// past the end of the file) or be refused with a vague message. Reads the ELF header and the
// program headers; every loadable segment and the section-header table must lie in the file.
dx_status_t CheckLoadableFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Failf(DX_IO_ERROR, "cannot open plugin file '%s': %s", path.c_str(),
                 std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return Failf(DX_IO_ERROR, "plugin file '%s' is not a regular file", path.c_str());
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](void* out, uint64_t n, uint64_t offset) {
    return offset <= size && n <= size - offset &&
           ::pread(fd, out, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  };
  Elf64_Ehdr eh;
  if (!read_at(&eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return Failf(DX_IO_ERROR, "plugin file '%s' is not an ELF shared object (%llu bytes%s)",
                 path.c_str(), static_cast<unsigned long long>(size),
                 size < sizeof eh ? ", shorter than an ELF header: truncated?" : "");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Failf(DX_IO_ERROR, "plugin file '%s' is not a 64-bit little-endian ELF object",
                 path.c_str());
  }
  if (eh.e_type != ET_DYN) {
    return Failf(DX_IO_ERROR, "plugin file '%s' is an ELF object but not a shared library",
                 path.c_str());
  }
  if (kElfMachine != EM_NONE && eh.e_machine != kElfMachine) {
    return Failf(DX_IO_ERROR, "plugin file '%s' was built for another machine (ELF e_machine %u)",
                 path.c_str(), static_cast<unsigned>(eh.e_machine));
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0) {
    return Failf(DX_IO_ERROR, "plugin file '%s' has a malformed program-header table",
                 path.c_str());
  }
  const uint64_t sh_end = eh.e_shoff + static_cast<uint64_t>(eh.e_shnum) * eh.e_shentsize;
  if (eh.e_shoff > size || sh_end > size) {
    return Failf(DX_IO_ERROR,
                 "plugin file '%s' is truncated: its section headers end at byte %llu of %llu",
                 path.c_str(), static_cast<unsigned long long>(sh_end),
                 static_cast<unsigned long long>(size));
  }
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!read_at(&ph, sizeof ph, eh.e_phoff + static_cast<uint64_t>(i) * sizeof ph)) {
      return Failf(DX_IO_ERROR, "plugin file '%s' is truncated: program header %u is missing",
                   path.c_str(), static_cast<unsigned>(i));
    }
    if (ph.p_type == PT_LOAD && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)) {
      return Failf(DX_IO_ERROR,
                   "plugin file '%s' is truncated: a loadable segment ends at byte %llu of %llu",
                   path.c_str(), static_cast<unsigned long long>(ph.p_offset + ph.p_filesz),
                   static_cast<unsigned long long>(size));
    }
  }
  return DX_OK;
}

dx_status_t ResolvePath(const Core& core, const char* name_or_path, std::string* out_path) {
  std::string arg(name_or_path);
  if (arg.find('/') != std::string::npos) {
    struct stat st;
    if (::stat(arg.c_str(), &st) != 0) {
      return Failf(DX_NOT_FOUND, "plugin file '%s' does not exist", arg.c_str());
    }
    if (!S_ISREG(st.st_mode)) {
      return Failf(DX_IO_ERROR, "plugin file '%s' is not a regular file (%s)", arg.c_str(),
                   S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file");
    }
    char* real = ::realpath(arg.c_str(), nullptr);
    *out_path = real ? real : arg;
    std::free(real);
    return DX_OK;
  }
  if (!ValidPluginName(arg.c_str())) {
    return Failf(DX_INVALID_ARGUMENT,
                 "'%s' is neither a path (it has no '/') nor a plugin name ([a-z0-9_.-]{1,63})",
                 arg.c_str());
  }
  std::string file = std::string(kPrefix) + arg + kSuffix;
  std::string tried;
  for (const auto& dir : core.search_dirs) {
    std::string candidate = dir + "/" + file;
    if (FileExists(candidate)) {
      char* real = ::realpath(candidate.c_str(), nullptr);
      *out_path = real ? real : candidate;
      std::free(real);
      return DX_OK;
    }
    tried += "\n  " + candidate;
  }
  return Fail(DX_NOT_FOUND, "plugin '" + arg + "' not found; tried:" + tried +
                                "\nSet DEEPX_PLUGIN_PATH to the directory holding " + file +
                                ", or pass the library's path.");
}

}  // namespace

dx_status_t LoadPlugin(const std::shared_ptr<Core>& core, const char* name_or_path,
                       int32_t* out_index) {
  // Loads are serialised; only this thread changes the registries until the lock is released,
  // so reading them below needs no registry lock (the commit takes it exclusively).
  std::lock_guard<std::mutex> loading(core->loading);
  std::string path;
  if (dx_status_t st = ResolvePath(*core, name_or_path, &path); st != DX_OK) return st;
  for (const auto& p : core->plugins) {
    if (p->path == path) {
      return Failf(DX_ALREADY_EXISTS, "plugin '%s' (%s) is already loaded in this runtime",
                   p->name.c_str(), path.c_str());
    }
  }

  if (dx_status_t st = CheckLoadableFile(path); st != DX_OK) return st;
  // The bytes that will run, hashed before any of their code runs (see SealPluginFile).
  std::string load_path = path;
  std::string loaded_sha256;
  if (core->require_certified) {
    SealedImage image;
    if (dx_status_t st = SealPluginFile(path, &image); st != DX_OK) return st;
    load_path = "/proc/self/fd/" + std::to_string(image.fd);
    loaded_sha256 = image.sha256;
    if (dx_status_t st = CheckLoadableFile(load_path); st != DX_OK) return st;
    PreloadOriginDependencies(image.fd, path.substr(0, path.rfind('/')));
  } else {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      loaded_sha256 = cert::Sha256Fd(fd).value_or("");
      ::close(fd);
    }
  }
  ::dlerror();
  void* library = ::dlopen(load_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    const char* why = ::dlerror();
    return Failf(DX_PLUGIN_ERROR,
                 "cannot load plugin '%s': %s\nCheck that its dependencies are installed "
                 "(ldd '%s') and that it was built for this machine.",
                 path.c_str(), why ? why : "unknown dlopen error", path.c_str());
  }
  // From here on the library stays mapped (RTLD_NODELETE), even if we refuse it; dlclose only
  // drops the reference count.
  auto entry = reinterpret_cast<dx_plugin_entry_fn>(::dlsym(library, DX_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    ::dlclose(library);
    return Failf(DX_PLUGIN_ERROR,
                 "'%s' does not export the entry symbol '%s': it is not a deepx plugin, or it "
                 "was built without deepx_add_plugin()/DX_EXPORT on dx_plugin_entry.",
                 path.c_str(), DX_PLUGIN_ENTRY_SYMBOL);
  }
  const dx_plugin_t* raw = nullptr;
  try {
    raw = entry(kHostAbiMin, kHostAbiMax);
  } catch (...) {
    ::dlclose(library);
    return Failf(DX_PLUGIN_ERROR, "plugin '%s': dx_plugin_entry threw an exception",
                 path.c_str());
  }
  if (raw == nullptr) {
    ::dlclose(library);
    return Failf(DX_VERSION_MISMATCH,
                 "plugin '%s' serves no ABI version this host speaks (%s to %s): it returned no "
                 "descriptor. Use a plugin built against deepx %u.x.",
                 path.c_str(), VersionString(kHostAbiMin).c_str(),
                 VersionString(kHostAbiMax).c_str(), DX_ABI_VERSION_MAJOR);
  }
  // The frozen header: struct_size and abi_version, readable whatever the plugin's major.
  uint32_t plugin_abi = raw->abi_version;
  if (DX_VERSION_MAJOR(plugin_abi) != DX_ABI_VERSION_MAJOR) {
    ::dlclose(library);
    return Failf(DX_VERSION_MISMATCH,
                 "plugin '%s' was built against deepx ABI %s; this host speaks ABI %s to %s. "
                 "Rebuild the plugin against a deepx %u.x SDK, or use a host of major %u.",
                 path.c_str(), VersionString(plugin_abi).c_str(),
                 VersionString(kHostAbiMin).c_str(), VersionString(kHostAbiMax).c_str(),
                 DX_ABI_VERSION_MAJOR, DX_VERSION_MAJOR(plugin_abi));
  }
  constexpr size_t kKnown = DX_PLUGIN_SIZE_1_0;
  constexpr size_t kMinimum = DX_PLUGIN_MIN_SIZE_1_0;
  if (raw->struct_size < kMinimum) {
    ::dlclose(library);
    return Failf(DX_PLUGIN_ERROR,
                 "plugin '%s': dx_plugin_t.struct_size is %zu, smaller than the ABI 1.0 minimum "
                 "%zu; set it with DX_PLUGIN_SIZE_1_0.",
                 path.c_str(), raw->struct_size, kMinimum);
  }
  dx_plugin_t d = ReadStruct(raw, kKnown);
  if (!ValidPluginName(d.name)) {
    ::dlclose(library);
    return Failf(DX_PLUGIN_ERROR,
                 "plugin '%s': name '%s' is invalid (1-63 chars of [a-z0-9_.-] required)",
                 path.c_str(), d.name ? d.name : "(null)");
  }
  if (d.init == nullptr) {
    ::dlclose(library);
    return Failf(DX_PLUGIN_ERROR, "plugin '%s' (%s): init is null", d.name, path.c_str());
  }
  for (const auto& p : core->plugins) {
    if (p->name == d.name) {
      ::dlclose(library);
      return Failf(DX_ALREADY_EXISTS,
                   "a plugin named '%s' is already loaded (%s); cannot also load %s", d.name,
                   p->path.c_str(), path.c_str());
    }
  }

  auto plugin = std::make_unique<Plugin>();
  plugin->index = static_cast<int32_t>(core->plugins.size());
  plugin->name = d.name;
  plugin->vendor = CopyString(d.vendor);
  plugin->version = CopyString(d.version);
  plugin->build_id = CopyString(d.build_id);
  plugin->path = path;
  plugin->abi_version = plugin_abi;
  plugin->capabilities = d.capabilities;
  plugin->concurrent = (d.capabilities & DX_PLUGIN_CAP_CONCURRENT_KERNELS) != 0;
  plugin->library = library;
  plugin->shutdown = d.shutdown;
  plugin->get_extension = d.get_extension;
  plugin->core = core.get();
  plugin->context.plugin = plugin.get();
  plugin->context.registering = true;

  void* state = nullptr;
  dx_error_t* error = nullptr;
  try {
    error = d.init(HostServices(), &plugin->context, &state);
  } catch (...) {
    error = MakeError(DX_PLUGIN_ERROR, "init threw an exception");
  }
  plugin->context.registering = false;
  if (error != nullptr) {
    ::dlclose(library);
    return FailFromError(error, "plugin '" + plugin->name + "' (" + path +
                                    ") failed to initialise: ");
  }
  plugin->state = state;

  // Cross-plugin conflicts: memory-space and transport names are unique per runtime.
  for (const auto& s : plugin->context.spaces) {
    for (const auto& existing : core->spaces) {
      if (existing.name == s.name) {
        if (plugin->shutdown) plugin->shutdown(state);
        ::dlclose(library);
        return Failf(DX_ALREADY_EXISTS,
                     "plugin '%s' registers memory space '%s', already registered by plugin '%s'",
                     plugin->name.c_str(), s.name.c_str(),
                     core->plugins[existing.plugin_index]->name.c_str());
      }
    }
  }
  for (const auto& t : plugin->context.transports) {
    for (const auto& existing : core->transports) {
      if (existing.name == t.name) {
        if (plugin->shutdown) plugin->shutdown(state);
        ::dlclose(library);
        return Failf(DX_ALREADY_EXISTS,
                     "plugin '%s' registers transport '%s', already registered by plugin '%s'",
                     plugin->name.c_str(), t.name.c_str(),
                     core->plugins[existing.plugin_index]->name.c_str());
      }
    }
  }

  EvaluateCertificate(*core, *plugin, plugin->context.kernels, loaded_sha256);

  // Commit, with readers held off. Reserve first so nothing below can throw half-way.
  std::unique_lock<RegistryLock> registry(core->registry);
  size_t new_ops = 0;
  for (const auto& k : plugin->context.kernels) {
    if (core->op_ids.find(k.op_name) == core->op_ids.end()) ++new_ops;
  }
  core->ops.reserve(core->ops.size() + new_ops);
  core->transports.reserve(core->transports.size() + plugin->context.transports.size());
  core->plugins.reserve(core->plugins.size() + 1);
  for (auto& k : plugin->context.kernels) {
    auto it = core->op_ids.find(k.op_name);
    dx_op_id_t id;
    if (it == core->op_ids.end()) {
      id = static_cast<dx_op_id_t>(core->ops.size());
      Op op;
      op.name = k.op_name;
      op.schema = FindSchema(k.op_name);
      core->ops.push_back(std::move(op));
      core->op_ids.emplace(k.op_name, id);
    } else {
      id = it->second;
    }
    k.kernel.plugin_index = plugin->index;
    k.kernel.plugin = plugin.get();
    core->ops[id].kernels.push_back(std::move(k.kernel));
  }
  for (auto& s : plugin->context.spaces) {
    s.plugin_index = plugin->index;
    s.index = static_cast<int32_t>(core->spaces.size());
    core->spaces.push_back(std::move(s));
  }
  for (auto& t : plugin->context.transports) {
    t.plugin_index = plugin->index;
    core->transports.push_back(std::move(t));
  }
  plugin->num_kernels = static_cast<int32_t>(plugin->context.kernels.size());
  plugin->num_memory_spaces = static_cast<int32_t>(plugin->context.spaces.size());
  plugin->num_transports = static_cast<int32_t>(plugin->context.transports.size());
  plugin->context.kernels.clear();
  plugin->context.spaces.clear();
  plugin->context.transports.clear();
  if (out_index) *out_index = plugin->index;
  core->plugins.push_back(std::move(plugin));
  return DX_OK;
}

Core::~Core() {
  // Shut plugins down in reverse load order. Libraries stay mapped (RTLD_NODELETE).
  for (auto it = plugins.rbegin(); it != plugins.rend(); ++it) {
    Plugin& p = **it;
    if (p.shutdown) {
      try {
        p.shutdown(p.state);
      } catch (...) {
      }
    }
    if (p.library) ::dlclose(p.library);
  }
}

const MemorySpace* Core::FindSpace(DLDevice device) const {
  // An imported DLPack tensor may carry any device_type value, including none of the enum's:
  // compare the integers, never load it as the enum.
  const int32_t type = DeviceTypeOf(device);
  for (const auto& s : spaces) {
    if (DeviceTypeOf(s.desc.device) == type && s.desc.device.device_id == device.device_id) {
      return &s;
    }
  }
  return nullptr;
}

}  // namespace deepx::host
