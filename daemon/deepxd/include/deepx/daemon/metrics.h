// deepx::daemon::Metrics: deepxd's counters, gauges and histograms, rendered in the Prometheus
// text exposition format 0.0.4 (docs/operations.md lists every metric), plus the health state
// that /healthz and /readyz report.
//
// Threading: the event loop records, the HTTP thread (http.h) renders. Every member function
// is safe from any thread: the tables are guarded by one mutex, the health state is atomic.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace deepx::daemon {

class Metrics {
 public:
  /// The upper bounds (seconds) of the task latency histogram's buckets (+Inf is implied).
  static constexpr std::array<double, 16> kLatencyBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   10.0};

  /// A task answered: |request| is the request type ("Invoke"), |op| the op of an Invoke
  /// (empty otherwise), |status| the reply's status name ("DX_OK"), |seconds| the time from
  /// the start of its execution to its reply.
  void TaskDone(std::string_view request, std::string_view op, std::string_view status,
                double seconds);
  /// A frame or message refused by the wire layer, by the status name of its error reply.
  void ProtocolError(std::string_view status);
  /// Bytes read from / written to client sockets.
  void BytesIn(uint64_t n) { bytes_in_.fetch_add(n, std::memory_order_relaxed); }
  void BytesOut(uint64_t n) { bytes_out_.fetch_add(n, std::memory_order_relaxed); }
  /// Tensor bytes allocated on |device| (of |kind|, e.g. "cpu") changed by |delta|.
  void TensorBytes(const std::string& device, const std::string& kind, int64_t delta);
  void SessionOpened();
  void SessionClosed();
  void ConnectionOpened();
  void ConnectionClosed();
  /// A connection refused before a byte was read; |reason|: "uid", "credentials",
  /// "max_connections".
  void ConnectionRefused(std::string_view reason);
  /// The configuration was reloaded (SIGHUP); |ok| false when the new one was refused.
  void Reloaded(bool ok);
  /// The version labels of deepxd_build_info.
  void SetBuildInfo(std::string version, std::string protocol);

  /// The whole exposition, in the text format 0.0.4.
  std::string Render() const;

  // ---- health (/healthz, /readyz) ----
  /// The event loop calls this from a timer: /healthz is 200 while the last beat is recent.
  void Heartbeat();
  /// Milliseconds since the last Heartbeat (a large value before the first).
  int64_t SinceHeartbeatMs() const;
  /// Plugins loaded and the socket accepting: /readyz is 200 while ready and not draining.
  void SetReady(bool ready) { ready_.store(ready); }
  void SetDraining(bool draining) { draining_.store(draining); }
  bool ready() const { return ready_.load(); }
  bool draining() const { return draining_.load(); }

 private:
  struct Histogram {
    std::array<uint64_t, kLatencyBuckets.size()> buckets{};  // not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> tasks_;
  std::map<std::string, Histogram> latency_;  // by request type
  std::map<std::string, uint64_t> protocol_errors_;
  std::map<std::string, uint64_t> refused_;
  std::map<std::pair<std::string, std::string>, int64_t> tensor_bytes_;
  uint64_t sessions_opened_ = 0;
  int64_t sessions_open_ = 0;
  uint64_t connections_opened_ = 0;
  int64_t connections_open_ = 0;
  uint64_t reloads_ok_ = 0;
  uint64_t reloads_failed_ = 0;
  std::string version_, protocol_;
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<int64_t> heartbeat_ms_{0};
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
};

}  // namespace deepx::daemon
