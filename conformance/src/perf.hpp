// Performance mode (--perf): times every claimed kernel (each op x dtype signature the
// reference also defines, forward and backward) on one large case (warm-up, then the median of
// repeated runs) and relates it to ceilings measured in the same run on the same
// machine: a STREAM-style loop over the same byte traffic for memory-bound ops, cblas_sgemm /
// cblas_dgemm for matmul (when the runner was built with OpenBLAS).
#pragma once

#include <set>
#include <string>

#include "runner.hpp"

namespace deepx::conformance {

struct PerfOptions {
  bool isolate = true;              // time in a forked worker: a crash loses the perf table only
  std::set<std::string> ops;        // only these ops (empty: all)
  std::set<std::string> skip;       // "op dtype device" kernels not to time (they crashed or hung)
  int repeats = 7;                  // timed runs per kernel; the median is reported
  int64_t elements = int64_t{1} << 20;  // elementwise / reduction / movement case size (secondary
                                        // signatures of a key dtype: a quarter of it)
  int64_t matmul_n = 512;           // M = N = K
  double timeout_s = 600;           // the whole perf run, when isolated
};

// Prints the machine line, the thread count, one line per claimed kernel (timed, or
// "skipped: <reason>") and "perf: N kernels timed (F forward, B backward), S skipped" to stdout.
void run_perf(const Environment& env, const PerfOptions& options);

}  // namespace deepx::conformance
