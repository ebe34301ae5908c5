#include "isolation.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace deepx::conformance {

namespace {

// ---- a small binary encoding (the worker is a fork of the same binary: no versioning) ----

class Encoder {
 public:
  void u64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Decoder {
 public:
  explicit Decoder(const std::string& in) : in_(in) {}
  uint64_t u64() {
    uint64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    double v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return {};
    }
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_ && pos_ == in_.size(); }

 private:
  void take(void* dst, size_t n) {
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      std::memset(dst, 0, n);
      return;
    }
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void worker_main(const Environment& env, const std::vector<Case>& cases, size_t first, size_t end, int fd) {
  // Dies with the parent rather than running on orphaned (e.g. when the runner is killed).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (size_t i = first; i < std::min(end, cases.size()); ++i) {
    const std::string payload = encode_result(i, execute_case(env, cases[i]));
    const uint64_t length = payload.size();
    if (!write_all(fd, reinterpret_cast<const char*>(&length), sizeof length) ||
        !write_all(fd, payload.data(), payload.size()))
      ::_exit(3);
  }
  // _exit: no static destructors or plugin shutdown in the worker; the parent owns those.
  ::_exit(0);
}

namespace {

std::string describe_exit(int wstatus) {
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    const char* text = ::strsignal(sig);
    return "the worker process running the case was killed by signal " + std::to_string(sig) + " (" + (text ? text : "?") + ")";
  }
  if (WIFEXITED(wstatus))
    return "the worker process running the case exited with status " + std::to_string(WEXITSTATUS(wstatus)) + " in the middle of the case";
  return "the worker process running the case ended abnormally";
}

}  // namespace

std::string encode_result(uint64_t index, const CaseResult& r) {
  Encoder e;
  e.u64(index);
  e.u64(static_cast<uint64_t>(r.status));
  e.str(r.reason);
  e.u64(r.compared);
  const Comparison& c = r.comparison;
  e.u64(c.pass);
  e.i64(c.elements);
  e.i64(c.mismatches);
  e.i64(c.unconstrained);
  e.i64(c.worst_index);
  e.f64(c.worst_expected);
  e.f64(c.worst_actual);
  e.f64(c.worst_threshold);
  e.str(c.worst_expected_text);
  e.str(c.worst_actual_text);
  e.f64(c.max_abs);
  e.f64(c.max_rel);
  e.u64(c.max_ulp);
  e.str(c.reason);
  const Tolerance& t = r.tolerance;
  e.u64(static_cast<uint64_t>(t.rule));
  e.f64(t.ulps);
  e.f64(t.rtol);
  e.f64(t.atol);
  e.f64(t.c);
  e.f64(t.unit_roundoff);
  e.f64(t.accumulation_max);
  e.u64(t.ignore_zero_sign);
  e.u64(t.relaxed);
  e.str(t.source);
  e.str(r.out_dtype);
  e.u64(r.out_shape.size());
  for (int64_t d : r.out_shape) e.i64(d);
  e.i64(r.reference_status);
  e.i64(r.plugin_status);
  e.f64(r.reference_seconds);
  e.f64(r.plugin_seconds);
  e.f64(r.seconds);
  e.u64(r.determinism_checked);
  e.u64(r.in_place_checked);
  return std::move(e.bytes());
}

bool decode_result(const std::string& bytes, uint64_t& index, CaseResult& r) {
  Decoder d(bytes);
  r = CaseResult{};
  index = d.u64();
  const uint64_t status = d.u64();
  if (status > static_cast<uint64_t>(Status::Timeout)) return false;
  r.status = static_cast<Status>(status);
  r.reason = d.str();
  r.compared = d.u64() != 0;
  Comparison& c = r.comparison;
  c.pass = d.u64() != 0;
  c.elements = d.i64();
  c.mismatches = d.i64();
  c.unconstrained = d.i64();
  c.worst_index = d.i64();
  c.worst_expected = d.f64();
  c.worst_actual = d.f64();
  c.worst_threshold = d.f64();
  c.worst_expected_text = d.str();
  c.worst_actual_text = d.str();
  c.max_abs = d.f64();
  c.max_rel = d.f64();
  c.max_ulp = d.u64();
  c.reason = d.str();
  Tolerance& t = r.tolerance;
  const uint64_t rule = d.u64();
  if (rule > static_cast<uint64_t>(Rule::RtolAtolNormwise)) return false;
  t.rule = static_cast<Rule>(rule);
  t.ulps = d.f64();
  t.rtol = d.f64();
  t.atol = d.f64();
  t.c = d.f64();
  t.unit_roundoff = d.f64();
  t.accumulation_max = d.f64();
  t.ignore_zero_sign = d.u64() != 0;
  t.relaxed = d.u64() != 0;
  t.source = d.str();
  r.out_dtype = d.str();
  const uint64_t rank = d.u64();
  if (rank > 64) return false;
  for (uint64_t i = 0; i < rank; ++i) r.out_shape.push_back(d.i64());
  r.reference_status = static_cast<dx_status_t>(d.i64());
  r.plugin_status = static_cast<dx_status_t>(d.i64());
  r.reference_seconds = d.f64();
  r.plugin_seconds = d.f64();
  r.seconds = d.f64();
  r.determinism_checked = d.u64() != 0;
  r.in_place_checked = d.u64() != 0;
  return d.ok();
}

std::string run_in_child(const std::function<void()>& body, double timeout_s) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    body();
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int ws = 0;
  while (::waitpid(pid, &ws, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &ws, 0);
      char buf[64];
      std::snprintf(buf, sizeof buf, "hung: killed after %.3g s", timeout_s);
      return buf;
    }
    ::usleep(2000);
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return "";
  if (WIFSIGNALED(ws)) {
    const char* text = ::strsignal(WTERMSIG(ws));
    return "killed by signal " + std::to_string(WTERMSIG(ws)) + " (" + (text ? text : "?") + ")";
  }
  return "exited with status " + std::to_string(WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
}

