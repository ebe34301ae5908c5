#include "manifest.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "shape_rules.hpp"

namespace deepx::conformance {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool parse_i64(std::string_view text, int64_t& out) {
  std::string s(trim(text));
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_f64(std::string_view text, double& out) {
  std::string s(trim(text));
  if (s.empty()) return false;
  if (s == "inf" || s == "+inf") { out = INFINITY; return true; }
  if (s == "-inf") { out = -INFINITY; return true; }
  if (s == "nan") { out = NAN; return true; }
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0';
}

std::string format_f64(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool looks_integral(const std::string& text) {
  return text.find_first_of(".eEinfa") == std::string::npos;
}

const std::set<std::string> kKnownKeys = {"op",    "dtypes", "device", "shapes", "layouts", "out",      "attrs",
                                          "tier",  "seeds",  "expect", "mode",   "outshapes"};
// Singular and plural spellings are both accepted.
std::string canonical_key(const std::string& key) {
  if (key == "ops") return "op";
  if (key == "dtype") return "dtypes";
  if (key == "devices") return "device";
  if (key == "shape") return "shapes";
  if (key == "layout") return "layouts";
  if (key == "tiers") return "tier";
  if (key == "seed") return "seeds";
  if (key == "attr") return "attrs";
  if (key == "modes") return "mode";
  if (key == "outshape") return "outshapes";
  return key;
}

}  // namespace

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<std::string> split_top_level(std::string_view text, char sep) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == sep && depth == 0)) {
      parts.emplace_back(trim(text.substr(start, i - start)));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      if (--depth < 0) throw ManifestError("unbalanced ']' in '" + std::string(text) + "'");
    }
  }
  if (depth != 0) throw ManifestError("unbalanced '[' in '" + std::string(text) + "'");
  return parts;
}

Shape parse_shape(std::string_view text) {
  text = trim(text);
  if (text == "none") return kAbsentShape;
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    throw ManifestError("a shape is written [d0,d1,...] ([] for rank 0), got '" + std::string(text) + "'");
  Shape shape;
  std::string_view inner = trim(text.substr(1, text.size() - 2));
  if (inner.empty()) return shape;
  for (const auto& part : split_top_level(inner, ',')) {
    int64_t d = 0;
    if (!parse_i64(part, d) || d < 0) throw ManifestError("bad dimension '" + part + "' in " + std::string(text));
    shape.push_back(d);
  }
  return shape;
}

