// deepx-load-daemon: a load test of deepxd. N tasks from C concurrent clients, each on its own
// connection to a real deepxd (started here on a temporary socket with the CPU plugin), each
// keeping a window of requests in flight. Checks, and exits 1 unless all hold:
//   - 0 lost: every task is answered (a reply missing for 30 s counts as lost, and the client
//     stops);
//   - 0 duplicated: every reply's task id is one this client sent and is seen exactly once;
//   - correct results: a task is one request of a group of three on the client's own tensors:
//     write x = [v, v+1, ..., v+7] (f64), y = dx.add(x, ones), read y; each read must return
//     [v+1, ..., v+8], the others OK;
//   - RSS of deepxd (VmRSS from /proc/<pid>/status) flat: within --rss-tolerance (10%) of its
//     value at the end of the warm-up (the first 20% of the tasks) at every later sample (a
//     negative tolerance reports it without checking: sanitizer builds, whose allocators keep
//     freed memory in quarantine).
// Bounded: stops sending at --max-seconds and reports what was not done as a failure.
//
// Worker kills: the issue asks for an executor worker to be killed every few seconds during
// the test. deepxd runs plugins in its own process today (no isolated workers, issue 16 item 5),
// so there is nothing to kill. The hook is here: every --kill-every seconds the monitor looks
// for child processes of deepxd and sends one SIGKILL; it reports how many it found (0 today).
// Once workers exist, the same checks (0 lost, 0 duplicated, exact values) prove drift.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "deepx/host.h"  // the DX_DTYPE_* values only
#include "process.h"
#include "raw_io.h"

