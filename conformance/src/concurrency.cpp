#include "concurrency.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <latch>
#include <mutex>
#include <thread>

#include "isolation.hpp"

namespace deepx::conformance {
namespace {

bool passed(Status s) { return s == Status::Pass || s == Status::Mistrusted; }

// The data of thread `t`: even threads take a seed of their own, odd threads the case's.
Case variant(const Case& c, size_t t) {
  Case v = c;
  if (t % 2 == 0) v.seed = c.seed + 1000003ull * (t / 2 + 1);
  return v;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// In the child: checks every case, writes one line per failing kernel to `fd`.
void check_all(const Environment& env, const std::vector<Case>& cases, const ConcurrencyOptions& o, int fd) {
  for (const Case& c : cases) {
    // The data of each thread must pass alone first: a failure below is then the concurrency's.
    std::vector<Case> data;
    for (size_t t = 0; t < o.threads; ++t) data.push_back(variant(c, t));
    bool alone = true;
    for (size_t t = 0; t < 2 && t < data.size(); ++t) alone = alone && passed(execute_case(env, data[t]).status);
    if (!alone) continue;
    std::mutex mutex;
    size_t runs = 0, wrong = 0;
    std::string first_reason;
    std::latch start(static_cast<std::ptrdiff_t>(o.threads));
    std::vector<std::thread> threads;
    for (size_t t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (size_t r = 0; r < o.rounds; ++r) {
          const CaseResult result = execute_case(env, data[t]);
          std::lock_guard<std::mutex> lock(mutex);
          ++runs;
          if (!passed(result.status)) {
            ++wrong;
            if (first_reason.empty()) first_reason = std::string(status_name(result.status)) + ": " + result.reason;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    if (wrong == 0) continue;
    write_all(fd, c.op + " " + c.sig + " " + c.device + ": run from " + std::to_string(o.threads) +
                      " threads at once (each on its own data or on the same data), " + std::to_string(wrong) +
                      " of " + std::to_string(runs) +
                      " calls disagree with the reference, though each passes alone: the kernel keeps state "
                      "shared between calls (a static or global accumulator, a shared scratch buffer), which a "
                      "plugin declaring DX_PLUGIN_CAP_CONCURRENT_KERNELS must not; first: " +
                      first_reason + "\n");
  }
}

}  // namespace

ConcurrencyResult check_concurrency(const Environment& env, const std::vector<Case>& cases,
                                    const ConcurrencyOptions& options) {
  ConcurrencyResult result;
  result.kernels = cases.size();
  if (cases.empty() || options.threads < 2) return result;
  const int fd = ::memfd_create("deepx-certify-concurrency", MFD_CLOEXEC);
  if (fd < 0) {
    result.failures.push_back("the concurrency check could not start (memfd_create failed)");
    return result;
  }
  const std::string died = run_in_child([&] { check_all(env, cases, options, fd); }, options.timeout_s);
  std::string text;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  ::close(fd);
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    result.failures.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (!died.empty())
    result.failures.push_back("running kernels from " + std::to_string(options.threads) +
                              " threads at once: the worker process ended: " + died +
                              " (each kernel passed alone: a crash or hang only when called concurrently)");
  return result;
}

}  // namespace deepx::conformance
