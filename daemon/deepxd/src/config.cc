// deepxd's configuration (config.h): TOML through toml++, every key checked.
#include "deepx/daemon/config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include <toml++/toml.h>

namespace deepx::daemon {
namespace {

struct Ctx {
  std::string origin;
  std::string error;
  bool Fail(const std::string& key, const std::string& what) {
    if (error.empty()) error = origin + ": " + key + ": " + what;
    return false;
  }
};

template <typename T>
bool GetUint(Ctx& c, const std::string& key, const toml::node& n, T& out, uint64_t min = 0) {
  auto v = n.value<int64_t>();
  if (!n.is_integer() || !v) return c.Fail(key, "must be an integer");
  if (*v < 0 || uint64_t(*v) < min || uint64_t(*v) > uint64_t(std::numeric_limits<T>::max()))
    return c.Fail(key, "value " + std::to_string(*v) + " out of range (" + std::to_string(min) +
                           " to " + std::to_string(uint64_t(std::numeric_limits<T>::max())) + ")");
  out = T(*v);
  return true;
}

bool GetString(Ctx& c, const std::string& key, const toml::node& n, std::string& out) {
  if (!n.is_string()) return c.Fail(key, "must be a string");
  out = *n.value<std::string>();
  return true;
}

using Setter = std::function<bool(Ctx&, const std::string&, const toml::node&, Config&)>;

const std::map<std::string, std::map<std::string, Setter>>& Schema() {
  static const std::map<std::string, std::map<std::string, Setter>> schema = {
      {"server",
       {{"socket",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           return GetString(c, k, n, o.socket_path);
         }},
        {"allowed_uids",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           if (!n.is_array()) return c.Fail(k, "must be an array of uids");
           o.allowed_uids.clear();
           for (const toml::node& e : *n.as_array()) {
             uint32_t uid = 0;
             if (!GetUint(c, k, e, uid)) return false;
             o.allowed_uids.push_back(uid);
           }
           return true;
         }},
        {"drain_seconds",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           if (!n.is_number()) return c.Fail(k, "must be a number of seconds");
           double v = n.is_integer() ? double(*n.value<int64_t>()) : *n.value<double>();
           if (!(v >= 0 && v <= 3600)) return c.Fail(k, "must be 0 to 3600 seconds");
           o.drain_seconds = v;
           return true;
         }},
        {"resume_seconds",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           if (!n.is_number()) return c.Fail(k, "must be a number of seconds");
           double v = n.is_integer() ? double(*n.value<int64_t>()) : *n.value<double>();
           if (!(v >= 0 && v <= 86400)) return c.Fail(k, "must be 0 to 86400 seconds");
           o.resume_seconds = v;
           return true;
         }},
        {"max_connections",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           return GetUint(c, k, n, o.max_connections, 1);
         }}}},
      {"plugins",
       {{"paths",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           if (!n.is_array()) return c.Fail(k, "must be an array of plugin paths or names");
           o.plugins.clear();
           for (const toml::node& e : *n.as_array()) {
             std::string p;
             if (!GetString(c, k, e, p)) return false;
             if (p.empty()) return c.Fail(k, "an empty plugin path");
             o.plugins.push_back(p);
           }
           return true;
         }},
        {"require_certified",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           if (!n.is_boolean()) return c.Fail(k, "must be true or false");
           o.require_certified = *n.value<bool>();
           return true;
         }}}},
      {"limits",
       {
#define DEEPXD_LIMIT(field)                                                               \
  {#field, [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {             \
     return GetUint(c, k, n, o.limits.field, 1);                                          \
   }}
           DEEPXD_LIMIT(max_header_bytes), DEEPXD_LIMIT(max_bulk_frame_bytes),
           DEEPXD_LIMIT(max_bulk_bytes), DEEPXD_LIMIT(max_depth), DEEPXD_LIMIT(max_tables),
           DEEPXD_LIMIT(max_string_bytes), DEEPXD_LIMIT(max_rank),
           DEEPXD_LIMIT(max_tensors_per_op), DEEPXD_LIMIT(max_attrs),
           DEEPXD_LIMIT(max_attr_elements), DEEPXD_LIMIT(max_program_ops),
           DEEPXD_LIMIT(max_list_entries),
#undef DEEPXD_LIMIT
       }},
      {"quotas",
       {{"max_tensor_bytes",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           return GetUint(c, k, n, o.quotas.max_tensor_bytes);
         }},
        {"max_tensors",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           return GetUint(c, k, n, o.quotas.max_tensors);
         }},
        {"max_inflight",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           return GetUint(c, k, n, o.quotas.max_inflight, 1);
         }}}},
      {"metrics",
       {{"listen",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           std::string v, why;
           if (!GetString(c, k, n, v)) return false;
           LoopbackAddress a;
           if (!ParseLoopbackAddress(v, a, why)) return c.Fail(k, why);
           o.metrics_listen = v;
           return true;
         }}}},
      {"log",
       {{"level",
         [](Ctx& c, const std::string& k, const toml::node& n, Config& o) {
           std::string v;
           if (!GetString(c, k, n, v)) return false;
           if (!ParseLogLevel(v, o.log_level))
             return c.Fail(k, "'" + v + "' is not one of error, warn, info, debug");
           return true;
         }}}},
  };
  return schema;
}

}  // namespace

