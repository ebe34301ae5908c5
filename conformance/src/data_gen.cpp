#include "data_gen.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace deepx::conformance {

int64_t exact_magnitude(const std::string& op, DType dtype, int64_t k) {
  int64_t m = 8;
  k = std::max<int64_t>(k, 1);
  const double limit = 0x1.0p24;
  if (op == "dx.sum") {
    while (m > 1 && static_cast<double>(m) * static_cast<double>(k) >= limit) m /= 2;
  } else if (op == "dx.matmul") {
    while (m > 1 && static_cast<double>(m * m) * static_cast<double>(k) >= limit) m /= 2;
  }
  // Comparisons: values in [-2, 2] so that ties (eq, le, ge) are common. Products: [-2, 2], so
  // every partial product is 0 or a power of two, exact until it overflows (on both sides).
  if (is_comparison_op(op) || op == "dx.prod") m = 2;
  (void)dtype;  // every dtype of the suite holds the integers up to 8 exactly
  return m;
}

bool is_comparison_op(const std::string& op) {
  return op == "dx.eq" || op == "dx.ne" || op == "dx.lt" || op == "dx.le" || op == "dx.gt" || op == "dx.ge";
}

namespace {

std::vector<double> special_values(DType d) {
  const double inf = std::numeric_limits<double>::infinity();
  const double sub = min_subnormal(d), norm = min_normal(d), big = max_finite(d);
  return {0.0, -0.0, sub, -sub, norm - sub, norm, -norm, big, -big, inf, -inf,
          std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 0.5, -2.0};
}

// Special logits of the softmax family and cross_entropy: huge ones (1e17, or a quarter of the
// dtype's largest finite value), where max + log(sum) rounds to max so a kernel that forms it
// before subtracting x cancels (cross_entropy log 2 becomes 0 for a tie of two), with neighbours
// about one and two ulps of the dtype away (near-ties) and its negation; and near-equal values
// at 1.
std::vector<double> logit_specials(DType d) {
  const double top = std::min(1e17, max_finite(d) / 4);
  const double ulp = std::ldexp(1.0, 1 - info(d).mantissa_bits);  // relative, at a power of two or above
  return {top, top * (1 + ulp), top * (1 + 2 * ulp), top * (1 - ulp), -top, 1.0 + ulp, 1.0 - ulp / 2};
}

bool is_logit_input(const GenRequest& q) {
  return q.input_index == 0 && (q.op == "dx.softmax" || q.op == "dx.log_softmax" || q.op == "dx.cross_entropy");
}

std::vector<double> exp_edges(DType d) {
  const double top = std::log(max_finite(d));
  return {top - 0.01, top, top + 0.01, std::log(min_normal(d)), std::log(min_subnormal(d)),
          std::log(min_subnormal(d)) - 1.0, -top - 10.0, 0.0, -0.0};
}

}  // namespace

