// The tolerance table (one published table, keyed by op class, dtype and tier) and the
// comparator that applies it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "shape_rules.hpp"

namespace deepx::conformance {

// RtolAtolNormwise: |got - exp| <= atol + rtol * (|exp| + kNormwiseFactor * max|exp| of that
// output), for gradients of softmax-like ops whose elements cancel (a norm-wise floor).
enum class Rule { BitExact, Ulp, ErrorBound, RtolAtol, RtolAtolNormwise };
inline constexpr double kNormwiseFactor = 8;
const char* rule_name(Rule rule);

// One row of the table. Rows are matched in order; the first match wins.
struct ToleranceRow {
  const char* op_class;  // op class name (grad_* for backward kernels), or "*"
  const char* ops;       // comma list of op names, or "*"
  const char* dtypes;    // comma list of dtype names, "int" (integers and bool), "float" or "*"
  const char* tier;      // "exact" or "*"
  Rule rule;
  double ulps;            // Ulp: max distance in ulps of the output dtype
  double rtol, atol;      // RtolAtol: |got-exp| <= atol + rtol*|exp|
  double c;               // ErrorBound: |got-exp| <= c*K*u*sum|terms| + 1 ulp(exp)
  double unit_roundoff;   // ErrorBound: u of the accumulation dtype
  double accumulation_max;// ErrorBound: largest finite value of the accumulation dtype
  const char* source;     // why this rule
};

const std::vector<ToleranceRow>& tolerance_table();

// A relaxation: a looser rule for some (op, dtypes, direction), with a mandatory written reason.
// Every case that uses one shows as RELAXED in every report, and a verdict reached with one is
// "CERTIFIED-with-relaxations".
struct Relaxation {
  const char* op;         // op name
  const char* dtypes;     // as ToleranceRow::dtypes
  const char* direction;  // "forward", "backward" or "*"
  Rule rule;
  double ulps, rtol, atol, c, unit_roundoff, accumulation_max;
  const char* reason;     // required: why the published rule cannot hold here
};
// The relaxations of the published table (compare.cpp). Empty today.
const std::vector<Relaxation>& published_relaxations();
// The relaxations this build applies. Defined in its own translation unit so that the table is
// chosen at link time, never by a flag or an environment variable a vendor could set:
// src/relaxation_table.cpp (deepx-certify) returns published_relaxations();
// tests/relaxation_fixture_table.cpp (the test-only deepx-certify-relaxation-fixture) adds one
// entry, to drive the RELAXED path end to end.
const std::vector<Relaxation>& relaxations();
// How a relaxation is named in reports and certificates ("dx.exp f32 forward <= 8 ulp"), and the
// threshold source of the cases held to it ("relaxation dx.exp f32 forward <= 8 ulp: <reason>").
std::string relaxation_title(const Relaxation& r);
std::string relaxation_source(const Relaxation& r);

// The class whose tolerance rows apply to the backward kernel of `op` ("grad_movement",
// "grad_accumulating", "grad_transcendental", "grad_normalising").
const char* backward_class(const std::string& op);

// The published table (docs/tolerances.md, between its GENERATED markers) as Markdown.
std::string tolerance_table_markdown();
// The table as canonical JSON (what the hash covers).
std::string tolerance_table_json();
std::string tolerance_table_sha256();

struct Tolerance {
  Rule rule = Rule::BitExact;
  double ulps = 0, rtol = 0, atol = 0, c = 0, unit_roundoff = 0, accumulation_max = 0;
  bool ignore_zero_sign = false;  // dx.max, dx.min: which of +0/-0 a tie returns is not specified
  bool relaxed = false;           // from relaxations(): reported as RELAXED
  std::string source;
  std::string describe() const;  // "bit-exact", "<= 4 ulp", ...
};

Tolerance tolerance_for(const std::string& op, DType out_dtype, const std::string& tier, bool backward = false);

struct Comparison {
  bool pass = true;
  int64_t elements = 0;
  int64_t mismatches = 0;
  int64_t unconstrained = 0;  // accumulating elements whose sum|terms| overflows the accumulator
  int64_t worst_index = -1;
  double worst_expected = 0, worst_actual = 0, worst_threshold = 0;
  std::string worst_expected_text, worst_actual_text;  // exact (integers beyond 2^53 too)
  double max_abs = 0, max_rel = 0;
  uint64_t max_ulp = 0;
  std::string reason;  // empty on pass
};

// Compares `n` elements of `dtype` (row-major bytes). `abs_terms`/`K` are needed for
// Rule::ErrorBound (one sum per element).
// `overflow_scale`: the accumulator holds Σ|terms| times this (K for means, whose terms are x / K).
Comparison compare_outputs(const Tolerance& tol, DType dtype, const uint8_t* expected, const uint8_t* actual,
                           int64_t n, const std::vector<double>* abs_terms, int64_t accumulation_length,
                           double overflow_scale = 1);

// True when at least 90% of >= 16 elements share one bit pattern: such an output proves little.
bool mostly_constant(DType dtype, const uint8_t* data, int64_t n);

std::string format_value(DType dtype, double value);

}  // namespace deepx::conformance
