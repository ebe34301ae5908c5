// The certificate's line format: Write and Parse (certificate.h, certificate/README.md).
#include <cstdlib>
#include <map>
#include <set>

#include "certificate.h"

namespace deepx::cert {
namespace {

// One word: spaces and control characters would change how the line splits.
std::string Word(std::string_view s) {
  std::string w;
  for (char c : s) w += (static_cast<unsigned char>(c) <= ' ') ? '_' : c;
  return w.empty() ? std::string("-") : w;
}

// The rest of a line: no newline may end it early.
std::string Rest(std::string_view s) {
  std::string r;
  for (char c : s) r += (c == '\n' || c == '\r') ? ' ' : c;
  return r;
}

bool IsHex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::vector<std::string_view> Fields(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ParseUnsigned(std::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace

bool VerdictGrantsTrust(std::string_view verdict) {
  return verdict == "CERTIFIED" || verdict == "CERTIFIED-with-relaxations";
}

std::string Write(const Certificate& c) {
  std::string t = "deepx-certificate " + std::to_string(kFormat) + "\n";
  t += "plugin " + Word(c.plugin) + "\n";
  t += "sha256 " + Word(c.sha256) + "\n";
  t += "suite " + Word(c.suite) + "\n";
  for (const auto& b : c.builds) t += "build " + Word(b) + "\n";
  if (!c.verdict.empty()) t += "verdict " + Rest(c.verdict) + "\n";
  if (!c.isa.empty()) t += "isa " + Word(c.isa) + "\n";
  if (!c.cpu.empty()) t += "cpu " + Rest(c.cpu) + "\n";
  for (const auto& l : c.libraries) t += "library " + Word(l.name) + " " + Word(l.version) + "\n";
  if (!c.tolerance_table_sha256.empty())
    t += "tolerance_table_sha256 " + Word(c.tolerance_table_sha256) + "\n";
  for (const auto& r : c.relaxed) t += "relaxed " + Rest(r) + "\n";
  for (const auto& k : c.kernels) {
    t += "kernel " + Word(k.op) + " " + std::to_string(k.device_type) + " ";
    for (size_t i = 0; i < k.dtypes.size(); ++i) t += (i ? "," : "") + std::to_string(k.dtypes[i]);
    if (k.dtypes.empty()) t += "-";
    t += "\n";
  }
  return t;
}

bool Parse(std::string_view text, Certificate* out, std::string* why) {
  *out = Certificate{};
  auto fail = [&](size_t line, const std::string& what) {
    *why = line ? "line " + std::to_string(line) + ": " + what : what;
    return false;
  };
  size_t first_end = text.find('\n');
  std::string_view first = text.substr(0, first_end);
  if (first == "deepx-certificate 1") {
    out->format = 1;
  } else if (first == "deepx-certificate 2") {
    out->format = 2;
  } else {
    return fail(0, "not a deepx certificate (the first line must be 'deepx-certificate 2', or 1)");
  }
  std::set<std::string> seen;
  size_t pos = first_end == std::string_view::npos ? text.size() : first_end + 1;
  size_t number = 1;
  size_t signed_by_end = 0;  // offset just past the signed-by line
  bool have_signature = false;
  while (pos < text.size()) {
    ++number;
    size_t end = text.find('\n', pos);
    const size_t line_start = pos;
    std::string_view line = text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (have_signature) return fail(number, "text after the signature line (the signature must end the file)");
    if (line.empty() || line[0] == '#') continue;
    if (line.find('\0') != std::string_view::npos) return fail(number, "a NUL byte");
    const size_t space = line.find(' ');
    const std::string key(line.substr(0, space));
    const std::string_view value = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    static const std::set<std::string> kSingle = {"plugin", "sha256", "suite", "verdict", "isa", "cpu",
                                                   "tolerance_table_sha256", "signed-by", "signature"};
    if (kSingle.count(key) && !seen.insert(key).second) return fail(number, "a second '" + key + "' line");
    const auto fields = Fields(value);
    if (key == "plugin") {
      if (fields.size() != 1) return fail(number, "malformed plugin line");
      out->plugin = std::string(fields[0]);
    } else if (key == "sha256") {
      if (fields.size() != 1 || !IsHex64(fields[0])) return fail(number, "no valid sha256 line (64 lowercase hex digits)");
      out->sha256 = std::string(fields[0]);
    } else if (key == "suite") {
      out->suite = std::string(value);
    } else if (key == "build") {
      if (fields.size() != 1) return fail(number, "empty build line");
      out->builds.emplace_back(fields[0]);
    } else if (key == "verdict") {
      if (value.empty()) return fail(number, "empty verdict line");
      out->verdict = std::string(value);
    } else if (key == "isa") {
      out->isa = std::string(value);
    } else if (key == "cpu") {
      out->cpu = std::string(value);
    } else if (key == "library") {
      if (fields.size() != 2) return fail(number, "malformed library line (library <name> <version>)");
      out->libraries.push_back({std::string(fields[0]), std::string(fields[1])});
    } else if (key == "tolerance_table_sha256") {
      out->tolerance_table_sha256 = std::string(value);
    } else if (key == "relaxed") {
      out->relaxed.emplace_back(value);
    } else if (key == "kernel") {
      if (fields.size() != 3) return fail(number, "malformed kernel line (kernel <op> <device type> <dtype,dtype,...>)");
      Kernel k;
      k.op = std::string(fields[0]);
      uint64_t device = 0;
      if (!ParseUnsigned(fields[1], 0x7FFFFFFF, &device)) return fail(number, "malformed kernel line (device type)");
      k.device_type = static_cast<int32_t>(device);
      std::string_view list = fields[2];
      size_t i = 0;
      while (true) {
        size_t comma = list.find(',', i);
        std::string_view item = list.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i);
        uint64_t v = 0;
        if (!ParseUnsigned(item, 0xFFFFFFFFull, &v)) return fail(number, "malformed dtype '" + std::string(item) + "'");
        k.dtypes.push_back(static_cast<uint32_t>(v));
        if (comma == std::string_view::npos) break;
        i = comma + 1;
      }
      out->kernels.push_back(std::move(k));
    } else if (key == "signed-by") {
      if (fields.size() != 1 || !IsHex64(fields[0])) return fail(number, "malformed signed-by line (a key id: 64 hex digits)");
      out->signed_by = std::string(fields[0]);
      signed_by_end = pos;
    } else if (key == "signature") {
      if (out->signed_by.empty()) return fail(number, "a signature line without a signed-by line before it");
      if (fields.size() != 1) return fail(number, "malformed signature line");
      out->signature = std::string(fields[0]);
      out->signed_text = std::string(text.substr(0, line_start));
      have_signature = true;
    }
    // Other keys: written by a later suite; ignored here, covered by the signature when signed.
  }
  if (!out->signed_by.empty() && !have_signature) return fail(0, "a signed-by line without a signature line");
  if (have_signature && out->signed_text.size() != signed_by_end)
    return fail(0, "lines between the signed-by and the signature lines");
  if (out->plugin.empty()) return fail(0, "no plugin line");
  if (out->sha256.empty()) return fail(0, "no valid sha256 line");
  return true;
}

}  // namespace deepx::cert
