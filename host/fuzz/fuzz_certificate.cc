// fuzz_certificate: the certificate parser (certificate/src/certificate.cc, the one module the
// host and `deepx certify` share), reached the way the host reaches it: the input is a file next
// to a plugin, handed over as a memfd (/proc/self/fd/N), read and parsed by
// host/src/certificate.cc through its hook ParseCertificateForFuzzing. The same bytes also go to
// deepx::cert::Parse directly, and what it accepts to Write and Verify.
//
// Checks, besides the sanitizers: a refused file comes with a reason; an accepted one starts
// with the format's first line, names the plugin "fuzz" and has a 64-digit sha256; Write of what
// was parsed parses again to the same text; no input is ever trusted by an empty trust store,
// and a signed one is refused for its key, never accepted.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "certificate.h"
#include "fuzz_common.h"
#include "internal.h"

using namespace deepx_fuzz;

namespace {
int g_fd = -1;
std::string g_path;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_fd = memfd_create("deepx-fuzz-certificate", MFD_CLOEXEC);
  FUZZ_CHECK(g_fd >= 0, "memfd_create failed");
  g_path = "/proc/self/fd/" + std::to_string(g_fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FUZZ_CHECK(ftruncate(g_fd, 0) == 0, "ftruncate");
  FUZZ_CHECK(pwrite(g_fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");
  std::string why;
  const bool accepted = deepx::host::ParseCertificateForFuzzing(g_path, &why);
  const std::string text(reinterpret_cast<const char*>(data), size);
  deepx::cert::Certificate c;
  std::string direct_why;
  const bool parsed = deepx::cert::Parse(text, &c, &direct_why);
  if (!parsed) {
    FUZZ_CHECK(!direct_why.empty(), "a refused certificate without a reason");
    FUZZ_CHECK(!accepted, "the host accepted what the module refused");
    return 0;
  }
  FUZZ_CHECK(text.rfind("deepx-certificate 1\n", 0) == 0 || text.rfind("deepx-certificate 2\n", 0) == 0,
             "a certificate without the first line 'deepx-certificate 1' or 2 was accepted");
  FUZZ_CHECK(c.sha256.size() == 64, "a certificate without a valid sha256 line was accepted");
  FUZZ_CHECK(!c.plugin.empty(), "a certificate without a plugin line was accepted");
  if (accepted) {
    FUZZ_CHECK(c.plugin == "fuzz", "the host accepted a certificate of another plugin");
  } else {
    FUZZ_CHECK(!why.empty(), "a refused certificate without a reason");
  }
  // Write is a fixed point after one round: what it writes parses back to the same text.
  const std::string written = deepx::cert::Write(c);
  deepx::cert::Certificate again;
  FUZZ_CHECK(deepx::cert::Parse(written, &again, &direct_why), "Write produced text Parse refuses");
  FUZZ_CHECK(deepx::cert::Write(again) == written, "Write(Parse(Write(c))) differs from Write(c)");
  // Nothing is trusted without a trust store.
  const deepx::cert::Check check = deepx::cert::Verify(c, deepx::cert::TrustStore{}, c.sha256, &why);
  FUZZ_CHECK(check == (c.signature.empty() ? deepx::cert::Check::kUnsigned : deepx::cert::Check::kUntrustedKey),
             "an empty trust store did not refuse a certificate for its signature or key");
  return 0;
}
