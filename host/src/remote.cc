// The remote runtime's connection to deepxd (remote.h): a blocking unix-socket client of the wire
// protocol, built on the codec deepx::wire (frames, the incremental reader, the Verifier, the
// request builders).
#include "remote.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>

#ifndef DEEPX_HOST_NO_REMOTE

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

#include "deepx/ops.h"
#include "deepx/wire/wire.h"

namespace deepx::host {
namespace {

using Clock = std::chrono::steady_clock;
namespace fb = deepx::wire::fb;

// Tensor bytes move in messages of at most this many bulk bytes (a daemon's default cap on one
// message is 1 GiB), cut into bulk frames of the protocol's default frame cap.
constexpr uint64_t kChunkBytes = uint64_t{64} << 20;
constexpr uint32_t kBulkFrameBytes = 4u << 20;

// What this client accepts from the daemon: the protocol's defaults, with room for a large
// catalogue in one reply.
wire::Limits ClientLimits() {
  wire::Limits limits;
  limits.max_header_bytes = 16u << 20;
  limits.max_bulk_bytes = kChunkBytes;
  return limits;
}

dx_status_t KnownStatus(int code) {
  return code >= DX_OK && code <= DX_DATA_LOSS ? static_cast<dx_status_t>(code) : DX_UNKNOWN;
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// DLPack device type of a device named "cpu", "cuda:1", ...: the part before ':'. deepxd names a
// kernel's device "dlpack-device-type-N" when no device of its plugin has that type.
int32_t DeviceTypeOfName(const std::string& name, int32_t* device_id) {
  constexpr std::string_view kNumbered = "dlpack-device-type-";
  if (name.size() > kNumbered.size() && name.size() <= kNumbered.size() + 4 &&
      name.compare(0, kNumbered.size(), kNumbered) == 0 &&
      std::all_of(name.begin() + kNumbered.size(), name.end(),
                  [](char c) { return c >= '0' && c <= '9'; })) {
    if (device_id != nullptr) *device_id = 0;
    return std::stoi(name.substr(kNumbered.size()));
  }
  const size_t colon = name.find(':');
  const std::string type = name.substr(0, colon);
  if (device_id != nullptr) {
    *device_id = 0;
    if (colon != std::string::npos && colon + 1 < name.size() && name.size() - colon <= 9 &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(colon) + 1, name.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      *device_id = std::stoi(name.substr(colon + 1));
    }
  }
  if (type == "cpu") return kDLCPU;
  if (type == "cuda") return kDLCUDA;
  if (type == "cuda_host" || type == "cuda-host" || type == "cuda_pinned") return kDLCUDAHost;
  if (type == "cuda_managed") return kDLCUDAManaged;
  if (type == "rocm" || type == "hip") return kDLROCM;
  if (type == "rocm_host" || type == "hip_host") return kDLROCMHost;
  return 0;
}

int32_t MemoryKindOfName(const std::string& kind) {
  if (kind == "host") return DX_MEMORY_HOST;
  if (kind == "pinned") return DX_MEMORY_PINNED;
  if (kind == "managed") return DX_MEMORY_MANAGED;
  return DX_MEMORY_DEVICE;
}

// The frame header of a bulk frame (docs/protocol.md, "Frames"): magic, flags, length, LE.
void BulkFrameHeader(uint8_t out[wire::kFrameHeaderBytes], uint32_t length) {
  std::memcpy(out, wire::kFrameMagic, 4);
  const uint32_t words[2] = {wire::kFrameFlagBulk, length};
  for (int w = 0; w < 2; ++w) {
    for (int b = 0; b < 4; ++b) out[4 + 4 * w + b] = static_cast<uint8_t>(words[w] >> (8 * b));
  }
}

// A kernel's input and output counts, which protocol 1.0 does not carry: a standard op's from
// its schema (deepx/ops.h; a variadic side from the kernel's dtype signature, one dtype for all
// its inputs), -1 for a vendor op.
void StandardArity(const std::string& op, int32_t num_dtypes, int32_t* in, int32_t* out) {
  struct Arity {
    const char* name;
    int32_t in, out;
  };
  static const Arity kArity[] = {
#define DX_REMOTE_ARITY_(id, op_name, nin, nout, attr_list) {op_name, nin, nout},
      DX_OP_TABLE(DX_REMOTE_ARITY_)
#undef DX_REMOTE_ARITY_
  };
  *in = -1;
  *out = -1;
  for (const Arity& a : kArity) {
    if (op != a.name) continue;
    *out = a.out >= 0 ? a.out : (a.in >= 0 ? num_dtypes - a.in : -1);
    *in = a.in >= 0 ? a.in : (*out >= 0 ? 1 : -1);
    return;
  }
}

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

}  // namespace

struct RemoteConnection::Impl {
  int fd = -1;
  std::mutex mutex;  // one request at a time; guards everything below
  wire::Limits limits = ClientLimits();
  wire::StreamDecoder decoder{wire::Role::kClient, ClientLimits()};
  std::deque<wire::Event> events;
  uint64_t next_task = 1;
  bool broken = false;
  dx_status_t broken_code = DX_OK;
  std::string broken_message;
  std::string address;
  uint32_t request_timeout_ms = 0;
  std::vector<uint8_t> buffer;  // what recv() reads into, kept across calls

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  // Breaks the connection for good (the first reason stays) and parks it for the caller.
  dx_status_t Break(dx_status_t code, const std::string& why, const char* where) {
    if (!broken) {
      broken = true;
      broken_code = code;
      broken_message = why;
      if (fd >= 0) {
        ::shutdown(fd, SHUT_RDWR);
        ::close(fd);
        fd = -1;
      }
    }
    return Fail(broken_code, std::string(where) + ": " + broken_message);
  }

