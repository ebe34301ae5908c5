#include "compare.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "digest.hpp"
#include "report.hpp"

namespace deepx::conformance {


const char* rule_name(Rule rule) {
  switch (rule) {
    case Rule::BitExact: return "bit_exact";
    case Rule::Ulp: return "ulp";
    case Rule::ErrorBound: return "error_bound";
    case Rule::RtolAtol: return "rtol_atol";
    case Rule::RtolAtolNormwise: return "rtol_atol_normwise";
  }
  return "?";
}

namespace {
constexpr double kU32 = 0x1.0p-24, kU64 = 0x1.0p-53;
constexpr double kMax32 = 3.4028234663852886e38, kMax64 = std::numeric_limits<double>::max();
}  // namespace

const std::vector<ToleranceRow>& tolerance_table() {
  static const std::vector<ToleranceRow> rows = {
      {"*", "*", "int", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0, "integer and bool results are exact (wrapping is defined)"},
      {"movement", "*", "*", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0, "data movement copies bits; casts round once"},
      {"random", "dx.normal", "f64", "*", Rule::Ulp, 4, 0, 0, 0, 0, 0,
       "f64 normal: log and cos are not correctly rounded in every libm (CUDA's: 1 and 2 ulp), so <= 4 ulp"},
      {"random", "*", "*", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0,
       "Philox-4x32-10 stream with a fixed element-to-counter map, each value computed in f64 and rounded once"},
      {"exact_arith", "*", "*", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0, "the result is an input, its negation or an exact value"},
      {"basic_arith", "*", "*", "exact", Rule::BitExact, 0, 0, 0, 0, 0, 0, "exact tier: every result is representable"},
      {"accumulating", "*", "*", "exact", Rule::BitExact, 0, 0, 0, 0, 0, 0,
       "exact tier: every partial sum is an integer below 2^24, exact in f32 and f64"},
      {"basic_arith", "*", "f64,f32", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0,
       "IEEE basic operations are correctly rounded"},
      {"basic_arith", "*", "f16,bf16", "*", Rule::Ulp, 1, 0, 0, 0, 0, 0, "f16/bf16 arithmetic: <= 1 ulp of the output dtype"},
      {"transcendental", "dx.tanh,dx.erf,dx.pow", "f32", "*", Rule::Ulp, 8, 0, 0, 0, 0, 0,
       "f64 reference rounded once: <= 8 ulp for tanh, erf, pow in f32"},
      {"transcendental", "*", "f64,f32", "*", Rule::Ulp, 4, 0, 0, 0, 0, 0, "f64 reference rounded once: <= 4 ulp"},
      {"transcendental", "*", "f16,bf16", "*", Rule::Ulp, 1, 0, 0, 0, 0, 0, "f64 reference rounded once: <= 1 ulp"},
      {"accumulating", "*", "f64", "*", Rule::ErrorBound, 0, 0, 0, 2, kU64, kMax64,
       "c*K*u*sum|terms| + 1 ulp, c=2, u=2^-53 (f64 accumulation)"},
      {"accumulating", "*", "f32,f16,bf16", "*", Rule::ErrorBound, 0, 0, 0, 2, kU32, kMax32,
       "c*K*u*sum|terms| + 1 ulp, c=2, u=2^-24 (f32-or-better accumulation)"},
      {"normalising", "*", "f64", "*", Rule::RtolAtol, 0, 1e-7, 1e-7, 0, 0, 0, "PyTorch default rtol/atol"},
      {"normalising", "*", "f32", "*", Rule::RtolAtol, 0, 1.3e-6, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      {"normalising", "*", "f16", "*", Rule::RtolAtol, 0, 1e-3, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      {"normalising", "*", "bf16", "*", Rule::RtolAtol, 0, 1.6e-2, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      // Backward kernels (input gradients), by the backward's own class.
      {"grad_movement", "*", "*", "*", Rule::BitExact, 0, 0, 0, 0, 0, 0,
       "gradients routed or copied unchanged"},
      {"grad_accumulating", "*", "f64", "*", Rule::ErrorBound, 0, 0, 0, 2, kU64, kMax64,
       "c*K*u*sum|terms| + 1 ulp, c=2, u=2^-53; K is the longest of the forward accumulation, any dim, and each broadcast reduction"},
      {"grad_accumulating", "*", "f32,f16,bf16", "*", Rule::ErrorBound, 0, 0, 0, 2, kU32, kMax32,
       "c*K*u*sum|terms| + 1 ulp, c=2, u=2^-24; K as for f64"},
      {"grad_transcendental", "*", "f64", "*", Rule::RtolAtol, 0, 1e-7, 1e-7, 0, 0, 0, "PyTorch default rtol/atol"},
      {"grad_transcendental", "*", "f32", "*", Rule::RtolAtol, 0, 1.3e-6, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      {"grad_transcendental", "*", "f16", "*", Rule::RtolAtol, 0, 1e-3, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      {"grad_transcendental", "*", "bf16", "*", Rule::RtolAtol, 0, 1.6e-2, 1e-5, 0, 0, 0, "PyTorch default rtol/atol"},
      {"grad_normalising", "*", "f64", "*", Rule::RtolAtolNormwise, 0, 1e-7, 1e-7, 0, 0, 0,
       "PyTorch default rtol/atol plus a norm-wise floor: these gradients cancel (dy - sum(dy*y))"},
      {"grad_normalising", "*", "f32", "*", Rule::RtolAtolNormwise, 0, 1.3e-6, 1e-5, 0, 0, 0,
       "PyTorch default rtol/atol plus a norm-wise floor: these gradients cancel (dy - sum(dy*y))"},
      {"grad_normalising", "*", "f16", "*", Rule::RtolAtolNormwise, 0, 1e-3, 1e-5, 0, 0, 0,
       "PyTorch default rtol/atol plus a norm-wise floor: these gradients cancel (dy - sum(dy*y))"},
      {"grad_normalising", "*", "bf16", "*", Rule::RtolAtolNormwise, 0, 1.6e-2, 1e-5, 0, 0, 0,
       "PyTorch default rtol/atol plus a norm-wise floor: these gradients cancel (dy - sum(dy*y))"},
  };
  return rows;
}

const std::vector<Relaxation>& published_relaxations() {
  // Add an entry only with a reason a reviewer can check; none is needed today.
  static const std::vector<Relaxation> entries = {};
  return entries;
}

namespace {
// A tolerance with the limits of a table row (ToleranceRow or Relaxation: the same fields).
template <class Row>
Tolerance limits_of(const Row& r) {
  Tolerance t;
  t.rule = r.rule;
  t.ulps = r.ulps;
  t.rtol = r.rtol;
  t.atol = r.atol;
  t.c = r.c;
  t.unit_roundoff = r.unit_roundoff;
  t.accumulation_max = r.accumulation_max;
  return t;
}

std::string relaxation_limit(const Relaxation& r) { return limits_of(r).describe(); }
}  // namespace

std::string relaxation_title(const Relaxation& r) {
  return std::string(r.op) + " " + r.dtypes + " " + r.direction + " " + relaxation_limit(r);
}

std::string relaxation_source(const Relaxation& r) { return "relaxation " + relaxation_title(r) + ": " + r.reason; }

const char* backward_class(const std::string& op) {
  static const std::set<std::string> movement = {
      "dx.neg",  "dx.relu",    "dx.abs",  "dx.sign",  "dx.clamp", "dx.max",   "dx.min",
      "dx.transpose", "dx.copy", "dx.reshape", "dx.slice", "dx.pad", "dx.split", "dx.concat"};
  static const std::set<std::string> accumulating = {
      "dx.add",        "dx.sub",          "dx.mul",        "dx.div",       "dx.matmul",     "dx.linear",
      "dx.conv2d",     "dx.sum",          "dx.mean",       "dx.prod",      "dx.avg_pool2d", "dx.max_pool2d",
      "dx.broadcast_to", "dx.tile",       "dx.index_select", "dx.embedding", "dx.gather",   "dx.scatter_add",
      "dx.cast",       "dx.dropout",      "dx.reciprocal", "dx.sqrt",     "dx.maximum",    "dx.minimum",
      "dx.where"};
  static const std::set<std::string> normalising = {"dx.softmax",    "dx.log_softmax", "dx.layer_norm",
                                                    "dx.rms_norm",   "dx.batch_norm",  "dx.cross_entropy",
                                                    "dx.scaled_dot_product_attention"};
  if (movement.count(op)) return "grad_movement";
  if (accumulating.count(op)) return "grad_accumulating";
  if (normalising.count(op)) return "grad_normalising";
  return "grad_transcendental";
}

std::string tolerance_table_json() {
  Json rows = Json::array();
  for (const auto& r : tolerance_table())
    rows.push_back({{"op_class", r.op_class},
                    {"ops", r.ops},
                    {"dtypes", r.dtypes},
                    {"tier", r.tier},
                    {"rule", rule_name(r.rule)},
                    {"ulps", json_number(r.ulps)},
                    {"rtol", json_number(r.rtol)},
                    {"atol", json_number(r.atol)},
                    {"c", json_number(r.c)},
                    {"unit_roundoff", json_number(r.unit_roundoff)},
                    {"source", r.source}});
  // Relaxations are part of the published table: a new one changes the hash.
  Json relaxed = Json::array();
  for (const auto& r : relaxations())
    relaxed.push_back({{"op", r.op},
                       {"dtypes", r.dtypes},
                       {"direction", r.direction},
                       {"rule", rule_name(r.rule)},
                       {"limit", relaxation_limit(r)},
                       {"reason", r.reason}});
  Json table = Json::object();
  table["rows"] = std::move(rows);
  table["relaxations"] = std::move(relaxed);
  return json_text(table);
}

std::string tolerance_table_sha256() { return sha256_hex(tolerance_table_json()); }

std::string Tolerance::describe() const {
  char buf[160];
  switch (rule) {
    case Rule::BitExact: return ignore_zero_sign ? "bit-exact (+0 == -0)" : "bit-exact";
    case Rule::Ulp: std::snprintf(buf, sizeof buf, "<= %g ulp", ulps); return buf;
    case Rule::ErrorBound: std::snprintf(buf, sizeof buf, "<= %g*K*%g*sum|terms| + 1 ulp", c, unit_roundoff); return buf;
    case Rule::RtolAtol: std::snprintf(buf, sizeof buf, "rtol %g atol %g", rtol, atol); return buf;
    case Rule::RtolAtolNormwise:
      std::snprintf(buf, sizeof buf, "rtol %g atol %g + %g*rtol*max|expected|", rtol, atol, kNormwiseFactor);
      return buf;
  }
  return "?";
}

namespace {
// Whether the comma-separated `list` names `item`; "*" names everything.
bool list_has(const char* list, const std::string& item) {
  std::string s = list;
  if (s == "*") return true;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (s.substr(start, comma - start) == item) return true;
    start = comma + 1;
  }
  return false;
}

// list_has for dtype names, where "int" and "float" also name the two kinds.
bool dtype_matches(const char* list, DType d) {
  const std::string s = list;
  if (s == "int") return !is_float(d);
  if (s == "float") return is_float(d);
  return list_has(list, name(d));
}
}  // namespace

Tolerance tolerance_for(const std::string& op, DType out_dtype, const std::string& tier, bool backward) {
  const OpRule* rule = find_op_rule(op);
  const std::string cls = backward ? backward_class(op) : (rule ? op_class_name(rule->op_class) : "other");
  Tolerance t;
  for (const auto& r : relaxations()) {
    if (op != r.op || !dtype_matches(r.dtypes, out_dtype)) continue;
    const std::string dir = r.direction;
    if (dir != "*" && dir != (backward ? "backward" : "forward")) continue;
    t = limits_of(r);
    t.relaxed = true;
    t.source = relaxation_source(r);
    return t;
  }
  for (const auto& r : tolerance_table()) {
    if (!list_has(r.op_class, cls)) continue;
    if (!list_has(r.ops, op)) continue;
    if (!dtype_matches(r.dtypes, out_dtype)) continue;
    if (std::string(r.tier) != "*" && r.tier != tier) continue;
    t = limits_of(r);
    t.source = std::string("table: ") + r.op_class + "/" + r.ops + "/" + r.dtypes + "/" + r.tier + ": " + r.source;
    break;
  }
  if (t.source.empty()) {  // every op of the suite has a row; unknown ops get PyTorch's floor
    t.rule = Rule::RtolAtol;
    t.rtol = 1.3e-6;
    t.atol = 1e-5;
    t.source = "fallback: PyTorch defaults";
  }
  // A reduction that returns one of its inputs may return either zero of a +0/-0 tie; an exact
  // sum whose value is zero has the sign of wherever its accumulation started (a BLAS writes
  // a*b = -0 for K = 1, a loop from +0 gives +0).
  t.ignore_zero_sign = is_float(out_dtype) &&
                       ((!backward && (op == "dx.max" || op == "dx.min" || op == "dx.max_pool2d")) ||
                        (cls == "accumulating" && tier == "exact"));
  return t;
}

std::string tolerance_table_markdown() {
  std::string md = "| # | op class | ops | output dtypes | tier | rule | limit | why |\n|---|---|---|---|---|---|---|---|\n";
  char buf[200];
  int n = 0;
  for (const auto& r : tolerance_table()) {
    std::string limit;
    switch (r.rule) {
      case Rule::BitExact: limit = "bit-exact"; break;
      case Rule::Ulp: std::snprintf(buf, sizeof buf, "<= %g ulp", r.ulps); limit = buf; break;
      case Rule::ErrorBound:
        std::snprintf(buf, sizeof buf, "c·K·u·Σ\\|terms\\| + 1 ulp, c = %g, u = 2^%d", r.c,
                      static_cast<int>(std::lround(std::log2(r.unit_roundoff))));
        limit = buf;
        break;
      case Rule::RtolAtol: std::snprintf(buf, sizeof buf, "rtol %g, atol %g", r.rtol, r.atol); limit = buf; break;
      case Rule::RtolAtolNormwise:
        std::snprintf(buf, sizeof buf, "rtol %g, atol %g, + %g·rtol·max\\|expected\\|", r.rtol, r.atol, kNormwiseFactor);
        limit = buf;
        break;
    }
    std::string why = r.source;
    for (size_t p = 0; (p = why.find('|', p)) != std::string::npos; p += 2) why.replace(p, 1, "\\|");
    md += "| " + std::to_string(++n) + " | " + r.op_class + " | " + r.ops + " | " + r.dtypes + " | " + r.tier + " | " +
          rule_name(r.rule) + " | " + limit + " | " + why + " |\n";
  }
  md += "\nRELAXED entries (each with its reason):";
  if (relaxations().empty()) md += " none.\n";
  else {
    md += "\n\n";
    for (const auto& r : relaxations())
      md += "- " + relaxation_title(r) + " (" + rule_name(r.rule) + "): " + r.reason + "\n";
  }
  return md;
}

std::string format_value(DType dtype, double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  if (!is_float(dtype)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.*g", dtype == DType::F64 ? 17 : 9, v);
  return buf;
}

Comparison compare_outputs(const Tolerance& tol, DType dtype, const uint8_t* expected, const uint8_t* actual,
                           int64_t n, const std::vector<double>* abs_terms, int64_t k, double overflow_scale) {
  Comparison c;
  double max_expected = 0;  // RtolAtolNormwise: the output's largest finite |expected|
  if (tol.rule == Rule::RtolAtolNormwise && is_float(dtype))
    for (int64_t i = 0; i < n; ++i) {
      const double e = load_double(dtype, expected + static_cast<size_t>(i) * static_cast<size_t>(byte_size(dtype)));
      if (std::isfinite(e)) max_expected = std::max(max_expected, std::fabs(e));
    }
  c.elements = n;
  const size_t width = static_cast<size_t>(byte_size(dtype));
  double worst_score = -1;
  bool worst_ok = true;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* pe = expected + static_cast<size_t>(i) * width;
    const uint8_t* pa = actual + static_cast<size_t>(i) * width;
    double e, a, threshold = 0, score = 0;
    bool ok = false;
    if (!is_float(dtype)) {
      const int64_t ie = load_int(dtype, pe), ia = load_int(dtype, pa);
      e = static_cast<double>(ie);
      a = static_cast<double>(ia);
      ok = ie == ia;
      const double diff = std::fabs(e - a);
      c.max_abs = std::max(c.max_abs, diff);
      score = diff;
    } else {
      e = load_double(dtype, pe);
      a = load_double(dtype, pa);
      if (tol.rule == Rule::ErrorBound && abs_terms && static_cast<size_t>(i) < abs_terms->size()) {
        const double terms = (*abs_terms)[static_cast<size_t>(i)];
        if (std::isfinite(terms) && terms * overflow_scale >= tol.accumulation_max) {  // the accumulator may overflow
          ++c.unconstrained;
          continue;
        }
        threshold = tol.c * static_cast<double>(std::max<int64_t>(k, 1)) * tol.unit_roundoff * terms +
                    ulp_of(dtype, e);
      }
      if (std::isnan(e) || std::isnan(a)) {
        ok = std::isnan(e) && std::isnan(a);
        score = ok ? 0 : INFINITY;
      } else if (std::isinf(e) || std::isinf(a)) {
        ok = e == a;
        score = ok ? 0 : INFINITY;
      } else {
        const double diff = std::fabs(e - a);
        const uint64_t ulps = ulp_distance(dtype, e, a);
        c.max_abs = std::max(c.max_abs, diff);
        if (e != 0) c.max_rel = std::max(c.max_rel, diff / std::fabs(e));
        c.max_ulp = std::max(c.max_ulp, ulps);
        switch (tol.rule) {
          case Rule::BitExact:
            ok = tol.ignore_zero_sign ? e == a : load_bits(dtype, pe) == load_bits(dtype, pa);
            score = ok ? 0 : static_cast<double>(std::max<uint64_t>(ulps, 1));
            break;
          case Rule::Ulp:
            threshold = tol.ulps;
            ok = static_cast<double>(ulps) <= tol.ulps;
            score = static_cast<double>(ulps) / std::max(tol.ulps, 1.0);
            break;
          case Rule::ErrorBound:
            ok = diff <= threshold;
            score = threshold > 0 ? diff / threshold : (diff > 0 ? INFINITY : 0);
            break;
          case Rule::RtolAtolNormwise:
          case Rule::RtolAtol:
            threshold = tol.atol + tol.rtol * std::fabs(e) +
                        (tol.rule == Rule::RtolAtolNormwise ? kNormwiseFactor * tol.rtol * max_expected : 0);
            ok = diff <= threshold;
            score = diff / threshold;
            break;
        }
      }
    }
    if (!ok) {
      ++c.mismatches;
    }
    // The worst element: any failing one beats every passing one; then the largest score.
    if (c.worst_index < 0 || (!ok && worst_ok) || (ok == worst_ok && score > worst_score)) {
      worst_ok = ok;
      worst_score = score;
      c.worst_index = i;
      c.worst_expected = e;
      c.worst_actual = a;
      c.worst_threshold = threshold;
    }
  }
  c.pass = c.mismatches == 0;
  if (c.worst_index >= 0) {
    const uint8_t* pe = expected + static_cast<size_t>(c.worst_index) * width;
    const uint8_t* pa = actual + static_cast<size_t>(c.worst_index) * width;
    c.worst_expected_text = is_float(dtype) ? format_value(dtype, c.worst_expected) : std::to_string(load_int(dtype, pe));
    c.worst_actual_text = is_float(dtype) ? format_value(dtype, c.worst_actual) : std::to_string(load_int(dtype, pa));
  }
  if (!c.pass) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%lld of %lld elements outside %s; worst at index %lld: expected %s, got %s",
                  static_cast<long long>(c.mismatches), static_cast<long long>(n), tol.describe().c_str(),
                  static_cast<long long>(c.worst_index), c.worst_expected_text.c_str(), c.worst_actual_text.c_str());
    c.reason = buf;
    if (is_float(dtype) && std::isfinite(c.worst_expected) && std::isfinite(c.worst_actual)) {
      std::snprintf(buf, sizeof buf, " (%llu ulp, abs %.3g)",
                    static_cast<unsigned long long>(ulp_distance(dtype, c.worst_expected, c.worst_actual)),
                    std::fabs(c.worst_expected - c.worst_actual));
      c.reason += buf;
    }
  }
  return c;
}

bool mostly_constant(DType dtype, const uint8_t* data, int64_t n) {
  if (n < 16) return false;
  const size_t width = static_cast<size_t>(byte_size(dtype));
  auto bits_at = [&](int64_t i) { return load_bits(dtype, data + static_cast<size_t>(i) * width); };
  // A value held by >= 90% of the elements is the majority: find the candidate with the
  // Boyer-Moore vote, then count it.
  uint64_t candidate = 0;
  int64_t votes = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t b = bits_at(i);
    if (votes == 0) candidate = b;
    votes += b == candidate ? 1 : -1;
  }
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += bits_at(i) == candidate;
  return count * 10 >= n * 9;
}

}  // namespace deepx::conformance