bool ParseLogLevel(const std::string& name, LogLevel& out) {
  if (name == "error") out = LogLevel::kError;
  else if (name == "warn") out = LogLevel::kWarn;
  else if (name == "info") out = LogLevel::kInfo;
  else if (name == "debug") out = LogLevel::kDebug;
  else return false;
  return true;
}

bool ParseLoopbackAddress(const std::string& text, LoopbackAddress& out, std::string& error) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    error = "'" + text + "' is not HOST:PORT (e.g. \"127.0.0.1:9464\")";
    return false;
  }
  std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535) {
    error = "'" + text + "': the port '" + port + "' is not a number from 0 to 65535";
    return false;
  }
  LoopbackAddress a;
  a.port = uint16_t(std::stoul(port));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    a.ipv6 = true;
  }
  if (host == "localhost") host = "127.0.0.1";
  const std::string refused =
      "'" + text + "' is not a loopback address; the metrics endpoint has no authentication "
      "and listens only on 127.0.0.0/8, [::1] or localhost";
  if (a.ipv6) {
    in6_addr addr{};
    if (inet_pton(AF_INET6, host.c_str(), &addr) != 1) {
      error = "'" + text + "': '" + host + "' is not an IPv6 address";
      return false;
    }
    if (!IN6_IS_ADDR_LOOPBACK(&addr)) {
      error = refused;
      return false;
    }
  } else {
    in_addr addr{};
    if (inet_pton(AF_INET, host.c_str(), &addr) != 1) {
      error = "'" + text + "': '" + host +
              "' is not an IPv4 address, [IPv6] address or localhost";
      return false;
    }
    if ((ntohl(addr.s_addr) >> 24) != 127) {
      error = refused;
      return false;
    }
  }
  a.host = host;
  out = a;
  return true;
}

bool ParseConfig(const std::string& text, const std::string& origin, Config& out,
                 std::string& error) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream m;
    m << origin << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description();
    error = m.str();
    return false;
  }
  Ctx c{origin, {}};
  Config cfg = out;
  for (const auto& [section_key, section] : root) {
    std::string section_name(section_key.str());
    auto it = Schema().find(section_name);
    if (it == Schema().end()) {
      c.Fail(section_name, "unknown key (known sections: server, plugins, limits, quotas, log, metrics)");
      break;
    }
    if (!section.is_table()) {
      c.Fail(section_name, "must be a table ([" + section_name + "])");
      break;
    }
    for (const auto& [key, value] : *section.as_table()) {
      std::string full = section_name + "." + std::string(key.str());
      auto s = it->second.find(std::string(key.str()));
      if (s == it->second.end()) {
        c.Fail(full, "unknown key");
        break;
      }
      if (!s->second(c, full, value, cfg)) break;
    }
    if (!c.error.empty()) break;
  }
  if (!c.error.empty()) {
    error = c.error;
    return false;
  }
  out = cfg;
  return true;
}

bool LoadConfigFile(const std::string& path, Config& out, std::string& error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = path + ": cannot be read";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseConfig(ss.str(), path, out, error);
}

bool ValidateConfig(const Config& config, std::string& error) {
  wire::Status s = config.limits.validate();
  if (!s.ok()) {
    error = "limits: " + s.message;
    return false;
  }
  sockaddr_un addr{};
  if (config.socket_path.empty() || config.socket_path.size() >= sizeof addr.sun_path) {
    error = "server.socket: the path must be 1 to " + std::to_string(sizeof addr.sun_path - 1) +
            " bytes long";
    return false;
  }
  if (!config.metrics_listen.empty()) {
    LoopbackAddress a;
    std::string why;
    if (!ParseLoopbackAddress(config.metrics_listen, a, why)) {
      error = "metrics.listen: " + why;
      return false;
    }
  }
  if (config.plugins.empty()) {
    error = "plugins.paths: no plugin is configured (deepxd serves only the plugins of its "
            "configuration)";
    return false;
  }
  for (const std::string& p : config.plugins) {
    if (p.find('/') == std::string::npos) continue;  // a name: the host looks it up
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      error = "plugins.paths: '" + p + "' is not a regular file";
      return false;
    }
  }
  return true;
}

}  // namespace deepx::daemon
