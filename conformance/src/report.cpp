#include "report.hpp"

#include <cmath>
#include <cstdio>

namespace deepx::conformance {

std::string json_escape(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even as references.
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') out += '?';
        else out += static_cast<char>(c);
    }
  }
  return out;
}

void JsonWriter::separator() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separator();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  separator();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view k) {
  separator();
  out_ += '"' + json_escape(k) + "\":";
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view v) {
  separator();
  out_ += '"' + json_escape(v) + '"';
  return *this;
}
JsonWriter& JsonWriter::value(double v) {
  if (std::isnan(v)) return value(std::string_view("nan"));
  if (std::isinf(v)) return value(std::string_view(v > 0 ? "inf" : "-inf"));
  separator();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out_ += buf;
  return *this;
}
JsonWriter& JsonWriter::value(int64_t v) {
  separator();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::value(uint64_t v) {
  separator();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::value(bool v) {
  separator();
  out_ += v ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::null() {
  separator();
  out_ += "null";
  return *this;
}
JsonWriter& JsonWriter::raw(std::string_view json) {
  separator();
  out_ += json;
  return *this;
}

}  // namespace deepx::conformance
