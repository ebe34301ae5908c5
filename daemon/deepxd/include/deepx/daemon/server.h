// deepx::daemon::RunServer: deepxd's event loop (libuv). Serves the handler (handler.h) on a
// unix socket: mode 0600, peers checked by SO_PEERCRED against Config::allowed_uids before any
// byte is read; SIGTERM / SIGINT drain (stop accepting, flush, close, remove the socket).
#pragma once

#include "deepx/daemon/config.h"
#include "deepx/daemon/log.h"

namespace deepx::daemon {

/// Loads the plugins, listens on config.socket_path and serves until SIGTERM or SIGINT.
/// |config| must have passed ValidateConfig and have a non-empty allowed_uids. Returns the
/// process exit status: 0 after a drain, 1 when the daemon could not start.
int RunServer(const Config& config, Logger& log);

}  // namespace deepx::daemon
