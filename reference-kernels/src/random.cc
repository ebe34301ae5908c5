// Counter-based random ops: dx.uniform, dx.normal, dx.dropout (and dropout's gradient), on
// Philox-4x32-10 (Salmon et al., SC'11; the Random123 definition). The mapping from an element
// to its random bits is fixed (README.md, "Random ops") so every plugin can reproduce the
// streams bit for bit:
//   key     = (seed & 0xFFFFFFFF, seed >> 32)                      (seed: attr `seed`, u64 bits)
//   block b = Philox4x32-10(key, counter = (b & 0xFFFFFFFF, b >> 32, 0, 0)) -> 4 u32 words
//   uniform, dropout: element i (row-major over the output) uses word i % 4 of block
//                     offset + i / 4                                   (offset: attr `offset`)
//   normal:           element i uses words 2(i % 2), 2(i % 2) + 1 of block offset + i / 2
//   a word w becomes u = (w + 0.5) * 2^-32, in (0, 1), exact in f64.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                           std::array<std::uint32_t, 2> key) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const std::uint64_t p0 = std::uint64_t{kM0} * counter[0];
    const std::uint64_t p1 = std::uint64_t{kM1} * counter[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
  }
  return counter;
}

namespace {

// The attributes every random op shares: seed and offset (i64 bits read as u64; unset = 0).
struct Stream {
  std::array<std::uint32_t, 2> key{};
  std::uint64_t offset = 0;

  std::array<std::uint32_t, 4> block(std::uint64_t b) const {
    return philox4x32_10({static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32), 0, 0}, key);
  }
};

Stream stream_of(const Call& call, int seed_slot, int offset_slot) {
  const auto seed = static_cast<std::uint64_t>(attr_i64(call, seed_slot, "seed", 0));
  Stream s;
  s.key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  s.offset = static_cast<std::uint64_t>(attr_i64(call, offset_slot, "offset", 0));
  return s;
}

double unit(std::uint32_t word) { return (static_cast<double>(word) + 0.5) * 0x1p-32; }

// Uniform (0, 1) of element i: word i % 4 of block offset + i / 4.
double uniform_of(const Stream& s, std::uint64_t i) { return unit(s.block(s.offset + i / 4)[i % 4]); }

double dropout_p(const Call& call) {
  const double p = attr_f64(call, 0, "p").value_or(0.5);
  if (!(p >= 0 && p <= 1)) fail(DX_INVALID_ARGUMENT, "dx.dropout: p must be in [0, 1], got " + std::to_string(p));
  return p;
}

}  // namespace

void uniform(const Call& call) {
  // low + (high - low) * u in f64, rounded once (so f32/f16/bf16 may round up to `high`).
  const Tensor y = view(call.outputs[0], "output 0");
  const double low = attr_f64(call, 0, "low").value_or(0.0);
  const double high = attr_f64(call, 1, "high").value_or(1.0);
  const Stream s = stream_of(call, 2, 3);
  std::uint64_t i = 0;
  for_each_index(y.shape, [&](std::span<const std::int64_t> index) {
    store_float(y.dtype, y.at(index), low + (high - low) * uniform_of(s, i++));
  });
}

void normal(const Call& call) {
  // mean + std * sqrt(-2 ln u1) cos(2 pi u2) (Box-Muller, cosine branch), in f64, rounded once.
  const Tensor y = view(call.outputs[0], "output 0");
  const double mean = attr_f64(call, 0, "mean").value_or(0.0);
  const double std_dev = attr_f64(call, 1, "std").value_or(1.0);
  const Stream s = stream_of(call, 2, 3);
  std::uint64_t i = 0;
  for_each_index(y.shape, [&](std::span<const std::int64_t> index) {
    const std::array<std::uint32_t, 4> words = s.block(s.offset + i / 2);
    const std::size_t first = 2 * (i % 2);
    const double u1 = unit(words[first]), u2 = unit(words[first + 1]);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    store_float(y.dtype, y.at(index), mean + std_dev * z);
    ++i;
  });
}

void dropout(const Call& call) {
  // Element i is kept when its uniform u >= p; kept elements are scaled by 1 / (1 - p). Not
  // training (attr `training` false; unset = true): y = x, mask all true. p = 1 drops all.
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  const Tensor mask = view(call.outputs[1], "output 1");
  expect_output_shape(y, x.shape);
  expect_output_shape(mask, x.shape);
  const double p = dropout_p(call);
  const Stream s = stream_of(call, 1, 2);
  const bool training = attr_bool(call, 3, "training", true);
  std::uint64_t i = 0;
  for_each_index(x.shape, [&](std::span<const std::int64_t> index) {
    const double v = load_float(x.dtype, x.at(index));
    const bool keep = !training || uniform_of(s, i++) >= p;
    store_float(y.dtype, y.at(index), !training ? v : (keep ? v / (1.0 - p) : 0.0));
    store_int_wrapping(DType::kBool, mask.at(index), keep ? 1 : 0);
  });
}

void dropout_backward(const Call& call) {
  // inputs: dy, dmask (ignored), x, y, mask; output dx = dy * mask / (1 - p) (dy when not
  // training). The saved mask is used, so the gradient matches the forward exactly.
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[2], "forward input 0");
  const Tensor mask = view(call.inputs[4], "forward output 1");
  expect_output_shape(dy, x.shape);
  expect_output_shape(mask, x.shape);
  const double p = dropout_p(call);
  const bool training = attr_bool(call, 3, "training", true);
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  for_each_index(x.shape, [&](std::span<const std::int64_t> index) {
    const double g = load_float(dy.dtype, dy.at(index));
    const bool keep = load_int(DType::kBool, mask.at(index)) != 0;
    GradBuffer::add(buf.view.at(index), !training ? g : (keep ? g / (1.0 - p) : 0.0));
  });
  buf.store(*dx);
}

}  // namespace deepx::ref