std::string format_shape(const Shape& shape) {
  if (is_absent(shape)) return "none";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string format_attr_value(const AttrValue& v) {
  switch (v.kind) {
    case AttrValue::Kind::I64: return std::to_string(v.i64);
    case AttrValue::Kind::Bool: return v.i64 ? "true" : "false";
    case AttrValue::Kind::F64: {
      std::string s = format_f64(v.f64);
      return looks_integral(s) ? "f64:" + s : s;
    }
    case AttrValue::Kind::I64Array: {
      std::string s = "[";
      for (size_t i = 0; i < v.i64s.size(); ++i) s += (i ? "," : "") + std::to_string(v.i64s[i]);
      return s + "]";
    }
    case AttrValue::Kind::F64Array: {
      std::string s = "f64:[";
      for (size_t i = 0; i < v.f64s.size(); ++i) s += (i ? "," : "") + format_f64(v.f64s[i]);
      return s + "]";
    }
    case AttrValue::Kind::String: return "str:" + v.str;
  }
  return "";
}

namespace {
AttrValue parse_attr_value(std::string_view text, const std::string& context) {
  text = trim(text);
  AttrValue v;
  std::string_view type;
  for (std::string_view prefix : {"i64:", "f64:", "bool:", "str:"}) {
    if (text.substr(0, prefix.size()) == prefix) {
      type = prefix.substr(0, prefix.size() - 1);
      text.remove_prefix(prefix.size());
      break;
    }
  }
  auto fail = [&] { return ManifestError("bad attribute value '" + std::string(text) + "' in '" + context + "'"); };
  if (type == "str") {
    v.kind = AttrValue::Kind::String;
    v.str = std::string(text);
    return v;
  }
  if (!text.empty() && text.front() == '[') {
    if (text.back() != ']') throw fail();
    std::string_view inner = trim(text.substr(1, text.size() - 2));
    std::vector<std::string> items = inner.empty() ? std::vector<std::string>{} : split_top_level(inner, ',');
    bool floats = type == "f64";
    for (const auto& item : items)
      if (!looks_integral(item)) floats = true;
    v.kind = floats ? AttrValue::Kind::F64Array : AttrValue::Kind::I64Array;
    for (const auto& item : items) {
      if (floats) {
        double d;
        if (!parse_f64(item, d)) throw fail();
        v.f64s.push_back(d);
      } else {
        int64_t i;
        if (!parse_i64(item, i)) throw fail();
        v.i64s.push_back(i);
      }
    }
    return v;
  }
  if (type == "bool" || (type.empty() && (text == "true" || text == "false"))) {
    v.kind = AttrValue::Kind::Bool;
    if (text == "true" || text == "1") v.i64 = 1;
    else if (text == "false" || text == "0") v.i64 = 0;
    else throw fail();
    return v;
  }
  if (type == "i64" || (type.empty() && looks_integral(std::string(text)))) {
    v.kind = AttrValue::Kind::I64;
    if (!parse_i64(text, v.i64)) throw fail();
    return v;
  }
  v.kind = AttrValue::Kind::F64;
  if (!parse_f64(text, v.f64)) throw fail();
  return v;
}
}  // namespace

std::vector<Attr> parse_attrs(std::string_view text) {
  text = trim(text);
  std::vector<Attr> attrs;
  if (text.empty() || text == "none") return attrs;
  for (const auto& item : split_top_level(text, ';')) {
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0)
      throw ManifestError("an attribute is written name:value, got '" + item + "'");
    Attr a;
    a.name = item.substr(0, colon);
    a.value = parse_attr_value(std::string_view(item).substr(colon + 1), item);
    for (const auto& other : attrs)
      if (other.name == a.name) throw ManifestError("attribute '" + a.name + "' given twice");
    attrs.push_back(std::move(a));
  }
  return attrs;
}

std::string format_attrs(const std::vector<Attr>& attrs) {
  if (attrs.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < attrs.size(); ++i) s += (i ? ";" : "") + attrs[i].name + ":" + format_attr_value(attrs[i].value);
  return s;
}

std::string Case::display_op() const {
  if (mode == "forward") return op;
  if (is_backward()) return op + "/backward";
  return op + "/" + mode;
}

namespace {
// The dtypes= text of a case: its key dtype when the signature is the key's default one,
// else the full signature.
std::string dtypes_text(const Case& c) {
  if (c.sig.empty()) return c.dtype;
  // Ops with several kernels per key dtype (the cast target, where's T, the index dtype, the
  // mask dtype, the output count): a key alone would not name one kernel.
  static const std::set<std::string> kSeveralPerKey = {"dx.cast", "dx.where", "dx.embedding", "dx.index_select",
                                                       "dx.scaled_dot_product_attention", "dx.split"};
  if (kSeveralPerKey.count(c.op)) return c.sig;
  auto sig = parse_signature(c.sig);
  auto key = dtype_from_name(c.dtype);
  if (sig && key && *sig == default_signature(c.op, *key, static_cast<int>(sig->outputs.size()))) return c.dtype;
  return c.sig;
}
}  // namespace

std::string Case::line() const {
  std::string s = "op=" + op + " dtypes=" + dtypes_text(*this) + " device=" + device + " shapes=";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ";" : "") + format_shape(shapes[i]);
  if (!outshapes.empty()) {
    s += " outshapes=";
    for (size_t i = 0; i < outshapes.size(); ++i) s += (i ? ";" : "") + format_shape(outshapes[i]);
  }
  s += " layouts=";
  if (layouts.empty()) s += "none";
  for (size_t i = 0; i < layouts.size(); ++i) s += (i ? ";" : "") + layouts[i];
  s += " out=" + out_layout + " attrs=" + format_attrs(attrs) + " tier=" + tier + " seeds=" + std::to_string(seed);
  if (mode != "forward") s += " mode=" + mode;
  if (!expect.empty()) s += " expect=" + expect;
  return s;
}

