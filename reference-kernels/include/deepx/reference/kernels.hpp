// The reference kernels' internal C++ API. Kernels are plain C++ functions that read
// `Call` (a C++ view of dx_kernel_call_t) and report failures by throwing `Error`; the C
// trampoline in registry.cc turns every exception into a dx_error_t, so nothing throws past the
// ABI. Written for clarity: tensors are walked element by element through a multi-index, with
// their strides and byte_offset honoured, and floating values are computed in f64.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "deepx/plugin.h"

namespace deepx::ref {

// ---- dtypes ----------------------------------------------------------------------------------

enum class DType : std::uint8_t { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

inline constexpr DType kFloatTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16};
inline constexpr DType kIntTypes[] = {DType::kI64, DType::kI32, DType::kI16, DType::kI8,
                                      DType::kU8};
inline constexpr DType kAllTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16,
                                      DType::kI64, DType::kI32, DType::kI16, DType::kI8,
                                      DType::kU8,  DType::kBool};

bool is_float(DType t);
bool is_int(DType t);
std::size_t size_of(DType t);
const char* name_of(DType t);
DLDataType to_dlpack(DType t);
std::optional<DType> from_dlpack(DLDataType t);

// ---- errors ----------------------------------------------------------------------------------

// A failure with a status code; thrown by kernels, caught at the C boundary.
struct Error {
  dx_status_t code;
  std::string message;
};
[[noreturn]] void fail(dx_status_t code, std::string message);

// ---- tensors ---------------------------------------------------------------------------------

// A validated view of one DLTensor: element (i0, i1, ...) lives at
// base + sum(ik * strides[k]) * size_of(dtype).
struct Tensor {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements, never null (compact when DLPack said null)
  std::byte* base = nullptr;          // data + byte_offset
  std::int64_t numel = 1;

  std::size_t rank() const { return shape.size(); }
  // Address of the element at `index` (rank entries).
  std::byte* at(std::span<const std::int64_t> index) const;
};

// Validates `dl` (non-null, CPU, lanes 1, known dtype, non-negative dims, data present when the
// tensor has elements) and views it; `role` names it in messages ("input 0").
Tensor view(const DLTensor* dl, const std::string& role);

std::string shape_string(std::span<const std::int64_t> shape);

// Calls fn(index) for every multi-index of `shape` in row-major order; nothing when a dim is 0,
// once (with an empty index) for rank 0.
template <typename Fn>
void for_each_index(std::span<const std::int64_t> shape, Fn&& fn) {
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::int64_t dim : shape) {
    if (dim == 0) return;
  }
  while (true) {
    fn(std::span<const std::int64_t>(index));
    std::size_t k = shape.size();
    while (k > 0) {
      --k;
      if (++index[k] < shape[k]) break;
      index[k] = 0;
      if (k == 0) return;
    }
    if (shape.empty()) return;
  }
}

// NumPy broadcast of two shapes (aligned from the right; each pair equal or one of them 1);
// DX_SHAPE_MISMATCH when they do not broadcast.
std::vector<std::int64_t> broadcast_shapes(std::span<const std::int64_t> a,
                                           std::span<const std::int64_t> b);
// Re-views `in` with the rank and shape `out_shape`: missing leading dims and broadcast dims of
// size 1 get stride 0, so the result's at(out_index) addresses the broadcast element.
Tensor broadcast_to(const Tensor& in, std::span<const std::int64_t> out_shape);
// DX_SHAPE_MISMATCH unless `out` has exactly the shape `expected`.
void expect_output_shape(const Tensor& out, std::span<const std::int64_t> expected);

// The operands of a broadcasting binary op `out = f(a, b)`: the views of call.inputs[0..1] and
// call.outputs[0], the broadcast shape (checked against `out`), and a and b re-viewed with that
// shape, so ab.at(i) / bb.at(i) address the elements combined into out.at(i).
struct Call;
struct BroadcastBinary {
  Tensor a, b, out, ab, bb;
  std::vector<std::int64_t> shape;
};
BroadcastBinary broadcast_binary(const Call& call);

// ---- element access --------------------------------------------------------------------------

// Floating element as f64 (exact for every F dtype).
double load_float(DType t, const std::byte* p);
// Stores `v` rounded once (nearest even) to the F dtype `t`.
void store_float(DType t, std::byte* p, double v);
// Integer element (I dtypes and bool) widened to i64.
std::int64_t load_int(DType t, const std::byte* p);
// Stores the low bits of `v` (two's complement wrap) into the I dtype `t`; bool stores v != 0.
void store_int_wrapping(DType t, std::byte* p, std::int64_t v);

