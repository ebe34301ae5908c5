// Deterministic case inputs: a counter-based generator (splitmix64 of (key, stream, index)),
// so element i of input j of a case is the same on every machine and in every run order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.hpp"

namespace deepx::conformance {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The index-th 64-bit draw of stream `stream` of the case keyed `key`.
inline uint64_t counter_random(uint64_t key, uint64_t stream, uint64_t index) {
  const uint64_t base = splitmix64(key ^ splitmix64(stream + 0x5851f42d4c957f2dull));
  return splitmix64(base + index * 0x9e3779b97f4a7c15ull);
}

// A uniform double in [0, 1) from 53 bits of a draw.
inline double unit_double(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

struct GenRequest {
  std::string op;
  DType dtype;
  std::string tier;  // exact, real, special, divzero, large, negative, allbits
  int input_index = 0;
  uint64_t key = 0;                 // mixes the run's --seed and the case's canonical line
  int64_t count = 0;                // elements to generate (the base tensor's, in storage order)
  int64_t accumulation_length = 1;  // K, to size exact-tier values of accumulating ops
  // Index inputs (embedding, index_select, gather, scatter_add, cross_entropy labels): values in
  // [0, index_limit); the "badindex" tier puts one out-of-range value (the limit, or -1) in.
  int64_t index_limit = -1;
  bool plant_ignore = false;  // cross_entropy labels: about 1 in 5 is ignore_index
  int64_t ignore_index = -100;
  bool positive = false;      // variances (batch_norm's running_var): (0.25, 4)
};

// Returns count * byte_size(dtype) bytes.
std::vector<uint8_t> generate(const GenRequest& request);

// The magnitude bound m of exact-tier float data: values are integers in [-m, m], with
// m (sum) or m^2 (matmul) times K below 2^24 so every partial sum is exact in f32.
int64_t exact_magnitude(const std::string& op, DType dtype, int64_t accumulation_length);

// dx.eq, ne, lt, le, gt, ge: their exact-tier data is drawn from a narrower range (more ties).
bool is_comparison_op(const std::string& op);

}  // namespace deepx::conformance
