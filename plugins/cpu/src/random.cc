// Counter-based random ops: dx.uniform, dx.normal, dx.dropout (and dropout's gradient), bit
// identical to the reference plugin. The stream is the one docs/ops.md fixes ("Random ops"):
//   key       = (seed & 0xFFFFFFFF, seed >> 32)            (attrs `seed`, `offset`: i64 bits as u64)
//   block(b)  = Philox4x32-10(counter (b & 0xFFFFFFFF, b >> 32, 0, 0), key)
//   unit(w)   = (w + 0.5) * 2^-32
//   uniform, dropout: element i (row-major position) uses word i % 4 of block offset + i / 4
//   normal:           element i uses words 2(i % 2), 2(i % 2) + 1 of block offset + i / 2
// and every value is computed in f64 and rounded once to the output dtype, with the same
// expressions as the reference (this file is built with -ffp-contract=off so no FMA changes a
// rounding). Each element depends only on its position, so the loops split into independent
// ranges across OpenMP threads; within a run a block is generated once for its 4 (or 2)
// consecutive elements.
#include <cmath>
#include <numbers>
#include <string>

#include "movement_util.h"
#include "philox.h"

namespace deepx::cpu {
namespace {

using namespace movement;

constexpr dx_kernel_flags_t kFlags = DX_KERNEL_FLAG_DETERMINISTIC;

// Schema slots (deepx/ops.h order).
constexpr int kUniformLow = 0, kUniformHigh = 1, kUniformSeed = 2, kUniformOffset = 3;
constexpr int kNormalMean = 0, kNormalStd = 1, kNormalSeed = 2, kNormalOffset = 3;
constexpr int kDropoutP = 0, kDropoutSeed = 1, kDropoutOffset = 2, kDropoutTraining = 3;

/// Philox cost per element, in units of a load-op-store, for the parallel threshold.
constexpr int64_t kRandomWork = 16;

struct Stream {
  Philox4x32x10::Key key{};
  uint64_t offset = 0;

  Philox4x32x10::Counter block(uint64_t b) const {
    return Philox4x32x10::generate({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0, 0}, key);
  }
};

Stream stream_of(const dx_kernel_call_t* call, int seed_slot, int offset_slot) {
  const auto seed = static_cast<uint64_t>(attr_i64(call, seed_slot, "seed", 0));
  Stream s;
  s.key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  s.offset = static_cast<uint64_t>(attr_i64(call, offset_slot, "offset", 0));
  return s;
}

inline double unit(uint32_t word) { return (static_cast<double>(word) + 0.5) * 0x1p-32; }

/// The uniforms of consecutive positions, one Philox block per 4 of them.
class UniformCursor {
 public:
  explicit UniformCursor(const Stream& s) : stream_(s) {}
  double at(uint64_t position) {
    const uint64_t b = stream_.offset + position / 4;
    if (!valid_ || b != block_index_) {
      words_ = stream_.block(b);
      block_index_ = b;
      valid_ = true;
    }
    return unit(words_[position % 4]);
  }

 private:
  const Stream& stream_;
  Philox4x32x10::Counter words_{};
  uint64_t block_index_ = 0;
  bool valid_ = false;
};

template <class T>
dx_error_t* uniform_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // low + (high - low) * u in f64, rounded once (a narrow dtype may round up to `high`).
    expect_arity(call, 0, 1);
    const View y = output(call, 0, dtype_of<T>());
    const double low = attr_f64(call, kUniformLow, "low").value_or(0.0);
    const double high = attr_f64(call, kUniformHigh, "high").value_or(1.0);
    const Stream s = stream_of(call, kUniformSeed, kUniformOffset);
    if (y.count() == 0) return;
    T* const py = y.data<T>();
    for_each_row_flat(loop_over(y), [=, &s](int64_t flat, int64_t n, const int64_t* off, const int64_t* st) {
      UniformCursor cursor(s);
      T* o = py + off[0];
      for (int64_t i = 0; i < n; ++i) {
        const double u = cursor.at(static_cast<uint64_t>(flat + i));
        o[i * st[0]] = from_f64<T>(low + (high - low) * u);
      }
    }, kRandomWork);
  });
}

template <class T>
dx_error_t* normal_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // mean + std * sqrt(-2 ln u1) cos(2 pi u2) (Box-Muller, cosine branch), f64, rounded once.
    expect_arity(call, 0, 1);
    const View y = output(call, 0, dtype_of<T>());
    const double mean = attr_f64(call, kNormalMean, "mean").value_or(0.0);
    const double std_dev = attr_f64(call, kNormalStd, "std").value_or(1.0);
    const Stream s = stream_of(call, kNormalSeed, kNormalOffset);
    if (y.count() == 0) return;
    T* const py = y.data<T>();
    for_each_row_flat(loop_over(y), [=, &s](int64_t flat, int64_t n, const int64_t* off, const int64_t* st) {
      T* o = py + off[0];
      Philox4x32x10::Counter words{};
      uint64_t block_index = 0;
      bool valid = false;
      for (int64_t i = 0; i < n; ++i) {
        const auto position = static_cast<uint64_t>(flat + i);
        const uint64_t b = s.offset + position / 2;
        if (!valid || b != block_index) {
          words = s.block(b);
          block_index = b;
          valid = true;
        }
        const size_t first = 2 * (position % 2);
        const double u1 = unit(words[first]), u2 = unit(words[first + 1]);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
        o[i * st[0]] = from_f64<T>(mean + std_dev * z);
      }
    }, 4 * kRandomWork);
  });
}

