// The trust gate's use of certificates: finds a plugin's certificate, checks it with the
// certificate module (certificate/src/certificate.h: format, Ed25519 signature, trust store)
// and marks the kernels it grants. The host only decides where to look and what the verdict
// means for dispatch; parsing and verifying are the module's, shared with `deepx certify`.
//
// A plugin is VALID (its listed kernels certified) only when, in this order: a certificate is
// found; it parses and names this plugin; it is signed; its key is not revoked and is in the
// trust store; the signature matches its text; its sha256 is the SHA-256 of the bytes that
// were loaded (computed by the loader before any of the plugin's code ran); its verdict is
// CERTIFIED or CERTIFIED-with-relaxations; its `build` lines, if any, name the build id the
// plugin reported; and no library it records is loaded here in another version. Anything else
// is INVALID with a note naming the check that failed. Unsigned certificates are read (they
// are reports) but grant nothing.
//
// Trust store: the public keys (*.pub) of DEEPX_TRUST_DIR (colon-separated) when set, else of
// the installed <datadir>/deepx/trusted-keys; revoked key ids from the `revoked-keys` files of
// both. Read at each plugin load.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "certificate.h"
#include "internal.h"

#ifndef DEEPX_INSTALL_TRUST_DIR
#define DEEPX_INSTALL_TRUST_DIR ""
#endif

namespace deepx::host {
namespace {

constexpr size_t kMaxCertificateBytes = 16u << 20;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> Split(const char* list) {
  std::vector<std::string> out;
  if (list == nullptr) return out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ':'))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Reads and parses `path`; on failure returns false with `why` set (naming the file).
bool ReadCertificate(const std::string& path, cert::Certificate* c, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot read " + path;
    return false;
  }
  std::string text;
  char chunk[1 << 16];
  while (text.size() <= kMaxCertificateBytes && in.read(chunk, sizeof chunk).gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (text.size() > kMaxCertificateBytes) {
    *why = path + " is larger than 16 MiB: not a certificate";
    return false;
  }
  std::string parse_why;
  if (!cert::Parse(text, c, &parse_why)) {
    *why = path + ": " + parse_why;
    return false;
  }
  return true;
}

}  // namespace

cert::TrustStore LoadHostTrustStore() {
  std::vector<std::string> installed;
  if (DEEPX_INSTALL_TRUST_DIR[0] != '\0') installed.push_back(DEEPX_INSTALL_TRUST_DIR);
  std::vector<std::string> env = Split(std::getenv("DEEPX_TRUST_DIR"));
  return cert::LoadTrustStore(env.empty() ? installed : env, installed);
}

void EvaluateCertificate(const Core& core, Plugin& plugin, std::vector<PendingKernel>& kernels,
                         const std::string& loaded_sha256) {
  for (auto& k : kernels) k.kernel.certified = false;
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
  plugin.certification = DX_CERTIFICATION_INVALID;
  cert::Certificate c;
  std::string why;
  if (!ReadCertificate(plugin.certificate, &c, &why)) {
    plugin.certification_note = why;
    return;
  }
  if (c.plugin != plugin.name) {
    plugin.certification_note = plugin.certificate + " certifies plugin '" + c.plugin + "', not '" +
                                plugin.name + "'";
    return;
  }
  if (loaded_sha256.size() != 64) {
    plugin.certification_note = "cannot hash " + plugin.path + " (the loaded code)";
    return;
  }
  const cert::TrustStore store = LoadHostTrustStore();
  if (cert::Verify(c, store, loaded_sha256, &why) != cert::Check::kTrusted) {
    plugin.certification_note = plugin.certificate + ": " + why;
    return;
  }
  if (!c.builds.empty() &&
      std::find(c.builds.begin(), c.builds.end(), plugin.build_id) == c.builds.end()) {
    std::string listed;
    for (const auto& b : c.builds) listed += (listed.empty() ? "" : ", ") + b;
    plugin.certification_note = plugin.certificate + " covers build " + listed + " of " +
                                plugin.path + ", but this process loaded build " +
                                plugin.build_id +
                                " (another instruction-set variant?); certify it again here";
    return;
  }
  const std::vector<std::string> changed = cert::ChangedLibraries(c.libraries);
  if (!changed.empty()) {
    std::string list;
    for (const auto& l : changed) list += (list.empty() ? "" : "; ") + l;
    plugin.certification_note = plugin.certificate +
                                ": library changed: a library the certificate records is loaded "
                                "here in another version (" + list + "); certify it again here";
    return;
  }
  plugin.certification = DX_CERTIFICATION_VALID;
  plugin.certification_note.clear();
  const std::set<cert::Kernel> listed(c.kernels.begin(), c.kernels.end());
  for (auto& k : kernels) {
    cert::Kernel key{k.op_name, k.kernel.device_type,
                     std::vector<uint32_t>(k.kernel.dtypes.begin(), k.kernel.dtypes.end())};
    k.kernel.certified = listed.count(key) != 0;
  }
}

bool ParseCertificateForFuzzing(const std::string& path, std::string* why) {
  cert::Certificate c;
  if (!ReadCertificate(path, &c, why)) return false;
  if (c.plugin != "fuzz") {
    *why = path + " certifies plugin '" + c.plugin + "', not 'fuzz'";
    return false;
  }
  return true;
}

}  // namespace deepx::host
