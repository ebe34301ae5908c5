// The reference kernels' internal C++ API. Kernels are plain C++ functions that read
// `Call` (a C++ view of dx_kernel_call_t) and report failures by throwing `Error`; the C
// trampoline in registry.cc turns every exception into a dx_error_t, so nothing throws past the
// ABI. Written for clarity: tensors are walked element by element through a multi-index, with
// their strides and byte_offset honoured, and floating values are computed in f64.
#pragma once

#include <cstddef>
#include <cstdint>
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
// An i64 array attribute (a scalar i64 counts as a one-element array); nullopt when unset.
std::optional<std::vector<std::int64_t>> attr_i64_list(const Call& call, int slot,
                                                       const char* name);

// One registered kernel: an op, its dtype signature, and the C++ function computing it.
struct KernelEntry {
  const char* op;
  std::vector<DType> inputs;
  std::vector<DType> outputs;
  void (*compute)(const Call& call);
  dx_kernel_flags_t flags;
};

// Every reference kernel; built once, static storage (kernel_data points into it).
const std::vector<KernelEntry>& kernel_table();

// Checks arity and dtypes of `call` against `entry` (DX_INVALID_ARGUMENT on mismatch) and runs
// it; throws Error on failure.
void run_kernel(const KernelEntry& entry, const Call& call);

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

}  // namespace deepx::ref
