// The report writers of a run: report.json (nlohmann-json), junit.xml, report.html (through
// html_report.hpp) and the certificate's text. Each takes the run's record and returns text, so
// they are unit-tested without a runtime.
#pragma once

#include <string>
#include <vector>

#include "certificate.h"
#include "html_report.hpp"
#include "run_record.hpp"

namespace deepx::conformance {

// The float case with the largest ulp error per (op, output dtype), in (op, dtype) order.
std::vector<WorstError> worst_errors(const std::vector<Outcome>& outcomes);
// "max ulp 3, max abs 1e-07, max rel 2e-07, case <id> element [5]: expected 1.5 got 1.50001".
std::string describe_worst_error(const WorstError& w);

// report.json: the record of the run (suite, plugins, tolerance table, totals, verdict,
// certificate summary, worst errors, every case).
Json json_report(const RunRecord& run);
// junit.xml: one <testsuite> per op; the verdict as a comment, relaxations and worst errors as
// properties of the op's suite.
std::string junit_report(const RunRecord& run);
HtmlReportData html_report_data(const RunRecord& run);
// The certificate of a run (certificate/src/certificate.h): the plugin's SHA-256, the verdict,
// the build, ISA variant, CPU and libraries, the relaxations and the certified kernels.
deepx::cert::Certificate certificate_of(const RunRecord& run);
// Its text, unsigned (deepx::cert::Write); `deepx certify --sign KEY` signs it instead.
std::string certificate_text(const RunRecord& run);

// Writes report.json, junit.xml and report.html into `dir` (created if needed). False, with
// `error`, when one cannot be written.
bool write_reports(const RunRecord& run, const std::string& dir, std::string& error);

}  // namespace deepx::conformance
