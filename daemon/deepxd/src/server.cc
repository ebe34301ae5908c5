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

#include <systemd/sd-daemon.h>
#include <uv.h>

#include "deepx/daemon/handler.h"
#include "deepx/daemon/http.h"

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
  std::vector<Connection::OutPiece> pieces;  // kept alive until the write is done
  Conn* conn;
};

// Reads into the message's bulk buffer in place when at least this much of a bulk frame is
// still to come; smaller remainders go through Conn::buf with what follows them.
constexpr size_t kInPlaceMinBytes = 16 * 1024;

struct Server {
  Config config;  // the running configuration; a SIGHUP reload replaces its reloadable keys
  Logger& log;
  ReloadFn reload;
  uv_loop_t loop;
  uv_pipe_t listener;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t drain_timer;
  uv_timer_t expiry_timer;  // ends detached sessions whose grace period is over
  std::unique_ptr<Executor> executor;
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<HttpEndpoint> http;
  std::set<Conn*> conns;
  bool draining = false;
  bool listening = false;
  bool stopped = false;
};

void MaybeStop(Server* s);

void OnClosed(uv_handle_t* h) {
  Conn* c = static_cast<Conn*>(h->data);
  Server* s = c->server;
  if (s->conns.erase(c)) s->daemon->metrics().ConnectionClosed();
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
  std::span<uint8_t> w = c->conn ? c->conn->BulkWindow() : std::span<uint8_t>();
  if (w.size() >= kInPlaceMinBytes) {
    // The rest of a TensorWrite's bulk frame: straight into its buffer (at most to the end of
    // the frame, so every byte read belongs there).
    *buf = uv_buf_init(reinterpret_cast<char*>(w.data()),
                       unsigned(std::min<size_t>(w.size(), 1u << 30)));
    return;
  }
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
  std::vector<Connection::OutPiece> out = c->conn->TakeOutputPieces();
  if (out.empty() || c->closing) return;
  std::vector<uv_buf_t> bufs;
  bufs.reserve(out.size());
  uint64_t bytes = 0;
  for (const Connection::OutPiece& p : out) {
    bufs.push_back(uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(p.data)),
                               unsigned(p.size)));
    bytes += p.size;
  }
  c->server->daemon->metrics().BytesOut(bytes);
  auto* w = new WriteReq{{}, std::move(out), c};
  w->req.data = w;
  auto* stream = reinterpret_cast<uv_stream_t*>(&c->pipe);
  // libuv copies the buffer list (not the bytes) when the write cannot finish at once.
  if (uv_write(&w->req, stream, bufs.data(), unsigned(bufs.size()), OnWrite) != 0) {
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
    c->server->daemon->metrics().BytesIn(uint64_t(nread));
    if (buf->base != c->buf)
      c->conn->CommitBulk(size_t(nread));  // read in place (OnAlloc)
    else
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

void Refuse(Server* s, Conn* c, const char* reason, dx_status_t code,
            const std::string& message) {
  ++s->daemon->stats().connections_refused;
  s->daemon->metrics().ConnectionRefused(reason);
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
    Refuse(s, c, "credentials", DX_PERMISSION_DENIED, "the peer's credentials (SO_PEERCRED) are unknown");
    return;
  }
  const auto& allowed = s->config.allowed_uids;
  if (std::find(allowed.begin(), allowed.end(), uint32_t(cred.uid)) == allowed.end()) {
    Refuse(s, c, "uid", DX_PERMISSION_DENIED,
           "uid " + std::to_string(cred.uid) +
               " is not allowed to connect to this daemon (server.allowed_uids)");
    return;
  }
  if (s->conns.size() >= s->config.max_connections) {
    Refuse(s, c, "max_connections", DX_RESOURCE_EXHAUSTED,
           "the daemon has " + std::to_string(s->conns.size()) +
               " connections open, its limit (server.max_connections)");
    return;
  }
  c->conn = s->daemon->Open("uid=" + std::to_string(cred.uid) + " pid=" + std::to_string(cred.pid),
                            uint32_t(cred.uid));
  s->conns.insert(c);
  s->daemon->metrics().ConnectionOpened();
  uv_read_start(reinterpret_cast<uv_stream_t*>(&c->pipe), OnAlloc, OnRead);
}

