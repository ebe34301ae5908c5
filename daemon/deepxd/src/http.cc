// deepxd's HTTP endpoint through libmicrohttpd (http.h).
#include "deepx/daemon/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>

#include <microhttpd.h>

namespace deepx::daemon {
namespace {

// /healthz fails when the event loop has not beaten for this long (it beats every second).
constexpr int64_t kStalledMs = 5000;

MHD_Result Send(MHD_Connection* connection, unsigned code, const std::string& body,
                const char* content_type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_Result ret = MHD_queue_response(connection, code, r);
  MHD_destroy_response(r);
  return ret;
}

MHD_Result Serve(void* cls, MHD_Connection* connection, const char* url, const char* method,
                 const char*, const char*, size_t* upload_size, void** state) {
  Metrics& m = *static_cast<Metrics*>(cls);
  // The first call for a request only announces its headers; answer on the second, after any
  // body (which is ignored: these endpoints take none).
  static int announced;
  if (*state == nullptr) {
    *state = &announced;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0;
    return MHD_YES;
  }
  const char* text = "text/plain; charset=utf-8";
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return Send(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                std::string("method ") + method + " is not served: use GET\n", text);
  const std::string path = url ? url : "";
  if (path == "/metrics")
    return Send(connection, MHD_HTTP_OK, m.Render(), "text/plain; version=0.0.4; charset=utf-8");
  if (path == "/healthz") {
    int64_t since = m.SinceHeartbeatMs();
    if (since <= kStalledMs) return Send(connection, MHD_HTTP_OK, "ok\n", text);
    return Send(connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                since == INT64_MAX ? std::string("the event loop has not started\n")
                                   : "the event loop has not run for " + std::to_string(since) +
                                         " ms\n",
                text);
  }
  if (path == "/readyz") {
    if (m.draining())
      return Send(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "draining\n", text);
    if (!m.ready())
      return Send(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "starting\n", text);
    return Send(connection, MHD_HTTP_OK, "ready\n", text);
  }
  return Send(connection, MHD_HTTP_NOT_FOUND,
              "not found: this endpoint serves /metrics, /healthz and /readyz\n", text);
}

}  // namespace

std::unique_ptr<HttpEndpoint> HttpEndpoint::Start(const LoopbackAddress& address,
                                                  Metrics& metrics, std::string& error) {
  sockaddr_storage ss{};
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
  if (address.ipv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(address.port);
    if (inet_pton(AF_INET6, address.host.c_str(), &a->sin6_addr) != 1) {
      error = "metrics.listen: '" + address.host + "' is not an IPv6 address";
      return nullptr;
    }
    flags |= MHD_USE_IPv6;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(address.port);
    if (inet_pton(AF_INET, address.host.c_str(), &a->sin_addr) != 1) {
      error = "metrics.listen: '" + address.host + "' is not an IPv4 address";
      return nullptr;
    }
  }
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  // The endpoint's thread inherits a mask blocking the signals the event loop handles, so
  // they are always delivered to the loop's thread (libuv), never to this one.
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, &old);
  e->daemon_ = MHD_start_daemon(
      flags, address.port, nullptr, nullptr, &Serve, &metrics, MHD_OPTION_SOCK_ADDR,
      reinterpret_cast<sockaddr*>(&ss), MHD_OPTION_CONNECTION_LIMIT, 32u,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, size_t(64 * 1024), MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!e->daemon_) {
    error = "metrics.listen: cannot listen on " +
            (address.ipv6 ? "[" + address.host + "]" : address.host) + ":" +
            std::to_string(address.port) + " (in use, or not permitted)";
    return nullptr;
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(e->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  e->port_ = info ? info->port : address.port;
  return e;
}

HttpEndpoint::~HttpEndpoint() {
  if (daemon_) MHD_stop_daemon(daemon_);
}

}  // namespace deepx::daemon
