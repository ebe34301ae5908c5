#include "reports.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "digest.hpp"
#include "dtype.hpp"

namespace deepx::conformance {
namespace {

namespace fs = std::filesystem;

// One line of text: a reason with a line break must not start a new certificate line.
std::string single_line(std::string text) {
  for (char& ch : text)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return text;
}

std::string packed_signature(const Claim& c) {
  std::string sig;
  for (size_t i = 0; i < c.signature.size(); ++i) sig += (i ? "," : "") + packed_name(c.signature[i]);
  return sig;
}

// As the certificate's kernel lines: "dx.exp 1 2,2" (op, device type, signature codes).
std::string kernel_line(const Claim& c) {
  std::string t = c.op + " " + std::to_string(c.device_type) + " ";
  for (size_t i = 0; i < c.signature.size(); ++i) t += (i ? "," : "") + std::to_string(c.signature[i]);
  return t;
}

Json plugin_json(const PluginIdentity& p) {
  return {{"name", p.name},       {"vendor", p.vendor},           {"version", p.version},
          {"build_id", p.build_id}, {"path", p.path},             {"abi_version", p.abi_version},
          {"sha256", p.sha256}};
}

Json case_json(const Outcome& o, size_t index) {
  const auto& r = o.r;
  Json shapes = Json::array();
  for (const auto& s : o.c.shapes) shapes.push_back(format_shape(s));
  Json j = {{"index", index}, {"id", o.id}, {"line", o.c.line()}, {"source", o.c.source}};
  j["parameters"] = {{"op", o.c.op},
                     {"display_op", o.c.display_op()},
                     {"mode", o.c.mode},
                     {"dtype", o.c.dtype},
                     {"signature", o.c.sig},
                     {"device", o.c.device},
                     {"shapes", shapes},
                     {"layouts", o.c.layouts},
                     {"out_layout", o.c.out_layout},
                     {"attrs", format_attrs(o.c.attrs)},
                     {"tier", o.c.tier},
                     {"seed", o.c.seed},
                     {"output_dtype", r.out_dtype},
                     {"output_shape", format_shape(r.out_shape)}};
  j["status"] = status_name(r.status);
  j["reason"] = r.reason;
  j["reference_status"] = dx_status_string(r.reference_status);
  j["plugin_status"] = dx_status_string(r.plugin_status);
  if (r.compared) {
    const auto& cmp = r.comparison;
    j["errors"] = {{"elements", cmp.elements},
                   {"mismatches", cmp.mismatches},
                   {"unconstrained", cmp.unconstrained},
                   {"max_abs", json_number(cmp.max_abs)},
                   {"max_rel", json_number(cmp.max_rel)},
                   {"max_ulp", cmp.max_ulp},
                   {"worst_index", cmp.worst_index},
                   {"worst_expected", cmp.worst_expected_text},
                   {"worst_actual", cmp.worst_actual_text},
                   {"worst_threshold", json_number(cmp.worst_threshold)}};
    j["threshold"] = r.tolerance.describe();
    j["threshold_source"] = r.tolerance.source;
    j["relaxed"] = r.tolerance.relaxed;
  }
  j["determinism_checked"] = r.determinism_checked;
  j["in_place_checked"] = r.in_place_checked;
  j["time_s"] = json_number(r.seconds);
  j["reference_time_s"] = json_number(r.reference_seconds);
  j["plugin_time_s"] = json_number(r.plugin_seconds);
  if (!o.diagnosis.empty()) j["diagnosis"] = o.diagnosis;
  j["repro"] = o.repro;
  return j;
}

std::string totals_line(const RunRecord& run) {
  char totals[200];
  std::snprintf(totals, sizeof totals, "tests: %zu passed: %zu failed: %zu not_supported: %zu mistrusted: %zu",
                run.outcomes.size(), run.passed(), run.failed, run.count(Status::NotSupported),
                run.count(Status::Mistrusted));
  return totals;
}

bool write_file(const fs::path& path, const std::string& text, std::string& error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

}  // namespace

std::vector<WorstError> worst_errors(const std::vector<Outcome>& outcomes) {
  std::map<std::pair<std::string, std::string>, const Outcome*> worst;
  for (const auto& o : outcomes) {
    if (!o.r.compared || !is_float(dtype_from_name(o.r.out_dtype).value_or(DType::I64))) continue;
    const auto key = std::make_pair(o.c.display_op(), o.r.out_dtype);
    auto it = worst.find(key);
    if (it == worst.end() || o.r.comparison.max_ulp > it->second->r.comparison.max_ulp) worst[key] = &o;
  }
  std::vector<WorstError> rows;
  for (const auto& [key, o] : worst) {
    const auto& cmp = o->r.comparison;
    rows.push_back({key.first, key.second, o->id, cmp.max_ulp, cmp.max_abs, cmp.max_rel, cmp.worst_index,
                    cmp.worst_expected_text, cmp.worst_actual_text});
  }
  return rows;
}

std::string describe_worst_error(const WorstError& w) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "max ulp %llu, max abs %.3g, max rel %.3g, case %s element [%lld]: ",
                static_cast<unsigned long long>(w.max_ulp), w.max_abs, w.max_rel, w.id.c_str(),
                static_cast<long long>(w.index));
  return buf + ("expected " + w.expected + " got " + w.actual);
}

