// JSON-lines logging (log.h).
#include "deepx/daemon/log.h"

#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

namespace deepx::daemon {
namespace {
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "info";
}
}  // namespace

void Logger::Log(LogLevel level, std::string_view message, uint64_t session, uint64_t task,
                 const Fields& fields) {
  if (!enabled(level)) return;
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[96];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
  nlohmann::json j;
  j["ts"] = ts;
  j["level"] = LevelName(level);
  j["msg"] = std::string(message);
  if (session) j["session"] = session;
  if (task) j["task"] = task;
  for (const auto& [k, v] : fields) j[k] = v;
  // Invalid UTF-8 (a client name, a plugin message) is replaced, never thrown on.
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace deepx::daemon
