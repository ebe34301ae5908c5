// What deepx-certify prints: progress on stderr while cases run, then on stdout the details
// (failures with their reproduction lines, warnings, RELAXED items; with --verbose the op x dtype
// matrix and the worst errors) and a short summary that ends with the verdict.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

#include "run_record.hpp"

namespace deepx::conformance {

// Progress of a run. On a terminal: one line, rewritten at most every 0.1 s. Otherwise (a log,
// a pipe): a line every `interval` at most, and one at the end, so that a long run stays short.
class Progress {
 public:
  Progress(FILE* out, bool enabled, size_t total, bool tty,
           std::chrono::steady_clock::duration interval = std::chrono::seconds(10));
  void update(size_t done, const Case& c, size_t failures);
  size_t lines() const { return lines_; }  // lines written when not a terminal

 private:
  FILE* out_;
  bool enabled_;
  size_t total_;
  bool tty_;
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point start_, last_;
  size_t lines_ = 0;
};

// Failures with reproduction lines, claims without cases, the RELAXED section; unless `quiet`,
// the claims the suite does not cover; with `verbose`, first the op x dtype matrix and the
// worst errors per op and output dtype.
void print_details(FILE* out, const RunRecord& run, bool quiet, bool verbose);

struct SummaryText {
  std::string certificate;  // "certificate: PATH (N kernels, sha256 H)" or why there is none; may be empty
  std::string reports_dir;  // empty: no "reports:" line (--quiet)
};
// The closing block: plugin, cases by tier, the totals line, time, verdict and what it means,
// certificate, where the reports are.
void print_summary(FILE* out, const RunRecord& run, const SummaryText& text);

// "exact 120, real 300 (2 failed), special 40": the cases of each data tier, in tier order.
std::string cases_by_tier(const RunRecord& run);

}  // namespace deepx::conformance
