#include <gtest/gtest.h>

#include "isolation.hpp"

using namespace deepx::conformance;

TEST(CertifyIsolation, ResultWireFormatRoundTrips) {
  CaseResult r;
  r.status = Status::Mistrusted;
  static const char kReason[] = "reason with \0 and \xff bytes";
  r.reason = std::string(kReason, sizeof kReason - 1);  // embedded NUL and a non-UTF-8 byte
  r.compared = true;
  r.comparison.pass = true;
  r.comparison.elements = 42;
  r.comparison.mismatches = 3;
  r.comparison.unconstrained = 1;
  r.comparison.worst_index = 7;
  r.comparison.worst_expected = 1.5;
  r.comparison.worst_actual = -2.25;
  r.comparison.worst_threshold = 1e-7;
  r.comparison.worst_expected_text = "1.5";
  r.comparison.worst_actual_text = "-2.25";
  r.comparison.max_abs = 3.75;
  r.comparison.max_rel = 0.5;
  r.comparison.max_ulp = 123456789012ull;
  r.comparison.reason = "why";
  r.tolerance.rule = Rule::ErrorBound;
  r.tolerance.ulps = 4;
  r.tolerance.rtol = 1e-3;
  r.tolerance.atol = 1e-5;
  r.tolerance.c = 2;
  r.tolerance.unit_roundoff = 0x1p-24;
  r.tolerance.accumulation_max = 3.4e38;
  r.tolerance.ignore_zero_sign = true;
  r.tolerance.source = "row 7";
  r.out_dtype = "bf16";
  r.out_shape = {2, 0, 5};
  r.reference_status = DX_ARITHMETIC_ERROR;
  r.plugin_status = DX_UNSUPPORTED;
  r.reference_seconds = 0.125;
  r.plugin_seconds = 0.25;
  r.seconds = 0.5;
  r.determinism_checked = true;
  r.in_place_checked = true;

  const std::string bytes = encode_result(99, r);
  uint64_t index = 0;
  CaseResult back;
  ASSERT_TRUE(decode_result(bytes, index, back));
  EXPECT_EQ(index, 99u);
  EXPECT_EQ(encode_result(99, back), bytes);  // every encoded field survived
  EXPECT_EQ(back.reason, r.reason);
  EXPECT_EQ(back.status, Status::Mistrusted);
  EXPECT_EQ(back.comparison.max_ulp, 123456789012ull);
  EXPECT_EQ(back.out_shape, r.out_shape);
  EXPECT_EQ(back.tolerance.rule, Rule::ErrorBound);
  EXPECT_TRUE(back.in_place_checked);

  // Truncated or padded bytes are refused, not misread.
  EXPECT_FALSE(decode_result(bytes.substr(0, bytes.size() - 1), index, back));
  EXPECT_FALSE(decode_result(bytes + "x", index, back));
  EXPECT_FALSE(decode_result("", index, back));
}

TEST(CertifyIsolation, EveryCaseGetsOneResultInOrder) {
  // Cases the suite cannot run never touch the runtime: the worker answers each with a
  // HARNESS_ERROR, which is enough to check the plumbing (order, count, one worker).
  Environment env;
  std::vector<Case> cases(300);
  for (size_t i = 0; i < cases.size(); ++i) cases[i].op = "dx.no_such_op_" + std::to_string(i);
  std::vector<size_t> order;
  std::vector<std::string> reasons;
  const size_t workers = run_cases_isolated(env, cases, IsolationOptions{}, [&](size_t i, CaseResult r) {
    order.push_back(i);
    reasons.push_back(r.reason);
    EXPECT_EQ(r.status, Status::HarnessError);
  });
  EXPECT_EQ(workers, 1u);
  ASSERT_EQ(order.size(), cases.size());
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_NE(reasons[i].find(cases[i].op), std::string::npos) << reasons[i];
  }
}

TEST(CertifyIsolation, StatusNamesAndFailures) {
  EXPECT_STREQ(status_name(Status::Crash), "CRASH");
  EXPECT_STREQ(status_name(Status::Timeout), "TIMEOUT");
  EXPECT_TRUE(is_failure(Status::Crash));
  EXPECT_TRUE(is_failure(Status::Timeout));
  EXPECT_FALSE(is_failure(Status::Mistrusted));
}

#if defined(__x86_64__) && defined(__GLIBCXX__)
TEST(CertifyIsolation, WireFormatCoversEveryField) {
  // encode_result()/decode_result() list the fields by hand. If one of these structs grows,
  // a new field would silently not cross from the worker to the report: add it to both
  // functions (src/isolation.cpp), then update the sizes here.
  EXPECT_EQ(sizeof(Comparison), 184u) << "Comparison changed: update the result wire format";
  EXPECT_EQ(sizeof(Tolerance), 96u) << "Tolerance changed: update the result wire format";
  EXPECT_EQ(sizeof(CaseResult), 424u) << "CaseResult changed: update the result wire format";
}
#endif
