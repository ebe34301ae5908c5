// deepx::daemon::testing::Client: a small blocking client of deepxd over a unix socket, built
// on deepx::wire, for tests (and anything else that needs to talk to a real deepxd without the
// host's remote runtime). Lenient on purpose: it decodes every well-framed reply whatever the
// order, so tests can see the daemon's answers to out-of-order requests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <deepx/wire/wire.h>

namespace deepx::daemon::testing {

/// One reply: its header (verified) and bulk bytes.
struct Reply {
  uint64_t task_id = 0;
  dx_status_t status = DX_OK;
  std::string message;
  std::vector<uint8_t> header;
  std::vector<uint8_t> bulk;
  const wire::fb::Reply* get() const {
    return flatbuffers::GetRoot<wire::fb::Reply>(header.data());
  }
};

/// A blocking connection to deepxd. Not thread-safe.
class Client {
 public:
  /// Connects to the socket at |path|; null with |error| set when that fails.
  static std::unique_ptr<Client> Connect(const std::string& path, std::string* error = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Writes raw bytes (for malformed input). False when the daemon closed the connection.
  bool SendRaw(std::span<const uint8_t> bytes);
  /// Frames and writes one request (header FlatBuffer from wire::request::*) with its bulk.
  bool Send(const std::vector<uint8_t>& header, std::span<const uint8_t> bulk = {});
  /// The next reply, or nullopt on timeout, end of stream or a malformed reply (error()).
  std::optional<Reply> Receive(int timeout_ms = 10000);
  /// Send, then Receive.
  std::optional<Reply> Call(const std::vector<uint8_t>& header,
                            std::span<const uint8_t> bulk = {}, int timeout_ms = 10000);
  /// Hello with this library's version; true when answered OK.
  bool Hello(const std::string& client_name = "deepxd-test-client");
  /// True when the daemon closes the stream within |timeout_ms| (replies before that are
  /// discarded).
  bool WaitClosed(int timeout_ms = 10000);
  /// Closes the write side (the daemon sees the end of the stream).
  void ShutdownWrite();
  /// What went wrong in the last Receive.
  const std::string& error() const { return error_; }

  // Helpers for the common requests; each returns the reply (nullopt: no reply).
  std::optional<Reply> CreateTensor(uint64_t task, uint32_t dtype, std::vector<int64_t> shape,
                                    uint64_t* out_handle, const std::string& device = "");
  std::optional<Reply> WriteTensor(uint64_t task, uint64_t handle, std::span<const uint8_t> bytes,
                                   uint64_t offset = 0);
  std::optional<Reply> ReadTensor(uint64_t task, uint64_t handle, uint64_t length,
                                  uint64_t offset = 0);

 private:
  explicit Client(int fd);
  int fd_;
  wire::Limits limits_;
  wire::FrameReader reader_{limits_};
  bool eof_ = false;
  std::string error_;
  // A reply whose bulk frames are still arriving.
  std::optional<Reply> pending_;
  uint64_t bulk_left_ = 0;
};

/// The tensor handle of a TensorInfo reply (0 when it has none).
uint64_t HandleOf(const Reply& r);

}  // namespace deepx::daemon::testing