  std::string Lost(const char* where, uint64_t task, const std::string& detail) const {
    return "the connection to deepxd at " + address + " was lost during " + where + " (task " +
           std::to_string(task) + "): " + detail +
           "; this runtime cannot be used any more, connect again with dx_runtime_connect()";
  }

  // Writes all of `iov` before the deadline; a failure breaks the connection (the stream is
  // cut in the middle of a frame).
  dx_status_t SendAll(struct iovec* iov, int count, Clock::time_point deadline, const char* where,
                      uint64_t task) {
    while (count > 0) {
      struct msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          const int ms = RemainingMs(deadline);
          if (ms == 0) {
            return Break(DX_TIMEOUT,
                         "sending " + std::string(where) + " (task " + std::to_string(task) +
                             ") to deepxd at " + address + " did not finish within " +
                             std::to_string(request_timeout_ms) +
                             " ms, so the connection was closed (a request cut short cannot be "
                             "resumed); connect again with dx_runtime_connect()",
                         where);
          }
          struct pollfd p{fd, POLLOUT, 0};
          ::poll(&p, 1, ms);
          continue;
        }
        return Break(DX_UNAVAILABLE,
                     Lost(where, task,
                          std::string("deepxd closed the connection (") + std::strerror(errno) +
                              "): the daemon exited, restarted or dropped this session"),
                     where);
      }
      size_t done = static_cast<size_t>(n);
      while (count > 0 && done >= iov->iov_len) {
        done -= iov->iov_len;
        ++iov;
        --count;
      }
      if (count > 0) {
        iov->iov_base = static_cast<char*>(iov->iov_base) + done;
        iov->iov_len -= done;
      }
    }
    return DX_OK;
  }

