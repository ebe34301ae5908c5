// SHA-256 as lowercase hex, through OpenSSL's libcrypto (EVP_Digest with EVP_sha256): the
// certificate's binding of a verdict to a plugin's .so, and the tolerance table's hash.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deepx::conformance {

// The SHA-256 of `data`, 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
// The SHA-256 of a file's bytes; nullopt when it cannot be read.
std::optional<std::string> sha256_file(const std::string& path);

}  // namespace deepx::conformance
