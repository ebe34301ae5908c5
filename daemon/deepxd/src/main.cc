// deepxd: the deepx daemon. Usage: deepxd [--config FILE] [--socket PATH] [--plugin PATH]...
// [--allow-uid UID]... [--log-level LEVEL] [--metrics-listen HOST:PORT]; deepxd --check-config
// FILE. docs/operations.md.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "deepx/daemon/config.h"
#include "deepx/daemon/log.h"
#include "deepx/daemon/server.h"

using namespace deepx::daemon;

int main(int argc, char** argv) {
  CLI::App app{
      "deepxd: the deepx daemon. Serves the plugins of its configuration to clients on a unix "
      "socket (docs/operations.md, docs/protocol.md).",
      "deepxd"};
  app.footer("Exit status: 0 after a drain (SIGTERM, SIGINT) or a valid --check-config; 1 for "
             "a configuration or start-up error; 2 for a usage error.");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string config_file, check_file, socket, log_level, metrics_listen;
  std::vector<std::string> plugins;
  std::vector<uint32_t> uids;
  app.add_option("--config", config_file, "the TOML configuration file")->type_name("FILE");
  app.add_option("--check-config", check_file,
                 "validate FILE (with the other options applied) and exit 0 or 1")
      ->type_name("FILE");
  app.add_option("--socket", socket, "the unix socket's path (overrides server.socket)")
      ->type_name("PATH");
  app.add_option("--plugin", plugins,
                 "a plugin to load; repeatable; replaces plugins.paths")
      ->type_name("PATH")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--allow-uid", uids,
                 "a uid allowed to connect; repeatable; replaces server.allowed_uids")
      ->type_name("UID")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--log-level", log_level, "error, warn, info or debug (overrides log.level)")
      ->type_name("LEVEL");
  app.add_option("--metrics-listen", metrics_listen,
                 "the loopback HOST:PORT of /metrics, /healthz, /readyz (overrides "
                 "metrics.listen)")
      ->type_name("HOST:PORT");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  // The file, then the command line's overrides, then the checks: at start and on SIGHUP.
  const std::string& file = !check_file.empty() ? check_file : config_file;
  auto build = [&](Config& config, std::string& error) {
    config = Config{};
    if (!file.empty() && !LoadConfigFile(file, config, error)) return false;
    if (!socket.empty()) config.socket_path = socket;
    if (!plugins.empty()) config.plugins = plugins;
    if (!uids.empty()) config.allowed_uids = uids;
    if (!metrics_listen.empty()) config.metrics_listen = metrics_listen;
    if (!log_level.empty()) ParseLogLevel(log_level, config.log_level);
    if (!ValidateConfig(config, error)) {
      if (!file.empty()) error = file + ": " + error;
      return false;
    }
    return true;
  };
  LogLevel unused;
  if (!log_level.empty() && !ParseLogLevel(log_level, unused)) {
    std::fprintf(stderr, "deepxd: error: --log-level: '%s' is not one of error, warn, info, debug\n",
                 log_level.c_str());
    return 2;
  }
  Config config;
  std::string error;
  if (!build(config, error)) {
    std::fprintf(stderr, "deepxd: error: %s\n", error.c_str());
    return 1;
  }
  if (!check_file.empty()) {
    std::printf("deepxd: %s: configuration OK\n", check_file.c_str());
    return 0;
  }
  if (config.allowed_uids.empty()) config.allowed_uids.push_back(uint32_t(::getuid()));

  // A client that vanishes mid-write must not kill the daemon: EPIPE is handled as an error.
  std::signal(SIGPIPE, SIG_IGN);
  Logger log(config.log_level);
  ReloadFn reload;
  if (!config_file.empty()) reload = build;
  return RunServer(config, log, reload);
}
