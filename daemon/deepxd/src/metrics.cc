// deepxd's metrics in the Prometheus text exposition format 0.0.4 (metrics.h).
#include "deepx/daemon/metrics.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace deepx::daemon {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A label value: backslash, double quote and line feed escaped, as the format requires.
std::string Esc(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The shortest decimal form that reads back as |v| ("0.00025", not "0.00025000000000000001").
std::string Num(double v) {
  char b[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(b, sizeof b, "%.*g", precision, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

void Head(std::string& o, const char* name, const char* type, const char* help) {
  o += "# HELP ";
  o += name;
  o += ' ';
  o += help;
  o += "\n# TYPE ";
  o += name;
  o += ' ';
  o += type;
  o += '\n';
}

void Line(std::string& o, const std::string& name_and_labels, const std::string& value) {
  o += name_and_labels;
  o += ' ';
  o += value;
  o += '\n';
}

}  // namespace

void Metrics::TaskDone(std::string_view request, std::string_view op, std::string_view status,
                       double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++tasks_[{std::string(request), std::string(op), std::string(status)}];
  Histogram& h = latency_[std::string(request)];
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    if (seconds <= kLatencyBuckets[i]) {
      ++h.buckets[i];
      break;
    }
  }
  ++h.count;
  h.sum += seconds;
}

void Metrics::ProtocolError(std::string_view status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++protocol_errors_[std::string(status)];
}

void Metrics::TensorBytes(const std::string& device, const std::string& kind, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  tensor_bytes_[{device, kind}] += delta;
}

void Metrics::SessionOpened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++sessions_opened_;
  ++sessions_open_;
}

void Metrics::SessionClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  --sessions_open_;
}

void Metrics::ConnectionOpened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++connections_opened_;
  ++connections_open_;
}

void Metrics::ConnectionClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  --connections_open_;
}

void Metrics::ConnectionRefused(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_[std::string(reason)];
}

void Metrics::Reloaded(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(ok ? reloads_ok_ : reloads_failed_);
}

void Metrics::SetBuildInfo(std::string version, std::string protocol) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = std::move(version);
  protocol_ = std::move(protocol);
}

void Metrics::Heartbeat() { heartbeat_ms_.store(NowMs()); }

int64_t Metrics::SinceHeartbeatMs() const {
  int64_t last = heartbeat_ms_.load();
  return last == 0 ? INT64_MAX : NowMs() - last;
}

std::string Metrics::Render() const {
  std::string o;
  o.reserve(8192);
  std::lock_guard<std::mutex> lock(mu_);

  Head(o, "deepxd_build_info", "gauge",
       "Always 1; the labels say which deepxd and which wire protocol version serve.");
  Line(o, "deepxd_build_info{version=\"" + Esc(version_) + "\",protocol=\"" + Esc(protocol_) +
              "\"}",
       "1");

  Head(o, "deepxd_tasks_total", "counter",
       "Requests answered, by request type, op (Invoke only) and reply status.");
  for (const auto& [k, v] : tasks_) {
    const auto& [request, op, status] = k;
    Line(o, "deepxd_tasks_total{request=\"" + Esc(request) + "\",op=\"" + Esc(op) +
                "\",status=\"" + Esc(status) + "\"}",
         std::to_string(v));
  }

  Head(o, "deepxd_task_duration_seconds", "histogram",
       "Time from the start of a request's execution to its reply, by request type.");
  for (const auto& [request, h] : latency_) {
    const std::string r = "request=\"" + Esc(request) + "\"";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cumulative += h.buckets[i];
      Line(o, "deepxd_task_duration_seconds_bucket{" + r + ",le=\"" + Num(kLatencyBuckets[i]) +
                  "\"}",
           std::to_string(cumulative));
    }
    Line(o, "deepxd_task_duration_seconds_bucket{" + r + ",le=\"+Inf\"}", std::to_string(h.count));
    Line(o, "deepxd_task_duration_seconds_sum{" + r + "}", Num(h.sum));
    Line(o, "deepxd_task_duration_seconds_count{" + r + "}", std::to_string(h.count));
  }

  Head(o, "deepxd_received_bytes_total", "counter", "Bytes read from client connections.");
  Line(o, "deepxd_received_bytes_total", std::to_string(bytes_in_.load()));
  Head(o, "deepxd_sent_bytes_total", "counter", "Bytes written to client connections.");
  Line(o, "deepxd_sent_bytes_total", std::to_string(bytes_out_.load()));

  Head(o, "deepxd_tensor_bytes", "gauge",
       "Bytes of the tensors the sessions hold, by device and its memory kind (views and "
       "opened names count 0).");
  for (const auto& [k, v] : tensor_bytes_)
    Line(o, "deepxd_tensor_bytes{device=\"" + Esc(k.first) + "\",kind=\"" + Esc(k.second) + "\"}",
         std::to_string(v));

  Head(o, "deepxd_sessions", "gauge",
       "Sessions alive (connected, or detached and waiting for a resume).");
  Line(o, "deepxd_sessions", std::to_string(sessions_open_));
  Head(o, "deepxd_sessions_opened_total", "counter", "Sessions opened since the start.");
  Line(o, "deepxd_sessions_opened_total", std::to_string(sessions_opened_));
  Head(o, "deepxd_connections", "gauge", "Client connections open.");
  Line(o, "deepxd_connections", std::to_string(connections_open_));
  Head(o, "deepxd_connections_accepted_total", "counter",
       "Client connections accepted (past the uid allow-list and server.max_connections).");
  Line(o, "deepxd_connections_accepted_total", std::to_string(connections_opened_));

  Head(o, "deepxd_connections_refused_total", "counter",
       "Connections refused before a byte was read, by reason (uid, credentials, "
       "max_connections).");
  for (const char* reason : {"uid", "credentials", "max_connections"}) {
    auto it = refused_.find(reason);
    Line(o, std::string("deepxd_connections_refused_total{reason=\"") + reason + "\"}",
         std::to_string(it == refused_.end() ? 0 : it->second));
  }

  Head(o, "deepxd_protocol_errors_total", "counter",
       "Frames or messages refused by the wire layer, by the status of the error reply.");
  for (const auto& [k, v] : protocol_errors_)
    Line(o, "deepxd_protocol_errors_total{status=\"" + Esc(k) + "\"}", std::to_string(v));

  Head(o, "deepxd_worker_restarts_total", "counter",
       "Executor worker processes restarted. Always 0 in this version: plugins run inside "
       "deepxd's process, there are no workers yet.");
  Line(o, "deepxd_worker_restarts_total", "0");

  Head(o, "deepxd_config_reloads_total", "counter",
       "Configuration reloads on SIGHUP, by result (ok; failed: the old configuration kept).");
  Line(o, "deepxd_config_reloads_total{result=\"ok\"}", std::to_string(reloads_ok_));
  Line(o, "deepxd_config_reloads_total{result=\"failed\"}", std::to_string(reloads_failed_));

  Head(o, "deepxd_ready", "gauge", "1 while plugins are loaded and the socket accepts; 0 "
                                   "while starting or draining.");
  Line(o, "deepxd_ready", ready_.load() && !draining_.load() ? "1" : "0");
  return o;
}

}  // namespace deepx::daemon
