// deepxd's operations against real daemon processes (label `daemon`): the HTTP endpoint
// (/metrics, /healthz, /readyz) read over loopback with a raw-socket HTTP/1.0 GET, the metrics
// checked by Prometheus's own `promtool check metrics` when it is installed (Debian package
// `prometheus`), the systemd notification protocol played by the test (NOTIFY_SOCKET), and the
// SIGHUP reload.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <deepx/host.h>  // DX_DTYPE_* (constants only)
#include <gtest/gtest.h>

#include "client.h"
#include "process.h"

namespace {

using deepx::daemon::testing::Client;
using deepx::daemon::testing::DaemonProcess;
namespace wire = deepx::wire;

const std::string kDeepxd = DEEPXD_PATH;
const std::string kCpuPlugin = DEEPX_CPU_PLUGIN;

std::string Config(const std::string& extra = "") {
  return "[plugins]\npaths = [\"" + kCpuPlugin + "\"]\n[log]\nlevel = \"debug\"\n" + extra;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};

// One HTTP/1.0 request over a fresh loopback connection; the server closes after its reply.
HttpReply Http(uint16_t port, const std::string& method, const std::string& path) {
  HttpReply r;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  std::string req = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) {
    ::close(fd);
    return r;
  }
  std::string raw;
  char buf[65536];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return r;
  r.status = std::atoi(raw.c_str() + 9);
  size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

// The port deepxd printed on its standard output ("deepxd: metrics on http://127.0.0.1:P/...").
uint16_t MetricsPort(const DaemonProcess& d) {
  std::string out = ReadFile(d.dir() + "/stdout");
  const std::string key = "http://127.0.0.1:";
  size_t at = out.find(key);
  return at == std::string::npos ? 0 : uint16_t(std::atoi(out.c_str() + at + key.size()));
}

// The value of the sample |series| (name and labels exactly as rendered), or -1.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::atof(line.c_str() + series.size() + 1);
  return -1;
}

