// report.html: a self-contained (inline CSS, no scripts, no external resources) page for people:
// header, op x dtype matrix colored by status, max-ulp histograms per op, the worst error per op
// and output dtype, failures with reproduction lines, RELAXED items. Takes plain data so it
// needs no runtime (unit-tested).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "report.hpp"

namespace deepx::conformance {

std::string html_escape(std::string_view text);

struct HtmlCase {
  std::string op, dtype, status, id, reason, repro;
  bool failure = false;
  bool compared_float = false;  // a floating-point output was compared: has a max ulp
  uint64_t max_ulp = 0;
};

struct HtmlReportData {
  std::string plugin_name, plugin_version, plugin_path, plugin_sha256;
  std::string suite_version, suite_commit, verdict, profile, totals_line, date, host, seed;
  std::vector<HtmlCase> cases;
  std::vector<WorstError> worst_errors;  // one per op and output dtype
  std::vector<std::string> relaxed;   // "case id: reason"
  std::vector<std::string> warnings;  // claims without cases, uncovered claims
};

std::string render_html_report(const HtmlReportData& data);

// The histogram bucket of a max-ulp value: 0, 1, 2-3, 4-7, 8-15, 16-255, >= 256.
int ulp_bucket(uint64_t max_ulp);
inline constexpr int kUlpBuckets = 7;
const char* ulp_bucket_label(int bucket);

}  // namespace deepx::conformance