  // Reads until the reply of `task` is in; its status becomes the result.
  dx_status_t Receive(uint64_t task, Clock::time_point deadline, uint32_t timeout_ms,
                      const char* where, wire::Message* out) {
    for (;;) {
      while (!events.empty()) {
        wire::Event event = std::move(events.front());
        events.pop_front();
        if (event.kind == wire::Event::Kind::kError) {
          if (event.fatal) {
            return Break(event.error.code,
                         "deepxd at " + address + " (during " + where + ", task " +
                             std::to_string(task) + "): " + event.error.message +
                             "; the connection is closed",
                         where);
          }
          if (event.task_id == task) {
            return Fail(event.error.code, std::string(where) + ": the reply of deepxd at " +
                                              address + " (task " + std::to_string(task) +
                                              ") was refused: " + event.error.message);
          }
          continue;
        }
        const fb::Reply* reply = event.message.reply();
        const dx_status_t code = KnownStatus(static_cast<int>(reply->status()));
        if (reply->task_id() == task) {
          if (code != DX_OK) {
            *out = std::move(event.message);  // a failing reply may carry a body (SubmitResult)
            return Fail(code, std::string(where) + ": deepxd (task " + std::to_string(task) +
                                  "): " + Str(reply->message()));
          }
          *out = std::move(event.message);
          return DX_OK;
        }
        if (reply->task_id() == 0 && code != DX_OK) {
          return Break(code,
                       "deepxd at " + address + " ended the session (during " + where +
                           ", task " + std::to_string(task) + "): " + Str(reply->message()),
                       where);
        }
        // The reply of an earlier request whose caller timed out: dropped.
      }
      const int ms = RemainingMs(deadline);
      if (ms == 0) {
        return Fail(DX_TIMEOUT, std::string(where) + ": no reply from deepxd at " + address +
                                    " within " + std::to_string(timeout_ms) + " ms (task " +
                                    std::to_string(task) +
                                    "); the connection stays open and a late reply is dropped");
      }
      struct pollfd p{fd, POLLIN, 0};
      int ready = ::poll(&p, 1, ms);
      if (ready < 0 && errno != EINTR) {
        return Break(DX_UNAVAILABLE,
                     Lost(where, task, std::string("poll failed: ") + std::strerror(errno)),
                     where);
      }
      if (ready <= 0) continue;
      if (buffer.empty()) buffer.resize(256u << 10);
      // Inside a large bulk frame: receive straight into the reply's bulk buffer.
      const std::span<uint8_t> window = decoder.BulkWindow();
      const bool in_place = window.size() >= (16u << 10);
      ssize_t n = in_place ? ::recv(fd, window.data(), window.size(), 0)
                           : ::recv(fd, buffer.data(), buffer.size(), 0);
      if (n == 0) {
        return Break(DX_UNAVAILABLE,
                     Lost(where, task,
                          "deepxd closed the connection (the daemon exited, restarted or "
                          "dropped this session)"),
                     where);
      }
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return Break(DX_UNAVAILABLE,
                     Lost(where, task,
                          std::string("deepxd closed the connection (") + std::strerror(errno) +
                              "): the daemon exited, restarted or dropped this session"),
                     where);
      }
      std::vector<wire::Event> fresh;
      if (in_place)
        decoder.CommitBulk(static_cast<size_t>(n), fresh);
      else
        decoder.Feed(std::span<const uint8_t>(buffer.data(), static_cast<size_t>(n)), fresh);
      for (auto& e : fresh) events.push_back(std::move(e));
    }
  }

  // One request and its reply. `build` makes the header for the task id it is given; `bulk`
  // follows it in bulk frames.
  dx_status_t Call(const char* where, const std::function<std::vector<uint8_t>(uint64_t)>& build,
                   std::span<const uint8_t> bulk, wire::Message* reply,
                   std::span<uint8_t> reply_bulk_into = {}) {
    std::lock_guard<std::mutex> lock(mutex);
    if (broken) return Fail(broken_code, std::string(where) + ": " + broken_message);
    const uint64_t task = next_task++;
    const auto deadline = Clock::now() + std::chrono::milliseconds(request_timeout_ms);
    std::vector<uint8_t> header = build(task);
    std::vector<uint8_t> frame;
    wire::Status framed = wire::AppendFrame(frame, false, header, limits);
    if (!framed.ok()) {
      return Fail(framed.code, std::string(where) + ": the request cannot be sent to deepxd: " +
                                   framed.message);
    }
    struct iovec iov[2];
    iov[0] = {frame.data(), frame.size()};
    if (dx_status_t st = SendAll(iov, 1, deadline, where, task)) return st;
    for (size_t offset = 0; offset < bulk.size();) {
      const uint32_t n = static_cast<uint32_t>(
          std::min<uint64_t>(bulk.size() - offset, kBulkFrameBytes));
      uint8_t bulk_header[wire::kFrameHeaderBytes];
      BulkFrameHeader(bulk_header, n);
      iov[0] = {bulk_header, sizeof bulk_header};
      iov[1] = {const_cast<uint8_t*>(bulk.data() + offset), n};
      if (dx_status_t st = SendAll(iov, 2, deadline, where, task)) return st;
      offset += n;
    }
    wire::Message ignored;
    // A reply's bulk of exactly reply_bulk_into's size lands there (the caller's buffer).
    if (!reply_bulk_into.empty()) decoder.SetBulkDestination(task, reply_bulk_into);
    dx_status_t st = Receive(task, deadline, request_timeout_ms, where, reply ? reply : &ignored);
    if (!reply_bulk_into.empty()) decoder.ClearBulkDestination();
    return st;
  }
};

