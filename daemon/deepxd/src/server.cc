// deepxd's libuv event loop (server.h).
#include "deepx/daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include <uv.h>

#include "deepx/daemon/handler.h"

namespace deepx::daemon {
namespace {

constexpr size_t kReadBufferBytes = 64 * 1024;
// A client that does not read its replies: stop reading its requests above the high mark,
// resume below the low one.
constexpr size_t kWriteHighBytes = 64u << 20;
constexpr size_t kWriteLowBytes = 8u << 20;

struct Server;

struct Conn {
  uv_pipe_t pipe;
  uv_shutdown_t shutdown;
  Server* server = nullptr;
  std::unique_ptr<Connection> conn;
  bool closing = false;    // uv_close called
  bool shutting = false;   // uv_shutdown called
  bool paused = false;     // reading stopped for backpressure
  char buf[kReadBufferBytes];
};

struct WriteReq {
  uv_write_t req;
  std::vector<uint8_t> data;
  Conn* conn;
};

struct Server {
  const Config& config;
  Logger& log;
  uv_loop_t loop;
  uv_pipe_t listener;
  uv_signal_t sigterm, sigint;
  uv_timer_t drain_timer;
  uv_timer_t expiry_timer;  // ends detached sessions whose grace period is over
  std::unique_ptr<Executor> executor;
  std::unique_ptr<Daemon> daemon;
  std::set<Conn*> conns;
  bool draining = false;
  bool listening = false;
  bool stopped = false;
};

void MaybeStop(Server* s);

void OnClosed(uv_handle_t* h) {
  Conn* c = static_cast<Conn*>(h->data);
  Server* s = c->server;
  s->conns.erase(c);
  delete c;  // ends the session: its tensors are freed
  MaybeStop(s);
}

void CloseConn(Conn* c) {
  if (c->closing) return;
  c->closing = true;
  if (c->conn) c->conn->Finish();
  uv_close(reinterpret_cast<uv_handle_t*>(&c->pipe), OnClosed);
}

void OnShutdown(uv_shutdown_t* req, int) { CloseConn(static_cast<Conn*>(req->data)); }

// Closes once the pending replies are written.
void ShutdownConn(Conn* c) {
  if (c->closing || c->shutting) return;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->pipe));
  c->shutting = true;
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, reinterpret_cast<uv_stream_t*>(&c->pipe), OnShutdown) != 0)
    CloseConn(c);
}

void OnAlloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
  Conn* c = static_cast<Conn*>(h->data);
  *buf = uv_buf_init(c->buf, sizeof c->buf);
}

void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);

void OnWrite(uv_write_t* req, int status) {
  WriteReq* w = static_cast<WriteReq*>(req->data);
  Conn* c = w->conn;
  delete w;
  if (status != 0) {
    CloseConn(c);
    return;
  }
  auto* stream = reinterpret_cast<uv_stream_t*>(&c->pipe);
  if (c->paused && !c->closing && !c->shutting &&
      uv_stream_get_write_queue_size(stream) < kWriteLowBytes) {
    c->paused = false;
    uv_read_start(stream, OnAlloc, OnRead);
  }
}

void Flush(Conn* c) {
  std::vector<uint8_t> out = c->conn->TakeOutput();
  if (out.empty() || c->closing) return;
  auto* w = new WriteReq{{}, std::move(out), c};
  w->req.data = w;
  uv_buf_t b = uv_buf_init(reinterpret_cast<char*>(w->data.data()), unsigned(w->data.size()));
  auto* stream = reinterpret_cast<uv_stream_t*>(&c->pipe);
  if (uv_write(&w->req, stream, &b, 1, OnWrite) != 0) {
    delete w;
    CloseConn(c);
    return;
  }
  if (!c->paused && uv_stream_get_write_queue_size(stream) > kWriteHighBytes) {
    c->paused = true;
    uv_read_stop(stream);
  }
}

void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  Conn* c = static_cast<Conn*>(stream->data);
  if (nread > 0) {
    c->conn->Feed(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf->base),
                                           size_t(nread)));
    Flush(c);
    if (c->conn->closing() || c->server->draining) ShutdownConn(c);
    return;
  }
  if (nread < 0) {  // UV_EOF or an error: the client is gone
    if (uv_stream_get_write_queue_size(stream) > 0 && nread == UV_EOF)
      ShutdownConn(c);
    else
      CloseConn(c);
  }
}

