// fuzz_certificate: the parser of the certificate files `deepx certify` writes and the host reads
// next to a plugin (host/src/certificate.cc, through its hook ParseCertificateForFuzzing). The
// input is the file, handed over as a memfd (/proc/self/fd/N) as a real file would be.
//
// Checks, besides the sanitizers: a refused file comes with a reason; an accepted one starts
// with the format's first line and names the plugin "fuzz" and a 64-character sha256.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

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
  if (!accepted) {
    FUZZ_CHECK(!why.empty(), "a refused certificate without a reason");
    return 0;
  }
  FUZZ_CHECK(text.rfind("deepx-certificate 1\n", 0) == 0,
             "a certificate without the first line 'deepx-certificate 1' was accepted");
  FUZZ_CHECK(text.find("plugin") != std::string::npos && text.find("fuzz") != std::string::npos,
             "a certificate that does not name the plugin was accepted");
  FUZZ_CHECK(text.find("sha256") != std::string::npos,
             "a certificate without a sha256 line was accepted");
  return 0;
}
