// SHA-256 of bytes and of files, as lowercase hex: binds certificates to the exact plugin
// binary. Computed by OpenSSL's libcrypto (sha256.cc).
#ifndef DEEPX_HOST_SRC_SHA256_H_
#define DEEPX_HOST_SRC_SHA256_H_

#include <optional>
#include <string>
#include <string_view>

namespace deepx::util {

// Hex digest (64 characters) of `data`.
std::string sha256_hex(std::string_view data);
// Hex digest of a file's contents; nullopt when it cannot be opened or read.
std::optional<std::string> sha256_file(const std::string& path);

}  // namespace deepx::util
#endif  // DEEPX_HOST_SRC_SHA256_H_
