// What the suite knows about each op: arity, tolerance class, output shape and dtype, and the
// per-output sums of |terms| that bound an accumulating op's rounding error. The op list, arities,
// attributes, tolerance classes and the names of the shape and dtype rules come from
// abi/ops.json through the generated op_table.hpp; the rules themselves are implemented here.
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "manifest.hpp"
#include "op_table.hpp"

namespace deepx::conformance {

enum class OpClass {
  Movement,        // copy, transpose, fill, where, cast, reshape ... tile, embedding: bit-exact
  ExactArith,      // neg, relu, max, min, abs, sign, rounding, clamp, maximum/minimum, comparisons, logic, argmax
  BasicArith,      // add, sub, mul, div, reciprocal, sqrt: one IEEE operation per element
  Transcendental,  // exp, log, trig, tanh, erf, activations, pow
  Accumulating,    // sum, mean, prod, matmul
  Normalising,     // softmax, log_softmax, layer/rms/batch norm, attention, cross_entropy
  Random,          // uniform, normal, dropout: a fixed Philox stream, bit-exact
};
const char* op_class_name(OpClass c);

struct OpRule {
  const char* name;
  int inputs;  // 0 for dx.fill; -1 variadic (dx.concat: >= 1)
  OpClass op_class;
  int outputs = 1;        // -1: from the kernel's signature (dx.split: 1..8)
  bool backward = false;  // the op has a backward (F signatures)
  const char* attrs = "";                  // the attribute schema, "name,name,..."
  ShapeRule shape = ShapeRule::kSame;      // selects the rule's code in output_specs()
  DtypeRule dtype = DtypeRule::kSame;      // the outputs' dtype for a key dtype
  unsigned index_inputs = 0;               // bit i: input i holds indices (i64 by default)
  unsigned bool_outputs = 0;               // bit i: output i is bool whatever the key
};
// Every standard op, in DX_OP_TABLE order (generated from abi/ops.json).
const std::vector<OpRule>& op_rules();
const OpRule* find_op_rule(const std::string& op);
// The rule's name in abi/ops.json ("broadcast", "reduce", ...).
const char* shape_rule_name(ShapeRule rule);

struct OutputSpec {
  Shape shape;
  DType dtype;
};
struct ShapeResult {
  std::optional<OutputSpec> output;  // empty when the call is invalid
  std::string error;                 // why, when invalid
};

// The op's first output for inputs of `shapes` with the default signature keyed by `dtype`
// (default_signature) and `attrs`; for dx.fill, shapes[0] is the output shape. A max or argmax
// over an empty set has both an output and an error.
ShapeResult output_spec(const std::string& op, const std::vector<Shape>& shapes, DType dtype,
                        const std::vector<Attr>& attrs);

// An absent optional input is written `none` in a manifest and held as this shape.
inline const Shape kAbsentShape{-1};
inline bool is_absent(const Shape& s) { return s.size() == 1 && s[0] < 0; }

// A kernel's dtype signature, as registered: inputs then outputs (a variadic kernel lists its
// one input dtype, which every input of a call has).
struct Signature {
  std::vector<DType> inputs, outputs;
  bool operator==(const Signature&) const = default;
  DType input(size_t i) const { return inputs.empty() ? DType::F32 : inputs[std::min(i, inputs.size() - 1)]; }
};
// "bool:f32:f32->f32", "->f32" for 0-input ops, "f32->f32:bool" for two outputs.
std::string format_signature(const Signature& sig);
std::optional<Signature> parse_signature(std::string_view text);
// The signature a case keyed by `key` has when the manifest names only the key dtype: every
// input of that dtype, the op's usual output dtype(s) (`outputs` of them for dx.split).
Signature default_signature(const std::string& op, DType key, int outputs = 1);
// The signature with every float dtype replaced by f64 (the reference's f64 kernels).
Signature widened_to_f64(const Signature& sig);

struct OutputsResult {
  std::vector<OutputSpec> outputs;  // empty when the call is invalid
  std::string error;
};
// The general rule: inputs of `shapes` (kAbsentShape for an absent optional input) with the
// dtypes of `sig`, attributes, the output count of the signature, and for dx.reshape and
// dx.broadcast_to the requested output shape (`outshapes`). For 0-input ops shapes[0] is the
// output shape.
OutputsResult output_specs(const std::string& op, const std::vector<Shape>& shapes, const Signature& sig,
                           const std::vector<Attr>& attrs, const std::vector<Shape>& outshapes = {});
// Input indices a kernel may update in place (batch_norm's running stats when training); the
// runner compares their final contents instead of requiring them unchanged.
std::vector<int> mutated_inputs(const std::string& op, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs);
// For index inputs (embedding, index_select, gather, scatter_add, cross_entropy labels): the
// exclusive upper bound of valid values of input `input`, or -1 when the input holds no indices.
int64_t index_limit(const std::string& op, int input, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs);
// K, the longest accumulation of an output element (1 for non-accumulating ops).
int64_t accumulation_length(const std::string& op, const std::vector<Shape>& shapes, const std::vector<Attr>& attrs);

// The kernel signature (inputs' then output's dtypes) the suite tests for `op` keyed by
// `dtype`: every input of that dtype; the output of the same dtype except i64 for integer
// sums and i32 for i8 matmul. Empty for ops the suite does not know.
std::vector<DType> expected_signature(const std::string& op, DType dtype);

// dx.cast is keyed by its input dtype, and the runner tests one signature per key: the
// conversion each input dtype is certified through (the other 90 pairs are listed as uncovered).
DType cast_target(DType from);

int64_t numel(const Shape& shape);
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// For dx.sum and dx.matmul: for every output element (row-major), the sum of the finite |terms|
// it accumulates (taken in long double, clamped to DBL_MAX); `accumulation_length` receives K (the longest accumulation).
// `inputs` are the inputs' logical values in row-major order. Empty for other ops.
std::vector<double> abs_term_sums(const std::string& op, const std::vector<Shape>& shapes,
                                  const std::vector<std::vector<double>>& inputs,
                                  const std::vector<Attr>& attrs, int64_t& accumulation_length);

const Attr* find_attr(const std::vector<Attr>& attrs, const std::string& name);

}  // namespace deepx::conformance