void Refuse(Server* s, Conn* c, dx_status_t code, const std::string& message) {
  ++s->daemon->stats().connections_refused;
  s->log.Log(LogLevel::kWarn, "connection refused: " + message, 0, 0,
             {{"refused_total", std::to_string(s->daemon->stats().connections_refused)}});
  // One error reply, so the client can say why; nothing of the peer is read.
  std::vector<uint8_t> out;
  if (wire::EncodeReply(out, wire::reply::Error(0, code, message), {}, s->config.limits).ok()) {
    uv_buf_t b = uv_buf_init(reinterpret_cast<char*>(out.data()), unsigned(out.size()));
    (void)uv_try_write(reinterpret_cast<uv_stream_t*>(&c->pipe), &b, 1);
  }
  CloseConn(c);
}

void OnConnection(uv_stream_t* listener, int status) {
  Server* s = static_cast<Server*>(listener->data);
  if (status != 0) {
    s->log.Log(LogLevel::kWarn, std::string("accept failed: ") + uv_strerror(status));
    return;
  }
  auto* c = new Conn;
  c->server = s;
  uv_pipe_init(&s->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(&c->pipe)) != 0) {
    CloseConn(c);
    return;
  }
  uv_os_fd_t fd = -1;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&c->pipe), &fd) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) {
    Refuse(s, c, DX_PERMISSION_DENIED, "the peer's credentials (SO_PEERCRED) are unknown");
    return;
  }
  const auto& allowed = s->config.allowed_uids;
  if (std::find(allowed.begin(), allowed.end(), uint32_t(cred.uid)) == allowed.end()) {
    Refuse(s, c, DX_PERMISSION_DENIED,
           "uid " + std::to_string(cred.uid) +
               " is not allowed to connect to this daemon (server.allowed_uids)");
    return;
  }
  if (s->conns.size() >= s->config.max_connections) {
    Refuse(s, c, DX_RESOURCE_EXHAUSTED,
           "the daemon has " + std::to_string(s->conns.size()) +
               " connections open, its limit (server.max_connections)");
    return;
  }
  c->conn = s->daemon->Open("uid=" + std::to_string(cred.uid) + " pid=" + std::to_string(cred.pid),
                            uint32_t(cred.uid));
  s->conns.insert(c);
  uv_read_start(reinterpret_cast<uv_stream_t*>(&c->pipe), OnAlloc, OnRead);
}

void MaybeStop(Server* s) {
  if (!s->draining || !s->conns.empty() || s->stopped) return;
  s->stopped = true;
  uv_timer_stop(&s->drain_timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->drain_timer), nullptr);
  uv_timer_stop(&s->expiry_timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->expiry_timer), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->sigterm), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->sigint), nullptr);
}

void OnDrainTimeout(uv_timer_t* t) {
  Server* s = static_cast<Server*>(t->data);
  s->log.Log(LogLevel::kWarn, "drain grace period over: closing " +
                                  std::to_string(s->conns.size()) + " connections");
  std::vector<Conn*> all(s->conns.begin(), s->conns.end());
  for (Conn* c : all) CloseConn(c);
}

void OnSignal(uv_signal_t* h, int signum) {
  Server* s = static_cast<Server*>(h->data);
  if (s->draining) {
    s->log.Log(LogLevel::kWarn, "second signal: closing every connection now");
    OnDrainTimeout(&s->drain_timer);
    return;
  }
  s->draining = true;
  s->log.Log(LogLevel::kInfo, std::string("draining on ") + strsignal(signum),
             0, 0, {{"connections", std::to_string(s->conns.size())}});
  if (s->listening) {
    uv_close(reinterpret_cast<uv_handle_t*>(&s->listener), nullptr);
    ::unlink(s->config.socket_path.c_str());
    s->listening = false;
  }
  // Requests run as they arrive, so nothing is queued: flush what is being written, close.
  std::vector<Conn*> all(s->conns.begin(), s->conns.end());
  for (Conn* c : all) ShutdownConn(c);
  uv_timer_start(&s->drain_timer, OnDrainTimeout, uint64_t(s->config.drain_seconds * 1000), 0);
  MaybeStop(s);
}

