// deepx::daemon::RunServer: deepxd's event loop (libuv). Serves the handler (handler.h) on a
// unix socket: mode 0600, peers checked by SO_PEERCRED against Config::allowed_uids before any
// byte is read; SIGTERM / SIGINT drain (stop accepting, flush, close, remove the socket);
// SIGHUP reloads the configuration; sd_notify for systemd's Type=notify.
#pragma once

#include <functional>
#include <string>

#include "deepx/daemon/config.h"
#include "deepx/daemon/log.h"

namespace deepx::daemon {

/// Reads the configuration again for a SIGHUP reload (the file, then the command line's
/// overrides, then ValidateConfig). False with |error| set when the new one is refused.
using ReloadFn = std::function<bool(Config& out, std::string& error)>;

/// Loads the plugins, listens on config.socket_path (and on config.metrics_listen, when set,
/// with the HTTP endpoint of http.h) and serves until SIGTERM or SIGINT; SIGHUP calls |reload|
/// and applies the keys that can change while clients stay connected (docs/operations.md).
/// Under systemd (NOTIFY_SOCKET set) it reports READY=1, RELOADING=1 and STOPPING=1.
/// |config| must have passed ValidateConfig and have a non-empty allowed_uids. Returns the
/// process exit status: 0 after a drain, 1 when the daemon could not start.
int RunServer(const Config& config, Logger& log, ReloadFn reload = {});

}  // namespace deepx::daemon
