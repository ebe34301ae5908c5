// The runner's report writers, terminal output and command line, without a runtime: a run
// record built by hand goes through report.json (parsed back with nlohmann-json), junit.xml,
// the summary and --verbose; argument vectors go through the CLI.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "reports.hpp"
#include "terminal.hpp"

using namespace deepx::conformance;

namespace {

Outcome outcome(const std::string& op, const std::string& dtype, const std::string& tier, Status status,
                uint64_t max_ulp, const std::string& id) {
  Outcome o;
  o.c.op = op;
  o.c.dtype = dtype;
  o.c.sig = dtype + ":" + dtype + "->" + dtype;
  o.c.device = "cpu";
  o.c.shapes = {{3, 4}};
  o.c.layouts = {"contig"};
  o.c.tier = tier;
  o.c.source = "t.txt:1";
  o.r.status = status;
  o.r.out_dtype = dtype;
  o.r.out_shape = {3, 4};
  o.r.compared = status != Status::NotSupported;
  o.r.comparison.max_ulp = max_ulp;
  o.r.comparison.max_abs = max_ulp * 1e-7;
  o.r.comparison.worst_index = 5;
  o.r.comparison.worst_expected_text = "1.5";
  o.r.comparison.worst_actual_text = "1.5000007";
  o.id = id;
  o.repro = "deepx-certify 'x' --case '" + o.c.line() + "'";
  if (status == Status::Fail) o.r.reason = "1 of 12 elements outside <= 4 ulp";
  return o;
}

// Two dx.add f32 cases (0 and 7 ulp; the 7-ulp one FAILs), one NaN-error dx.exp f32, one
// unclaimed i8 case.
RunRecord sample_run() {
  RunRecord run;
  run.plugin_name = "sample";
  run.plugin.name = "sample";
  run.plugin.version = "1.2";
  run.reference.name = "reference";
  run.outcomes = {outcome("dx.add", "f32", "exact", Status::Pass, 0, "aaaaaaaaaaaa"),
                  outcome("dx.add", "f32", "real", Status::Fail, 7, "bbbbbbbbbbbb"),
                  outcome("dx.exp", "f32", "special", Status::Pass, 2, "cccccccccccc"),
                  outcome("dx.neg", "i8", "real", Status::NotSupported, 0, "dddddddddddd")};
  run.outcomes[2].r.comparison.max_rel = NAN;
  run.outcomes[2].c.mode = "backward";
  run.cases = run.outcomes.size();
  for (const auto& o : run.outcomes) ++run.counts[o.r.status];
  run.failed = 1;
  run.verdict = "NOT CERTIFIED";
  run.profile = "sample: 2 ops x 1 dtypes on cpu, 2 kernels, suite 0.1.0";
  run.seconds = 1.5;
  run.workers = 1;
  run.worst_errors = worst_errors(run.outcomes);
  return run;
}

std::string capture(const std::function<void(FILE*)>& print) {
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  print(f);
  std::fclose(f);
  std::string text(buf, size);
  std::free(buf);
  return text;
}

struct Parsed {
  int status;
  Options options;
  std::string out, err;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "deepx-certify");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Parsed p;
  std::ostringstream out, err;
  p.status = parse_command_line(static_cast<int>(argv.size()), argv.data(), p.options, out, err);
  p.out = out.str();
  p.err = err.str();
  return p;
}

}  // namespace

TEST(CertifyReports, WorstErrorIsTheLargestUlpPerOpAndDtype) {
  const RunRecord run = sample_run();
  ASSERT_EQ(run.worst_errors.size(), 2u);
  EXPECT_EQ(run.worst_errors[0].op, "dx.add");
  EXPECT_EQ(run.worst_errors[0].dtype, "f32");
  EXPECT_EQ(run.worst_errors[0].max_ulp, 7u);
  EXPECT_EQ(run.worst_errors[0].id, "bbbbbbbbbbbb");
  EXPECT_EQ(run.worst_errors[1].op, "dx.exp/backward");  // integer outputs have no ulp row
  EXPECT_EQ(describe_worst_error(run.worst_errors[0]),
            "max ulp 7, max abs 7e-07, max rel 0, case bbbbbbbbbbbb element [5]: expected 1.5 got 1.5000007");
}

