// Case manifests: one case family per line, comma lists expanded to their cartesian product.
// The format is documented in conformance/README.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace deepx::conformance {

using Shape = std::vector<int64_t>;

struct ManifestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct AttrValue {
  enum class Kind { I64, F64, Bool, I64Array, F64Array, String } kind = Kind::I64;
  int64_t i64 = 0;
  double f64 = 0;
  std::vector<int64_t> i64s;
  std::vector<double> f64s;
  std::string str;
};

struct Attr {
  std::string name;
  AttrValue value;
};

// One fully specified case. Its canonical line() is a manifest line with one value per field:
// parsing it back gives the same case, which is what `--case` does.
struct Case {
  std::string op;
  std::string dtype;   // the claim's key dtype: the first input's (the output's for 0-input ops)
  std::string sig;     // the kernel's full dtype signature, "bool:f32:f32->f32" (shape_rules.hpp)
  std::string device;  // device type name: "cpu", "cuda", "rocm", ...
  std::vector<Shape> shapes;         // inputs' logical shapes (the output shape for 0-input ops);
                                     // kAbsentShape ("none") for an absent optional input
  std::vector<Shape> outshapes;      // requested output shapes (dx.reshape, dx.broadcast_to)
  std::vector<std::string> layouts;  // one per input
  std::string out_layout = "contig";
  std::vector<Attr> attrs;
  std::string tier = "real";
  uint64_t seed = 1;
  std::string expect;  // expected status name ("ARITHMETIC_ERROR"), "" for success
  // "forward"; "backward" (every input gradient wanted); "backward:0110" (a mask over the
  // forward inputs: 0 = that gradient is not wanted, a null output); "fdcheck" (the reference's
  // f64 backward against central finite differences of its forward, `--fd-check`).
  std::string mode = "forward";
  bool is_backward() const { return mode.rfind("backward", 0) == 0; }
  // The op as reports show it: "dx.add", "dx.add/backward", "dx.add/fdcheck".
  std::string display_op() const;
  std::string source;  // "file:line" of the family it came from
  std::string line() const;
};

// A parsed manifest line: each field's comma-separated alternatives, as text.
struct Family {
  std::map<std::string, std::vector<std::string>> fields;
  std::string source;
};

// Splits at `sep` outside [] brackets; trims blanks.
std::vector<std::string> split_top_level(std::string_view text, char sep);
Shape parse_shape(std::string_view text);
std::string format_shape(const Shape& shape);
std::vector<Attr> parse_attrs(std::string_view text);  // "none" or "a:v;b:v"
std::string format_attrs(const std::vector<Attr>& attrs);
std::string format_attr_value(const AttrValue& value);

Family parse_family(std::string_view line, const std::string& source);
// Skips blank lines and '#' comments.
std::vector<Family> parse_manifest(std::string_view text, const std::string& file_name);

// What the plugin under test claims for an op: (dtype, device) pairs, dtype names as in Case.
struct DtypeDevice {
  std::string dtype;
  std::string device;
};
using ClaimsFn = std::function<std::vector<DtypeDevice>(const std::string& op)>;
// Number of inputs of an op of the suite, or -1 when the suite does not know the op.
using ArityFn = std::function<int(const std::string& op)>;

// A kernel signature the expansion may use for an op.
struct SigOption {
  std::string dtype;   // key dtype name
  std::string device;  // device type name
  std::string sig;     // format_signature()
  bool has_backward = false;
};
// The plugin's claimed signatures of `op` (reference = false), or the reference's (true).
using SignaturesFn = std::function<std::vector<SigOption>(const std::string& op, bool reference)>;

struct ExpandOptions {
  // Add a backward case (and an "unwanted gradient" variant) to forward cases of float
  // signatures with a backward (manifest expansion; not for `--case`, which runs one line).
  bool auto_backward = false;
};
std::vector<Case> expand(const Family& family, const SignaturesFn& signatures, const ExpandOptions& options);

// Expands a family into cases. `dtypes` defaults to every dtype the plugin claims for the op;
// `device` defaults to every device type claimed with that dtype (or "cpu" when none).
// Tier/dtype pairs that do not apply are dropped (bool data has one tier, "exact"; "large" and
// "negative" are float-only, "allbits" is f16/bf16-only); duplicates (by canonical line) are
// dropped.
std::vector<Case> expand(const Family& family, const ClaimsFn& claims, const ArityFn& arity);

// Stable 64-bit FNV-1a hash (case keys, ids).
uint64_t fnv1a64(std::string_view text);

}  // namespace deepx::conformance