// ---- calls -----------------------------------------------------------------------------------

// A C++ view of one dx_kernel_call_t.
struct Call {
  std::span<const DLTensor* const> inputs;
  std::span<const DLTensor* const> outputs;
  std::span<const dx_attr_t> attrs;

  // The attribute of schema slot `slot` (named `name`), or null when absent/unset. Reads the
  // slot first, as the ABI promises schema order, and falls back to a search by name.
  const dx_attr_t* attr(int slot, const char* name) const;
};

// Attribute readers: the default when unset, DX_INVALID_ARGUMENT for a wrong type.
bool attr_bool(const Call& call, int slot, const char* name, bool fallback);
std::int64_t attr_i64(const Call& call, int slot, const char* name, std::int64_t fallback);
// An f64 attribute (an i64 one is converted); nullopt when unset.
std::optional<double> attr_f64(const Call& call, int slot, const char* name);
// A string attribute; nullopt when unset.
std::optional<std::string> attr_string(const Call& call, int slot, const char* name);
// An i64 array attribute (a scalar i64 counts as a one-element array); nullopt when unset.
std::optional<std::vector<std::int64_t>> attr_i64_list(const Call& call, int slot,
                                                       const char* name);

// One registered kernel: an op, its dtype signature, the C++ function computing it and, for a
// differentiable op, the one computing its gradients.
//
// Backward calling convention (the `backward` slot of dx_kernel_desc_t, see plugin.h): for an
// op with n inputs and m outputs, `inputs` are the m output gradients (dtypes of the forward
// outputs), then the n forward inputs, then the m forward outputs; `outputs` are the n input
// gradients (dtypes of the forward inputs), where a null entry means "not wanted". Attributes
// are the forward ones. Gradients are accumulated in f64 and rounded once; gradients of
// broadcast inputs are summed back to the input's shape. A requested gradient of an input that
// has none (a bool condition, integer indices) is filled with zeros.
struct KernelEntry {
  const char* op;
  std::vector<DType> inputs;
  std::vector<DType> outputs;
  void (*compute)(const Call& call);
  dx_kernel_flags_t flags;
  void (*backward)(const Call& call) = nullptr;
  // Bit i set: input i is optional and may be a null tensor (dx.linear's bias, the norms'
  // weight and bias). A null optional input has no gradient (its gradient output must be null).
  std::uint32_t optional_inputs = 0;
  // Variadic inputs (dx.concat): `inputs` holds the one shared dtype and the kernel takes one
  // or more inputs (DX_KERNEL_FLAG_VARIADIC).
  bool variadic = false;
};

// Every reference kernel; built once, static storage (kernel_data points into it).
const std::vector<KernelEntry>& kernel_table();

// Checks arity and dtypes of `call` against `entry` (DX_INVALID_ARGUMENT on mismatch) and runs
// it; throws Error on failure.
void run_kernel(const KernelEntry& entry, const Call& call);
// Same for the backward kernel (arity and dtypes of the backward convention above).
void run_backward(const KernelEntry& entry, const Call& call);

// ---- gradient helpers -------------------------------------------------------------------------

// An f64 accumulation buffer shaped like a forward input: backward kernels add partial
// gradients into `view` (compact f64, same shape; broadcast_to(view, ...) reaches it through a
// broadcast) and store it once, rounded, into the gradient output.
struct GradBuffer {
  std::vector<double> data;
  Tensor view;
  explicit GradBuffer(std::span<const std::int64_t> shape);
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;
  static void add(std::byte* p, double v);  // *p (an f64 in a GradBuffer) += v
  void store(const Tensor& grad) const;     // rounds once into `grad` (same shape)
};
// The gradient output `i` of a backward call, or nullopt when not wanted; DX_SHAPE_MISMATCH
// unless it has the shape `expected`.
std::optional<Tensor> grad_output(const Call& call, std::size_t i,
                                  std::span<const std::int64_t> expected);
// Fills a (non-differentiable input's) gradient with zeros.
void zero_fill(const Tensor& t);

// Float -> integer: truncate toward zero, saturate to [lo, hi], NaN -> 0.
std::int64_t saturating_int(double v, std::int64_t lo, std::int64_t hi);
// The value range of an integer dtype (bool: 0..1).
void int_range(DType t, std::int64_t& lo, std::int64_t& hi);
// i64 -> f64 rounded to odd (exact below 2^53), so a second rounding to f16/bf16 is correct.
double to_double_round_to_odd(std::int64_t v);
// Encodes a value attribute (dx.fill's `value`, dx.pad's `value`) as one element of `t`: an i64
// exactly (wrapping; rounded once to F), an f64 converted (ints: truncate, saturate, NaN -> 0;
// bool: != 0); unset = 0.
void encode_value(const Call& call, int slot, const char* name, DType t, std::byte* bytes);
// Stores the integer `v` into any dtype: F rounds once, I wraps, bool is v != 0.
void store_int_any(DType t, std::byte* p, std::int64_t v);

