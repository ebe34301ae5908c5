// Certificates written by `deepx certify` and the trust gate that uses them.
//
// A certificate binds a verdict to one plugin binary: it names the plugin, the SHA-256 of its
// .so, and each certified kernel (op, device type, dtype signature). A rebuilt library has
// another hash, so its certificate no longer applies. The format is line based so the host
// needs no parser dependency:
//
//   deepx-certificate 1
//   plugin <name>
//   sha256 <hex>
//   suite <version>
//   build <build id>                                 (optional, may repeat)
//   kernel <op> <device type> <dtype,dtype,...>     (packed dx_dtype_t values, decimal)
//
// Unknown keys are ignored, so later suites can add lines. `build` lines name the descriptor
// build ids the verdict was earned by: one .so can serve several (the CPU plugin compiles its
// kernels per instruction set and picks one at load), and a certificate earned by one variant
// must not vouch for another that never ran the suite. Without `build` lines any build id of
// the hashed file is covered (certificates of earlier suites).
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <optional>
#include <sstream>
#include <tuple>

#include "internal.h"
#include "sha256.h"

namespace deepx::host {
namespace {

struct KernelKey {
  std::string op;
  int32_t device_type;
  std::vector<dx_dtype_t> dtypes;
  bool operator<(const KernelKey& o) const {
    return std::tie(op, device_type, dtypes) < std::tie(o.op, o.device_type, o.dtypes);
  }
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Parses `path`; on failure returns false with `why` set.
bool Parse(const std::string& path, const std::string& plugin_name, std::string* sha256,
           std::set<std::string>* builds, std::set<KernelKey>* kernels, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "cannot read " + path;
    return false;
  }
  std::string line;
  if (!std::getline(in, line) || line != "deepx-certificate 1") {
    *why = path + " is not a deepx certificate (first line must be 'deepx-certificate 1')";
    return false;
  }
  std::string name;
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "plugin") {
      fields >> name;
    } else if (key == "sha256") {
      fields >> *sha256;
    } else if (key == "build") {
      std::string id;
      fields >> id;
      if (id.empty()) {
        *why = path + ":" + std::to_string(number) + ": empty build line";
        return false;
      }
      builds->insert(id);
    } else if (key == "kernel") {
      KernelKey k;
      std::string dtypes;
      if (!(fields >> k.op >> k.device_type >> dtypes)) {
        *why = path + ":" + std::to_string(number) + ": malformed kernel line";
        return false;
      }
      std::istringstream list(dtypes);
      std::string item;
      while (std::getline(list, item, ',')) {
        char* end = nullptr;
        unsigned long v = std::strtoul(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v > 0xFFFFFFFFul) {
          *why = path + ":" + std::to_string(number) + ": malformed dtype '" + item + "'";
          return false;
        }
        k.dtypes.push_back(static_cast<dx_dtype_t>(v));
      }
      kernels->insert(std::move(k));
    }
  }
  if (name != plugin_name) {
    *why = path + " certifies plugin '" + name + "', not '" + plugin_name + "'";
    return false;
  }
  if (sha256->size() != 64) {
    *why = path + " has no valid sha256 line";
    return false;
  }
  return true;
}

}  // namespace

void EvaluateCertificate(const Core& core, Plugin& plugin, std::vector<PendingKernel>& kernels) {
  std::vector<std::string> candidates;
  for (const auto& dir : core.certificate_dirs) {
    candidates.push_back(dir + "/" + plugin.name + ".certificate");
  }
  candidates.push_back(plugin.path + ".certificate");
  for (const auto& c : candidates) {
    if (Exists(c)) {
      plugin.certificate = c;
      break;
    }
  }
  if (plugin.certificate.empty()) {
    plugin.certification = DX_CERTIFICATION_NONE;
    plugin.certification_note = "no certificate found (looked for " + candidates.back() +
                                (candidates.size() > 1 ? " and in the certificate path" : "") +
                                ")";
    return;
  }
  std::string expected_sha;
  std::set<std::string> builds;
  std::set<KernelKey> certified;
  std::string why;
  if (!Parse(plugin.certificate, plugin.name, &expected_sha, &builds, &certified, &why)) {
    plugin.certification = DX_CERTIFICATION_INVALID;
    plugin.certification_note = why;
    return;
  }
  std::optional<std::string> actual = util::sha256_file(plugin.path);
  if (!actual) {
    plugin.certification = DX_CERTIFICATION_INVALID;
    plugin.certification_note = "cannot read " + plugin.path + " to hash it";
    return;
  }
  if (*actual != expected_sha) {
    plugin.certification = DX_CERTIFICATION_INVALID;
    plugin.certification_note = plugin.certificate + " was issued for another build of " +
                                plugin.path + " (SHA-256 " + expected_sha.substr(0, 12) +
                                "..., this file is " + actual->substr(0, 12) +
                                "...); certify it again";
    return;
  }
  if (!builds.empty() && builds.count(plugin.build_id) == 0) {
    std::string listed;
    for (const auto& b : builds) listed += (listed.empty() ? "" : ", ") + b;
    plugin.certification = DX_CERTIFICATION_INVALID;
    plugin.certification_note = plugin.certificate + " covers build " + listed + " of " +
                                plugin.path + ", but this process loaded build " +
                                plugin.build_id +
                                " (another instruction-set variant?); certify it again here";
    return;
  }
  plugin.certification = DX_CERTIFICATION_VALID;
  for (auto& k : kernels) {
    KernelKey key{k.op_name, k.kernel.device_type, k.kernel.dtypes};
    k.kernel.certified = certified.count(key) != 0;
  }
}

bool ParseCertificateForFuzzing(const std::string& path, std::string* why) {
  std::string sha256;
  std::set<std::string> builds;
  std::set<KernelKey> kernels;
  return Parse(path, "fuzz", &sha256, &builds, &kernels, why);
}

}  // namespace deepx::host