namespace {

using namespace deepx::bench;
namespace wire = deepx::wire;

constexpr int kElems = 8;
constexpr int kSlots = 4;

struct Options {
  std::string deepxd = DEEPXD_PATH;
  std::string plugin = DEEPX_CPU_PLUGIN;
  uint64_t tasks = 50000;
  int clients = 64;
  int window = 24;
  double kill_every = 3;
  double max_seconds = 600;
  double rss_tolerance = 0.10;
};

struct ClientResult {
  uint64_t sent = 0, answered = 0, duplicated = 0, unknown = 0, wrong = 0, failed = 0, checked = 0;
  std::string first_problem;
  void Problem(const std::string& p) {
    if (first_problem.empty()) first_problem = p;
  }
};

std::atomic<uint64_t> g_answered{0};
std::atomic<bool> g_stop_sending{false};

// The value group |g| of client |c| writes: exact in f64.
double GroupValue(int c, uint64_t g) { return double(c) * 1e9 + double(g) * 16; }

void RunClient(const std::string& socket, int index, uint64_t tasks, int window,
               ClientResult& res) {
  int fd = UnixConnect(socket);
  if (fd < 0) {
    res.Problem("cannot connect");
    res.failed = 1;
    return;
  }
  WireConn conn(fd);
  uint64_t setup = 1ull << 62;  // setup task ids, apart from the load's 1..tasks
  if (!conn.Hello("deepx-load-daemon")) {
    res.Problem("hello: " + conn.error());
    res.failed = 1;
    return;
  }
  uint64_t x[kSlots], y[kSlots], ones;
  std::vector<double> one(kElems, 1.0);
  ones = conn.Create(setup++, DX_DTYPE_F64, {kElems});
  bool ok = ones && conn.Write(setup++, ones, {reinterpret_cast<const uint8_t*>(one.data()),
                                               kElems * sizeof(double)});
  for (int s = 0; ok && s < kSlots; ++s) {
    x[s] = conn.Create(setup++, DX_DTYPE_F64, {kElems});
    y[s] = conn.Create(setup++, DX_DTYPE_F64, {kElems});
    ok = x[s] && y[s];
  }
  if (!ok) {
    res.Problem("setup: " + conn.error());
    res.failed = 1;
    return;
  }
  std::vector<uint8_t> seen(tasks + 1, 0);
  uint64_t next = 1;  // the next task id to send; tasks are 1..tasks
  uint64_t outstanding = 0;
  std::vector<double> values(kElems);
  std::vector<uint8_t> bytes;
  while (res.answered + res.unknown + res.duplicated < next - 1 || next <= tasks) {
    bytes.clear();
    while (next <= tasks && outstanding < uint64_t(window) && !g_stop_sending.load()) {
      const uint64_t t = next - 1, g = t / 3;
      const int slot = int(g % kSlots);
      switch (t % 3) {
        case 0: {
          for (int i = 0; i < kElems; ++i) values[i] = GroupValue(index, g) + i;
          conn.Frame(bytes, wire::request::TensorWrite(next, x[slot], 0, kElems * sizeof(double)),
                     {reinterpret_cast<const uint8_t*>(values.data()), kElems * sizeof(double)});
          break;
        }
        case 1: {
          wire::OpCall call;
          call.op = "dx.add";
          call.inputs = {x[slot], ones};
          call.outputs = {y[slot]};
          conn.Frame(bytes, wire::request::Invoke(next, call));
          break;
        }
        default:
          conn.Frame(bytes, wire::request::TensorRead(next, y[slot], 0, kElems * sizeof(double)));
      }
      ++next;
      ++outstanding;
      ++res.sent;
    }
    if (!bytes.empty() && !conn.SendBytes(bytes)) {
      res.Problem("send: " + conn.error());
      break;
    }
    if (outstanding == 0) break;  // stopped sending, everything answered
    auto e = conn.Next(30000);
    if (!e) {
      res.Problem("receive: " + conn.error());
      break;
    }
    uint64_t id = e->kind == wire::Event::Kind::kMessage ? e->message.reply()->task_id()
                                                           : e->task_id;
    if (id == 0 || id >= next) {
      ++res.unknown;
      res.Problem("a reply with task id " + std::to_string(id) + " that was not sent");
      continue;
    }
    if (seen[id]) {
      ++res.duplicated;
      res.Problem("task " + std::to_string(id) + " answered twice");
      continue;
    }
    seen[id] = 1;
    --outstanding;
    ++res.answered;
    g_answered.fetch_add(1, std::memory_order_relaxed);
    if (e->kind != wire::Event::Kind::kMessage) {
      ++res.wrong;
      res.Problem("task " + std::to_string(id) + ": " + e->error.message);
      continue;
    }
    const auto* r = e->message.reply();
    if (r->status() != wire::fb::Status::OK) {
      ++res.wrong;
      res.Problem("task " + std::to_string(id) + ": " + wire::StatusName(int(r->status())) + ": " +
                  (r->message() ? r->message()->str() : ""));
      continue;
    }
    if ((id - 1) % 3 == 2) {
      const uint64_t g = (id - 1) / 3;
      const auto& bulk = e->message.bulk;
      bool right = bulk.size() == kElems * sizeof(double);
      for (int i = 0; right && i < kElems; ++i) {
        double v;
        std::memcpy(&v, bulk.data() + i * sizeof(double), sizeof v);
        right = v == GroupValue(index, g) + i + 1;
      }
      ++res.checked;
      if (!right) {
        ++res.wrong;
        res.Problem("task " + std::to_string(id) + ": y read back is not x + 1");
      }
    }
  }
}

void Usage() {
  std::printf(
      "usage: deepx-load-daemon [--tasks=N] [--clients=C] [--window=W] [--kill-every=S]\n"
      "                         [--max-seconds=S] [--rss-tolerance=F] [--deepxd=PATH]\n"
      "                         [--plugin=PATH]   (--rss-tolerance<0: RSS reported, not checked)\n"
      "N tasks (requests) from C clients against a real deepxd; checks 0 lost, 0 duplicated,\n"
      "exact results and a flat RSS. Exit 0 when all hold.\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    auto val = [&](const char* key, std::string* out) {
      std::string k = std::string("--") + key;
      if (a.rfind(k + "=", 0) == 0) {
        *out = a.substr(k.size() + 1);
        return true;
      }
      if (a == k && i + 1 < argc) {
        *out = argv[++i];
        return true;
      }
      return false;
    };
    if (val("deepxd", &o.deepxd) || val("plugin", &o.plugin)) {
    } else if (val("tasks", &v)) {
      o.tasks = std::strtoull(v.c_str(), nullptr, 10);
    } else if (val("clients", &v)) {
      o.clients = std::max(1, std::atoi(v.c_str()));
    } else if (val("window", &v)) {
      o.window = std::max(1, std::atoi(v.c_str()));
    } else if (val("kill-every", &v)) {
      o.kill_every = std::atof(v.c_str());
    } else if (val("max-seconds", &v)) {
      o.max_seconds = std::atof(v.c_str());
    } else if (val("rss-tolerance", &v)) {
      o.rss_tolerance = std::atof(v.c_str());
    } else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      Usage();
      return 2;
    }
  }
  if (o.tasks < uint64_t(o.clients)) o.tasks = uint64_t(o.clients);
  ::setenv("OMP_NUM_THREADS", EnvOr("OMP_NUM_THREADS", "1"), 1);
  ::setenv("OPENBLAS_NUM_THREADS", EnvOr("OPENBLAS_NUM_THREADS", "1"), 1);
  const std::string load_before = LoadAverage();

  deepx::daemon::testing::DaemonProcess daemon;
  // The quota of requests in flight per session (default 256) stays above the window.
  if (!daemon.Start(o.deepxd, "[plugins]\npaths = [\"" + o.plugin +
                                  "\"]\n[log]\nlevel = \"warn\"\n[server]\nmax_connections = " +
                                  std::to_string(o.clients + 16) + "\n")) {
    std::fprintf(stderr, "deepx-load-daemon: deepxd: %s\n", daemon.error().c_str());
    return 1;
  }
  const pid_t pid = daemon.pid();
  std::printf("deepx-load-daemon: %llu tasks from %d clients (window %d each) against deepxd pid "
              "%d; %s; load average %s\n",
              (unsigned long long)o.tasks, o.clients, o.window, int(pid), CpuModel().c_str(),
              load_before.c_str());
  std::printf("worker kills: deepxd has no isolated executor workers yet (issue 16, item 5): "
              "every %.0f s the test looks for child processes of deepxd to SIGKILL; today it "
              "finds none, so no worker is killed\n",
              o.kill_every);
  std::fflush(stdout);

  std::vector<ClientResult> results(size_t(o.clients));
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int c = 0; c < o.clients; ++c) {
    const uint64_t n = o.tasks / uint64_t(o.clients) + (uint64_t(c) < o.tasks % uint64_t(o.clients));
    threads.emplace_back(RunClient, daemon.socket(), c, n, o.window, std::ref(results[size_t(c)]));
  }

  // Monitor: RSS samples, the worker-kill hook, the time bound.
  std::atomic<bool> done{false};
  long rss_warm = -1, rss_max = -1, rss_min = -1, rss_start = RssKib(pid), rss_last = -1;
  uint64_t samples = 0, kills = 0, children_seen = 0, looks = 0;
  std::thread monitor([&] {
    auto next_kill = Clock::now();  // the first look right away, then every kill_every
    const uint64_t warm_at = o.tasks / 5;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const long rss = RssKib(pid);
      if (rss > 0) rss_last = rss;
      if (g_answered.load() >= warm_at && rss > 0) {
        if (rss_warm < 0) rss_warm = rss_min = rss_max = rss;
        rss_max = std::max(rss_max, rss);
        rss_min = std::min(rss_min, rss);
        ++samples;
      }
      if (o.kill_every > 0 && Clock::now() >= next_kill) {
        next_kill += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(o.kill_every));
        std::vector<pid_t> kids = ChildrenOf(pid);  // the hook: executor workers, once they exist
        children_seen += kids.size();
        ++looks;
        if (!kids.empty() && ::kill(kids[kills % kids.size()], SIGKILL) == 0) ++kills;
      }
      if (Seconds(t0, Clock::now()) > o.max_seconds) g_stop_sending.store(true);
    }
  });
  for (auto& t : threads) t.join();
  const double secs = Seconds(t0, Clock::now());
  // One last sample with every session still open is what the monitor took last; stop it.
  done.store(true);
  monitor.join();
  const int stop_rc = daemon.Stop(SIGTERM);

  ClientResult total;
  int failed_clients = 0;
  for (size_t c = 0; c < results.size(); ++c) {
    const auto& r = results[c];
    total.sent += r.sent;
    total.answered += r.answered;
    total.duplicated += r.duplicated;
    total.unknown += r.unknown;
    total.wrong += r.wrong;
    total.checked += r.checked;
    if (!r.first_problem.empty()) {
      ++failed_clients;
      if (failed_clients <= 5)
        std::printf("  client %zu: %s\n", c, r.first_problem.c_str());
    }
  }
  const uint64_t lost = total.sent - total.answered;
  const uint64_t not_sent = o.tasks - total.sent;
  const double growth = rss_warm > 0 ? double(rss_max) / double(rss_warm) - 1 : 0;
  const double shrink = rss_warm > 0 ? 1 - double(rss_min) / double(rss_warm) : 0;
  const bool rss_checked = o.rss_tolerance >= 0;
  const bool rss_flat = rss_warm > 0 && growth <= o.rss_tolerance && shrink <= o.rss_tolerance;

  std::printf("tasks: %llu sent of %llu, %llu answered, %llu lost, %llu duplicated, %llu unknown "
              "ids, %llu wrong results or errors (%llu values read back and compared); %.2f s, %.0f "
              "tasks/s\n",
              (unsigned long long)total.sent, (unsigned long long)o.tasks,
              (unsigned long long)total.answered, (unsigned long long)lost,
              (unsigned long long)total.duplicated, (unsigned long long)total.unknown,
              (unsigned long long)total.wrong, (unsigned long long)total.checked, secs, double(total.answered) / secs);
  std::printf("deepxd RSS (VmRSS): %ld KiB at start, %ld KiB after warm-up (20%% of the tasks), "
              "then %ld..%ld KiB over %llu samples (%+.1f%% / -%.1f%%), %ld KiB at the end: %s "
              "(tolerance %.0f%%)\n",
              rss_start, rss_warm, rss_min, rss_max, (unsigned long long)samples, growth * 100,
              shrink * 100, rss_last,
              !rss_checked ? "not checked (--rss-tolerance<0)" : rss_flat ? "flat" : "NOT flat",
              std::max(0.0, o.rss_tolerance) * 100);
  std::printf("worker kills: %llu (looked %llu times, child processes of deepxd seen: %llu; "
              "isolated workers do not exist yet)\n",
              (unsigned long long)kills, (unsigned long long)looks,
              (unsigned long long)children_seen);
  std::printf("deepxd stopped with SIGTERM: exit status %d; load average after %s\n", stop_rc,
              LoadAverage().c_str());
  const bool pass = not_sent == 0 && lost == 0 && total.duplicated == 0 && total.unknown == 0 &&
                    total.wrong == 0 && failed_clients == 0 && (rss_flat || !rss_checked) &&
                    stop_rc == 0;
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
