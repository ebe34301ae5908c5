// What else decides a plugin's numbers: the libraries loaded with it and the CPU (certificate.h).
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "certificate.h"

namespace deepx::cert {
namespace {

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The C library's own objects: versioned together, as glibc.
bool IsGlibc(const std::string& name) {
  static const std::set<std::string> kNames = {"libc.so.6", "libm.so.6", "libmvec.so.1", "libpthread.so.0",
                                               "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1"};
  return kNames.count(name) != 0 || name.rfind("ld-linux", 0) == 0;
}

int Collect(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] == '/') out->push_back(info->dlpi_name);
  return 0;
}

std::vector<std::string> LoadedPaths() {
  std::vector<std::string> paths;
  dl_iterate_phdr(&Collect, &paths);
  return paths;
}

}  // namespace

std::string LibraryVersion(const std::string& path) {
  const std::string name = Basename(path);
  if (IsGlibc(name)) return std::string("glibc-") + gnu_get_libc_version();
  char* real = ::realpath(path.c_str(), nullptr);
  std::string resolved = real ? Basename(real) : std::string();
  std::free(real);
  if (!resolved.empty() && resolved != name) return resolved;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "unreadable";
  std::optional<std::string> sha = Sha256Fd(fd);
  ::close(fd);
  return sha ? "sha256:" + sha->substr(0, 16) : std::string("unreadable");
}

std::vector<Library> LoadedLibraries() {
  std::map<std::string, std::string> found;
  for (const auto& path : LoadedPaths()) {
    const std::string name = Basename(path);
    if (name.rfind("ld-linux", 0) == 0 || path.rfind("/proc/", 0) == 0 || found.count(name)) continue;
    found[name] = LibraryVersion(path);
  }
  std::vector<Library> out;
  for (auto& [name, version] : found) out.push_back({name, version});
  return out;
}

std::vector<std::string> ChangedLibraries(const std::vector<Library>& recorded) {
  std::map<std::string, std::string> loaded;
  for (const auto& path : LoadedPaths()) loaded.emplace(Basename(path), path);
  std::vector<std::string> changed;
  for (const auto& lib : recorded) {
    auto it = loaded.find(lib.name);
    if (it == loaded.end()) continue;
    const std::string here = LibraryVersion(it->second);
    if (here != lib.version) changed.push_back(lib.name + ": recorded " + lib.version + ", loaded " + here);
  }
  return changed;
}

std::string CpuDescription() {
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> fields;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) break;  // the first processor only
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    fields.emplace(key, value);
  }
  if (fields.count("vendor_id")) {
    std::string d = fields["vendor_id"] + " family " + fields["cpu family"] + " model " + fields["model"];
    if (fields.count("model name")) d += " (" + fields["model name"] + ")";
    return d;
  }
  struct utsname u{};
  if (::uname(&u) == 0) return u.machine;
  return "unknown";
}

}  // namespace deepx::cert