namespace {

// Splits "unix:PATH" or a bare PATH; refuses other schemes.
dx_status_t SocketPath(const std::string& address, std::string* path, const char* where) {
  if (address.rfind("unix:", 0) == 0) {
    *path = address.substr(5);
    if (path->rfind("//", 0) == 0) *path = path->substr(2);  // unix:///run/x.sock
  } else {
    const size_t colon = address.find(':');
    const size_t slash = address.find('/');
    const bool has_scheme = colon != std::string::npos && colon > 0 &&
                            (slash == std::string::npos || colon < slash) &&
                            std::all_of(address.begin(),
                                        address.begin() + static_cast<std::ptrdiff_t>(colon),
                                        [](char c) {
                                          return std::isalnum(static_cast<unsigned char>(c)) ||
                                                 c == '+' || c == '-' || c == '.';
                                        });
    if (has_scheme) {
      const std::string scheme = address.substr(0, colon);
      if (scheme == "tcp" || scheme == "tls" || scheme == "tcp4" || scheme == "tcp6") {
        return Failf(DX_UNSUPPORTED,
                     "%s: address '%s': TCP is not supported yet; connect to the daemon's unix "
                     "socket (unix:PATH)",
                     where, address.c_str());
      }
      return Failf(DX_INVALID_ARGUMENT,
                   "%s: address '%s' has the unknown scheme '%s'; use unix:PATH or a socket path",
                   where, address.c_str(), scheme.c_str());
    }
    *path = address;
  }
  if (path->empty()) {
    return Failf(DX_INVALID_ARGUMENT, "%s: address '%s' names no socket path", where,
                 address.c_str());
  }
  if (path->size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Failf(DX_INVALID_ARGUMENT,
                 "%s: socket path '%s' is %zu bytes; a unix socket path has at most %zu", where,
                 path->c_str(), path->size(), sizeof(sockaddr_un{}.sun_path) - 1);
  }
  if (path->find('\0') != std::string::npos) {
    return Failf(DX_INVALID_ARGUMENT, "%s: the socket path contains a NUL byte", where);
  }
  return DX_OK;
}

// Opens the socket and connects before the deadline.
dx_status_t ConnectSocket(const std::string& path, const std::string& address,
                          Clock::time_point deadline, uint32_t timeout_ms, int* out_fd,
                          const char* where) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return Failf(DX_IO_ERROR, "%s: socket(AF_UNIX) failed: %s", where, std::strerror(errno));
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EINPROGRESS) {
      // The listen backlog is full: try again until the deadline.
      if (RemainingMs(deadline) == 0) {
        ::close(fd);
        return Failf(DX_TIMEOUT, "%s: deepxd at %s did not accept the connection within %u ms",
                     where, address.c_str(), timeout_ms);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    ::close(fd);
    switch (err) {
      case ENOENT:
        return Failf(DX_UNAVAILABLE,
                     "%s: no socket at '%s': is deepxd running with --socket %s?", where,
                     path.c_str(), path.c_str());
      case ECONNREFUSED:
        return Failf(DX_UNAVAILABLE,
                     "%s: nothing accepts connections at '%s' (a socket file left by a deepxd "
                     "that exited, or not a socket)",
                     where, path.c_str());
      case EACCES:
      case EPERM:
        return Failf(DX_PERMISSION_DENIED,
                     "%s: may not connect to '%s' (%s): the daemon's socket is mode 0600, "
                     "for its own user",
                     where, path.c_str(), std::strerror(err));
      default:
        return Failf(DX_UNAVAILABLE, "%s: connecting to '%s' failed: %s", where, path.c_str(),
                     std::strerror(err));
    }
  }
  *out_fd = fd;
  return DX_OK;
}

}  // namespace

RemoteConnection::RemoteConnection(const ConnectSettings& settings)
    : settings_(settings), impl_(std::make_unique<Impl>()) {
  impl_->address = settings.address;
  impl_->request_timeout_ms = settings.request_timeout_ms;
}

RemoteConnection::~RemoteConnection() = default;

RemoteTensor::~RemoteTensor() {
  if (connection) connection->Free(handle);
}

bool RemoteConnection::FindOp(const std::string& name, dx_op_id_t* id) const {
  auto it = op_ids_.find(name);
  if (it == op_ids_.end()) return false;
  *id = it->second;
  return true;
}