TEST(CertifyReports, JsonReportParsesBackWithTotalsVerdictWorstErrorsAndCases) {
  const RunRecord run = sample_run();
  const Json report = Json::parse(json_text(json_report(run)));
  EXPECT_EQ(report["suite"]["name"], "deepx-conformance");
  EXPECT_EQ(report["plugin"]["name"], "sample");
  EXPECT_EQ(report["verdict"], "NOT CERTIFIED");
  EXPECT_EQ(report["totals"]["cases"], 4);
  EXPECT_EQ(report["totals"]["results"], 4);
  EXPECT_EQ(report["totals"]["PASS"], 2);
  EXPECT_EQ(report["totals"]["FAIL"], 1);
  EXPECT_EQ(report["totals"]["NOT_SUPPORTED"], 1);
  EXPECT_EQ(report["totals"]["CRASH"], 0);
  EXPECT_EQ(report["certificate"]["certified"], false);
  EXPECT_TRUE(report["certificate"]["kernels"].empty());
  EXPECT_EQ(report["tolerance_table_sha256"].get<std::string>().size(), 64u);
  EXPECT_TRUE(report["tolerance_table"]["rows"].is_array());
  ASSERT_EQ(report["worst_errors"].size(), 2u);
  EXPECT_EQ(report["worst_errors"][0]["op"], "dx.add");
  EXPECT_EQ(report["worst_errors"][0]["max_ulp"], 7);
  EXPECT_EQ(report["worst_errors"][0]["case"], "bbbbbbbbbbbb");
  EXPECT_EQ(report["worst_errors"][1]["max_rel"], "nan");  // JSON has no NaN
  ASSERT_EQ(report["cases"].size(), 4u);
  EXPECT_EQ(report["cases"][1]["status"], "FAIL");
  EXPECT_EQ(report["cases"][1]["reason"], "1 of 12 elements outside <= 4 ulp");
  EXPECT_EQ(report["cases"][1]["parameters"]["tier"], "real");
  EXPECT_EQ(report["cases"][1]["parameters"]["shapes"][0], "[3,4]");
  EXPECT_EQ(report["cases"][1]["errors"]["max_ulp"], 7);
  EXPECT_EQ(report["cases"][2]["errors"]["max_rel"], "nan");
  EXPECT_FALSE(report["cases"][3].contains("errors"));  // not compared
  // Keys keep the order they were written in: the record reads top-down.
  EXPECT_EQ(report.begin().key(), "suite");
}

TEST(CertifyReports, JunitCarriesTheWorstErrorsAndFailures) {
  const std::string xml = junit_report(sample_run());
  EXPECT_NE(xml.find("<!-- deepx-certify verdict: NOT CERTIFIED -->"), std::string::npos);
  EXPECT_NE(xml.find("<testsuite name=\"dx.add\" tests=\"2\" failures=\"1\""), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"worst_error f32\" value=\"max ulp 7, max abs 7e-07"), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"FAIL\" message=\"1 of 12 elements outside &lt;= 4 ulp\">"), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"\"/>"), std::string::npos);
}

TEST(CertifyReports, HtmlDataCarriesTheWorstErrors) {
  const HtmlReportData h = html_report_data(sample_run());
  ASSERT_EQ(h.worst_errors.size(), 2u);
  EXPECT_EQ(h.verdict, "NOT CERTIFIED (1 failures)");
  EXPECT_EQ(h.totals_line, "tests: 4 passed: 2 failed: 1 not_supported: 1 mistrusted: 0");
}

