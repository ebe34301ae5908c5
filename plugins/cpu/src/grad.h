// Shared machinery of the backward kernels (plugin.h's convention: inputs are the output
// gradients, then the forward inputs, then the forward outputs; outputs are the input gradients,
// a null entry meaning "not wanted").
//
// Semantics follow the reference (docs/ops.md, "Backward kernels"):
// derivatives are evaluated in f64 from the forward inputs, contributions are accumulated in
// f64 starting from +0 (so a -0 contribution gives +0, as the reference's zeroed buffers do),
// gradients of broadcast inputs are summed back to the input's shape, and each gradient element
// is rounded once to its dtype.
//
// write_gradient() is the engine of the elementwise gradients: an input gradient whose shape is
// the iteration space's is one vectorised, parallel map; a broadcast input's gradient is a
// reduction over the broadcast dims fused with the computation of the contributions (one pass,
// linear in the iteration space, no full-size temporary), summed in the reference's order, so
// deterministic for any thread count (and the reference's bits in f64).
//
// GradTarget handles gradients that overlap the call's inputs (in-place backward calls): such a
// gradient is computed into a compact temporary and copied out after every input was read.
#ifndef DEEPX_PLUGINS_CPU_GRAD_H_
#define DEEPX_PLUGINS_CPU_GRAD_H_

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "map.h"
#include "strided.h"