// Removes a stale socket file left by a daemon that died; refuses to touch a live one or
// anything that is not a socket.
bool PrepareSocketPath(const std::string& path, std::string& error) {
  struct stat st{};
  // libuv reports a missing directory as "permission denied": say what is wrong instead.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (dir.empty()) dir = "/";
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error = path + ": the directory " + dir + " does not exist";
    return false;
  }
  if (::lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    error = path + " exists and is not a socket; refusing to replace it";
    return false;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::close(fd);
  if (rc == 0) {
    error = path + ": another daemon is listening there";
    return false;
  }
  if (err != ECONNREFUSED) {
    error = path + ": cannot check the existing socket: " + std::strerror(err);
    return false;
  }
  ::unlink(path.c_str());
  return true;
}

}  // namespace

int RunServer(const Config& config, Logger& log) {
  Server s{config, log, {}, {}, {}, {}, {}, {}, nullptr, nullptr, {}, false, false, false};
  wire::Status st;
  s.executor = Executor::Create(config.plugins, config.require_certified, log, st);
  if (!s.executor) {
    log.Log(LogLevel::kError, "cannot start: " + st.message,
            0, 0, {{"status", wire::StatusName(st.code)}});
    return 1;
  }
  s.daemon = std::make_unique<Daemon>(config, *s.executor, log);

  std::string error;
  if (!PrepareSocketPath(config.socket_path, error)) {
    log.Log(LogLevel::kError, "cannot start: " + error);
    return 1;
  }
  uv_loop_init(&s.loop);
  uv_pipe_init(&s.loop, &s.listener, 0);
  s.listener.data = &s;
  // The socket file is created with mode 0600 (no window where others could connect).
  mode_t old = ::umask(0177);
  int rc = uv_pipe_bind(&s.listener, config.socket_path.c_str());
  ::umask(old);
  struct stat sst{};
  if (rc == 0) ::chmod(config.socket_path.c_str(), 0600);
  if (rc == 0 && (::stat(config.socket_path.c_str(), &sst) != 0 || !S_ISSOCK(sst.st_mode) ||
                  (sst.st_mode & 0777) != 0600)) {
    error = config.socket_path + ": the socket's mode is not 0600";
    rc = UV_EPERM;
  } else if (rc != 0) {
    error = config.socket_path + ": " + uv_strerror(rc);
  }
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(&s.listener), 128, OnConnection);
    if (rc != 0) error = config.socket_path + ": listen: " + uv_strerror(rc);
  }
  if (rc != 0) {
    log.Log(LogLevel::kError, "cannot start: " + error);
    uv_close(reinterpret_cast<uv_handle_t*>(&s.listener), nullptr);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    return 1;
  }
  s.listening = true;
  uv_signal_init(&s.loop, &s.sigterm);
  uv_signal_init(&s.loop, &s.sigint);
  uv_timer_init(&s.loop, &s.drain_timer);
  uv_timer_init(&s.loop, &s.expiry_timer);
  s.sigterm.data = s.sigint.data = s.drain_timer.data = s.expiry_timer.data = &s;
  uv_timer_start(
      &s.expiry_timer, [](uv_timer_t* t) { static_cast<Server*>(t->data)->daemon->ExpireDetached(); },
      1000, 1000);
  uv_signal_start(&s.sigterm, OnSignal, SIGTERM);
  uv_signal_start(&s.sigint, OnSignal, SIGINT);

  log.Log(LogLevel::kInfo, "ready", 0, 0,
          {{"socket", config.socket_path},
           {"plugins", std::to_string(s.executor->plugins().size())},
           {"devices", std::to_string(s.executor->devices().size())},
           {"protocol", std::to_string(wire::kProtocolMajor) + "." +
                            std::to_string(wire::kProtocolMinor)}});
  std::printf("deepxd: ready on %s\n", config.socket_path.c_str());
  std::fflush(stdout);

  uv_run(&s.loop, UV_RUN_DEFAULT);
  uv_loop_close(&s.loop);
  const DaemonStats& ds = s.daemon->stats();
  log.Log(LogLevel::kInfo, "stopped", 0, 0,
          {{"sessions", std::to_string(ds.sessions_opened)},
           {"tasks_completed", std::to_string(ds.tasks_completed)},
           {"tasks_failed", std::to_string(ds.tasks_failed)},
           {"protocol_errors", std::to_string(ds.protocol_errors)},
           {"connections_refused", std::to_string(ds.connections_refused)}});
  return 0;
}

}  // namespace deepx::daemon
