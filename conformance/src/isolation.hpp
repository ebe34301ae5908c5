// Crash and hang isolation: cases run in a forked worker process, so a kernel that crashes
// (SIGSEGV, abort, exit) or hangs costs one case (CRASH / TIMEOUT) and not the run.
//
// The parent loads the runtime and both plugins but never runs a kernel itself; it forks a
// worker (a copy of the loaded process: no re-loading) that executes cases in order from a
// start index and streams each result back through a pipe. When the worker dies, or the case
// in flight exceeds the per-case timeout (the parent then SIGKILLs it), the parent records
// CRASH or TIMEOUT for that case and forks a fresh worker from the next case. One fork per
// run when nothing crashes, so isolation costs milliseconds.
#pragma once

#include <cstddef>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "runner.hpp"

namespace deepx::conformance {

// Starts a worker that runs cases [first, end) and writes framed results to `write_fd`;
// returns its pid (or -1). Empty: fork the loaded process (fast; fine for CPU plugins).
using WorkerSpawner = std::function<pid_t(size_t first, size_t end, int write_fd)>;

struct IsolationOptions {
  double case_timeout_s = 10.0;  // per case, from the moment the previous result arrived
  WorkerSpawner spawn;           // e.g. exec a fresh `deepx-certify --worker-fd ...` process
  size_t jobs = 1;               // workers at once, each on a contiguous range of the cases
};

// The worker's loop (in whatever process runs it): executes cases [first, end) and writes each
// framed result to `fd`; never returns.
[[noreturn]] void worker_main(const Environment& env, const std::vector<Case>& cases, size_t first, size_t end,
                              int fd);

// Called exactly once per case, in the parent; in case order within each job's range (in case
// order overall when jobs == 1).
using ResultSink = std::function<void(size_t index, CaseResult result)>;

// Runs every case in isolated workers. Every case gets exactly one result. Returns the number of
// workers started (`jobs` when nothing crashed or hung).
size_t run_cases_isolated(const Environment& env, const std::vector<Case>& cases, const IsolationOptions& options,
                          const ResultSink& sink);

// Runs `body` in a forked child and waits up to `timeout_s`. Returns "" when it returned
// normally, else what happened ("killed by signal 11 (Segmentation fault)", "hung: killed after
// 60 s", "exited with status 3"). Used to load the plugins once in a throwaway process first, so
// a plugin whose init crashes or hangs is reported instead of taking the runner down.
std::string run_in_child(const std::function<void()>& body, double timeout_s);

// The wire format of one result (exposed for tests): encode then decode gives the same fields.
std::string encode_result(uint64_t index, const CaseResult& r);
bool decode_result(const std::string& bytes, uint64_t& index, CaseResult& r);

}  // namespace deepx::conformance