class Operations : public ::testing::Test {
 protected:
  void StartWith(const std::string& config) {
    ASSERT_TRUE(daemon_.Start(kDeepxd, config)) << daemon_.error();
  }
  std::unique_ptr<Client> Connected() {
    std::string err;
    auto c = Client::Connect(daemon_.socket(), &err);
    EXPECT_TRUE(c) << err;
    if (c) {
      EXPECT_TRUE(c->Hello()) << c->error();
    }
    return c;
  }
  uint64_t Tensor(Client& c, std::vector<int64_t> shape, dx_status_t expect = DX_OK) {
    uint64_t h = 0;
    auto r = c.CreateTensor(next_task_++, DX_DTYPE_F32, shape, &h);
    EXPECT_TRUE(r) << c.error();
    if (r) {
      EXPECT_EQ(r->status, expect) << r->message;
    }
    return h;
  }
  // Waits until the daemon's log contains |text| after byte |from|.
  bool WaitLog(const std::string& text, size_t from = 0, int timeout_ms = 10000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string log = daemon_.log();
      if (log.size() > from && log.find(text, from) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  DaemonProcess daemon_;
  uint64_t next_task_ = 100;
};

// ---- metrics and health -------------------------------------------------------------------

TEST_F(Operations, MetricsCountTasksBytesMemoryAndSessions) {
  StartWith(Config("[metrics]\nlisten = \"127.0.0.1:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  ASSERT_NE(port, 0) << ReadFile(daemon_.dir() + "/stdout");
  HttpReply before = Http(port, "GET", "/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(Sample(before.body, "deepxd_worker_restarts_total"), 0);
  EXPECT_EQ(Sample(before.body, "deepxd_build_info{version=\"0.1.0\",protocol=\"1.0\"}"), 1)
      << before.body;

  auto c = Connected();
  uint64_t a = Tensor(*c, {4, 4});
  uint64_t b = Tensor(*c, {4, 4});
  uint64_t out = Tensor(*c, {4, 4});
  for (int i = 0; i < 3; ++i) {
    auto r = c->Call(wire::request::Invoke(next_task_++, {"dx.add", {a, b}, {out}, {}, "", false}));
    ASSERT_TRUE(r && r->status == DX_OK);
  }
  auto r = c->Call(wire::request::Invoke(next_task_++, {"no.such.op", {a}, {out}, {}, "", false}));
  ASSERT_TRUE(r && r->status == DX_NOT_FOUND);
  c->SendRaw(std::vector<uint8_t>(64, 0xff));  // garbage: a protocol error, then closed
  EXPECT_TRUE(c->WaitClosed());

  HttpReply m = Http(port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  const std::string& t = m.body;
  EXPECT_EQ(Sample(t, "deepxd_tasks_total{request=\"Invoke\",op=\"dx.add\",status=\"DX_OK\"}"), 3)
      << t;
  // An op the daemon does not serve is not a label value: clients cannot grow the series.
  EXPECT_EQ(
      Sample(t, "deepxd_tasks_total{request=\"Invoke\",op=\"(unknown)\",status=\"DX_NOT_FOUND\"}"),
      1);
  EXPECT_EQ(Sample(t, "deepxd_tasks_total{request=\"TensorCreate\",op=\"\",status=\"DX_OK\"}"), 3);
  EXPECT_EQ(Sample(t, "deepxd_tasks_total{request=\"Hello\",op=\"\",status=\"DX_OK\"}"), 1);
  EXPECT_EQ(Sample(t, "deepxd_task_duration_seconds_count{request=\"Invoke\"}"), 4);
  EXPECT_EQ(Sample(t, "deepxd_task_duration_seconds_bucket{request=\"Invoke\",le=\"+Inf\"}"), 4);
  EXPECT_GT(Sample(t, "deepxd_received_bytes_total"), 64);
  EXPECT_GT(Sample(t, "deepxd_sent_bytes_total"), 0);
  EXPECT_GE(Sample(t, "deepxd_protocol_errors_total{status=\"DX_INVALID_ARGUMENT\"}") +
                Sample(t, "deepxd_protocol_errors_total{status=\"DX_OUT_OF_RANGE\"}") +
                Sample(t, "deepxd_protocol_errors_total{status=\"DX_UNSUPPORTED\"}") + 3,
            1)
      << t;
  EXPECT_NE(t.find("deepxd_protocol_errors_total{status="), std::string::npos) << t;
  // DaemonProcess::Start's probe of the socket was a connection and a session too, accepted
  // before this client's (the listen queue is in order).
  EXPECT_EQ(Sample(t, "deepxd_connections_accepted_total"), 2);
  EXPECT_EQ(Sample(t, "deepxd_sessions_opened_total"), 2);

  // Tensor memory follows the live tensors: the closed session waits for a resume
  // (server.resume_seconds) holding its 3 × 64 bytes; a new one adds 256.
  auto c2 = Connected();
  uint64_t big = Tensor(*c2, {8, 8});
  m = Http(port, "GET", "/metrics");
  EXPECT_EQ(Sample(m.body, "deepxd_tensor_bytes{device=\"cpu\",kind=\"host\"}"), 448) << m.body;
  EXPECT_EQ(Sample(m.body, "deepxd_sessions"), 2);
  EXPECT_EQ(Sample(m.body, "deepxd_connections"), 1);
  auto f = c2->Call(wire::request::TensorFree(next_task_++, big));
  ASSERT_TRUE(f && f->status == DX_OK);
  m = Http(port, "GET", "/metrics");
  EXPECT_EQ(Sample(m.body, "deepxd_tensor_bytes{device=\"cpu\",kind=\"host\"}"), 192);
}

TEST_F(Operations, TaskIdInErrorReplyLogAndCounts) {
  StartWith(Config("[metrics]\nlisten = \"127.0.0.1:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  auto c = Connected();
  uint64_t a = Tensor(*c, {2});
  auto r = c->Call(wire::request::Invoke(4242, {"no.such.op", {a}, {a}, {}, "", false}));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_EQ(r->task_id, 4242u);  // the client's id, in its error reply
  ASSERT_TRUE(c->Call(wire::request::TensorName(4243, a, "shared-a")));
  // The log's records about those tasks carry the same id.
  ASSERT_TRUE(WaitLog("\"task\":4243")) << daemon_.log();
  std::string log = daemon_.log();
  size_t at = log.find("\"task\":4242");
  ASSERT_NE(at, std::string::npos) << log;
  size_t line = log.rfind('\n', at) + 1;
  std::string record = log.substr(line, log.find('\n', at) - line);
  EXPECT_NE(record.find("DX_NOT_FOUND"), std::string::npos) << record;
  EXPECT_NE(record.find("no.such.op"), std::string::npos) << record;
  // The metrics count it by request, op and status (never by task id: unbounded labels).
  HttpReply m = Http(port, "GET", "/metrics");
  EXPECT_EQ(
      Sample(m.body, "deepxd_tasks_total{request=\"Invoke\",op=\"(unknown)\",status=\"DX_NOT_FOUND\"}"),
      1);
  EXPECT_EQ(m.body.find("4242"), std::string::npos);
}

TEST_F(Operations, MetricsPassPromtool) {
  if (::access("/usr/bin/promtool", X_OK) != 0)
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  StartWith(Config("[metrics]\nlisten = \"127.0.0.1:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  auto c = Connected();
  uint64_t a = Tensor(*c, {2});
  auto r = c->Call(wire::request::Invoke(next_task_++, {"dx.add", {a, a}, {a}, {}, "", false}));
  ASSERT_TRUE(r && r->status == DX_OK);
  Tensor(*c, {1ll << 40}, DX_RESOURCE_EXHAUSTED);
  HttpReply m = Http(port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  std::string file = daemon_.dir() + "/metrics.txt";
  std::ofstream(file) << m.body;
  std::string out;
  FILE* p = ::popen(("/usr/bin/promtool check metrics < " + file + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out << "\n" << m.body;
  EXPECT_EQ(out, "") << out;  // no lint finding either
}

TEST_F(Operations, HealthzReadyzAndBadRequests) {
  StartWith(Config("[metrics]\nlisten = \"localhost:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  ASSERT_NE(port, 0);
  EXPECT_EQ(Http(port, "GET", "/healthz").status, 200);
  HttpReply ready = Http(port, "GET", "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ready\n");
  EXPECT_EQ(Http(port, "HEAD", "/metrics").status, 200);
  EXPECT_EQ(Http(port, "GET", "/nope").status, 404);
  EXPECT_EQ(Http(port, "POST", "/metrics").status, 405);
  EXPECT_EQ(Http(port, "DELETE", "/readyz").status, 405);
  // Garbage instead of HTTP: the endpoint answers or closes, and goes on serving.
  {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string junk(5000, '\x01');
    junk += "\r\n\r\n";
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  EXPECT_EQ(Http(port, "GET", "/healthz").status, 200);
}

TEST_F(Operations, ReadyzIs503WhileDraining) {
  StartWith(Config("[metrics]\nlisten = \"127.0.0.1:0\"\n[server]\ndrain_seconds = 3\n"));
  uint16_t port = MetricsPort(daemon_);
  ASSERT_EQ(Http(port, "GET", "/readyz").status, 200);
  // A client that asks for 32 MiB and never reads them keeps the drain waiting on its replies.
  auto c = Connected();
  uint64_t h = Tensor(*c, {8 << 20});
  ASSERT_NE(h, 0u);
  ASSERT_TRUE(c->Send(wire::request::TensorRead(next_task_++, h, 0, 32u << 20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(::kill(daemon_.pid(), SIGTERM), 0);
  HttpReply r;
  for (int i = 0; i < 100 && r.status != 503; ++i) {
    r = Http(port, "GET", "/readyz");
    if (r.status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "draining\n");
  EXPECT_EQ(Http(port, "GET", "/healthz").status, 200);  // the loop is alive, just draining
  HttpReply m = Http(port, "GET", "/metrics");
  EXPECT_EQ(Sample(m.body, "deepxd_ready"), 0);
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0) << daemon_.log();
}

TEST_F(Operations, MetricsListenMustBeLoopback) {
  const std::string dir = daemon_.dir();
  auto check = [&](const std::string& listen, std::string* out) {
    std::ofstream(dir + "/m.toml") << Config("[metrics]\nlisten = \"" + listen + "\"\n");
    return DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/m.toml"}, out);
  };
  std::string out;
  EXPECT_EQ(check("127.0.0.1:9464", &out), 0) << out;
  EXPECT_EQ(check("[::1]:9464", &out), 0) << out;
  EXPECT_EQ(check("localhost:9464", &out), 0) << out;
  for (const char* bad : {"0.0.0.0:9464", "[::]:9464", "10.1.2.3:9464", "192.168.0.1:80"}) {
    EXPECT_EQ(check(bad, &out), 1) << bad << ": " << out;
    EXPECT_NE(out.find("metrics.listen"), std::string::npos) << out;
    EXPECT_NE(out.find("not a loopback address"), std::string::npos) << out;
  }
  for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", "example.org:80", "127.0.0.1:x"}) {
    EXPECT_EQ(check(bad, &out), 1) << bad << ": " << out;
    EXPECT_NE(out.find("metrics.listen"), std::string::npos) << out;
  }
  // The command line's override is checked the same way.
  std::ofstream(dir + "/ok.toml") << Config();
  EXPECT_EQ(DaemonProcess::RunToCompletion(
                kDeepxd, {"--check-config", dir + "/ok.toml", "--metrics-listen", "0.0.0.0:1"},
                &out),
            1);
  EXPECT_NE(out.find("not a loopback address"), std::string::npos) << out;
}

TEST_F(Operations, MetricsPortInUseStopsTheStart) {
  StartWith(Config("[metrics]\nlisten = \"127.0.0.1:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  ASSERT_NE(port, 0);
  const std::string dir = daemon_.dir();
  std::ofstream(dir + "/second.toml")
      << Config("[metrics]\nlisten = \"127.0.0.1:" + std::to_string(port) + "\"\n");
  std::string out;
  EXPECT_EQ(DaemonProcess::RunToCompletion(
                kDeepxd, {"--config", dir + "/second.toml", "--socket", dir + "/second"}, &out),
            1);
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << out;
  // The first daemon is untouched.
  EXPECT_EQ(Http(port, "GET", "/healthz").status, 200);
}

// ---- systemd: the notification protocol ---------------------------------------------------

// A datagram socket standing in for systemd's NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // The next datagram, or "" after |timeout_ms|.
  std::string Next(int timeout_ms = 10000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, size_t(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

TEST_F(Operations, SdNotifyReadyReloadingStopping) {
  NotifySocket notify(daemon_.dir() + "/notify");
  ASSERT_TRUE(notify.ok());
  ::setenv("NOTIFY_SOCKET", (daemon_.dir() + "/notify").c_str(), 1);
  bool started = daemon_.Start(kDeepxd, Config());
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(started) << daemon_.error();
  // The first message is READY=1, and by then the socket accepts connections.
  std::string first = notify.Next();
  EXPECT_NE(first.find("READY=1"), std::string::npos) << first;
  EXPECT_NE(first.find("STATUS=serving on " + daemon_.socket()), std::string::npos) << first;
  struct stat st{};
  ASSERT_EQ(::stat(daemon_.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  auto c = Connected();
  ASSERT_TRUE(c);

  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  std::string reloading = notify.Next();
  EXPECT_NE(reloading.find("RELOADING=1"), std::string::npos) << reloading;
  std::string again = notify.Next();
  EXPECT_NE(again.find("READY=1"), std::string::npos) << again;

  ASSERT_EQ(::kill(daemon_.pid(), SIGTERM), 0);
  std::string stopping = notify.Next();
  EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << stopping;
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0);
}

TEST_F(Operations, NoNotifySocketNoNotification) {
  // Without NOTIFY_SOCKET deepxd runs as before (sd_notify is a no-op).
  ::unsetenv("NOTIFY_SOCKET");
  StartWith(Config());
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0);
}

// ---- SIGHUP reload ------------------------------------------------------------------------

TEST_F(Operations, SighupReloadsQuotasAndLogLevelKeepingClients) {
  StartWith(Config("[quotas]\nmax_tensors = 2\n[metrics]\nlisten = \"127.0.0.1:0\"\n"));
  uint16_t port = MetricsPort(daemon_);
  auto c = Connected();
  Tensor(*c, {2});
  Tensor(*c, {2});
  Tensor(*c, {2}, DX_RESOURCE_EXHAUSTED);

  // A larger quota and a quieter log, read on SIGHUP.
  const std::string file = daemon_.dir() + "/deepxd.toml";
  std::string next = Config("[quotas]\nmax_tensors = 4\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
  next.replace(next.find("\"debug\""), 7, "\"warn\"");
  std::ofstream(file) << next;
  size_t mark = daemon_.log().size();
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitLog("\"msg\":\"configuration reloaded\"", mark)) << daemon_.log();
  // The connected client goes on, under the new quota.
  uint64_t third = Tensor(*c, {2});
  EXPECT_NE(third, 0u);
  Tensor(*c, {2});
  Tensor(*c, {2}, DX_RESOURCE_EXHAUSTED);
  // At "warn" a new session's info record is not written any more.
  size_t after = daemon_.log().size();
  auto c2 = Connected();
  ASSERT_TRUE(c2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(daemon_.log().find("session opened", after), std::string::npos) << daemon_.log();

  // A broken file is refused whole: logged, the running configuration kept.
  std::ofstream(file) << "[quotas]\nmax_tensors = \"many\"\n";
  mark = daemon_.log().size();
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitLog("reload refused", mark)) << daemon_.log();
  EXPECT_NE(daemon_.log().find("quotas.max_tensors", mark), std::string::npos);
  auto r = c->Call(wire::request::Invoke(next_task_++, {"dx.add", {third, third}, {third}, {}, "",
                                                        false}));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_OK) << r->message;
  Tensor(*c, {2}, DX_RESOURCE_EXHAUSTED);  // still 4
  HttpReply m = Http(port, "GET", "/metrics");
  EXPECT_EQ(Sample(m.body, "deepxd_config_reloads_total{result=\"ok\"}"), 1) << m.body;
  EXPECT_EQ(Sample(m.body, "deepxd_config_reloads_total{result=\"failed\"}"), 1);
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0);
}

TEST_F(Operations, SighupKeepsRemovedPluginsAndRestartOnlyKeys) {
  const std::string dir = daemon_.dir();
  StartWith(Config("[server]\nsocket = \"" + dir + "/s\"\n"));
  auto c = Connected();
  uint64_t h = Tensor(*c, {2});
  const std::string file = dir + "/deepxd.toml";
  // A plugin file that does not exist: the file does not validate, the reload is refused.
  std::ofstream(file) << "[plugins]\npaths = [\"" + kCpuPlugin +
                             "\", \"/nonexistent-dir/libnope.so\"]\n";
  size_t mark = daemon_.log().size();
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitLog("reload refused", mark)) << daemon_.log();
  EXPECT_NE(daemon_.log().find("libnope.so", mark), std::string::npos);

  // The CPU plugin no longer listed, a file that is no plugin newly listed, another socket path
  // and other limits: the reload goes on, the CPU plugin stays loaded, the new one fails to
  // load (logged), the socket and the limits keep their running values until a restart.
  std::ofstream(dir + "/not-a-plugin.so") << "not an ELF file";
  std::ofstream(file) << "[plugins]\npaths = [\"" + dir + "/not-a-plugin.so\"]\n[server]\n"
                      << "socket = \"" + dir + "/other\"\n[limits]\nmax_rank = 8\n";
  mark = daemon_.log().size();
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitLog("\"msg\":\"configuration reloaded\"", mark)) << daemon_.log();
  std::string log = daemon_.log().substr(mark);
  EXPECT_NE(log.find("stay loaded until deepxd restarts"), std::string::npos) << log;
  EXPECT_NE(log.find("not-a-plugin.so"), std::string::npos) << log;
  EXPECT_NE(log.find("server.socket, limits"), std::string::npos) << log;
  // The client and its tensor are untouched; the socket did not move.
  auto r = c->Call(wire::request::Invoke(next_task_++, {"dx.add", {h, h}, {h}, {}, "", false}));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_OK) << r->message;
  struct stat st{};
  EXPECT_EQ(::stat(daemon_.socket().c_str(), &st), 0);
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0);
}

}  // namespace