// The value of channel `c` of an optional per-channel (C,) tensor, `fallback` when absent
// (conv2d's bias, batch_norm's weights and running statistics).
inline double channel_value(const std::optional<Tensor>& t, std::int64_t c, double fallback) {
  if (!t) return fallback;
  const std::int64_t i[1] = {c};
  return load_float(t->dtype, t->at(i));
}

// ---- helpers of dx.softmax (reduce.cc) that dx.log_softmax (nn.cc) shares --------------------

// The normalised softmax axis (attribute `axis`, default -1) of a rank-`rank` tensor (rank 0
// acts as rank 1); DX_OUT_OF_RANGE outside it.
std::int64_t softmax_axis(const Call& call, std::size_t rank);
// softmax of one line in f64 (max-shifted; a NaN anywhere makes the line NaN), in place.
void softmax_line(std::vector<double>& line);
// The backward of dx.softmax and dx.log_softmax (inputs dy, x, y; output dx) along the axis:
// for each line, s = softmax(x) recomputed in f64 from x and g = dy, then line_grad(s, g, dx_line)
// gives the line's gradient, accumulated in f64 and rounded once. Rank 0: dx = 0 (both forwards
// are constant there).
void softmax_family_backward(const Call& call,
                             void (*line_grad)(const std::vector<double>& s, const std::vector<double>& g,
                                               std::vector<double>& dx_line));
// Calls fn(index) once per line of `shape` along `axis`, in row-major order of the other
// dimensions: `index` holds the line's position, index[axis] is the caller's to set.
template <typename Fn>
void for_each_line(std::span<const std::int64_t> shape, std::int64_t axis, Fn fn) {
  std::vector<std::int64_t> outer_shape(shape.begin(), shape.end());
  outer_shape[static_cast<std::size_t>(axis)] = 1;
  std::vector<std::int64_t> index;
  for_each_index(outer_shape, [&](std::span<const std::int64_t> outer) {
    index.assign(outer.begin(), outer.end());
    fn(index);
  });
}

// ---- helpers of the movement and indexing families (movement_shape.cc, indexing.cc) ----------

// Copies one element's bytes from in[ii] to out[oi].
inline void move_bytes(const Tensor& out, std::span<const std::int64_t> oi, const Tensor& in,
                       std::span<const std::int64_t> ii) {
  std::memmove(out.at(oi), in.at(ii), size_of(in.dtype));
}