dx_status_t RemoteConnection::Connect(const ConnectSettings& settings,
                                      std::shared_ptr<RemoteConnection>* out,
                                      const char* where) {
  std::string path;
  if (dx_status_t st = SocketPath(settings.address, &path, where)) return st;
  std::shared_ptr<RemoteConnection> c(new RemoteConnection(settings));
  Impl& impl = *c->impl_;
  const auto deadline = Clock::now() + std::chrono::milliseconds(settings.connect_timeout_ms);
  if (dx_status_t st = ConnectSocket(path, settings.address, deadline,
                                     settings.connect_timeout_ms, &impl.fd, where)) {
    return st;
  }

  // Hello, within the connect timeout. The decoder's session checks the reply: HelloReply first,
  // status OK, the same protocol major.
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    std::vector<uint8_t> frame;
    std::vector<uint8_t> hello = wire::request::Hello(0, settings.client_name);
    wire::Status framed = wire::AppendFrame(frame, false, hello, impl.limits);
    if (!framed.ok()) return Fail(framed.code, std::string(where) + ": " + framed.message);
    struct iovec iov[1] = {{frame.data(), frame.size()}};
    if (dx_status_t st = impl.SendAll(iov, 1, deadline, where, 0)) return st;
    wire::Message reply;
    if (dx_status_t st = impl.Receive(0, deadline, settings.connect_timeout_ms, where, &reply)) {
      return st;
    }
  }

  // The catalogue, within the request timeout of each list.
  wire::Message m;
  if (dx_status_t st = impl.Call(where, [](uint64_t t) { return wire::request::ListPlugins(t); },
                                 {}, &m)) {
    return st;
  }
  if (const auto* list = m.reply()->body_as_PluginList(); list && list->plugins()) {
    for (const auto* p : *list->plugins()) {
      RemotePlugin plugin;
      plugin.name = Str(p->name());
      plugin.version = Str(p->version());
      plugin.certification = p->certified() ? DX_CERTIFICATION_VALID : DX_CERTIFICATION_NONE;
      c->plugins_.push_back(std::move(plugin));
    }
  }
  auto plugin_index = [&](const std::string& name) -> int32_t {
    for (size_t i = 0; i < c->plugins_.size(); ++i) {
      if (c->plugins_[i].name == name) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (dx_status_t st = impl.Call(where, [](uint64_t t) { return wire::request::ListDevices(t); },
                                 {}, &m)) {
    return st;
  }
  if (const auto* list = m.reply()->body_as_DeviceList(); list && list->devices()) {
    for (const auto* d : *list->devices()) {
      RemoteDevice device;
      device.name = Str(d->name());
      device.device_type = DeviceTypeOfName(device.name, &device.device_id);
      device.kind = MemoryKindOfName(Str(d->kind()));
      device.plugin_index = plugin_index(Str(d->plugin()));
      if (device.plugin_index >= 0) ++c->plugins_[device.plugin_index].num_devices;
      c->devices_.push_back(std::move(device));
    }
  }
  if (dx_status_t st = impl.Call(where, [](uint64_t t) { return wire::request::ListOps(t); }, {},
                                 &m)) {
    return st;
  }
  if (const auto* list = m.reply()->body_as_OpList(); list && list->ops()) {
    for (const auto* name : *list->ops()) {
      const std::string op = Str(name);
      if (c->op_ids_.count(op)) continue;
      c->op_ids_.emplace(op, static_cast<dx_op_id_t>(c->ops_.size()));
      c->ops_.push_back(RemoteOp{op, {}});
    }
  }
  if (dx_status_t st = impl.Call(
          where, [](uint64_t t) { return wire::request::ListKernels(t, "", ""); }, {}, &m)) {
    return st;
  }
  if (const auto* list = m.reply()->body_as_KernelList(); list && list->kernels()) {
    for (const auto* k : *list->kernels()) {
      dx_op_id_t id = 0;
      if (!c->FindOp(Str(k->op()), &id)) continue;  // an op the op list did not name
      RemoteKernel kernel;
      kernel.plugin_index = plugin_index(Str(k->plugin()));
      const std::string device = Str(k->device());
      kernel.device_type = DeviceTypeOfName(device, nullptr);
      for (const auto& d : c->devices_) {
        if (d.name == device) kernel.device_type = d.device_type;
      }
      if (k->dtypes()) kernel.dtypes.assign(k->dtypes()->begin(), k->dtypes()->end());
      kernel.certified = k->certified();
      StandardArity(c->ops_[id].name, static_cast<int32_t>(kernel.dtypes.size()),
                    &kernel.num_inputs, &kernel.num_outputs);
      if (kernel.plugin_index >= 0) ++c->plugins_[kernel.plugin_index].num_kernels;
      c->ops_[id].kernels.push_back(std::move(kernel));
    }
  }
  *out = std::move(c);
  return DX_OK;
}

void RemoteConnection::Free(uint64_t handle) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      if (impl_->broken) return;  // the daemon freed the session's tensors with the session
    }
    if (impl_->Call("dx_tensor_destroy",
                    [&](uint64_t t) { return wire::request::TensorFree(t, handle); }, {},
                    nullptr) != DX_OK) {
      ClearPendingMessage();
    }
  } catch (...) {
  }
}

namespace {

// A tensor of the connection from a TensorInfo reply.
dx_status_t TensorFromInfo(const std::shared_ptr<RemoteConnection>& self,
                           const std::shared_ptr<Core>& core, const wire::Message& m,
                           std::unique_ptr<Tensor>* out, const char* where) {
  const fb::TensorInfo* info = m.reply()->body_as_TensorInfo();
  if (info == nullptr || info->tensor() == nullptr || info->tensor()->value() == 0) {
    return Failf(DX_INTERNAL, "%s: deepxd answered without a tensor handle", where);
  }
  // The handle is the daemon's from here on: freed when `t` goes, whatever happens below.
  auto t = std::make_unique<Tensor>();
  t->remote = std::make_shared<RemoteTensor>();
  t->remote->connection = self;
  t->remote->handle = info->tensor()->value();
  t->storage = new Storage();
  t->SetCore(core);
  if (info->shape()) t->shape.assign(info->shape()->begin(), info->shape()->end());
  if (info->strides()) t->strides.assign(info->strides()->begin(), info->strides()->end());
  if (t->strides.size() != t->shape.size() || t->shape.size() > 32) {
    return Failf(DX_INTERNAL, "%s: deepxd described the tensor with %zu extents and %zu strides",
                 where, t->shape.size(), t->strides.size());
  }
  t->dl.data = nullptr;
  t->dl.ndim = static_cast<int32_t>(t->shape.size());
  t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
  t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
  t->dl.dtype = UnpackDtype(info->dtype());
  const std::string device = Str(info->device());
  const auto& devices = self->devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].name == device) {
      t->device_index = static_cast<int32_t>(i);
      t->dl.device.device_type = static_cast<DLDeviceType>(devices[i].device_type);
      t->dl.device.device_id = devices[i].device_id;
    }
  }
  *out = std::move(t);
  return DX_OK;
}