TEST(CertifySummary, EndsWithVerdictTiersTimeAndWhereTheReportsAre) {
  const RunRecord run = sample_run();
  SummaryText text;
  text.reports_dir = "out";
  const std::string s = capture([&](FILE* f) { print_summary(f, run, text); });
  EXPECT_NE(s.find("summary of sample 1.2 against reference\n"), std::string::npos) << s;
  EXPECT_NE(s.find("cases: 4 (3 forward, 1 backward); by tier: exact 1, real 2 (1 failed), special 1\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("tests: 4 passed: 2 failed: 1 not_supported: 1 mistrusted: 0\n"), std::string::npos) << s;
  EXPECT_NE(s.find("time: 1.50 s (isolated: 1 worker process, per-case timeout 10 s)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("verdict: NOT CERTIFIED (1 failures)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("reports: out/report.json, out/junit.xml, out/report.html\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("worst errors (per op"), std::string::npos) << s;  // that table is --verbose's
  // --fd-check's cases are counted as such.
  RunRecord fd = run;
  fd.outcomes[0].c.mode = "fdcheck";
  const std::string f = capture([&](FILE* out) { print_summary(out, fd, text); });
  EXPECT_NE(f.find("cases: 4 (2 forward, 1 backward, 1 finite-difference); by tier:"), std::string::npos) << f;
  // --quiet: no reports line.
  const std::string quiet = capture([&](FILE* f) { print_summary(f, run, SummaryText{}); });
  EXPECT_EQ(quiet.find("reports:"), std::string::npos);
}

TEST(CertifySummary, WorstErrorsAndMatrixOnlyWithVerbose) {
  const RunRecord run = sample_run();
  const std::string plain = capture([&](FILE* f) { print_details(f, run, false, false); });
  EXPECT_EQ(plain.find("worst errors"), std::string::npos) << plain;
  EXPECT_NE(plain.find("failures:\n  FAIL bbbbbbbbbbbb: 1 of 12 elements outside <= 4 ulp\n    deepx-certify 'x' --case"),
            std::string::npos)
      << plain;
  const std::string verbose = capture([&](FILE* f) { print_details(f, run, false, true); });
  EXPECT_NE(verbose.find("worst errors (per op and output dtype):"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("dx.add f32"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("[5] expected 1.5 got 1.5000007"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("FAIL 1"), std::string::npos) << verbose;  // the matrix cell of dx.add f32
}

TEST(CertifyProgress, NotATerminalWritesAtMostOneLinePerInterval) {
  const RunRecord run = sample_run();
  size_t lines = 0;
  const std::string text = capture([&](FILE* f) {
    Progress p(f, true, 1000, false, std::chrono::hours(1));
    for (size_t i = 1; i <= 1000; ++i) p.update(i, run.outcomes[0].c, 0);
    lines = p.lines();
  });
  EXPECT_EQ(lines, 1u);  // only the final line: the interval never elapsed
  EXPECT_EQ(text, text.substr(0, text.find('\n') + 1));
  EXPECT_EQ(text.rfind("deepx-certify: 1000/1000 cases (100%), 0 failed, ", 0), 0u) << text;
  const std::string off = capture([&](FILE* f) {
    Progress p(f, false, 10, false);
    for (size_t i = 1; i <= 10; ++i) p.update(i, run.outcomes[0].c, 0);
  });
  EXPECT_EQ(off, "");
}

TEST(CertifyProgress, OnATerminalRewritesOneLine) {
  const RunRecord run = sample_run();
  const std::string text = capture([&](FILE* f) {
    Progress p(f, true, 3, true);
    for (size_t i = 1; i <= 3; ++i) p.update(i, run.outcomes[1].c, 1);
  });
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;  // one newline, at the very end
  EXPECT_NE(text.find("\r\033[K[3/3] 1 failed"), std::string::npos) << text;
}

TEST(CertifyCli, KeepsEveryFlagAndItsMeaning) {
  const Parsed p = parse({"cpu", "--reference", "ref.so", "--out", "dir", "--ops", "dx.add,dx.sum", "--ops", "dx.exp",
                          "--seed", "7", "--manifest", "a.txt", "--manifest", "b", "--case", "op=dx.add shapes=[3]",
                          "--list", "-q", "--verbose", "--timeout", "2.5", "--no-isolation", "-j", "3",
                          "--exec-workers", "--certificate", "c.cert", "--sign", "vendor.key", "--perf", "--fd-check"});
  ASSERT_EQ(p.status, kContinue) << p.err;
  const Options& o = p.options;
  EXPECT_EQ(o.plugin, "cpu");
  EXPECT_EQ(o.reference, "ref.so");
  EXPECT_EQ(o.out_dir, "dir");
  EXPECT_EQ(o.ops, (std::set<std::string>{"dx.add", "dx.sum", "dx.exp"}));
  EXPECT_EQ(o.seed, 7u);
  EXPECT_TRUE(o.seed_given);
  EXPECT_EQ(o.manifests, (std::vector<std::string>{"a.txt", "b"}));
  EXPECT_EQ(o.single_case, "op=dx.add shapes=[3]");
  EXPECT_TRUE(o.list_only && o.quiet && o.verbose && o.exec_workers && o.perf && o.fd_check);
  EXPECT_EQ(o.timeout_s, 2.5);
  EXPECT_FALSE(o.isolate);
  EXPECT_EQ(o.jobs, 3u);
  EXPECT_EQ(o.certificate_path, "c.cert");
  EXPECT_EQ(o.sign_key, "vendor.key");
  EXPECT_EQ(o.worker_fd, -1);
}

TEST(CertifyCli, DefaultsAndWorkerArguments) {
  const Parsed d = parse({"reference"});
  ASSERT_EQ(d.status, kContinue) << d.err;
  EXPECT_EQ(d.options.reference, "reference");
  EXPECT_EQ(d.options.out_dir, "deepx-certification");
  EXPECT_EQ(d.options.seed, 1u);
  EXPECT_FALSE(d.options.seed_given);
  EXPECT_TRUE(d.options.isolate);
  EXPECT_FALSE(d.options.verbose);
  EXPECT_EQ(d.options.timeout_s, 10.0);
  EXPECT_EQ(d.options.jobs, 1u);
  const Parsed w = parse({"cpu", "--worker-fd", "3", "--worker-start", "10", "--worker-end", "20", "--worker-hash", "h:2"});
  ASSERT_EQ(w.status, kContinue) << w.err;
  EXPECT_EQ(w.options.worker_fd, 3);
  EXPECT_EQ(w.options.worker_start, 10u);
  EXPECT_EQ(w.options.worker_end, 20u);
  EXPECT_EQ(w.options.worker_hash, "h:2");
  // --print-tolerances needs no plugin.
  EXPECT_EQ(parse({"--print-tolerances"}).status, kContinue);
}

TEST(CertifyCli, BadArgumentsGiveAClearErrorAndExitTwo) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Bad& bad : std::vector<Bad>{{{"cpu", "--bogus"}, "--bogus"},
                                         {{}, "PLUGIN is required"},
                                         {{"cpu", "other"}, "other"},
                                         {{"cpu", "--seed", "x"}, "--seed"},
                                         {{"cpu", "--seed", "-1"}, "--seed"},
                                         {{"cpu", "--timeout", "0"}, "positive number of seconds"},
                                         {{"cpu", "--timeout", "soon"}, "positive number of seconds"},
                                         {{"cpu", "--jobs", "0"}, "--jobs"},
                                         {{"cpu", "--jobs", "257"}, "--jobs"},
                                         {{"cpu", "--out"}, "--out"}}) {
    const Parsed p = parse(bad.args);
    std::string joined;
    for (const auto& a : bad.args) joined += a + " ";
    EXPECT_EQ(p.status, kExitHarness) << joined;
    EXPECT_EQ(p.err.rfind("deepx-certify: ", 0), 0u) << joined << "\n" << p.err;
    EXPECT_NE(p.err.find(bad.message), std::string::npos) << joined << "\n" << p.err;
    EXPECT_NE(p.err.find("Run 'deepx-certify --help' for every option."), std::string::npos) << p.err;
    EXPECT_EQ(p.out, "");
  }
}

TEST(CertifyCli, HelpListsTheOptionsAndExitsZero) {
  const Parsed p = parse({"--help"});
  EXPECT_EQ(p.status, kExitCertified);
  for (const char* flag : {"--reference", "--out", "--ops", "--seed", "--manifest", "--case", "--list", "--quiet",
                           "--verbose", "--timeout", "--no-isolation", "--jobs", "--exec-workers", "--certificate",
                           "--sign", "--perf", "--fd-check", "--print-tolerances", "Exit status"})
    EXPECT_NE(p.out.find(flag), std::string::npos) << flag;
  EXPECT_EQ(p.out.find("--worker-fd"), std::string::npos);  // internal
  EXPECT_EQ(p.err, "");
}
