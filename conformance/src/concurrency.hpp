// The concurrency check of a plugin that declares DX_PLUGIN_CAP_CONCURRENT_KERNELS: the host then
// calls its kernels from several threads at once without serialising them, so each kernel runs
// here from several threads at once, each thread on its own data (another seed) or on the case's
// own data, and every result is compared with the reference as a case is. A kernel that passes
// alone but not concurrently keeps state between calls (a static accumulator, a shared scratch
// buffer) and fails with a message that says so.
#pragma once

#include <string>
#include <vector>

#include "runner.hpp"

namespace deepx::conformance {

struct ConcurrencyOptions {
  size_t threads = 4;       // threads that run one kernel at once
  size_t rounds = 3;        // calls per thread
  double timeout_s = 120;   // for the whole check (it runs in a forked child)
};

struct ConcurrencyResult {
  size_t kernels = 0;                  // kernels checked
  std::vector<std::string> failures;   // one line per failing kernel, in words
};

// Runs each of `cases` (one forward case per kernel, each of which passed alone) from
// `options.threads` threads at once, in a forked child (a crash or hang is a failure of the
// check, reported as such). Never throws.
ConcurrencyResult check_concurrency(const Environment& env, const std::vector<Case>& cases,
                                    const ConcurrencyOptions& options);

}  // namespace deepx::conformance