// The connection a tensor of this process belongs to (null for an in-process tensor).
const RemoteConnection* ConnectionOf(const Tensor* t) {
  return t && t->remote ? t->remote->connection.get() : nullptr;
}

}  // namespace

dx_status_t RemoteConnection::CreateTensor(const std::shared_ptr<Core>& core,
                                           int32_t device_index, dx_dtype_t dtype,
                                           const int64_t* shape, int32_t ndim,
                                           std::unique_ptr<Tensor>* out, const char* where) {
  if (device_index < 0 || device_index >= static_cast<int32_t>(devices_.size())) {
    return Failf(DX_OUT_OF_RANGE, "%s: device index %d out of range (deepxd at %s has %zu devices)",
                 where, device_index, address().c_str(), devices_.size());
  }
  std::vector<int64_t> extents(shape, shape + ndim);
  const std::string& device = devices_[device_index].name;
  wire::Message m;
  if (dx_status_t st = impl_->Call(
          where,
          [&](uint64_t t) { return wire::request::TensorCreate(t, dtype, extents, device); }, {},
          &m)) {
    return st;
  }
  return TensorFromInfo(shared_from_this(), core, m, out, where);
}

dx_status_t RemoteConnection::ViewTensor(const Tensor& base, const int64_t* shape,
                                         const int64_t* strides, int32_t ndim,
                                         int64_t elem_offset, std::unique_ptr<Tensor>* out,
                                         const char* where) {
  std::vector<int64_t> extents(shape, shape + ndim);
  std::vector<int64_t> steps(static_cast<size_t>(ndim));
  if (strides != nullptr) {
    steps.assign(strides, strides + ndim);
  } else {
    int64_t s = 1;
    for (int32_t d = ndim - 1; d >= 0; --d) {
      steps[d] = s;
      s *= std::max<int64_t>(shape[d], 1);
    }
  }
  const uint64_t handle = base.remote->handle;
  wire::Message m;
  if (dx_status_t st = impl_->Call(
          where,
          [&](uint64_t t) {
            return wire::request::TensorView(t, handle, extents, steps, elem_offset);
          },
          {}, &m)) {
    return st;
  }
  return TensorFromInfo(shared_from_this(), base.core, m, out, where);
}

dx_status_t RemoteConnection::Write(const Tensor& tensor, const void* data, uint64_t size,
                                    const char* where) {
  const uint64_t handle = tensor.remote->handle;
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  for (uint64_t offset = 0; offset < size;) {
    const uint64_t n = std::min(size - offset, kChunkBytes);
    if (dx_status_t st = impl_->Call(
            where, [&](uint64_t t) { return wire::request::TensorWrite(t, handle, offset, n); },
            std::span<const uint8_t>(bytes + offset, static_cast<size_t>(n)), nullptr)) {
      return st;
    }
    offset += n;
  }
  return DX_OK;
}

dx_status_t RemoteConnection::Read(const Tensor& tensor, void* data, uint64_t size,
                                   const char* where) {
  const uint64_t handle = tensor.remote->handle;
  uint8_t* bytes = static_cast<uint8_t*>(data);
  for (uint64_t offset = 0; offset < size;) {
    const uint64_t n = std::min(size - offset, kChunkBytes);
    wire::Message m;
    if (dx_status_t st = impl_->Call(
            where, [&](uint64_t t) { return wire::request::TensorRead(t, handle, offset, n); }, {},
            &m, std::span<uint8_t>(bytes + offset, static_cast<size_t>(n)))) {
      return st;
    }
    if (m.bulk_in_destination) {  // received straight into |data|
      offset += n;
      continue;
    }
    if (m.bulk.size() != n) {
      return Failf(DX_DATA_LOSS, "%s: deepxd answered %zu bytes for a read of %llu", where,
                   m.bulk.size(), static_cast<unsigned long long>(n));
    }
    std::memcpy(bytes + offset, m.bulk.data(), static_cast<size_t>(n));
    offset += n;
  }
  return DX_OK;
}

dx_status_t RemoteConnection::Copy(const Tensor& dst, const Tensor& src, const char* where) {
  const uint64_t s = src.remote->handle, d = dst.remote->handle;
  return impl_->Call(where, [&](uint64_t t) { return wire::request::TensorCopy(t, s, d); }, {},
                     nullptr);
}

