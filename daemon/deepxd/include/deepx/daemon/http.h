// deepx::daemon::HttpEndpoint: deepxd's HTTP endpoint on a loopback address (metrics.listen),
// served by libmicrohttpd (Debian's libmicrohttpd12) on its own thread:
//   GET /metrics  the Prometheus text exposition 0.0.4 of Metrics::Render()
//   GET /healthz  200 while the event loop beats (Metrics::Heartbeat within 5 s), else 503
//   GET /readyz   200 while plugins are loaded and the socket accepts, 503 while starting or
//                 draining
// Anything else is 404 (an unknown path) or 405 (a method other than GET or HEAD).
//
// Threading: the endpoint's thread reads only the Metrics (thread-safe); it never touches the
// event loop or the handler.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "deepx/daemon/config.h"
#include "deepx/daemon/metrics.h"

struct MHD_Daemon;

namespace deepx::daemon {

class HttpEndpoint {
 public:
  /// Listens on |address| (a loopback address: ParseLoopbackAddress) and serves |metrics|,
  /// which must outlive the endpoint. Null with |error| set when it cannot listen.
  static std::unique_ptr<HttpEndpoint> Start(const LoopbackAddress& address, Metrics& metrics,
                                             std::string& error);
  /// Stops the thread and closes the socket.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  /// The port it listens on (the one picked when the address asked for port 0).
  uint16_t port() const { return port_; }

 private:
  HttpEndpoint() = default;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace deepx::daemon
