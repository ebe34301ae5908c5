// deepx::daemon::Config: deepxd's configuration (a TOML file, docs/operations.md lists every
// key), with the command line's overrides applied on top. Parsing never throws: errors are
// values naming the file, the key and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <deepx/wire/wire.h>

namespace deepx::daemon {

/// Per-session caps; a request that would pass one is refused with DX_RESOURCE_EXHAUSTED.
struct Quotas {
  uint64_t max_tensor_bytes = 1ull << 30;  ///< bytes of tensors a session allocated (1 GiB)
  uint32_t max_tensors = 4096;             ///< live handles of a session (tensors, views, opens)
  uint32_t max_inflight = 256;             ///< requests of a session queued and not yet answered
};

/// Log levels of the JSON-lines log on standard error.
enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// Everything deepxd reads from its configuration file and command line.
struct Config {
  /// [server] socket: the unix socket's path (created mode 0600, removed at exit).
  std::string socket_path = "/run/deepx/deepxd.sock";
  /// [server] allowed_uids: peers (SO_PEERCRED) allowed to connect; empty: the daemon's own uid.
  std::vector<uint32_t> allowed_uids;
  /// [server] drain_seconds: how long SIGTERM / SIGINT wait for connections to flush.
  double drain_seconds = 5.0;
  /// [server] max_connections: connections open at once; more are refused.
  uint32_t max_connections = 256;
  /// [server] resume_seconds: how long a session outlives its connection, waiting for a Hello
  /// with its token (HelloReply.session_token); 0: a session ends with its connection.
  double resume_seconds = 30.0;
  /// [plugins] paths: plugins loaded at start (paths, or names looked up in the installed
  /// plugin directory). Never from the wire.
  std::vector<std::string> plugins;
  /// [plugins] require_certified: run only certified kernels (DX_RUNTIME_FLAG_REQUIRE_CERTIFIED).
  bool require_certified = false;
  /// [limits]: the wire protocol's caps (deepx::wire::Limits, docs/protocol.md).
  wire::Limits limits;
  /// [quotas]: per-session caps.
  Quotas quotas;
  /// [log] level: "error", "warn", "info" or "debug".
  LogLevel log_level = LogLevel::kInfo;
  /// [metrics] listen: "HOST:PORT" of the HTTP endpoint serving /metrics, /healthz and /readyz
  /// (loopback addresses only: 127.0.0.0/8, [::1], localhost; port 0 picks a free port);
  /// empty: no endpoint.
  std::string metrics_listen;
};

/// A loopback listening address parsed from "HOST:PORT" (metrics.listen).
struct LoopbackAddress {
  std::string host;  ///< the numeric address: "127.0.0.1", "::1"
  uint16_t port = 0;
  bool ipv6 = false;
};

/// Parses |text| as "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" and accepts it only when
/// the address is a loopback one. False with |error| saying why otherwise.
bool ParseLoopbackAddress(const std::string& text, LoopbackAddress& out, std::string& error);

/// Parses |text| (TOML) into |out| (which holds the defaults to start from). |origin| names the
/// source in messages. Returns false with |error| set on a syntax error, an unknown key (named),
/// a value of the wrong type or out of range.
bool ParseConfig(const std::string& text, const std::string& origin, Config& out,
                 std::string& error);

/// Reads and parses the file at |path| as ParseConfig does.
bool LoadConfigFile(const std::string& path, Config& out, std::string& error);

/// Checks the settings as a whole (after the command line's overrides): limits within their
/// hard caps, a socket path that fits sockaddr_un, plugin files that exist, at least one plugin.
bool ValidateConfig(const Config& config, std::string& error);

/// "error", "warn", "info", "debug" → LogLevel; false for anything else.
bool ParseLogLevel(const std::string& name, LogLevel& out);

}  // namespace deepx::daemon
