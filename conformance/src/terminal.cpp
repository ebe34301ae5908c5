#include "terminal.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "reports.hpp"

namespace deepx::conformance {

Progress::Progress(FILE* out, bool enabled, size_t total, bool tty, std::chrono::steady_clock::duration interval)
    : out_(out), enabled_(enabled), total_(total), tty_(tty), interval_(interval) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::update(size_t done, const Case& c, size_t failures) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = done == total_;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    if (!last && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const std::string what = c.display_op() + " " + c.dtype + " " + c.tier;
    std::fprintf(out_, "\r\033[K[%zu/%zu] %zu failed, %.0f s  %s", done, total_, failures, seconds, what.c_str());
    if (last) std::fputc('\n', out_);
  } else {
    if (!last && now - last_ < interval_) return;
    last_ = now;
    ++lines_;
    std::fprintf(out_, "deepx-certify: %zu/%zu cases (%.0f%%), %zu failed, %.0f s\n", done, total_,
                 total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0, failures, seconds);
  }
  std::fflush(out_);
}

namespace {

void print_matrix(FILE* so, const RunRecord& run) {
  struct Cell {
    size_t total = 0, ok = 0, bad = 0, ns = 0, died = 0;  // died: CRASH or TIMEOUT
  };
  std::vector<std::string> dtype_cols = {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"};
  std::map<std::string, std::map<std::string, Cell>> matrix;
  for (const auto& o : run.outcomes) {
    Cell& cell = matrix[o.c.display_op()][o.c.dtype];
    ++cell.total;
    if (o.r.status == Status::Crash || o.r.status == Status::Timeout) ++cell.died;
    if (is_failure(o.r.status)) ++cell.bad;
    else if (o.r.status == Status::NotSupported) ++cell.ns;
    else ++cell.ok;
  }
  std::fprintf(so, "\n%-24s", "op");
  for (const auto& d : dtype_cols) std::fprintf(so, " %9s", d.c_str());
  std::fprintf(so, "\n");
  for (const auto& [op, row] : matrix) {
    std::fprintf(so, "%-24s", op.c_str());
    for (const auto& d : dtype_cols) {
      auto it = row.find(d);
      std::string cell = ".";
      if (it != row.end()) {
        const Cell& c = it->second;
        if (c.died) cell = "CRASH " + std::to_string(c.bad);
        else if (c.bad) cell = "FAIL " + std::to_string(c.bad);
        else if (c.ok == 0) cell = "n/s";
        else cell = "ok " + std::to_string(c.ok);
      }
      std::fprintf(so, " %9s", cell.c_str());
    }
    std::fprintf(so, "\n");
  }
  std::fprintf(so,
               "(ok N: cases passed or mistrusted; FAIL N: failing cases; CRASH N: failing cases, some crashed or\n"
               " timed out; n/s: not supported; .: no cases)\n");
}

void print_worst_errors(FILE* so, const RunRecord& run) {
  if (run.worst_errors.empty()) return;
  std::fprintf(so, "\nworst errors (per op and output dtype):\n");
  std::fprintf(so, "  %-30s %10s %10s %10s  %-12s %s\n", "op dtype", "max ulp", "max abs", "max rel", "case", "worst element");
  for (const auto& w : run.worst_errors) {
    const std::string key = w.op + " " + w.dtype;
    std::fprintf(so, "  %-30s %10llu %10.3g %10.3g  %-12s [%lld] expected %s got %s\n", key.c_str(),
                 static_cast<unsigned long long>(w.max_ulp), w.max_abs, w.max_rel, w.id.c_str(),
                 static_cast<long long>(w.index), w.expected.c_str(), w.actual.c_str());
  }
}

std::string packed_signature(const Claim& c) {
  std::string sig;
  for (size_t i = 0; i < c.signature.size(); ++i) sig += (i ? "," : "") + packed_name(c.signature[i]);
  return sig;
}

}  // namespace

void print_details(FILE* so, const RunRecord& run, bool quiet, bool verbose) {
  if (verbose) {
    print_matrix(so, run);
    print_worst_errors(so, run);
  }
  if (!quiet && !run.uncovered_claims.empty()) {
    std::set<std::string> names;
    for (const auto& c : run.uncovered_claims) names.insert(c.op + "(" + packed_signature(c) + ")");
    std::string list;
    for (const auto& n : names) list += " " + n;
    std::fprintf(so, "\nclaimed but not covered by this suite version (not certified):%s\n", list.c_str());
  }
  for (const auto& c : run.claims_without_cases)
    std::fprintf(so, "warning: no manifest case exercises the claimed kernel %s\n", c.c_str());
  bool any_failure_printed = false;
  for (const auto& o : run.outcomes) {
    if (!is_failure(o.r.status)) continue;
    if (!any_failure_printed) std::fprintf(so, "\nfailures:\n");
    any_failure_printed = true;
    std::fprintf(so, "  %s %s: %s\n", status_name(o.r.status), o.id.c_str(), o.r.reason.c_str());
    if (!o.diagnosis.empty()) std::fprintf(so, "    diagnosis: %s\n", o.diagnosis.c_str());
    std::fprintf(so, "    %s\n", o.repro.c_str());
  }
  if (!run.relaxed_items.empty()) {
    std::fprintf(so, "\nRELAXED (%zu cases held to a relaxation instead of the published table):\n",
                 run.relaxed_items.size());
    for (const Relaxation* r : run.relaxations_used) {
      auto it = run.relaxed_case_count.find(relaxation_source(*r));
      std::fprintf(so, "  relaxation %s (%zu cases): %s\n", relaxation_title(*r).c_str(),
                   it == run.relaxed_case_count.end() ? size_t{0} : it->second, r->reason);
    }
    for (const auto& item : run.relaxed_items) std::fprintf(so, "  RELAXED %s\n", item.c_str());
  }
}

std::string cases_by_tier(const RunRecord& run) {
  static const std::vector<std::string> order = {"exact",    "real",    "special",  "divzero",
                                                 "large",    "negative", "allbits", "badindex"};
  std::map<std::string, std::pair<size_t, size_t>> tiers;  // cases, failures
  for (const auto& o : run.outcomes) {
    auto& t = tiers[o.c.tier];
    ++t.first;
    if (is_failure(o.r.status)) ++t.second;
  }
  std::vector<std::string> names = order;
  for (const auto& [name, n] : tiers)
    if (std::find(order.begin(), order.end(), name) == order.end()) names.push_back(name);
  std::string text;
  for (const auto& name : names) {
    auto it = tiers.find(name);
    if (it == tiers.end()) continue;
    text += (text.empty() ? "" : ", ") + name + " " + std::to_string(it->second.first);
    if (it->second.second) text += " (" + std::to_string(it->second.second) + " failed)";
  }
  return text.empty() ? "none" : text;
}

void print_summary(FILE* so, const RunRecord& run, const SummaryText& text) {
  size_t forward = 0, backward = 0, fdcheck = 0;
  for (const auto& o : run.outcomes) (o.c.is_backward() ? backward : o.c.mode == "fdcheck" ? fdcheck : forward) += 1;
  std::fprintf(so, "\nsummary of %s%s%s against %s\n", run.plugin_name.c_str(), run.plugin.version.empty() ? "" : " ",
               run.plugin.version.c_str(), run.reference.name.c_str());
  const std::string finite_differences = fdcheck ? ", " + std::to_string(fdcheck) + " finite-difference" : "";
  std::fprintf(so, "cases: %zu (%zu forward, %zu backward%s); by tier: %s\n", run.outcomes.size(), forward, backward,
               finite_differences.c_str(), cases_by_tier(run).c_str());
  std::fprintf(so, "tests: %zu passed: %zu failed: %zu not_supported: %zu mistrusted: %zu\n", run.outcomes.size(),
               run.passed(), run.failed, run.count(Status::NotSupported), run.count(Status::Mistrusted));
  if (run.failed)
    std::fprintf(so, "  (failed = %zu FAIL + %zu UNIMPLEMENTED + %zu HARNESS_ERROR + %zu CRASH + %zu TIMEOUT%s)\n",
                 run.count(Status::Fail), run.count(Status::Unimplemented), run.count(Status::HarnessError),
                 run.count(Status::Crash), run.count(Status::Timeout),
                 run.concurrency_failures.empty()
                     ? ""
                     : (" + " + std::to_string(run.concurrency_failures.size()) + " CONCURRENCY").c_str());
  if (run.isolated)
    std::fprintf(so, "time: %.2f s (isolated: %zu %sworker process%s, per-case timeout %g s)\n", run.seconds,
                 run.workers, run.exec_workers ? "exec'd " : "", run.workers == 1 ? "" : "es", run.case_timeout_s);
  else
    std::fprintf(so, "time: %.2f s (not isolated)\n", run.seconds);
  if (run.self_check)
    std::fprintf(so, "note: the reference was compared with itself; this certifies nothing about its results\n");
  if (run.certified) {
    std::fprintf(so, "verdict: %s (profile: %s)\n", run.verdict.c_str(), run.profile.c_str());
    std::fprintf(so, "  every case agrees with the reference within the published tolerances%s\n",
                 run.relaxed_items.empty() ? "" : " or the relaxations listed above");
  } else if (run.verdict == "NOTHING CLAIMED") {
    std::fprintf(so, "verdict: NOTHING CLAIMED (0 failures; the plugin registers no kernel: it passes, and no certificate grants it anything)\n");
  } else if (run.cases == 0) {
    std::fprintf(so, "verdict: NOT CERTIFIED (0 failures; no cases ran: the plugin claims nothing the suite covers)\n");
  } else {
    std::fprintf(so, "verdict: NOT CERTIFIED (%zu failures)\n", run.failed);
    if (run.failed) std::fprintf(so, "  each failure above ends with the command that reruns just that case\n");
    else std::fprintf(so, "  %zu of %zu cases have no result\n", run.cases - run.outcomes.size(), run.cases);
  }
  if (!text.certificate.empty()) std::fprintf(so, "%s\n", text.certificate.c_str());
  if (!text.reports_dir.empty()) {
    const char* d = text.reports_dir.c_str();
    std::fprintf(so, "reports: %s/report.json, %s/junit.xml, %s/report.html\n", d, d, d);
    std::fprintf(so, "  (report.html: the op x dtype matrix, error histograms, the worst errors and every failure;\n"
                     "   --verbose prints the matrix and the worst errors here)\n");
  }
}

}  // namespace deepx::conformance