Family parse_family(std::string_view line, const std::string& source) {
  Family f;
  f.source = source;
  std::string_view rest = trim(line);
  while (!rest.empty()) {
    size_t end = rest.find_first_of(" \t");
    std::string_view token = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : trim(rest.substr(end));
    auto eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw ManifestError(source + ": a field is written key=value, got '" + std::string(token) + "'");
    std::string key = canonical_key(std::string(token.substr(0, eq)));
    if (!kKnownKeys.count(key)) throw ManifestError(source + ": unknown field '" + key + "'");
    if (f.fields.count(key)) throw ManifestError(source + ": field '" + key + "' given twice");
    auto alternatives = split_top_level(token.substr(eq + 1), ',');
    for (const auto& a : alternatives)
      if (a.empty()) throw ManifestError(source + ": empty alternative in field '" + key + "'");
    f.fields[key] = alternatives;
  }
  if (!f.fields.count("op")) throw ManifestError(source + ": the op= field is required");
  if (!f.fields.count("shapes")) throw ManifestError(source + ": the shapes= field is required");
  return f;
}

std::vector<Family> parse_manifest(std::string_view text, const std::string& file_name) {
  std::vector<Family> families;
  int number = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++number;
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    families.push_back(parse_family(line, file_name + ":" + std::to_string(number)));
  }
  return families;
}

std::vector<Case> expand(const Family& family, const ClaimsFn& claims, const ArityFn& arity) {
  // The first suite's interface: (dtype, device) claims with each key's default signature.
  (void)arity;
  const SignaturesFn sigs = [&](const std::string& op, bool) {
    std::vector<SigOption> out;
    for (const auto& c : claims(op)) {
      auto d = dtype_from_name(c.dtype);
      if (!d) continue;
      out.push_back({c.dtype, c.device, format_signature(default_signature(op, *d)), false});
    }
    return out;
  };
  return expand(family, sigs, ExpandOptions{});
}

namespace {
constexpr int64_t kAutoBackwardMaxElements = 40000;

}  // namespace

