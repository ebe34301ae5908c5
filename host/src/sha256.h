// A small SHA-256 (FIPS 180-4): binds certificates and reports to the exact plugin binary.
#ifndef DEEPX_HOST_SRC_SHA256_H_
#define DEEPX_HOST_SRC_SHA256_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepx::util {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finalises; call once

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

std::string sha256_hex(std::string_view data);
// Hex digest of a file's contents; empty when it cannot be read.
std::optional<std::string> sha256_file(const std::string& path);

}  // namespace deepx::util
#endif  // DEEPX_HOST_SRC_SHA256_H_
