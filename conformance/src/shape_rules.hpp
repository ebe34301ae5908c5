// What the suite knows about each op: arity, tolerance class, output shape and dtype, and the
// per-output sums of |terms| that bound an accumulating op's rounding error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "manifest.hpp"

namespace deepx::conformance {

enum class OpClass {
  Movement,        // copy, transpose, fill, where, cast: data movement / exact conversion, bit-exact
  ExactArith,      // neg, relu, max, min, abs, sign, rounding, clamp, maximum/minimum, comparisons, logic, argmax
  BasicArith,      // add, sub, mul, div, reciprocal, sqrt: one IEEE operation per element
  Transcendental,  // exp, log, trig, tanh, erf, activations, pow
  Accumulating,    // sum, mean, prod, matmul
  Normalising,     // softmax
};
const char* op_class_name(OpClass c);

struct OpRule {
  const char* name;
  int inputs;  // 0 for dx.fill
  OpClass op_class;
};
const std::vector<OpRule>& op_rules();
const OpRule* find_op_rule(const std::string& op);

struct OutputSpec {
  Shape shape;
  DType dtype;
};
struct ShapeResult {
  std::optional<OutputSpec> output;  // empty when the call is invalid
  std::string error;                 // why, when invalid
};

// The op's output for inputs of `shapes` (all of dtype `dtype`) and `attrs`; for dx.fill,
// shapes[0] is the output shape.
ShapeResult output_spec(const std::string& op, const std::vector<Shape>& shapes, DType dtype,
                        const std::vector<Attr>& attrs);

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
