// The test client of deepxd (client.h).
#include "client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace deepx::daemon::testing {

namespace fb = wire::fb;

std::unique_ptr<Client> Client::Connect(const std::string& path, std::string* error) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    if (error) *error = "socket path too long";
    return nullptr;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (error) *error = path + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<Client>(new Client(fd));
}

Client::Client(int fd) : fd_(fd) {}
Client::~Client() { ::close(fd_); }

bool Client::SendRaw(std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

bool Client::Send(const std::vector<uint8_t>& header, std::span<const uint8_t> bulk) {
  std::vector<uint8_t> out;
  if (!wire::EncodeRequest(out, header, bulk, limits_).ok()) return false;
  return SendRaw(out);
}

std::optional<Reply> Client::Receive(int timeout_ms) {
  error_.clear();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    wire::Frame f;
    while (reader_.Next(f)) {
      if (!f.bulk) {
        if (pending_) {
          error_ = "a header frame where bulk bytes were due";
          return std::nullopt;
        }
        wire::Status s = wire::VerifyReply(f.payload, limits_);
        if (!s.ok()) {
          error_ = "malformed reply: " + s.message;
          return std::nullopt;
        }
        Reply r;
        r.header = std::move(f.payload);
        const fb::Reply* fr = r.get();
        r.task_id = fr->task_id();
        r.status = dx_status_t(fr->status());
        r.message = fr->message() ? fr->message()->str() : "";
        if (fr->bulk_bytes() == 0) return r;
        bulk_left_ = fr->bulk_bytes();
        pending_ = std::move(r);
      } else {
        if (!pending_ || f.payload.size() > bulk_left_) {
          error_ = "an unexpected bulk frame";
          return std::nullopt;
        }
        pending_->bulk.insert(pending_->bulk.end(), f.payload.begin(), f.payload.end());
        bulk_left_ -= f.payload.size();
        if (bulk_left_ == 0) {
          Reply r = std::move(*pending_);
          pending_.reset();
          return r;
        }
      }
    }
    if (reader_.failed()) {
      error_ = "malformed frames from the daemon";
      return std::nullopt;
    }
    if (eof_) {
      error_ = "end of stream";
      return std::nullopt;
    }
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now())
                       .count());
    if (left <= 0) {
      error_ = "timed out";
      return std::nullopt;
    }
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    uint8_t buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      continue;
    }
    (void)reader_.Feed(std::span<const uint8_t>(buf, size_t(n)));
  }
}

std::optional<Reply> Client::Call(const std::vector<uint8_t>& header,
                                  std::span<const uint8_t> bulk, int timeout_ms) {
  if (!Send(header, bulk)) {
    error_ = "send failed";
    return std::nullopt;
  }
  return Receive(timeout_ms);
}

bool Client::Hello(const std::string& client_name) {
  auto r = Call(wire::request::Hello(0, client_name));
  return r && r->status == DX_OK && r->get()->body_type() == fb::ReplyBody::HelloReply;
}

bool Client::WaitClosed(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!eof_) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now())
                       .count());
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) continue;
    uint8_t buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0 && !(n < 0 && errno == EINTR)) eof_ = true;
  }
  return true;
}

void Client::ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

std::optional<Reply> Client::CreateTensor(uint64_t task, uint32_t dtype,
                                          std::vector<int64_t> shape, uint64_t* out_handle,
                                          const std::string& device) {
  auto r = Call(wire::request::TensorCreate(task, dtype, shape, device));
  if (out_handle) *out_handle = r ? HandleOf(*r) : 0;
  return r;
}

std::optional<Reply> Client::WriteTensor(uint64_t task, uint64_t handle,
                                         std::span<const uint8_t> bytes, uint64_t offset) {
  return Call(wire::request::TensorWrite(task, handle, offset, bytes.size()), bytes);
}

std::optional<Reply> Client::ReadTensor(uint64_t task, uint64_t handle, uint64_t length,
                                        uint64_t offset) {
  return Call(wire::request::TensorRead(task, handle, offset, length));
}

uint64_t HandleOf(const Reply& r) {
  auto* info = r.get()->body_as_TensorInfo();
  return info && info->tensor() ? info->tensor()->value() : 0;
}

}  // namespace deepx::daemon::testing
