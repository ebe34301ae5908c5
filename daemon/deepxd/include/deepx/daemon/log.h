// deepx::daemon::Logger: JSON-lines log records on standard error, one object per line, with
// the time, level, message, and the session and task they are about when there is one.
#pragma once

#include <cstdint>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deepx/daemon/config.h"

namespace deepx::daemon {

/// A thread-safe JSON-lines logger. Records below its level are dropped.
class Logger {
 public:
  /// Logs to |out| (standard error in deepxd; the fuzz target passes null for silence).
  explicit Logger(LogLevel level, FILE* out = stderr) : level_(level), out_(out) {}
  /// Extra string fields of a record, e.g. {"socket", path}.
  using Fields = std::vector<std::pair<std::string, std::string>>;
  /// Writes one record. |session| / |task|: 0 leaves the field out.
  void Log(LogLevel level, std::string_view message, uint64_t session = 0, uint64_t task = 0,
           const Fields& fields = {});
  bool enabled(LogLevel level) const { return out_ && level <= level_.load(); }
  /// Changes the level (a SIGHUP reload); safe from any thread.
  void set_level(LogLevel level) { level_.store(level); }

 private:
  std::atomic<LogLevel> level_;
  FILE* out_;
  std::mutex mu_;
};

}  // namespace deepx::daemon