namespace deepx::cpu {

// ---- f64 round trips for the floating storage types --------------------------------------------

template <class T>
inline double to_f64(T v) {
  if constexpr (std::is_same_v<T, Half>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>) return bfloat16_to_float(v.bits);
  else return static_cast<double>(v);
}

/// Rounds once (to nearest even) from f64 to T.
template <class T>
inline T from_f64(double d) {
  if constexpr (std::is_same_v<T, Half>) return Half{double_to_half(d)};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{double_to_bfloat16(d)};
  else return static_cast<T>(d);
}

// ---- attribute parsers shared by forward and backward kernels ----------------------------------

/// dx.gelu's `approximate`: false for unset / "none", true for "tanh"; anything else fails.
bool gelu_tanh_form(const dx_kernel_call_t* call);
/// dx.clamp's bound in `slot` for a floating tensor (f64 or i64 attribute), or nullopt.
std::optional<double> clamp_float_bound(const dx_kernel_call_t* call, int slot, const char* name);
/// dx.transpose's `perm` for a rank-`rank` tensor (unset = reversed), validated.
void transpose_perm(const dx_kernel_call_t* call, int rank, int64_t* perm);

// ---- backward kernels of elementwise.cc and elementwise_math.cc (elementwise_backward.cc) -------

/// The backward kernels of the elementwise ops whose operands are of dtype T (dx.where: its value
/// dtype), one member per op, passed as the `backward` argument where each forward kernel is
/// registered. Every member is null for integer and bool T, which have no gradient.
struct ElementwiseBackward {
  dx_kernel_fn add, sub, mul, div, pow, maximum, minimum, where;
  dx_kernel_fn neg, abs, sign, exp, expm1, relu, reciprocal, sqrt, rsqrt, log, log1p;
  dx_kernel_fn sin, cos, tan, tanh, erf, sigmoid, silu, gelu, clamp;
  dx_kernel_fn copy, transpose;
};
/// Instantiated for the ten dtypes of the op set (f64 ... bool).
template <class T>
ElementwiseBackward elementwise_backward();
/// The backward kernel of dx.cast from -> to (both F), or null.
dx_kernel_fn cast_backward(DLDataType from, DLDataType to);

// ---- call validation ---------------------------------------------------------------------------

/// The optional gradient output `i` (null = not wanted) with dtype `dt` and the shape of `like`.
inline std::optional<View> grad_view(const dx_kernel_call_t* call, int i, DLDataType dt,
                                     const View& like) {
  if (call->outputs[i] == nullptr) return std::nullopt;
  const std::string what = "input gradient " + std::to_string(i);
  View g = make_view(call->outputs[i], what.c_str());
  expect_dtype(g, dt, what.c_str());
  check_same_shape(g, like);
  return g;
}

/// The tensors of a backward call whose forward op has N inputs and one output, all of dtype
/// `t`: [0] the output gradient, [1..N] the forward inputs, [N + 1] the forward output. Checks the
/// arity (N + 2 inputs, N gradient outputs), then makes every view, then checks every dtype, each
/// error naming the tensor at fault.
template <int N>
std::array<View, N + 2> backward_tensors(const dx_kernel_call_t* call, DLDataType t) {
  static_assert(N >= 1 && N <= 3, "backward_tensors names up to three forward inputs");
  constexpr const char* kInputs[] = {"forward input 0", "forward input 1", "forward input 2"};
  expect_arity(call, N + 2, N);
  std::array<const char*, N + 2> names{};
  names[0] = "output gradient 0";
  for (int i = 0; i < N; ++i) names[i + 1] = kInputs[i];
  names[N + 1] = "forward output 0";
  std::array<View, N + 2> v;
  for (int i = 0; i < N + 2; ++i) v[i] = make_view(call->inputs[i], names[i]);
  for (int i = 0; i < N + 2; ++i) expect_dtype(v[i], t, names[i]);
  return v;
}

// ---- aliasing ----------------------------------------------------------------------------------

/// [first byte, one past the last byte] spanned by v's elements; {0, 0} when empty.
inline std::pair<uintptr_t, uintptr_t> byte_span(const View& v) {
  if (v.count() == 0) return {0, 0};
  int64_t low = 0, high = 0;
  for (int d = 0; d < v.rank; ++d) {
    const int64_t extent = (v.shape[d] - 1) * v.strides[d];
    (extent < 0 ? low : high) += extent;
  }
  const int64_t size = v.dtype.bits / 8;
  const auto base = reinterpret_cast<uintptr_t>(v.base);
  return {base + static_cast<uintptr_t>(low * size), base + static_cast<uintptr_t>(high * size + size)};
}

inline bool overlaps(const View& a, const View& b) {
  const auto x = byte_span(a), y = byte_span(b);
  return x.first < x.second && y.first < y.second && x.first < y.second && y.first < x.second;
}

/// Same elements at the same addresses in the same order (an exact in-place alias).
inline bool same_layout(const View& a, const View& b) {
  if (a.base != b.base || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
    if (a.shape[d] != 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

/// A compact row-major view of `like`'s shape and dtype over `data`.
inline View compact_view(const View& like, void* data, DLDataType dtype) {
  View v = like;
  v.base = static_cast<char*>(data);
  v.dtype = dtype;
  int64_t stride = 1;
  for (int d = like.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= like.shape[d];
  }
  return v;
}

template <size_t Size>
using GradBits = std::conditional_t<
    Size == 1, uint8_t,
    std::conditional_t<Size == 2, uint16_t, std::conditional_t<Size == 4, uint32_t, uint64_t>>>;

/// One wanted gradient output. Kernels write into view(); when the real output overlaps an
/// input it could clobber before that input is read, view() is a compact temporary that
/// finish() copies out (call finish() after every input has been read).
class GradTarget {
 public:
  GradTarget() = default;
  /// `exact_alias_ok`: an output with exactly an input's layout is safe (the kernel reads each
  /// element of that input before writing the same element of the output, and nothing else).
  GradTarget(const std::optional<View>& real, std::initializer_list<const View*> inputs,
             bool exact_alias_ok) {
    if (!real) return;
    present_ = true;
    real_ = *real;
    work_ = *real;
    bool clash = false;
    for (const View* in : inputs) {
      if (in == nullptr || !overlaps(real_, *in)) continue;
      if (exact_alias_ok && same_layout(real_, *in)) continue;
      clash = true;
    }
    if (clash) {
      storage_.resize(static_cast<size_t>(real_.count()) * (real_.dtype.bits / 8) + 8);
      work_ = compact_view(real_, storage_.data(), real_.dtype);
    }
  }
  explicit operator bool() const { return present_; }
  const View& view() const { return work_; }
  void finish() {
    if (!present_ || storage_.empty()) return;
    switch (real_.dtype.bits) {
      case 16: copy_out<GradBits<2>>(); break;
      case 32: copy_out<GradBits<4>>(); break;
      default: copy_out<GradBits<8>>(); break;
    }
    storage_.clear();
  }

 private:
  template <class R>
  void copy_out() {
    map_elements<R, R>(real_, {&work_}, [](R x) { return x; });
  }
  bool present_ = false;
  View real_{}, work_{};
  std::vector<unsigned char> storage_;
};

// ---- the elementwise gradient engine ----------------------------------------------------------

namespace grad_detail {

constexpr int64_t kChunk = 256;

template <class... In, class F, size_t... I>
void accumulate_row(double* acc, const std::tuple<const In*...>& p, int64_t n, const int64_t* st,
                    F& f, std::index_sequence<I...>) {
  bool unit = true;
  ((unit = unit && st[I + 1] == 1), ...);
  double c[kChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t m = std::min(kChunk, n - j0);
    if (unit) {
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) c[i] = f(std::get<I>(p)[j0 + i]...);
    } else {
      for (int64_t i = 0; i < m; ++i) c[i] = f(std::get<I>(p)[(j0 + i) * st[I + 1]]...);
    }
    if (st[0] == 0) {
      // Sequential, in the iteration order: the reference's order exactly (maximum, minimum
      // and where gradients are certified bit-exact).
      double s = acc[0];
      for (int64_t i = 0; i < m; ++i) s += c[i];
      acc[0] = s;
    } else if (st[0] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) acc[j0 + i] += c[i];
    } else {
      const int64_t sa = st[0];
      for (int64_t i = 0; i < m; ++i) acc[(j0 + i) * sa] += c[i];
    }
  }
}

}  // namespace grad_detail

/// Writes into `target` (dtype G; its shape right-aligned to `space` under NumPy broadcasting)
/// the sum, over every element of the iteration space `space` that maps to a target element, of
/// f(ins[k] elements...) (an f64), plus +0, rounded once. `ins` broadcast to `space`. `work` is
/// a rough per-element cost (see map_elements).
template <class G, class... In, class F>
void write_gradient(const View& target, const View& space,
                    const std::array<const View*, sizeof...(In)>& ins, F f, int64_t work = 1) {
  constexpr int K = static_cast<int>(sizeof...(In));
  const int rank = space.rank;
  const int lead = rank - target.rank;
  if (lead < 0) fail(DX_INTERNAL, "cpu: gradient of higher rank than its iteration space");
  // The target seen at the space's rank: stride 0 where it is broadcast.
  View aligned = target;
  aligned.rank = rank;
  bool reduces = false;
  for (int d = 0; d < rank; ++d) {
    const int64_t extent = d < lead ? 1 : target.shape[d - lead];
    aligned.shape[d] = space.shape[d];
    aligned.strides[d] = d < lead ? 0 : target.strides[d - lead];
    if (extent != space.shape[d]) reduces = true;
  }
  if (!reduces) {
    map_elements<G, In...>(aligned, ins, [f](In... v) { return from_f64<G>(f(v...) + 0.0); }, work);
    return;
  }

  const int64_t count = target.count();
  if (count == 0) return;
  std::vector<double> acc(static_cast<size_t>(count), 0.0);
  StridedLoop<K + 1> loop;
  loop.rank = rank;
  {
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t extent = d < lead ? 1 : target.shape[d - lead];
      loop.shape[d] = space.shape[d];
      loop.strides[0][d] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
  }
  for (int k = 0; k < K; ++k) broadcast_strides_into(*ins[k], rank, loop.strides[k + 1]);
  loop.simplify();
  const auto bases = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<const In*...>(ins[I]->template data<const In>()...);
  }(std::index_sequence_for<In...>{});
  auto make_row = [&bases, &f](double* acc_base) {
    return [acc_base, &bases, &f](int64_t n, const int64_t* off, const int64_t* st) {
      const auto p = [&]<size_t... I>(std::index_sequence<I...>) {
        return std::tuple<const In*...>((std::get<I>(bases) + off[I + 1])...);
      }(std::index_sequence_for<In...>{});
      grad_detail::accumulate_row<In...>(acc_base + off[0], p, n, st, f,
                                         std::index_sequence_for<In...>{});
    };
  };

  const int64_t total = loop.count();
  // Every gradient element receives its contributions one by one in the iteration space's
  // row-major order (the reference's order, so results are its bits in f64). Threads split a
  // kept dim, which gives each of them whole gradient elements: the order never changes.
  int split = -1;
  for (int d = 0; d < loop.rank; ++d) {
    if (loop.strides[0][d] != 0 && (split < 0 || loop.shape[d] > loop.shape[split])) split = d;
  }
  if (total > 0) {
    if (total * work < kParallelThreshold || split < 0 || available_threads() == 1) {
      auto row = make_row(acc.data());
      run_range(loop, 0, total, row);
    } else {
      const int64_t per_index = total / loop.shape[split];
      for_each_range(loop.shape[split], [&](int64_t begin, int64_t end) {
        StridedLoop<K + 1> slice = loop;
        slice.shape[split] = end - begin;
        int64_t delta[K + 1];
        for (int k = 0; k <= K; ++k) delta[k] = begin * loop.strides[k][split];
        auto inner = make_row(acc.data());
        auto row = [&inner, &delta](int64_t n, const int64_t* off, const int64_t* st) {
          constexpr int kOperands = static_cast<int>(sizeof...(In)) + 1;
          int64_t shifted[kOperands];
          for (int k = 0; k < kOperands; ++k) shifted[k] = off[k] + delta[k];
          inner(n, shifted, st);
        };
        run_range(slice, 0, slice.count(), row);
      }, per_index * work);
    }
  }
  const View acc_view = compact_view(target, acc.data(), make_dtype(kDLFloat, 64));
  map_elements<G, double>(target, {&acc_view}, [](double v) { return from_f64<G>(v); });
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_GRAD_H_
