#include "html_report.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

namespace deepx::conformance {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters other than tab/newline have no business in a page.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') out += '?';
        else out += ch;
    }
  }
  return out;
}

int ulp_bucket(uint64_t u) {
  if (u == 0) return 0;
  if (u == 1) return 1;
  if (u < 4) return 2;
  if (u < 8) return 3;
  if (u < 16) return 4;
  if (u < 256) return 5;
  return 6;
}

const char* ulp_bucket_label(int b) {
  static const char* labels[kUlpBuckets] = {"0", "1", "2-3", "4-7", "8-15", "16-255", "&ge;256"};
  return b >= 0 && b < kUlpBuckets ? labels[b] : "?";
}

namespace {

// Severity order decides a matrix cell's color: the worst status in it.
int severity(const std::string& status) {
  if (status == "CRASH" || status == "TIMEOUT") return 6;
  if (status == "FAIL" || status == "UNIMPLEMENTED" || status == "HARNESS_ERROR") return 5;
  if (status == "MISTRUSTED") return 3;
  if (status == "PASS") return 2;
  if (status == "NOT_SUPPORTED") return 1;
  return 4;
}

std::string css_class(const std::string& status) {
  std::string c = "s-";
  for (char ch : status) c += ch == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return c;
}

constexpr const char* kStyle = R"(<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:center}
th{background:#f4f4f4}td.op{text-align:left;font-family:monospace}
.verdict{font-weight:bold;font-size:18px;padding:4px 10px;display:inline-block;border-radius:4px}
.certified{background:#c8f0c8;color:#064}.not-certified{background:#f8c8c8;color:#800}
.s-pass{background:#c8f0c8}.s-mistrusted{background:#fff0b0}.s-not-supported{background:#e8e8e8;color:#666}
.s-fail,.s-unimplemented,.s-harness-error{background:#f8c0c0}.s-crash,.s-timeout{background:#b03030;color:#fff}
.meta td{text-align:left;border:none;padding:1px 8px}.mono{font-family:monospace;word-break:break-all}
.hist{display:inline-block;margin:0 24px 16px 0;vertical-align:top}.hist .row{display:flex;align-items:center;height:16px}
.hist .lbl{width:56px;text-align:right;padding-right:6px;font-size:12px}.hist .bar{background:#4a7fc0;height:12px}
.hist .n{font-size:12px;padding-left:4px}ul.fails li{margin-bottom:8px}
pre{background:#f6f6f6;padding:4px 6px;margin:2px 0;white-space:pre-wrap;word-break:break-all}
</style>)";

}  // namespace

std::string render_html_report(const HtmlReportData& d) {
  std::ostringstream h;
  const bool certified = d.verdict.rfind("CERTIFIED", 0) == 0;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>deepx certification: "
    << html_escape(d.plugin_name) << "</title>\n"
    << kStyle << "</head><body>\n";
  h << "<h1>deepx certification report: " << html_escape(d.plugin_name) << "</h1>\n";
  h << "<div class=\"verdict " << (certified ? "certified" : "not-certified") << "\">verdict: "
    << html_escape(d.verdict) << "</div>\n";
  h << "<table class=\"meta\">\n";
  auto meta = [&](const char* k, const std::string& v, bool mono = false) {
    h << "<tr><td>" << k << "</td><td" << (mono ? " class=\"mono\"" : "") << ">" << html_escape(v) << "</td></tr>\n";
  };
  meta("plugin", d.plugin_name + (d.plugin_version.empty() ? "" : " " + d.plugin_version));
  meta("library", d.plugin_path, true);
  meta("SHA-256", d.plugin_sha256, true);
  meta("suite", d.suite_version + (d.suite_commit.empty() ? "" : " (" + d.suite_commit + ")"));
  meta("profile", d.profile);
  meta("totals", d.totals_line);
  meta("seed", d.seed);
  meta("host", d.host);
  meta("date", d.date);
  h << "</table>\n";

  // ---- op x dtype matrix ----
  struct Cell {
    std::map<std::string, size_t> counts;
    std::string worst;
  };
  std::vector<std::string> dtypes;
  for (const char* dt : {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"}) dtypes.push_back(dt);
  std::map<std::string, std::map<std::string, Cell>> matrix;
  for (const auto& c : d.cases) {
    if (std::find(dtypes.begin(), dtypes.end(), c.dtype) == dtypes.end()) dtypes.push_back(c.dtype);
    Cell& cell = matrix[c.op][c.dtype];
    ++cell.counts[c.status];
    if (cell.worst.empty() || severity(c.status) > severity(cell.worst)) cell.worst = c.status;
  }
  h << "<h2>Op &times; dtype matrix</h2>\n<table class=\"matrix\"><tr><th>op</th>";
  for (const auto& dt : dtypes) h << "<th>" << html_escape(dt) << "</th>";
  h << "</tr>\n";
  for (const auto& [op, row] : matrix) {
    h << "<tr><td class=\"op\">" << html_escape(op) << "</td>";
    for (const auto& dt : dtypes) {
      auto it = row.find(dt);
      if (it == row.end()) {
        h << "<td>&middot;</td>";
        continue;
      }
      const Cell& cell = it->second;
      std::string title;
      for (const auto& [status, n] : cell.counts) title += (title.empty() ? "" : ", ") + status + " " + std::to_string(n);
      h << "<td class=\"" << css_class(cell.worst) << "\" title=\"" << html_escape(title) << "\">"
        << html_escape(cell.worst) << " " << cell.counts.at(cell.worst) << "</td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n<p>Each cell shows its worst status and how many cases have it (hover for all counts).</p>\n";

  // ---- max-ulp histograms per op ----
  std::map<std::string, std::array<size_t, kUlpBuckets>> hist;
  for (const auto& c : d.cases)
    if (c.compared_float) {
      auto& hh = hist.try_emplace(c.op).first->second;  // value-initialised: zeros
      ++hh[static_cast<size_t>(ulp_bucket(c.max_ulp))];
    }
  h << "<h2>Error histograms (max ulp per case, floating-point outputs)</h2>\n";
  if (hist.empty()) h << "<p>No floating-point outputs were compared.</p>\n";
  for (const auto& [op, buckets] : hist) {
    const size_t most = std::max<size_t>(1, *std::max_element(buckets.begin(), buckets.end()));
    h << "<div class=\"hist\"><b class=\"mono\">" << html_escape(op) << "</b>\n";
    for (int b = 0; b < kUlpBuckets; ++b) {
      const size_t n = buckets[static_cast<size_t>(b)];
      const int width = static_cast<int>(160.0 * static_cast<double>(n) / static_cast<double>(most));
      h << "<div class=\"row\"><span class=\"lbl\">" << ulp_bucket_label(b) << "</span><span class=\"bar\" style=\"width:"
        << width << "px\"></span><span class=\"n\">" << n << "</span></div>\n";
    }
    h << "</div>\n";
  }

  // ---- worst errors: the float case with the largest ulp error per op and output dtype ----
  h << "<h2>Worst errors (per op and output dtype)</h2>\n";
  if (d.worst_errors.empty()) {
    h << "<p>No floating-point outputs were compared.</p>\n";
  } else {
    h << "<table class=\"worst\"><tr><th>op</th><th>dtype</th><th>max ulp</th><th>max abs</th><th>max rel</th>"
         "<th>case</th><th>worst element</th></tr>\n";
    for (const auto& w : d.worst_errors) {
      char numbers[96];
      std::snprintf(numbers, sizeof numbers, "<td>%llu</td><td>%.3g</td><td>%.3g</td>",
                    static_cast<unsigned long long>(w.max_ulp), w.max_abs, w.max_rel);
      h << "<tr><td class=\"op\">" << html_escape(w.op) << "</td><td>" << html_escape(w.dtype) << "</td>" << numbers
        << "<td class=\"mono\">" << html_escape(w.id) << "</td><td class=\"mono\">[" << w.index << "] expected "
        << html_escape(w.expected) << " got " << html_escape(w.actual) << "</td></tr>\n";
    }
    h << "</table>\n";
  }

  // ---- failures ----
  size_t failures = 0;
  for (const auto& c : d.cases) failures += c.failure;
  h << "<h2>Failures (" << failures << ")</h2>\n";
  if (failures == 0) h << "<p>None.</p>\n";
  else h << "<ul class=\"fails\">\n";
  for (const auto& c : d.cases) {
    if (!c.failure) continue;
    h << "<li><span class=\"" << css_class(c.status) << "\">" << html_escape(c.status) << "</span> <span class=\"mono\">"
      << html_escape(c.id) << "</span> " << html_escape(c.op) << " " << html_escape(c.dtype) << ": "
      << html_escape(c.reason) << "<pre>" << html_escape(c.repro) << "</pre></li>\n";
  }
  if (failures) h << "</ul>\n";

  // ---- relaxed / warnings ----
  h << "<h2>RELAXED (" << d.relaxed.size() << ")</h2>\n";
  if (d.relaxed.empty()) h << "<p>None: every case was held to the published tolerance table.</p>\n";
  else {
    h << "<ul>\n";
    for (const auto& r : d.relaxed) h << "<li>RELAXED " << html_escape(r) << "</li>\n";
    h << "</ul>\n";
  }
  if (!d.warnings.empty()) {
    h << "<h2>Warnings</h2>\n<ul>\n";
    for (const auto& w : d.warnings) h << "<li>" << html_escape(w) << "</li>\n";
    h << "</ul>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace deepx::conformance
