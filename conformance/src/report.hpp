// What the report writers share without a runtime: JSON values through nlohmann-json (in
// insertion order, so that report.json reads top-down), XML escaping (JUnit), and the worst-error
// rows that report.json, junit.xml, report.html and `--verbose` show.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepx::conformance {

using Json = nlohmann::ordered_json;

// A double as JSON: JSON has no NaN or infinity, so those become the strings "nan", "inf" and
// "-inf" (nlohmann would write null).
Json json_number(double v);
// Compact JSON text. Bytes that are not UTF-8 (a plugin's strings are the vendor's) become
// U+FFFD instead of an exception.
std::string json_text(const Json& value);

std::string xml_escape(std::string_view text);

// The float case with the largest ulp error of one (op, output dtype): the worst-error table.
struct WorstError {
  std::string op;     // as reports show it: "dx.add", "dx.add/backward"
  std::string dtype;  // the output dtype
  std::string id;     // the case id
  uint64_t max_ulp = 0;
  double max_abs = 0, max_rel = 0;
  int64_t index = -1;  // the worst element
  std::string expected, actual;
};

}  // namespace deepx::conformance