std::vector<uint8_t> generate(const GenRequest& q) {
  const int width = byte_size(q.dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(q.count) * static_cast<size_t>(width));
  const bool divisor = q.op == "dx.div" && q.input_index == 1;
  const uint64_t stream = static_cast<uint64_t>(q.input_index);
  auto at = [&](int64_t i) { return bytes.data() + static_cast<size_t>(i) * static_cast<size_t>(width); };

  if (q.index_limit >= 0 && is_integer(q.dtype)) {
    const uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(q.index_limit, 1));
    for (int64_t i = 0; i < q.count; ++i) {
      const uint64_t r = counter_random(q.key, stream, static_cast<uint64_t>(i));
      int64_t v = static_cast<int64_t>(r % limit);
      if (q.plant_ignore && (r >> 32) % 5 == 0) v = q.ignore_index;
      store_int(q.dtype, v, at(i));
    }
    if (q.tier == "badindex" && q.count > 0) {
      const uint64_t r = counter_random(q.key, stream + 1000, 0);
      const int64_t where = static_cast<int64_t>(r % static_cast<uint64_t>(q.count));
      store_int(q.dtype, (r >> 40) & 1 ? q.index_limit : -1, at(where));
    }
    return bytes;
  }

  if (q.dtype == DType::Bool) {
    for (int64_t i = 0; i < q.count; ++i) store_int(q.dtype, counter_random(q.key, stream, static_cast<uint64_t>(i)) & 1, at(i));
    return bytes;
  }

  if (is_integer(q.dtype)) {
    const bool is_unsigned = info(q.dtype).is_unsigned_int;
    const int64_t lo = int_min(q.dtype), hi = int_max(q.dtype);
    const int64_t specials[] = {lo, hi, -1, 0, 1, lo + 1, hi - 1};
    for (int64_t i = 0; i < q.count; ++i) {
      const uint64_t r = counter_random(q.key, stream, static_cast<uint64_t>(i));
      int64_t v;
      if (q.tier == "real") {
        v = static_cast<int64_t>(r);  // wraps to the whole range of the dtype
      } else if (q.tier == "special") {
        v = (r & 1) ? specials[(r >> 1) % 7] : static_cast<int64_t>(r >> 8);
      } else if (is_comparison_op(q.op)) {  // exact tier of comparisons: many ties
        v = is_unsigned ? static_cast<int64_t>(r % 5) : static_cast<int64_t>(r % 5) - 2;
      } else {  // exact, divzero: small values
        v = is_unsigned ? static_cast<int64_t>(r % 17) : static_cast<int64_t>(r % 17) - 8;
      }
      if (divisor) {
        // Integer division by zero is an error: keep divisors non-zero, except where the
        // divzero tier plants one on purpose.
        int64_t wrapped;
        unsigned char tmp[8];
        store_int(q.dtype, v, tmp);
        wrapped = load_int(q.dtype, tmp);
        if (wrapped == 0) v = 1;
        if (q.tier == "divzero" && i % 7 == 0) v = 0;
      }
      store_int(q.dtype, v, at(i));
    }
    return bytes;
  }

  // Every bit pattern of a 16-bit float, in order (element i holds pattern i mod 65536).
  if (q.tier == "allbits" && width == 2) {
    for (int64_t i = 0; i < q.count; ++i) {
      const auto bits = static_cast<uint16_t>(i);
      std::memcpy(at(i), &bits, 2);
    }
    return bytes;
  }

  // Floats.
  auto specials = special_values(q.dtype);
  if (is_logit_input(q)) {
    const auto logits = logit_specials(q.dtype);
    specials.insert(specials.end(), logits.begin(), logits.end());
  }
  const auto edges = exp_edges(q.dtype);
  const int64_t m = exact_magnitude(q.op, q.dtype, q.accumulation_length);
  for (int64_t i = 0; i < q.count; ++i) {
    const uint64_t r = counter_random(q.key, stream, static_cast<uint64_t>(i));
    const double u = unit_double(r);
    double v;
    if (q.positive) {
      v = q.tier == "exact" ? static_cast<double>(1 + r % 4) : 0.25 + 3.75 * u;
    } else if (q.tier == "exact" || q.tier == "divzero") {
      v = static_cast<double>(static_cast<int64_t>(r % static_cast<uint64_t>(2 * m + 1)) - m);
      if (divisor && v == 0) v = 1;
      if (divisor && q.tier == "divzero" && i % 7 == 0) v = (i % 14 == 0) ? 0.0 : -0.0;
    } else if (q.tier == "special") {
      v = (r & 1) ? specials[(r >> 1) % specials.size()] : -9.0 + 18.0 * u;
    } else if (q.tier == "large") {
      v = 90.0 + 20.0 * u;
    } else if (q.tier == "negative") {
      v = -110.0 + 20.0 * u;
    } else if (q.op == "dx.exp") {  // real tier of exp: [-20, 20] plus overflow/underflow points
      v = (r & 7) == 0 ? edges[(r >> 3) % edges.size()] : -20.0 + 40.0 * u;
    } else if (q.op == "dx.scaled_dot_product_attention" || q.op == "dx.layer_norm" || q.op == "dx.rms_norm" ||
               q.op == "dx.batch_norm" || q.op == "dx.cross_entropy" || q.op == "dx.log_softmax") {
      v = -3.0 + 6.0 * u;  // moderate values: softmax-style ops stay away from one-hot outputs
    } else if (q.op == "dx.log" || q.op == "dx.sqrt" || q.op == "dx.rsqrt") {
      v = std::exp(-8.0 + 12.0 * u);  // positive, log-uniform in [e^-8, e^4)
    } else if (q.op == "dx.log1p") {
      v = -1.0 + 10.0 * u;  // (-1, 9): the whole domain's interesting part
    } else if (q.op == "dx.pow") {
      // Positive bases (a negative base with a fractional exponent is NaN), exponents of both signs.
      v = q.input_index == 0 ? 0.25 + 3.75 * u : -6.0 + 12.0 * u;
    } else {
      v = -9.0 + 18.0 * u;
    }
    store_double(q.dtype, v, at(i));
  }
  return bytes;
}

}  // namespace deepx::conformance
