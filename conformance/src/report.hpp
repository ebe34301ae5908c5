// Report writers: a small streaming JSON writer and XML escaping (JUnit).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepx::conformance {

std::string json_escape(std::string_view text);  // without the surrounding quotes
std::string xml_escape(std::string_view text);

// Writes compact JSON; the caller pairs begin/end calls. Non-finite doubles become strings
// ("nan", "inf", "-inf") since JSON has no such numbers.
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(uint64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);  // an already-encoded value
  const std::string& str() const { return out_; }

 private:
  void separator();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace deepx::conformance