namespace {

// One contiguous range of cases and the worker currently running it.
struct Shard {
  size_t next = 0, end = 0;  // the case in flight (or to start with) and the range's end
  pid_t pid = -1;            // -1: no live worker
  int fd = -1;
  std::string buffer;
  std::chrono::steady_clock::time_point case_start;
};

}  // namespace

size_t run_cases_isolated(const Environment& env, const std::vector<Case>& cases, const IsolationOptions& options,
                          const ResultSink& sink) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration<double>(options.case_timeout_s);
  const size_t n = cases.size();
  const size_t jobs = std::max<size_t>(1, std::min<size_t>(options.jobs, n));
  std::vector<Shard> shards(n == 0 ? 0 : jobs);
  for (size_t k = 0; k < shards.size(); ++k) {
    shards[k].next = k * n / jobs;
    shards[k].end = (k + 1) * n / jobs;
  }
  size_t workers = 0;
  auto finish_worker = [](Shard& sh, bool kill_it) {
    if (sh.pid < 0) return 0;
    if (kill_it) ::kill(sh.pid, SIGKILL);
    int ws = 0;
    ::waitpid(sh.pid, &ws, 0);
    ::close(sh.fd);
    sh.pid = -1;
    sh.fd = -1;
    sh.buffer.clear();
    return ws;
  };
  auto harness_error_rest = [&](Shard& sh, const std::string& why) {
    for (; sh.next < sh.end; ++sh.next) {
      CaseResult r;
      r.status = Status::HarnessError;
      r.reason = why;
      sink(sh.next, std::move(r));
    }
  };
  while (true) {
    // Start a worker for every range that has cases left and none running.
    bool any_left = false;
    for (Shard& sh : shards) {
      if (sh.next >= sh.end) continue;
      any_left = true;
      if (sh.pid >= 0) continue;
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        harness_error_rest(sh, std::string("pipe: ") + std::strerror(errno));
        continue;
      }
      // Buffered output would otherwise be flushed twice (by the worker too).
      std::fflush(stdout);
      std::fflush(stderr);
      pid_t pid = -1;
      if (options.spawn) {
        pid = options.spawn(sh.next, sh.end, fds[1]);
      } else {
        pid = ::fork();
        if (pid == 0) {
          ::close(fds[0]);
          worker_main(env, cases, sh.next, sh.end, fds[1]);
        }
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        harness_error_rest(sh, std::string("cannot start a worker process: ") + std::strerror(errno));
        continue;
      }
      ++workers;
      sh.pid = pid;
      sh.fd = fds[0];
      sh.case_start = Clock::now();
    }
    if (!any_left) break;

    std::vector<pollfd> polls;
    std::vector<Shard*> polled;
    auto wait = std::chrono::milliseconds(1 << 30);
    for (Shard& sh : shards)
      if (sh.pid >= 0) {
        polls.push_back(pollfd{sh.fd, POLLIN, 0});
        polled.push_back(&sh);
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - sh.case_start)));
      }
    if (polls.empty()) continue;
    const int ready = ::poll(polls.data(), polls.size(), static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (ready < 0 && errno != EINTR) {
      for (Shard* sh : polled) {
        finish_worker(*sh, true);
        harness_error_rest(*sh, std::string("poll: ") + std::strerror(errno));
      }
      continue;
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      Shard& sh = *polled[i];
      if (ready > 0 && (polls[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        char chunk[65536];
        const ssize_t got = ::read(sh.fd, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {  // the worker died (or the pipe broke) with this case in flight
          const int ws = finish_worker(sh, false);
          CaseResult r;
          r.status = Status::Crash;
          r.reason = describe_exit(ws) + "; the run continued in a new process";
          r.seconds = std::chrono::duration<double>(Clock::now() - sh.case_start).count();
          sink(sh.next++, std::move(r));
          continue;
        }
        sh.buffer.append(chunk, static_cast<size_t>(got));
        size_t pos = 0;
        while (sh.buffer.size() - pos >= sizeof(uint64_t)) {
          uint64_t length = 0;
          std::memcpy(&length, sh.buffer.data() + pos, sizeof length);
          if (sh.buffer.size() - pos - sizeof length < length) break;
          const std::string payload = sh.buffer.substr(pos + sizeof length, length);
          pos += sizeof length + length;
          uint64_t index = 0;
          CaseResult r;
          if (!decode_result(payload, index, r) || index != sh.next) {
            r = CaseResult{};
            r.status = Status::HarnessError;
            r.reason = "undecodable result from the worker process";
          }
          if (sh.next < sh.end) sink(sh.next++, std::move(r));
          sh.case_start = Clock::now();
        }
        sh.buffer.erase(0, pos);
        if (sh.next >= sh.end) finish_worker(sh, false);  // its range is done: it exits by itself
      } else if (Clock::now() - sh.case_start >= timeout) {  // the case in flight ran past its time
        finish_worker(sh, true);
        CaseResult r;
        r.status = Status::Timeout;
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "the case ran longer than %.3g s (--timeout); its process was killed and the run continued",
                      options.case_timeout_s);
        r.reason = buf;
        r.seconds = std::chrono::duration<double>(Clock::now() - sh.case_start).count();
        sink(sh.next++, std::move(r));
      }
    }
  }
  for (Shard& sh : shards) finish_worker(sh, false);
  return workers;
}

}  // namespace deepx::conformance
