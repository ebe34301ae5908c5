// The finite-difference check every reference backward kernel goes through
// (docs/conformance.md, "The reference"): the inner-product test <v, J^T u> = <J v, u> in f64,
// with J^T u from the backward kernel and J v from central differences of the forward kernel,
// along random directions u (over the outputs) and v (over one input at a time). Callers pick
// points away from non-differentiable ones (relu at 0, max ties) by construction.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fake_host.hpp"

namespace deepx::ref::testing {

// One forward output: its shape and dtype.
struct OutputSpec {
  std::vector<std::int64_t> shape;
  DType dtype = DType::kF64;
};

struct GradCheckOptions {
  double step = 1e-5;       // central-difference step along v
  double tolerance = 1e-6;  // |lhs - rhs| <= tolerance * (1 + |lhs| + |rhs|)
  std::uint64_t seed = 1;
  bool also_f32 = true;     // also run the f32 kernels and compare with the f64 gradients
};

// Runs the check for every F input of `op` at `inputs` (f64 tensors, or I/bool ones that are not
// differentiated), requesting one gradient at a time (the others null) and all together (the
// results must agree). Reports failures with gtest assertions.
void check_gradients(Reference& ref, const std::string& op,
                     const std::vector<const TestTensor*>& inputs,
                     const std::vector<OutputSpec>& outputs, const std::vector<dx_attr_t>& attrs,
                     const GradCheckOptions& options = {});

// Random f64 tensor with values uniform in [lo, hi).
TestTensor random_tensor(std::mt19937_64& rng, std::vector<std::int64_t> shape, double lo,
                         double hi);
// Random f64 tensor whose values keep at least `gap` away from every point in `avoid`.
TestTensor random_away_from(std::mt19937_64& rng, std::vector<std::int64_t> shape, double lo,
                            double hi, const std::vector<double>& avoid, double gap);
// A compact copy of `t` converted to `dtype` (F values rounded once; ints copied).
TestTensor converted(const TestTensor& t, DType dtype);

}  // namespace deepx::ref::testing