Json json_report(const RunRecord& run) {
  Json j;
  j["suite"] = {{"name", "deepx-conformance"},
                {"version", kSuiteVersion},
                {"commit", run.commit},
                {"manifests", run.manifests}};
  j["plugin"] = plugin_json(run.plugin);
  j["reference"] = plugin_json(run.reference);
  j["self_check"] = run.self_check;
  j["devices"] = run.profile_devices;
  j["host"] = run.host;
  j["date"] = run.date;
  j["seed"] = run.seed;
  j["tolerance_table_sha256"] = tolerance_table_sha256();
  // The published page (docs/tolerances.md) embeds this Markdown; a unit test keeps them equal.
  j["tolerance_doc_sha256"] = sha256_hex(tolerance_table_markdown());
  j["relaxed"] = run.relaxed_items;
  Json applied = Json::array();  // the relaxations the verdict relied on
  for (const Relaxation* r : run.relaxations_used) {
    auto it = run.relaxed_case_count.find(relaxation_source(*r));
    applied.push_back({{"relaxation", relaxation_title(*r)},
                       {"reason", r->reason},
                       {"cases", it == run.relaxed_case_count.end() ? size_t{0} : it->second}});
  }
  j["relaxations_applied"] = std::move(applied);
  j["tolerance_table"] = Json::parse(tolerance_table_json());
  Json claims = Json::array();  // every claim the suite covers
  for (const auto& c : run.claims) claims.push_back(c.op + " " + c.device + " (" + packed_signature(c) + ")");
  j["profile"] = std::move(claims);
  Json uncovered = Json::array();
  for (const auto& c : run.uncovered_claims) uncovered.push_back(c.op + " " + c.device + " " + c.dtype);
  j["uncovered_claims"] = std::move(uncovered);
  j["claims_without_cases"] = run.claims_without_cases;
  Json totals = {{"cases", run.cases}, {"results", run.outcomes.size()}};
  for (Status s : kAllStatuses) totals[status_name(s)] = run.count(s);
  totals["time_s"] = json_number(run.seconds);
  j["totals"] = std::move(totals);
  j["verdict"] = run.verdict;
  j["profile_summary"] = run.profile;
  Json relaxations = Json::array(), kernels = Json::array();  // as in the certificate's lines
  if (run.certified) {
    for (const Relaxation* r : run.relaxations_used)
      relaxations.push_back(single_line(relaxation_title(*r) + ": " + r->reason));
    for (const auto& c : run.profile_claims) kernels.push_back(kernel_line(c));
  }
  j["certificate"] = {{"plugin_sha256", run.plugin.sha256},
                      {"certified", run.certified},
                      {"verdict", run.verdict},
                      {"relaxations", relaxations},
                      {"profile", run.profile},
                      {"kernels", kernels}};
  Json concurrency_failures = Json::array();
  for (const auto& f : run.concurrency_failures) concurrency_failures.push_back(f);
  j["concurrency"] = {{"checked", run.concurrency_checked},
                      {"kernels", run.concurrency_kernels},
                      {"threads", run.concurrency_threads},
                      {"failures", concurrency_failures}};
  j["isolation"] = {{"isolated", run.isolated},
                    {"case_timeout_s", json_number(run.case_timeout_s)},
                    {"worker_processes", run.workers}};
  Json worst = Json::array();
  for (const auto& w : run.worst_errors)
    worst.push_back({{"op", w.op},
                     {"dtype", w.dtype},
                     {"case", w.id},
                     {"max_ulp", w.max_ulp},
                     {"max_abs", json_number(w.max_abs)},
                     {"max_rel", json_number(w.max_rel)},
                     {"worst_index", w.index},
                     {"expected", w.expected},
                     {"actual", w.actual}});
  j["worst_errors"] = std::move(worst);
  Json cases = Json::array();
  for (size_t i = 0; i < run.outcomes.size(); ++i) cases.push_back(case_json(run.outcomes[i], i));
  j["cases"] = std::move(cases);
  return j;
}