namespace {

// The wire form of one invoke on connection `self`: the handles resolved, the attributes and
// options translated.
dx_status_t BuildCall(const RemoteConnection* self, const std::string& name,
                      dx_tensor_t* const* input_handles, int32_t num_inputs,
                      dx_tensor_t* const* output_handles, int32_t num_outputs,
                      const dx_attrs_t* attrs_handle, const dx_invoke_options_t* options,
                      const char* where, wire::OpCall& call) {
  const auto& plugins_ = self->plugins();
  auto address = [self]() -> const std::string& { return self->address(); };
  if (num_inputs < 0 || num_outputs < 0 || num_inputs > 64 || num_outputs > 64 ||
      (num_inputs > 0 && input_handles == nullptr) ||
      (num_outputs > 0 && output_handles == nullptr)) {
    return Failf(DX_INVALID_ARGUMENT, "%s: bad input/output arrays", where);
  }
  call.op = name;
  auto gather = [&](dx_tensor_t* const* handles, int32_t n, const char* what,
                    std::vector<uint64_t>* out) -> dx_status_t {
    for (int32_t i = 0; i < n; ++i) {
      if (handles[i] == nullptr) {
        out->push_back(0);  // an absent optional input, or an unwanted gradient
        continue;
      }
      Tensor* t = nullptr;
      if (dx_status_t st = Resolve(handles[i], where, what, &t)) {
        return Failf(st, "%s (%s %d)", PendingMessage().c_str(), what, i);
      }
      if (ConnectionOf(t) != self) {
        return Failf(DX_INVALID_ARGUMENT,
                     "%s: %s %d is a tensor of another runtime (%s); deepxd at %s computes only "
                     "on tensors of this connection: copy it into one with dx_tensor_copy()",
                     where, what, i, t->remote ? "another connection" : "in-process",
                     address().c_str());
      }
      out->push_back(t->remote->handle);
    }
    return DX_OK;
  };
  if (dx_status_t st = gather(input_handles, num_inputs, "input", &call.inputs)) return st;
  if (dx_status_t st = gather(output_handles, num_outputs, "output", &call.outputs)) return st;
  if (attrs_handle != nullptr) {
    Attrs* attrs = nullptr;
    if (dx_status_t st = Resolve(attrs_handle, where, "attrs", &attrs)) return st;
    for (const AttrItem& item : attrs->items) {
      wire::AttrValue v;
      v.name = item.name;
      switch (item.type) {
        case DX_ATTR_I64:
        case DX_ATTR_BOOL:  // protocol 1.0 has no bool attribute: 0 or 1 as an integer
          v.type = fb::AttrType::INT;
          v.i = item.scalar_i;
          break;
        case DX_ATTR_F64:
          v.type = fb::AttrType::FLOAT;
          v.f = item.scalar_f;
          break;
        case DX_ATTR_STRING:
          v.type = fb::AttrType::STRING;
          v.s = item.str;
          break;
        case DX_ATTR_I64_ARRAY:
          v.type = fb::AttrType::INTS;
          v.ints = item.ints;
          break;
        case DX_ATTR_F64_ARRAY:
          v.type = fb::AttrType::FLOATS;
          v.floats = item.floats;
          break;
        default:
          return Failf(DX_INVALID_ARGUMENT, "%s: attribute '%s' has an unknown type", where,
                       item.name.c_str());
      }
      call.attrs.push_back(std::move(v));
    }
  }
  if (options != nullptr) {
    if (options->struct_size < DX_STRUCT_SIZE(dx_invoke_options_t, flags)) {
      return Failf(DX_INVALID_ARGUMENT,
                   "%s: options->struct_size is too small; set it to DX_INVOKE_OPTIONS_SIZE_1_0",
                   where);
    }
    dx_invoke_options_t opts;
    std::memset(&opts, 0, sizeof opts);
    std::memcpy(&opts, options,
                std::min<size_t>(options->struct_size, DX_INVOKE_OPTIONS_SIZE_1_0));
    call.backward = (opts.flags & DX_INVOKE_FLAG_BACKWARD) != 0;
    if (opts.flags & DX_INVOKE_FLAG_PLUGIN) {
      if (opts.plugin_index < 0 || opts.plugin_index >= static_cast<int32_t>(plugins_.size())) {
        return Failf(DX_OUT_OF_RANGE, "%s: plugin index %d out of range (deepxd has %zu plugins)",
                     where, opts.plugin_index, plugins_.size());
      }
      call.plugin = plugins_[opts.plugin_index].name;
    }
  }
  return DX_OK;
}

}  // namespace

dx_status_t RemoteConnection::Invoke(const std::string& name, dx_tensor_t* const* input_handles,
                                     int32_t num_inputs, dx_tensor_t* const* output_handles,
                                     int32_t num_outputs, const dx_attrs_t* attrs_handle,
                                     const dx_invoke_options_t* options, const char* where) {
  wire::OpCall call;
  if (dx_status_t st = BuildCall(this, name, input_handles, num_inputs, output_handles,
                                 num_outputs, attrs_handle, options, where, call)) {
    return st;
  }
  return impl_->Call(where, [&](uint64_t t) { return wire::request::Invoke(t, call); }, {},
                     nullptr);
}

