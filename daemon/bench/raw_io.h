// Blocking unix-socket helpers and a small wire-protocol connection, shared by
// deepx-bench-daemon and deepx-load-daemon.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <deepx/wire/wire.h>

namespace deepx::bench {

inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

inline bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

inline sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  return addr;
}

/// A connected stream socket, or -1.
inline int UnixConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = UnixAddress(path);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// A listening stream socket bound to |path|, or -1.
inline int UnixListen(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::unlink(path.c_str());
  sockaddr_un addr = UnixAddress(path);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// One wire-protocol connection to deepxd: framed requests out, decoded replies in (verified by
/// deepx::wire's client-role StreamDecoder). Blocking; not thread-safe.
class WireConn {
 public:
  explicit WireConn(int fd) : fd_(fd) {}
  ~WireConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  WireConn(const WireConn&) = delete;
  WireConn& operator=(const WireConn&) = delete;
  bool ok() const { return fd_ >= 0 && !failed_; }
  const std::string& error() const { return error_; }

  /// Appends the frames of one request to |out| (nothing is sent).
  bool Frame(std::vector<uint8_t>& out, const std::vector<uint8_t>& header,
             std::span<const uint8_t> bulk = {}) {
    wire::Status s = wire::EncodeRequest(out, header, bulk, limits_);
    if (!s.ok()) error_ = "encode: " + s.message;
    return s.ok();
  }
  bool SendBytes(const std::vector<uint8_t>& bytes) {
    if (!WriteAll(fd_, bytes.data(), bytes.size())) return Fail("send failed");
    return true;
  }
  bool Send(const std::vector<uint8_t>& header, std::span<const uint8_t> bulk = {}) {
    std::vector<uint8_t> out;
    return Frame(out, header, bulk) && SendBytes(out);
  }
  /// The next reply (a message or a per-request error), waiting at most |timeout_ms|; nullopt
  /// on a fatal error, the end of the stream or the timeout (error()).
  std::optional<wire::Event> Next(int timeout_ms = 30000) {
    while (events_.empty()) {
      if (failed_) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, timeout_ms);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) {
        error_ = "no reply within " + std::to_string(timeout_ms) + " ms";
        return std::nullopt;
      }
      if (buf_.empty()) buf_.resize(256u << 10);
      ssize_t n = ::recv(fd_, buf_.data(), buf_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Fail("deepxd closed the connection");
        return std::nullopt;
      }
      std::vector<wire::Event> fresh;
      decoder_.Feed(std::span<const uint8_t>(buf_.data(), size_t(n)), fresh);
      for (auto& e : fresh) {
        if (e.kind == wire::Event::Kind::kError && e.fatal) {
          Fail("fatal: " + e.error.message);
          return std::nullopt;
        }
        events_.push_back(std::move(e));
      }
    }
    wire::Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  /// Send, then the next reply; true when it is task |task|'s with status OK.
  bool Call(const std::vector<uint8_t>& header, uint64_t task, wire::Event* out = nullptr,
            std::span<const uint8_t> bulk = {}) {
    if (!Send(header, bulk)) return false;
    auto e = Next();
    if (!e) return false;
    if (e->kind != wire::Event::Kind::kMessage) return Fail("error reply: " + e->error.message);
    const auto* r = e->message.reply();
    if (r->task_id() != task || r->status() != wire::fb::Status(DX_OK)) {
      return Fail("task " + std::to_string(r->task_id()) + ": status " +
                  wire::StatusName(int(r->status())) + ": " +
                  (r->message() ? r->message()->str() : ""));
    }
    if (out) *out = std::move(*e);
    return true;
  }
  bool Hello(const std::string& name) { return Call(wire::request::Hello(0, name), 0); }
  /// TensorCreate; the new handle, 0 on failure.
  uint64_t Create(uint64_t task, uint32_t dtype, std::vector<int64_t> shape) {
    wire::Event e;
    if (!Call(wire::request::TensorCreate(task, dtype, shape, ""), task, &e)) return 0;
    const auto* info = e.message.reply()->body_as_TensorInfo();
    return info && info->tensor() ? info->tensor()->value() : 0;
  }
  bool Write(uint64_t task, uint64_t handle, std::span<const uint8_t> bytes) {
    return Call(wire::request::TensorWrite(task, handle, 0, bytes.size()), task, nullptr, bytes);
  }

 private:
  bool Fail(std::string why) {
    failed_ = true;
    error_ = std::move(why);
    return false;
  }
  int fd_;
  bool failed_ = false;
  std::string error_;
  wire::Limits limits_;
  wire::StreamDecoder decoder_{wire::Role::kClient, wire::Limits{}};
  std::deque<wire::Event> events_;
  std::vector<uint8_t> buf_;
};

}  // namespace deepx::bench
