// The reference-kernel tests' host: deepx::testing::TestHost (testing/), the shared fake host
// that records registered kernels and spaces, plus owned test tensors and a helper that calls a
// registered kernel through dx_kernel_call_t exactly as a host would. Nothing here shares code
// with deepx's real host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepx/plugin.h"
#include "deepx/reference/kernels.hpp"
#include "deepx/testing/test_host.h"

namespace deepx::ref::testing {

using FakeHost = deepx::testing::TestHost;
using RegisteredKernel = deepx::testing::RegisteredKernel;
using RegisteredSpace = deepx::testing::RegisteredSpace;

// Outcome of a call: DX_OK or an error code and its message (the error is destroyed).
struct Status {
  dx_status_t code = DX_OK;
  std::string message;
  bool ok() const { return code == DX_OK; }
};
// Consumes `error`.
Status take(const dx_host_t* host, dx_error_t* error);

// A test tensor owning its storage. Its DLTensor may be a strided/offset view into the
// storage; element (i...) is at data + byte_offset + sum(i_k * strides_k) * itemsize.
class TestTensor {
 public:
  // Compact row-major, zero-filled, strides null in the DLTensor.
  TestTensor(DType dtype, std::vector<std::int64_t> shape);
  // A view with explicit strides and an element offset into a storage of `storage_elements`
  // elements, which is filled with the byte 0xAB so stray writes show.
  TestTensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
             std::int64_t offset_elements, std::int64_t storage_elements);
  TestTensor(const TestTensor&) = delete;
  TestTensor& operator=(const TestTensor&) = delete;
  TestTensor(TestTensor&& other) noexcept;

  // Typed constructors from row-major values (floats are rounded once to the dtype).
  static TestTensor of(DType dtype, std::vector<std::int64_t> shape, const std::vector<double>& values);
  static TestTensor ints(DType dtype, std::vector<std::int64_t> shape, const std::vector<std::int64_t>& values);

  const DLTensor* dl() const { return &dl_; }
  DLTensor* mutable_dl() { return &dl_; }
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const;

  // Element access by multi-index or by row-major flat index.
  std::byte* at(const std::vector<std::int64_t>& index) const;
  std::byte* flat(std::int64_t i) const;
  double get(std::int64_t i) const;             // F dtypes
  std::int64_t get_int(std::int64_t i) const;   // I dtypes and bool
  std::uint16_t get_bits16(std::int64_t i) const;
  void set(std::int64_t i, double v);
  void set_int(std::int64_t i, std::int64_t v);
  std::vector<double> values() const;
  std::vector<std::int64_t> int_values() const;

  // Copies the raw storage bytes (for "untouched" checks).
  std::vector<std::byte> storage_bytes() const { return storage_; }

 private:
  DType dtype_;
  std::vector<std::int64_t> shape_;
  std::vector<std::int64_t> strides_;  // empty when compact (DLTensor strides null)
  std::vector<std::byte> storage_;
  DLTensor dl_{};
  void relink();
};

// Attribute builders (array attrs borrow `values`: keep it alive for the call).
dx_attr_t attr_none(const char* name);
dx_attr_t attr_i64(const char* name, std::int64_t v);
dx_attr_t attr_bool(const char* name, bool v);
dx_attr_t attr_f64(const char* name, double v);
dx_attr_t attr_i64s(const char* name, const std::vector<std::int64_t>& values);
dx_attr_t attr_string(const char* name, const char* value);  // borrows `value`

// Host fixture with the reference kernels registered through deepx_reference_register.
class Reference {
 public:
  Reference();
  FakeHost& fake() { return fake_; }
  // Finds the kernel for op and the dtypes of the tensors and calls its forward through a
  // dx_kernel_call_t. DX_NOT_FOUND when no kernel has that signature. A null input (an absent
  // optional input) is passed as a null tensor and looked up with input 0's dtype.
  Status call(const std::string& op, const std::vector<const TestTensor*>& inputs,
              const std::vector<const TestTensor*>& outputs, const std::vector<dx_attr_t>& attrs = {});
  // Same, with raw DLTensors and an explicit kernel key; `backward` calls desc.backward.
  Status call_raw(const RegisteredKernel& kernel, const std::vector<const DLTensor*>& inputs,
                  const std::vector<const DLTensor*>& outputs, const std::vector<dx_attr_t>& attrs,
                  bool backward = false);
  // Calls the backward kernel of `op` for the forward signature (fwd_inputs -> fwd_outputs)
  // with the convention of plugin.h: inputs = output gradients, forward inputs, forward outputs;
  // outputs = input gradients (null = not wanted).
  Status call_backward(const std::string& op, const std::vector<const TestTensor*>& output_grads,
                       const std::vector<const TestTensor*>& fwd_inputs,
                       const std::vector<const TestTensor*>& fwd_outputs,
                       const std::vector<const TestTensor*>& input_grads,
                       const std::vector<dx_attr_t>& attrs = {});
  const RegisteredKernel* find(const std::string& op, const std::vector<DType>& inputs,
                               const std::vector<DType>& outputs);

 private:
  FakeHost fake_;
};

// All reference-facing dtypes, for loops in tests.
inline const std::vector<DType> kF = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16};
inline const std::vector<DType> kI = {DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8};

}  // namespace deepx::ref::testing