dx_status_t RemoteConnection::Submit(const std::vector<InvokeStep>& steps, int32_t* completed,
                                     const char* where) {
  *completed = 0;
  std::vector<wire::OpCall> program(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const InvokeStep& s = steps[i];
    if (dx_status_t st = BuildCall(this, s.op_name, s.inputs.data(),
                                   static_cast<int32_t>(s.inputs.size()), s.outputs.data(),
                                   static_cast<int32_t>(s.outputs.size()), s.attrs,
                                   s.has_options ? &s.options : nullptr, where, program[i])) {
      return Failf(st, "%s: step %zu (%s) failed after 0 steps completed (none was sent): %s",
                   where, i, s.op_name.c_str(), PendingMessage().c_str());
    }
  }
  wire::Message m;
  const dx_status_t st = impl_->Call(
      where, [&](uint64_t t) { return wire::request::Submit(t, program); }, {}, &m);
  const fb::Reply* reply = m.header.empty() ? nullptr : m.reply();
  const fb::SubmitResult* result = reply ? reply->body_as_SubmitResult() : nullptr;
  if (result != nullptr) {
    *completed = static_cast<int32_t>(std::min<uint32_t>(result->ops_completed(),
                                                         static_cast<uint32_t>(steps.size())));
  } else if (st == DX_OK) {
    *completed = static_cast<int32_t>(steps.size());
  }
  if (st == DX_OK) return DX_OK;
  if (result == nullptr) return st;  // the connection, a timeout: no step is known to have failed
  const size_t k = static_cast<size_t>(*completed);
  const std::string op = k < steps.size() ? steps[k].op_name : std::string("?");
  return Failf(st, "%s: step %zu (%s) failed after %zu steps completed: %s", where, k, op.c_str(),
               k, Str(reply->message()).c_str());
}

dx_status_t RemoteInvoke(const Runtime& runtime, dx_op_id_t id, dx_tensor_t* const* inputs,
                         int32_t num_inputs, dx_tensor_t* const* outputs, int32_t num_outputs,
                         const dx_attrs_t* attrs, const dx_invoke_options_t* options) {
  RemoteConnection& c = *runtime.remote;
  if (id >= c.ops().size()) {
    return Failf(DX_NOT_FOUND, "dx_invoke: op id %u is not interned in this runtime", id);
  }
  return c.Invoke(c.ops()[id].name, inputs, num_inputs, outputs, num_outputs, attrs, options,
                  "dx_invoke");
}

}  // namespace deepx::host

#else  // DEEPX_HOST_NO_REMOTE: a host built without the wire codec (DEEPX_HOST_ONLY)

namespace deepx::host {

RemoteConnection::RemoteConnection(const ConnectSettings& settings) : settings_(settings) {}
RemoteConnection::~RemoteConnection() = default;
RemoteTensor::~RemoteTensor() = default;
struct RemoteConnection::Impl {};

dx_status_t RemoteConnection::Connect(const ConnectSettings&, std::shared_ptr<RemoteConnection>*,
                                      const char* where) {
  return Failf(DX_UNSUPPORTED,
               "%s: this libdeepx_host was built without the remote client (DEEPX_HOST_ONLY)",
               where);
}
bool RemoteConnection::FindOp(const std::string&, dx_op_id_t*) const { return false; }
// No RemoteConnection exists in this build, so nothing below is reached.
dx_status_t RemoteConnection::CreateTensor(const std::shared_ptr<Core>&, int32_t, dx_dtype_t,
                                           const int64_t*, int32_t, std::unique_ptr<Tensor>*,
                                           const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::ViewTensor(const Tensor&, const int64_t*, const int64_t*, int32_t,
                                         int64_t, std::unique_ptr<Tensor>*, const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::Write(const Tensor&, const void*, uint64_t, const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::Read(const Tensor&, void*, uint64_t, const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::Copy(const Tensor&, const Tensor&, const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::Invoke(const std::string&, dx_tensor_t* const*, int32_t,
                                     dx_tensor_t* const*, int32_t, const dx_attrs_t*,
                                     const dx_invoke_options_t*, const char*) {
  return DX_UNSUPPORTED;
}
dx_status_t RemoteConnection::Submit(const std::vector<InvokeStep>&, int32_t*, const char*) {
  return DX_UNSUPPORTED;
}
void RemoteConnection::Free(uint64_t) noexcept {}
dx_status_t RemoteInvoke(const Runtime&, dx_op_id_t, dx_tensor_t* const*, int32_t,
                         dx_tensor_t* const*, int32_t, const dx_attrs_t*,
                         const dx_invoke_options_t*) {
  return DX_UNSUPPORTED;
}

}  // namespace deepx::host

#endif  // DEEPX_HOST_NO_REMOTE
