// What else decides a plugin's numbers: the libraries loaded with it and the CPU (certificate.h).
#include <elf.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
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

bool ReadDynamicSection(int fd, DynamicSection* out) {
  *out = DynamicSection{};
  auto read_at = [fd](void* dst, uint64_t n, uint64_t offset) {
    return ::pread(fd, dst, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  };
  Elf64_Ehdr eh;
  if (!read_at(&eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return false;
  }
  std::vector<Elf64_Phdr> loads;
  Elf64_Phdr dynamic{};
  bool have_dynamic = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!read_at(&ph, sizeof ph, eh.e_phoff + static_cast<uint64_t>(i) * sizeof ph)) return false;
    if (ph.p_type == PT_LOAD) loads.push_back(ph);
    if (ph.p_type == PT_DYNAMIC) {
      dynamic = ph;
      have_dynamic = true;
    }
  }
  if (!have_dynamic || dynamic.p_filesz > (1u << 20)) return false;
  std::vector<Elf64_Dyn> dyn(dynamic.p_filesz / sizeof(Elf64_Dyn));
  if (dyn.empty() || !read_at(dyn.data(), dyn.size() * sizeof(Elf64_Dyn), dynamic.p_offset)) return false;
  uint64_t strtab = 0, strsz = 0;
  std::vector<uint64_t> needed, runpath, rpath;
  for (const auto& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    if (d.d_tag == DT_NEEDED) needed.push_back(d.d_un.d_val);
    if (d.d_tag == DT_RUNPATH) runpath.push_back(d.d_un.d_val);
    if (d.d_tag == DT_RPATH) rpath.push_back(d.d_un.d_val);
  }
  if (strsz == 0 || strsz > (16u << 20)) return false;
  uint64_t strtab_offset = UINT64_MAX;
  for (const auto& ph : loads) {
    if (strtab >= ph.p_vaddr && strtab - ph.p_vaddr < ph.p_filesz && strsz <= ph.p_filesz - (strtab - ph.p_vaddr))
      strtab_offset = ph.p_offset + (strtab - ph.p_vaddr);
  }
  if (strtab_offset == UINT64_MAX) return false;
  std::string strings(strsz, '\0');
  if (!read_at(strings.data(), strsz, strtab_offset)) return false;
  auto string_at = [&](uint64_t offset) {
    return offset < strings.size() ? std::string(strings.c_str() + offset) : std::string();
  };
  for (uint64_t n : needed) out->needed.push_back(string_at(n));
  for (const auto* list : {&runpath, &rpath}) {
    for (uint64_t entry : *list) {
      const std::string text = string_at(entry);
      size_t start = 0;
      while (start <= text.size()) {
        const size_t colon = text.find(':', start);
        out->search_path.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
        if (colon == std::string::npos) break;
        start = colon + 1;
      }
    }
  }
  return true;
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
