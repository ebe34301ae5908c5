#include "report.hpp"

#include <cmath>

namespace deepx::conformance {

Json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string json_text(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

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

}  // namespace deepx::conformance
