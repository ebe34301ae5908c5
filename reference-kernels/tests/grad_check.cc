#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace deepx::ref::testing {

TestTensor random_tensor(std::mt19937_64& rng, std::vector<std::int64_t> shape, double lo,
                         double hi) {
  TestTensor t(DType::kF64, std::move(shape));
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
  return t;
}

TestTensor random_away_from(std::mt19937_64& rng, std::vector<std::int64_t> shape, double lo,
                            double hi, const std::vector<double>& avoid, double gap) {
  TestTensor t(DType::kF64, std::move(shape));
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double v = 0;
    bool near = true;
    while (near) {
      v = dist(rng);
      near = false;
      for (double a : avoid) near = near || std::fabs(v - a) < gap;
    }
    t.set(i, v);
  }
  return t;
}

TestTensor converted(const TestTensor& t, DType dtype) {
  if (is_float(t.dtype())) return TestTensor::of(dtype, t.shape(), t.values());
  return TestTensor::ints(t.dtype(), t.shape(), t.int_values());
}

namespace {

double dot(const TestTensor& a, const TestTensor& b) {
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += a.get(i) * b.get(i);
  return s;
}

std::vector<const TestTensor*> pointers(const std::vector<TestTensor>& v) {
  std::vector<const TestTensor*> p;
  for (const TestTensor& t : v) p.push_back(&t);
  return p;
}

// Forward outputs of `op` at `inputs`.
std::vector<TestTensor> run_forward(Reference& ref, const std::string& op,
                                    const std::vector<const TestTensor*>& inputs,
                                    const std::vector<OutputSpec>& outputs,
                                    const std::vector<dx_attr_t>& attrs, DType float_type) {
  std::vector<TestTensor> out;
  out.reserve(outputs.size());
  for (const OutputSpec& o : outputs) {
    out.emplace_back(is_float(o.dtype) ? float_type : o.dtype, o.shape);
  }
  const Status s = ref.call(op, inputs, pointers(out), attrs);
  EXPECT_TRUE(s.ok()) << op << " forward: " << s.message;
  return out;
}

// sum over outputs of <u, y> (F outputs only).
double weighted(const std::vector<TestTensor>& u, const std::vector<TestTensor>& y) {
  double s = 0;
  for (std::size_t k = 0; k < y.size(); ++k) {
    if (is_float(y[k].dtype())) s += dot(u[k], y[k]);
  }
  return s;
}

}  // namespace

void check_gradients(Reference& ref, const std::string& op,
                     const std::vector<const TestTensor*>& inputs,
                     const std::vector<OutputSpec>& outputs, const std::vector<dx_attr_t>& attrs,
                     const GradCheckOptions& options) {
  SCOPED_TRACE(op);
  std::mt19937_64 rng(options.seed);
  const std::vector<TestTensor> y = run_forward(ref, op, inputs, outputs, attrs, DType::kF64);
  std::vector<TestTensor> u;
  u.reserve(y.size());
  for (const TestTensor& t : y) {
    if (is_float(t.dtype())) u.push_back(random_tensor(rng, t.shape(), -1, 1));
    else u.emplace_back(t.dtype(), t.shape());  // non-F outputs (masks) get a zero gradient
  }

  // All gradients at once.
  std::vector<TestTensor> all;
  all.reserve(inputs.size());
  for (const TestTensor* x : inputs) {
    if (x != nullptr) all.emplace_back(x->dtype(), x->shape());
    else all.emplace_back(DType::kF64, std::vector<std::int64_t>{});  // placeholder, not passed
  }
  const auto wanted_all = [&](std::vector<TestTensor>& grads) {
    std::vector<const TestTensor*> p = pointers(grads);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == nullptr) p[i] = nullptr;  // absent optional input: no gradient
    }
    return p;
  };
  {
    const Status s = ref.call_backward(op, pointers(u), inputs, pointers(y), wanted_all(all), attrs);
    ASSERT_TRUE(s.ok()) << "backward: " << s.message;
  }

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !is_float(inputs[i]->dtype())) continue;
    SCOPED_TRACE("input " + std::to_string(i));
    // This gradient alone, the others not wanted.
    TestTensor g(DType::kF64, inputs[i]->shape());
    std::vector<const TestTensor*> wanted(inputs.size(), nullptr);
    wanted[i] = &g;
    const Status s = ref.call_backward(op, pointers(u), inputs, pointers(y), wanted, attrs);
    ASSERT_TRUE(s.ok()) << "backward: " << s.message;
    EXPECT_EQ(g.values(), all[i].values()) << "a gradient depends on which others are wanted";

    const TestTensor v = random_tensor(rng, inputs[i]->shape(), -1, 1);
    const double lhs = dot(v, g);
    TestTensor plus = converted(*inputs[i], DType::kF64), minus = converted(*inputs[i], DType::kF64);
    for (std::int64_t k = 0; k < v.numel(); ++k) {
      plus.set(k, inputs[i]->get(k) + options.step * v.get(k));
      minus.set(k, inputs[i]->get(k) - options.step * v.get(k));
    }
    std::vector<const TestTensor*> in_plus = inputs, in_minus = inputs;
    in_plus[i] = &plus;
    in_minus[i] = &minus;
    const double rhs = (weighted(u, run_forward(ref, op, in_plus, outputs, attrs, DType::kF64)) -
                        weighted(u, run_forward(ref, op, in_minus, outputs, attrs, DType::kF64))) /
                       (2 * options.step);
    EXPECT_NEAR(lhs, rhs, options.tolerance * (1 + std::fabs(lhs) + std::fabs(rhs)))
        << "<v, J^T u> vs central difference <u, J v>";
  }

  if (!options.also_f32) return;
  // The f32 kernels: same gradients up to f32 rounding.
  std::vector<TestTensor> x32, y32, u32, g32;
  for (const TestTensor* x : inputs) {
    x32.push_back(x != nullptr ? converted(*x, DType::kF32) : TestTensor(DType::kF32, {}));
  }
  std::vector<const TestTensor*> x32p = pointers(x32);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) x32p[i] = nullptr;
  }
  y32 = run_forward(ref, op, x32p, outputs, attrs, DType::kF32);
  for (const TestTensor& t : u) u32.push_back(converted(t, is_float(t.dtype()) ? DType::kF32 : t.dtype()));
  for (const TestTensor* x : inputs) {
    if (x != nullptr) g32.emplace_back(is_float(x->dtype()) ? DType::kF32 : x->dtype(), x->shape());
    else g32.emplace_back(DType::kF32, std::vector<std::int64_t>{});
  }
  const Status s = ref.call_backward(op, pointers(u32), x32p, pointers(y32), wanted_all(g32), attrs);
  ASSERT_TRUE(s.ok()) << "f32 backward: " << s.message;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !is_float(inputs[i]->dtype())) continue;
    double scale = 0;
    for (double a : all[i].values()) scale = std::max(scale, std::fabs(a));
    for (std::int64_t k = 0; k < g32[i].numel(); ++k) {
      EXPECT_NEAR(g32[i].get(k), all[i].get(k), 1e-4 * (1 + scale)) << "f32 gradient " << i << "[" << k << "]";
    }
  }
}

}  // namespace deepx::ref::testing