void MaybeStop(Server* s) {
  if (!s->draining || !s->conns.empty() || s->stopped) return;
  s->stopped = true;
  uv_timer_stop(&s->drain_timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->drain_timer), nullptr);
  uv_timer_stop(&s->expiry_timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&s->expiry_timer), nullptr);
  // The signal handles stay open (unreferenced, so the loop ends): closing the last one would
  // restore the default action, and a late SIGTERM would kill the process during its exit.
  uv_unref(reinterpret_cast<uv_handle_t*>(&s->sigterm));
  uv_unref(reinterpret_cast<uv_handle_t*>(&s->sigint));
  uv_unref(reinterpret_cast<uv_handle_t*>(&s->sighup));
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
  s->daemon->metrics().SetDraining(true);
  s->log.Log(LogLevel::kInfo, std::string("draining on ") + strsignal(signum),
             0, 0, {{"connections", std::to_string(s->conns.size())}});
  sd_notifyf(0, "STOPPING=1\nSTATUS=draining %zu connections", s->conns.size());
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

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// SIGHUP: reads the configuration again and applies what can change while clients stay
// connected. A configuration that does not parse or validate is refused whole: the running one
// stays. Keys that need a restart keep their running value, with a warning naming them.
void OnReload(uv_signal_t* h, int) {
  Server* s = static_cast<Server*>(h->data);
  Metrics& m = s->daemon->metrics();
  if (s->draining) return;
  if (!s->reload) {
    s->log.Log(LogLevel::kWarn, "SIGHUP ignored: deepxd was started without --config, there is "
                                "no file to read again");
    return;
  }
  sd_notify(0, "RELOADING=1\nSTATUS=reloading the configuration");
  Config next;
  std::string error;
  if (!s->reload(next, error)) {
    m.Reloaded(false);
    s->log.Log(LogLevel::kError, "reload refused, the running configuration is kept: " + error);
    sd_notify(0, "READY=1\nSTATUS=reload refused, the running configuration is kept");
    return;
  }
  if (next.allowed_uids.empty()) next.allowed_uids.push_back(uint32_t(::getuid()));
  Config& cur = s->config;
  std::vector<std::string> restart;  // changed keys that take effect only after a restart
  if (next.socket_path != cur.socket_path) restart.push_back("server.socket");
  if (next.metrics_listen != cur.metrics_listen) restart.push_back("metrics.listen");
  if (next.require_certified != cur.require_certified)
    restart.push_back("plugins.require_certified");
  const wire::Limits &a = next.limits, &b = cur.limits;
  if (a.max_header_bytes != b.max_header_bytes || a.max_bulk_frame_bytes != b.max_bulk_frame_bytes ||
      a.max_bulk_bytes != b.max_bulk_bytes || a.max_depth != b.max_depth ||
      a.max_tables != b.max_tables || a.max_string_bytes != b.max_string_bytes ||
      a.max_rank != b.max_rank || a.max_tensors_per_op != b.max_tensors_per_op ||
      a.max_attrs != b.max_attrs || a.max_attr_elements != b.max_attr_elements ||
      a.max_program_ops != b.max_program_ops || a.max_list_entries != b.max_list_entries)
    restart.push_back("limits");
  // Plugins: a newly listed one is loaded; a removed one stays loaded until a restart (its
  // tensors and the handles to them stay valid).
  std::vector<std::string> added, removed, failed;
  for (const std::string& p : next.plugins)
    if (std::find(cur.plugins.begin(), cur.plugins.end(), p) == cur.plugins.end()) added.push_back(p);
  for (const std::string& p : cur.plugins)
    if (std::find(next.plugins.begin(), next.plugins.end(), p) == next.plugins.end())
      removed.push_back(p);
  for (const std::string& p : added) {
    wire::Status st = s->executor->LoadPlugin(p);
    if (st.ok()) {
      cur.plugins.push_back(p);
      s->log.Log(LogLevel::kInfo, "plugin loaded on reload", 0, 0, {{"plugin", p}});
    } else {
      failed.push_back(p);
      s->log.Log(LogLevel::kError, "reload: " + st.message, 0, 0,
                 {{"plugin", p}, {"status", wire::StatusName(st.code)}});
    }
  }
  if (!removed.empty())
    s->log.Log(LogLevel::kWarn,
               "reload: plugins no longer listed stay loaded until deepxd restarts (sessions may "
               "hold their tensors)",
               0, 0, {{"plugins", Join(removed)}});
  if (!restart.empty())
    s->log.Log(LogLevel::kWarn, "reload: these keys changed but take effect only after a restart; "
                                "the running values are kept",
               0, 0, {{"keys", Join(restart)}});
  cur.allowed_uids = next.allowed_uids;
  cur.drain_seconds = next.drain_seconds;
  cur.resume_seconds = next.resume_seconds;
  cur.max_connections = next.max_connections;
  cur.quotas = next.quotas;
  cur.log_level = next.log_level;
  m.Reloaded(failed.empty());
  // Written before the new log level applies, so that a reload to "warn" is still recorded.
  s->log.Log(LogLevel::kInfo, "configuration reloaded", 0, 0,
             {{"plugins", std::to_string(s->executor->plugins().size())},
              {"allowed_uids", std::to_string(cur.allowed_uids.size())},
              {"max_tensor_bytes", std::to_string(cur.quotas.max_tensor_bytes)},
              {"max_tensors", std::to_string(cur.quotas.max_tensors)},
              {"max_inflight", std::to_string(cur.quotas.max_inflight)}});
  s->daemon->Reconfigure(cur);
  sd_notify(0, "READY=1\nSTATUS=configuration reloaded");
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

int RunServer(const Config& config, Logger& log, ReloadFn reload) {
  // Never freed: its loop keeps the signal handles open to the end (MaybeStop); the static
  // pointer keeps it reachable for leak checkers.
  static Server* server = nullptr;
  server = new Server{config, log, std::move(reload), {}, {}, {}, {}, {}, {}, {},
                      nullptr, nullptr, nullptr, {}, false, false, false};
  Server& s = *server;
  wire::Status st;
  s.executor = Executor::Create(config.plugins, config.require_certified, log, st);
  if (!s.executor) {
    log.Log(LogLevel::kError, "cannot start: " + st.message,
            0, 0, {{"status", wire::StatusName(st.code)}});
    return 1;
  }
  s.daemon = std::make_unique<Daemon>(config, *s.executor, log);
  Metrics& metrics = s.daemon->metrics();
  metrics.SetBuildInfo(DEEPXD_VERSION, std::to_string(wire::kProtocolMajor) + "." +
                                           std::to_string(wire::kProtocolMinor));
  if (!config.metrics_listen.empty()) {
    LoopbackAddress address;
    std::string why;
    if (!ParseLoopbackAddress(config.metrics_listen, address, why) ||
        !(s.http = HttpEndpoint::Start(address, metrics, why))) {
      log.Log(LogLevel::kError, "cannot start: " + why);
      return 1;
    }
    std::string where = (address.ipv6 ? "[" + address.host + "]" : address.host) + ":" +
                        std::to_string(s.http->port());
    log.Log(LogLevel::kInfo, "metrics listening", 0, 0,
            {{"address", where}, {"paths", "/metrics /healthz /readyz"}});
    std::printf("deepxd: metrics on http://%s/metrics\n", where.c_str());
    std::fflush(stdout);
  }

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
  uv_signal_init(&s.loop, &s.sighup);
  uv_timer_init(&s.loop, &s.drain_timer);
  uv_timer_init(&s.loop, &s.expiry_timer);
  s.sigterm.data = s.sigint.data = s.sighup.data = s.drain_timer.data = s.expiry_timer.data = &s;
  // Every second: end the sessions not resumed in time, and beat for /healthz.
  uv_timer_start(
      &s.expiry_timer,
      [](uv_timer_t* t) {
        Daemon& d = *static_cast<Server*>(t->data)->daemon;
        d.ExpireDetached();
        d.metrics().Heartbeat();
      },
      1000, 1000);
  uv_signal_start(&s.sigterm, OnSignal, SIGTERM);
  uv_signal_start(&s.sigint, OnSignal, SIGINT);
  uv_signal_start(&s.sighup, OnReload, SIGHUP);
  metrics.Heartbeat();
  metrics.SetReady(true);

  log.Log(LogLevel::kInfo, "ready", 0, 0,
          {{"socket", config.socket_path},
           {"plugins", std::to_string(s.executor->plugins().size())},
           {"devices", std::to_string(s.executor->devices().size())},
           {"protocol", std::to_string(wire::kProtocolMajor) + "." +
                            std::to_string(wire::kProtocolMinor)}});
  std::printf("deepxd: ready on %s\n", config.socket_path.c_str());
  std::fflush(stdout);
  // Under systemd's Type=notify: the socket accepts now (no-op without NOTIFY_SOCKET).
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s", config.socket_path.c_str());

  uv_run(&s.loop, UV_RUN_DEFAULT);
  s.http.reset();
  // The signal handles are left open, so the loop is not closed: the process exits next, and
  // any thread (the plugins' too) that takes a late signal runs libuv's handler, which only
  // records it.
  const DaemonStats& ds = s.daemon->stats();
  log.Log(LogLevel::kInfo, "stopped", 0, 0,
          {{"sessions", std::to_string(ds.sessions_opened)},
           {"tasks_completed", std::to_string(ds.tasks_completed)},
           {"tasks_failed", std::to_string(ds.tasks_failed)},
           {"protocol_errors", std::to_string(ds.protocol_errors)},
           {"connections_refused", std::to_string(ds.connections_refused)}});
  // Plugins, tensors and the runtime are released now, before the exit.
  s.daemon.reset();
  s.executor.reset();
  return 0;
}

}  // namespace deepx::daemon