// Normalises an axis attribute (slot 0, "axis", default `fallback`) for rank `rank`.
inline std::size_t axis_attr(const Call& call, std::size_t rank, std::int64_t fallback, const char* op) {
  const std::int64_t axis = attr_i64(call, 0, "axis", fallback);
  const auto r = static_cast<std::int64_t>(rank);
  const std::int64_t normal = axis < 0 ? axis + r : axis;
  if (normal < 0 || normal >= r) {
    fail(DX_OUT_OF_RANGE, std::string(op) + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return static_cast<std::size_t>(normal);
}

// The gradient of a movement op: dx[src(i)] += dy[i] for each output index i, where
// `source(out_index, in_index)` fills the input index (and returns false to skip, e.g. padding).
template <typename Source>
void movement_backward(const Tensor& dy, const Tensor& x, const std::optional<Tensor>& dx, Source source) {
  if (!dx) return;
  GradBuffer buf(x.shape);
  std::vector<std::int64_t> in_index(x.rank());
  for_each_index(dy.shape, [&](std::span<const std::int64_t> i) {
    if (source(i, in_index)) GradBuffer::add(buf.view.at(in_index), load_float(dy.dtype, dy.at(i)));
  });
  buf.store(*dx);
}

// ---- the kernels (each validates shapes and attributes, throws Error) -------------------------
void add(const Call& call);
void sub(const Call& call);
void mul(const Call& call);
void div(const Call& call);
void neg(const Call& call);
void exp(const Call& call);
void relu(const Call& call);
void sum(const Call& call);
void max(const Call& call);
void matmul(const Call& call);
void softmax(const Call& call);
void transpose(const Call& call);
void copy(const Call& call);
void fill(const Call& call);

// Group 2: elementwise.
void abs(const Call& call);
void sign(const Call& call);
void reciprocal(const Call& call);
void sqrt(const Call& call);
void rsqrt(const Call& call);
void expm1(const Call& call);
void log(const Call& call);
void log1p(const Call& call);
void sin(const Call& call);
void cos(const Call& call);
void tan(const Call& call);
void tanh(const Call& call);
void erf(const Call& call);
void sigmoid(const Call& call);
void silu(const Call& call);
void gelu(const Call& call);
void floor(const Call& call);
void ceil(const Call& call);
void round(const Call& call);
void clamp(const Call& call);
void pow(const Call& call);
void maximum(const Call& call);
void minimum(const Call& call);
void cast(const Call& call);
void logical_not(const Call& call);
void bitwise_not(const Call& call);
void eq(const Call& call);
void ne(const Call& call);
void lt(const Call& call);
void le(const Call& call);
void gt(const Call& call);
void ge(const Call& call);
void logical_and(const Call& call);
void logical_or(const Call& call);
void logical_xor(const Call& call);
void where(const Call& call);

// Group 3: reductions.
void mean(const Call& call);
void prod(const Call& call);
void min(const Call& call);
void argmax(const Call& call);
void argmin(const Call& call);

// Group 4: nn ops, data movement, creation and random.
void log_softmax(const Call& call);
void linear(const Call& call);
void layer_norm(const Call& call);
void rms_norm(const Call& call);
void embedding(const Call& call);
void cross_entropy(const Call& call);
void log_softmax_backward(const Call& call);
void linear_backward(const Call& call);
void layer_norm_backward(const Call& call);
void rms_norm_backward(const Call& call);
void embedding_backward(const Call& call);
void cross_entropy_backward(const Call& call);

void reshape(const Call& call);
void broadcast_to_op(const Call& call);
void concat(const Call& call);
void split(const Call& call);
void slice(const Call& call);
void index_select(const Call& call);
void gather(const Call& call);
void scatter_add(const Call& call);
void pad(const Call& call);
void tile(const Call& call);
void arange(const Call& call);
void conv2d(const Call& call);
void conv2d_backward(const Call& call);
void max_pool2d(const Call& call);
void max_pool2d_backward(const Call& call);
void avg_pool2d(const Call& call);
void avg_pool2d_backward(const Call& call);
void batch_norm(const Call& call);
void batch_norm_backward(const Call& call);
void scaled_dot_product_attention(const Call& call);
void scaled_dot_product_attention_backward(const Call& call);
void uniform(const Call& call);
void normal(const Call& call);
void dropout(const Call& call);
void dropout_backward(const Call& call);
// Philox-4x32-10 (Random123): 10 rounds on a 128-bit counter with a 64-bit key.
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                           std::array<std::uint32_t, 2> key);
void reshape_backward(const Call& call);
void broadcast_to_backward(const Call& call);
void concat_backward(const Call& call);
void split_backward(const Call& call);
void slice_backward(const Call& call);
void index_select_backward(const Call& call);
void gather_backward(const Call& call);
void scatter_add_backward(const Call& call);
void pad_backward(const Call& call);
void tile_backward(const Call& call);

// Backward kernels (the convention is documented at KernelEntry).
void add_backward(const Call& call);
void sub_backward(const Call& call);
void mul_backward(const Call& call);
void div_backward(const Call& call);
void pow_backward(const Call& call);
void maximum_backward(const Call& call);
void minimum_backward(const Call& call);
void where_backward(const Call& call);
void neg_backward(const Call& call);
void exp_backward(const Call& call);
void relu_backward(const Call& call);
void abs_backward(const Call& call);
void sign_backward(const Call& call);
void reciprocal_backward(const Call& call);
void sqrt_backward(const Call& call);
void rsqrt_backward(const Call& call);
void expm1_backward(const Call& call);
void log_backward(const Call& call);
void log1p_backward(const Call& call);
void sin_backward(const Call& call);
void cos_backward(const Call& call);
void tan_backward(const Call& call);
void tanh_backward(const Call& call);
void erf_backward(const Call& call);
void sigmoid_backward(const Call& call);
void silu_backward(const Call& call);
void gelu_backward(const Call& call);
void clamp_backward(const Call& call);
void cast_backward(const Call& call);
void sum_backward(const Call& call);
void mean_backward(const Call& call);
void prod_backward(const Call& call);
void max_backward(const Call& call);
void min_backward(const Call& call);
void matmul_backward(const Call& call);
void softmax_backward(const Call& call);
void transpose_backward(const Call& call);
void copy_backward(const Call& call);

}  // namespace deepx::ref