std::string junit_report(const RunRecord& run) {
  std::map<std::string, std::vector<const Outcome*>> by_op;
  for (const auto& o : run.outcomes) by_op[o.c.display_op()].push_back(&o);
  std::map<std::string, std::vector<const WorstError*>> worst_by_op;
  for (const auto& w : run.worst_errors) worst_by_op[w.op].push_back(&w);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  // The verdict (CERTIFIED-with-relaxations included) as a comment: JUnit has no place for it.
  x << "<!-- deepx-certify verdict: " << xml_escape(run.verdict) << " -->\n";
  x << "<testsuites name=\"deepx-certify " << xml_escape(run.plugin_name) << "\" tests=\"" << run.outcomes.size()
    << "\" failures=\"" << run.failed << "\" time=\"" << run.seconds << "\">\n";
  for (const auto& [op, list] : by_op) {
    size_t f = 0, skipped = 0;
    double t = 0;
    std::set<std::string> suite_relaxations;  // the relaxations this suite's cases were held to
    for (const auto* o : list) {
      if (is_failure(o->r.status)) ++f;
      if (o->r.status == Status::NotSupported) ++skipped;
      if (o->r.tolerance.relaxed && !is_failure(o->r.status)) suite_relaxations.insert(o->r.tolerance.source);
      t += o->r.seconds;
    }
    x << "  <testsuite name=\"" << xml_escape(op) << "\" tests=\"" << list.size() << "\" failures=\"" << f
      << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << t << "\">\n";
    const auto worst = worst_by_op.find(op);
    if (!suite_relaxations.empty() || worst != worst_by_op.end()) {
      x << "    <properties>\n";
      for (const auto& source : suite_relaxations)
        x << "      <property name=\"RELAXED\" value=\"" << xml_escape(source) << "\"/>\n";
      if (worst != worst_by_op.end())
        for (const WorstError* w : worst->second)
          x << "      <property name=\"worst_error " << xml_escape(w->dtype) << "\" value=\""
            << xml_escape(describe_worst_error(*w)) << "\"/>\n";
      x << "    </properties>\n";
    }
    for (const auto* o : list) {
      x << "    <testcase classname=\"" << xml_escape(op + "." + o->c.dtype) << "\" name=\""
        << xml_escape(o->id + " " + o->c.line()) << "\" time=\"" << o->r.seconds << "\"";
      const bool relaxed = o->r.tolerance.relaxed && !is_failure(o->r.status);
      if (is_failure(o->r.status)) {
        x << ">\n      <failure type=\"" << status_name(o->r.status) << "\" message=\"" << xml_escape(o->r.reason)
          << "\">" << xml_escape(o->repro) << "</failure>\n    </testcase>\n";
      } else if (o->r.status == Status::NotSupported) {
        x << ">\n      <skipped message=\"" << xml_escape(o->r.reason) << "\"/>\n    </testcase>\n";
      } else if (o->r.status == Status::Mistrusted) {
        x << ">\n      <system-out>MISTRUSTED: " << xml_escape(o->r.reason)
          << (relaxed ? "\nRELAXED: " + xml_escape(o->r.tolerance.source) : std::string()) << "</system-out>\n    </testcase>\n";
      } else if (relaxed) {
        x << ">\n      <system-out>RELAXED: " << xml_escape(o->r.tolerance.source) << "</system-out>\n    </testcase>\n";
      } else {
        x << "/>\n";
      }
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return x.str();
}

HtmlReportData html_report_data(const RunRecord& run) {
  HtmlReportData h;
  h.plugin_name = run.plugin_name;
  h.plugin_version = run.plugin.version;
  h.plugin_path = run.plugin.path;
  h.plugin_sha256 = run.plugin.sha256;
  h.suite_version = kSuiteVersion;
  h.suite_commit = run.commit;
  h.verdict = run.certified ? run.verdict : run.verdict + " (" + std::to_string(run.failed) + " failures)";
  h.relaxed = run.relaxed_items;
  h.profile = run.profile;
  h.totals_line = totals_line(run);
  h.date = run.date;
  h.host = run.host;
  h.seed = std::to_string(run.seed);
  for (const auto& o : run.outcomes) {
    HtmlCase hc;
    hc.op = o.c.display_op();
    hc.dtype = o.c.dtype;
    hc.status = status_name(o.r.status);
    hc.id = o.id;
    hc.reason = o.r.reason;
    hc.repro = o.repro;
    hc.failure = is_failure(o.r.status);
    hc.compared_float = o.r.compared && is_float(dtype_from_name(o.r.out_dtype).value_or(DType::I64));
    hc.max_ulp = o.r.comparison.max_ulp;
    h.cases.push_back(std::move(hc));
  }
  h.worst_errors = run.worst_errors;
  for (const auto& c : run.claims_without_cases) h.warnings.push_back("no manifest case exercises the claimed kernel " + c);
  for (const auto& c : run.uncovered_claims)
    h.warnings.push_back("claimed but not covered by this suite version: " + c.op + " " + c.dtype + " " + c.device);
  return h;
}

deepx::cert::Certificate certificate_of(const RunRecord& run) {
  deepx::cert::Certificate c;
  c.plugin = run.plugin_name;
  c.sha256 = run.plugin.sha256;
  c.suite = kSuiteVersion;
  // The build id that earned the verdict: one .so may serve several (the cpu plugin picks an
  // instruction-set variant at load), and the host honours the certificate only for this one.
  const std::string& build = run.plugin.build_id;
  if (!build.empty() && build.find_first_of(" \t\r\n") == std::string::npos) {
    c.builds.push_back(build);
    // The variant, as the build id names it after its last '+' (deepx-0.1.0+x86-64-v3).
    const size_t plus = build.rfind('+');
    if (plus != std::string::npos && plus + 1 < build.size()) c.isa = build.substr(plus + 1);
  }
  c.verdict = run.verdict;
  c.cpu = single_line(run.cpu);
  for (const auto& [name, version] : run.libraries) c.libraries.push_back({name, version});
  c.tolerance_table_sha256 = tolerance_table_sha256();
  for (const Relaxation* r : run.relaxations_used)
    c.relaxed.push_back(single_line(relaxation_title(*r) + ": " + r->reason));
  for (const auto& claim : run.profile_claims)
    c.kernels.push_back({claim.op, claim.device_type, std::vector<uint32_t>(claim.signature.begin(), claim.signature.end())});
  return c;
}

std::string certificate_text(const RunRecord& run) { return deepx::cert::Write(certificate_of(run)); }

bool write_reports(const RunRecord& run, const std::string& dir, std::string& error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir + ": " + ec.message();
    return false;
  }
  return write_file(fs::path(dir) / "report.json", json_text(json_report(run)) + "\n", error) &&
         write_file(fs::path(dir) / "junit.xml", junit_report(run), error) &&
         write_file(fs::path(dir) / "report.html", render_html_report(html_report_data(run)), error);
}

}  // namespace deepx::conformance