double dropout_p(const dx_kernel_call_t* call) {
  const double p = attr_f64(call, kDropoutP, "p").value_or(0.5);
  if (!(p >= 0 && p <= 1)) {
    fail(DX_INVALID_ARGUMENT, "dx.dropout: p must be in [0, 1], got " + std::to_string(p));
  }
  return p;
}

template <class T>
dx_error_t* dropout_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // Element i is kept when its uniform u >= p; kept values are scaled by 1 / (1 - p) (in
    // f64, rounded once). Not training: y = x, mask all true. p = 1 drops everything.
    expect_arity(call, 1, 2);
    const View x = make_view(call->inputs[0], "input 0");
    expect_dtype(x, dtype_of<T>(), "input 0");
    const View y = output(call, 0, dtype_of<T>());
    const View mask = output(call, 1, dtype_of<Bool>());
    expect_shape(y, x.shape, x.rank, "dx.dropout output 0");
    expect_shape(mask, x.shape, x.rank, "dx.dropout mask");
    const double p = dropout_p(call);
    const Stream s = stream_of(call, kDropoutSeed, kDropoutOffset);
    const bool training = attr_bool(call, kDropoutTraining, "training", true);
    if (x.count() == 0) return;
    StridedLoop<3> loop = loop_over(y, mask, x);
    T* const py = y.data<T>();
    uint8_t* const pm = mask.data<uint8_t>();
    const T* const px = x.data<const T>();
    const double scale_divisor = 1.0 - p;
    for_each_row_flat(loop, [=, &s](int64_t flat, int64_t n, const int64_t* off, const int64_t* st) {
      T* yo = py + off[0];
      uint8_t* mo = pm + off[1];
      const T* xi = px + off[2];
      if (!training) {
        for (int64_t i = 0; i < n; ++i) {
          yo[i * st[0]] = xi[i * st[2]];
          mo[i * st[1]] = 1;
        }
        return;
      }
      UniformCursor cursor(s);
      for (int64_t i = 0; i < n; ++i) {
        const double v = to_f64(xi[i * st[2]]);
        const bool keep = cursor.at(static_cast<uint64_t>(flat + i)) >= p;
        yo[i * st[0]] = from_f64<T>(keep ? v / scale_divisor : 0.0);
        mo[i * st[1]] = keep ? 1 : 0;
      }
    }, kRandomWork);
  });
}

template <class T>
dx_error_t* dropout_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // inputs: dy, dmask (ignored), x, y, mask; output dx = dy * mask / (1 - p) (dy when not
    // training), from the saved mask so it matches the forward exactly; 0.0 + g as the
    // reference's f64 gradient buffer gives (-0 -> +0).
    expect_arity(call, 5, 1);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    expect_dtype(dy, dtype_of<T>(), "output gradient 0");
    const View x = make_view(call->inputs[2], "forward input 0");
    expect_dtype(x, dtype_of<T>(), "forward input 0");
    const View mask = make_view(call->inputs[4], "forward output 1");
    expect_dtype(mask, dtype_of<Bool>(), "forward output 1");
    expect_shape(dy, x.shape, x.rank, "dx.dropout output gradient");
    expect_shape(mask, x.shape, x.rank, "dx.dropout mask");
    const double p = dropout_p(call);
    const bool training = attr_bool(call, kDropoutTraining, "training", true);
    if (call->outputs[0] == nullptr) return;
    const View dx = output(call, 0, dtype_of<T>());
    expect_shape(dx, x.shape, x.rank, "gradient output 0");
    const double scale_divisor = 1.0 - p;
    map_elements<T, T, Bool>(dx, {&dy, &mask}, [=](T g, Bool m) {
      const double v = to_f64(g);
      return from_f64<T>(0.0 + (!training ? v : (m.bits != 0 ? v / scale_divisor : 0.0)));
    });
  });
}

template <class T>
void add_random(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  r.add("dx.uniform", 0, 1, {t}, &uniform_kernel<T>, kFlags);
  r.add("dx.normal", 0, 1, {t}, &normal_kernel<T>, kFlags);
  r.add("dx.dropout", 1, 2, {t, t, dtype_of<Bool>()}, &dropout_kernel<T>, kFlags,
        &dropout_backward<T>);
}

}  // namespace

void register_random_kernels(Registrar& r) {
  add_random<double>(r);
  add_random<float>(r);
  add_random<Half>(r);
  add_random<BFloat16>(r);
}

}  // namespace deepx::cpu
