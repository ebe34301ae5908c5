// Reductions dx.sum and dx.max over a set of axes (attrs `axes`, `keepdims`).
// Floating sums accumulate in f64 and round once; integer sums accumulate in i64 with wrap
// and produce i64. Max propagates NaN; the max of an empty set is an error.
#include <cmath>
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

// Which axes of a rank-`rank` tensor a reduction covers.
std::vector<bool> reduced_axes(const Call& call, std::size_t rank) {
  const std::optional<std::vector<std::int64_t>> axes =
      attr_i64_list(call, DX_REDUCE_AXES, "axes");
  std::vector<bool> reduced(rank, false);
  if (!axes || axes->empty()) {
    reduced.assign(rank, true);  // unset or empty: every axis
    return reduced;
  }
  const auto r = static_cast<std::int64_t>(rank);
  for (std::int64_t axis : *axes) {
    const std::int64_t normal = axis < 0 ? axis + r : axis;
    if (normal < 0 || normal >= r) {
      fail(DX_OUT_OF_RANGE, "axis " + std::to_string(axis) + " is out of range for rank " +
                                std::to_string(rank));
    }
    if (reduced[normal]) fail(DX_OUT_OF_RANGE, "axis " + std::to_string(axis) + " is repeated");
    reduced[normal] = true;
  }
  return reduced;
}

// The reduction's iteration plan: every input index is (outer index + inner index), both of
// full rank, with `outer` covering the kept dims (reduced dims fixed at 0) and `inner` the
// reduced dims (kept dims fixed at 0). `out_aligned` views the output at full rank, so
// out_aligned.at(outer_index) is the output element of that group.
struct Plan {
  Tensor in;
  Tensor out_aligned;
  std::vector<std::int64_t> outer_shape;
  std::vector<std::int64_t> inner_shape;
  std::int64_t group_size = 1;
};

Plan plan_reduction(const Call& call) {
  Plan p;
  p.in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
  const std::vector<bool> reduced = reduced_axes(call, p.in.rank());

  std::vector<std::int64_t> expected;
  for (std::size_t k = 0; k < p.in.rank(); ++k) {
    if (!reduced[k]) {
      expected.push_back(p.in.shape[k]);
    } else if (keepdims) {
      expected.push_back(1);
    }
  }
  expect_output_shape(out, expected);

  p.out_aligned = out;
  p.out_aligned.shape = p.in.shape;
  p.out_aligned.strides.assign(p.in.rank(), 0);
  std::size_t out_axis = 0;
  for (std::size_t k = 0; k < p.in.rank(); ++k) {
    if (!reduced[k]) {
      p.out_aligned.strides[k] = out.strides[out_axis++];
      p.outer_shape.push_back(p.in.shape[k]);
      p.inner_shape.push_back(1);
    } else {
      if (keepdims) ++out_axis;
      p.outer_shape.push_back(1);
      p.inner_shape.push_back(p.in.shape[k]);
      p.group_size *= p.in.shape[k];
    }
  }
  return p;
}

// Visits each group: start(), then element(address) for each of its input elements, then
// finish(address of its output element).
template <typename StartFn, typename ElementFn, typename FinishFn>
void for_each_group(const Plan& p, StartFn start, ElementFn element, FinishFn finish) {
  std::vector<std::int64_t> full(p.in.rank());
  for_each_index(p.outer_shape, [&](std::span<const std::int64_t> outer) {
    start();
    for_each_index(p.inner_shape, [&](std::span<const std::int64_t> inner) {
      for (std::size_t k = 0; k < full.size(); ++k) full[k] = outer[k] + inner[k];
      element(p.in.at(full));
    });
    finish(p.out_aligned.at(outer));
  });
}

}  // namespace

void sum(const Call& call) {
  const Plan p = plan_reduction(call);
  const DType in_type = p.in.dtype;
  const DType out_type = p.out_aligned.dtype;
  if (is_float(in_type)) {
    double acc = 0;
    for_each_group(
        p, [&] { acc = 0; }, [&](const std::byte* x) { acc += load_float(in_type, x); },
        [&](std::byte* o) { store_float(out_type, o, acc); });
  } else {
    std::uint64_t acc = 0;  // unsigned: wraps without UB
    for_each_group(
        p, [&] { acc = 0; },
        [&](const std::byte* x) { acc += static_cast<std::uint64_t>(load_int(in_type, x)); },
        [&](std::byte* o) { store_int_wrapping(out_type, o, static_cast<std::int64_t>(acc)); });
  }
}

void max(const Call& call) {
  const Plan p = plan_reduction(call);
  if (p.group_size == 0) {
    fail(DX_INVALID_ARGUMENT, "dx.max over an empty set (input shape " +
                                  shape_string(p.in.shape) + ") has no identity");
  }
  const DType type = p.in.dtype;
  bool first = true;
  if (is_float(type)) {
    double best = 0;
    for_each_group(
        p, [&] { first = true; },
        [&](const std::byte* x) {
          const double v = load_float(type, x);
          if (first || (!std::isnan(best) && (std::isnan(v) || v > best))) best = v;
          first = false;
        },
        [&](std::byte* o) { store_float(type, o, best); });
  } else {
    std::int64_t best = 0;
    for_each_group(
        p, [&] { first = true; },
        [&](const std::byte* x) {
          const std::int64_t v = load_int(type, x);
          if (first || v > best) best = v;
          first = false;
        },
        [&](std::byte* o) { store_int_wrapping(type, o, best); });
  }
}

}  // namespace deepx::ref