std::vector<Case> expand(const Family& family, const SignaturesFn& signatures, const ExpandOptions& options) {
  auto field = [&](const char* key, std::vector<std::string> fallback) {
    auto it = family.fields.find(key);
    return it == family.fields.end() ? fallback : it->second;
  };
  const auto ops = field("op", {});
  const auto shapes_alts = field("shapes", {});
  const auto outshape_alts = field("outshapes", {""});
  const auto layout_alts = field("layouts", {"contig"});
  const auto out_alts = field("out", {"contig"});
  const auto attr_alts = field("attrs", {"none"});
  const auto tiers = field("tier", {"real"});
  const auto seed_alts = field("seeds", {"1"});
  const auto expects = field("expect", {""});
  const bool modes_given = family.fields.count("mode") != 0;
  const auto modes = field("mode", {"forward"});
  if (expects.size() != 1) throw ManifestError(family.source + ": expect= takes one value");
  for (const auto& m : modes) {
    bool ok = m == "forward" || m == "backward" || m == "fdcheck";
    if (m.rfind("backward:", 0) == 0) {
      ok = m.size() > 9;
      for (size_t i = 9; i < m.size(); ++i) ok = ok && (m[i] == '0' || m[i] == '1');
    }
    if (!ok) throw ManifestError(family.source + ": unknown mode '" + m + "'");
  }

  std::vector<std::vector<Attr>> attr_sets;
  for (const auto& a : attr_alts) attr_sets.push_back(parse_attrs(a));
  std::vector<uint64_t> seeds;
  for (const auto& s : seed_alts) {
    int64_t v;
    if (!parse_i64(s, v) || v < 0) throw ManifestError(family.source + ": bad seed '" + s + "'");
    seeds.push_back(static_cast<uint64_t>(v));
  }
  static const std::set<std::string> kTiers = {"exact", "real", "special", "divzero", "large", "negative", "allbits",
                                               "badindex"};
  for (const auto& t : tiers)
    if (!kTiers.count(t)) throw ManifestError(family.source + ": unknown tier '" + t + "'");
  static const std::set<std::string> kLayouts = {"contig", "transposed", "sliced", "offset", "broadcast0",
                                                 "broadcastlast"};

  std::vector<Case> cases;
  std::set<std::string> seen;
  for (const auto& op : ops) {
    const OpRule* rule = find_op_rule(op);
    if (!rule) throw ManifestError(family.source + ": the suite has no shape rule for op '" + op + "'");
    const int n_inputs = rule->inputs;
    // Signatures to expand: the plugin's claims, or those the manifest names.
    std::vector<SigOption> targets;
    const auto claimed = signatures(op, false);
    auto dt_it = family.fields.find("dtypes");
    if (dt_it == family.fields.end()) {
      targets = claimed;
    } else {
      const auto reference = signatures(op, true);
      const std::string fallback_device = claimed.empty() ? "cpu" : claimed.front().device;
      auto add = [&](const SigOption& o) {
        bool any = false;
        for (const auto& c : claimed)
          if (c.sig == o.sig) {
            targets.push_back(c);
            any = true;
          }
        if (!any) targets.push_back({o.dtype, fallback_device, o.sig, o.has_backward});
      };
      for (const auto& d : dt_it->second) {
        if (d.find("->") != std::string::npos) {
          auto sig = parse_signature(d);
          if (!sig) throw ManifestError(family.source + ": bad signature '" + d + "'");
          const DType key = sig->inputs.empty() ? sig->outputs[0] : sig->inputs[0];
          bool bw = false;
          for (const auto& r : reference) bw = bw || (r.sig == format_signature(*sig) && r.has_backward);
          add({name(key), "", format_signature(*sig), bw});
        } else {
          auto key = dtype_from_name(d);
          if (!key) throw ManifestError(family.source + ": unknown dtype '" + d + "'");
          bool any = false;
          for (const auto& r : reference)
            if (r.dtype == d) {
              add(r);
              any = true;
            }
          if (!any) add({d, "", format_signature(default_signature(op, *key)), false});
        }
      }
    }
    auto dev_it = family.fields.find("device");
    if (dev_it != family.fields.end()) {
      std::vector<SigOption> filtered;
      std::set<std::string> done;
      for (const auto& dev : dev_it->second)
        for (auto t : targets)
          if (done.insert(t.sig + "@" + dev).second) {
            t.device = dev;
            filtered.push_back(t);
          }
      targets = filtered;
    }
    for (const auto& target : targets) {
      const auto sig = parse_signature(target.sig);
      if (!sig) continue;
      // Data tiers follow the inputs' dtypes (the output's for 0-input ops): "float" when any
      // is a float (where(bool, f32, f32)), "bool" when all are bool.
      const auto& data_types = sig->inputs.empty() ? sig->outputs : sig->inputs;
      bool is_float = false, is_bool = !data_types.empty();
      for (DType d : data_types) {
        is_float = is_float || deepx::conformance::is_float(d);
        is_bool = is_bool && d == DType::Bool;
      }
      for (const auto& shape_text : shapes_alts) {
        std::vector<Shape> shapes;
        for (const auto& s : split_top_level(shape_text, ';')) shapes.push_back(parse_shape(s));
        const bool count_ok = n_inputs < 0 ? !shapes.empty()
                                           : shapes.size() == (n_inputs == 0 ? 1u : static_cast<size_t>(n_inputs));
        if (!count_ok)
          throw ManifestError(family.source + ": " + op + " takes " + std::to_string(n_inputs == 0 ? 1 : n_inputs) +
                              " shape(s), got '" + shape_text + "'");
        // The signature must have this case's input count (one dtype for a variadic kernel).
        const size_t sig_inputs = n_inputs < 0 ? 1 : static_cast<size_t>(n_inputs);
        if (sig->inputs.size() != sig_inputs) continue;
        const size_t n_in = n_inputs == 0 ? 0 : shapes.size();
        for (const auto& outshape_text : outshape_alts) {
          std::vector<Shape> outshapes;
          if (!outshape_text.empty())
            for (const auto& s : split_top_level(outshape_text, ';')) outshapes.push_back(parse_shape(s));
          for (const auto& layout_text : layout_alts) {
            std::vector<std::string> layouts;
            if (n_in > 0) {
              auto parts = split_top_level(layout_text, ';');
              if (parts.size() == 1) parts.assign(n_in, parts[0]);
              if (parts.size() != n_in)
                throw ManifestError(family.source + ": layouts '" + layout_text + "' do not match " +
                                    std::to_string(n_in) + " inputs");
              for (const auto& l : parts)
                if (!kLayouts.count(l)) throw ManifestError(family.source + ": unknown layout '" + l + "'");
              layouts = parts;
            }
            for (const auto& out : out_alts) {
              if (!kLayouts.count(out) || out.rfind("broadcast", 0) == 0)
                throw ManifestError(family.source + ": bad output layout '" + out + "'");
              for (const auto& attrs : attr_sets) {
                const OutputsResult spec = output_specs(op, shapes, *sig, attrs, outshapes);
                // dx.split: the kernel with as many outputs as the sizes (or equal parts) give.
                if (rule->outputs < 0) {
                  const Attr* sizes = find_attr(attrs, "sizes");
                  const bool fits = sizes ? sizes->value.i64s.size() == sig->outputs.size() ||
                                                (sizes->value.kind == AttrValue::Kind::I64 && sig->outputs.size() == 1)
                                          : spec.error.empty();
                  if (!fits) continue;
                }
                for (const auto& tier_in : tiers) {
                  std::string tier = tier_in;
                  if (is_bool && tier != "badindex") tier = "exact";  // bool data has one tier
                  if (!is_float && (tier == "large" || tier == "negative")) continue;
                  if (tier == "allbits" && target.dtype != "f16" && target.dtype != "bf16") continue;
                  std::vector<std::string> case_modes = modes;
                  int64_t in_elements = 0;
                  for (const auto& s : shapes) in_elements += is_absent(s) ? 0 : numel(s);
                  // Softmax-like backward passes cancel large terms: exact-tier (integer) and
                  // overflow-range logits make them judge rounding, not the kernel; the norms
                  // keep the large tier (a mean offset the normalisation removes).
                  const bool softmax_like = rule->op_class == OpClass::Normalising && op != "dx.layer_norm" &&
                                            op != "dx.rms_norm" && op != "dx.batch_norm";
                  const bool backward_tier = rule->op_class == OpClass::Normalising
                                                 ? tier == "real" || (!softmax_like && tier == "large")
                                                 : tier == "exact" || tier == "real" || tier == "large" || tier == "negative";
                  if (!modes_given && options.auto_backward && target.has_backward && is_float && backward_tier &&
                      expects[0].empty() && spec.error.empty() && !spec.outputs.empty() &&
                      in_elements <= kAutoBackwardMaxElements) {
                    case_modes.push_back("backward");
                    bool plain = out == "contig" && tier == "real";
                    for (const auto& l : layouts) plain = plain && l == "contig";
                    bool others = false;  // a gradient other than input 0's can be wanted
                    for (size_t i = 1; i < n_in; ++i) others = others || !is_absent(shapes[i]);
                    if (plain && others) case_modes.push_back("backward:0" + std::string(n_in - 1, '1'));
                  }
                  for (const auto& mode : case_modes) {
                    if (mode != "forward" && !(target.has_backward && is_float && rule->backward)) continue;
                    for (uint64_t seed : seeds) {
                      Case c;
                      c.op = op;
                      c.dtype = target.dtype;
                      c.sig = target.sig;
                      c.device = target.device;
                      c.shapes = shapes;
                      c.outshapes = outshapes;
                      c.layouts = layouts;
                      c.out_layout = out;
                      c.attrs = attrs;
                      c.tier = tier;
                      c.seed = seed;
                      c.mode = mode;
                      c.expect = expects[0];
                      c.source = family.source;
                      if (seen.insert(c.line()).second) cases.push_back(std::move(c));
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

}  // namespace deepx::conformance
