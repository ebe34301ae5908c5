#include "fake_host.hpp"

#include <cstring>
#include <stdexcept>

#include "deepx/reference/half.hpp"
#include "deepx/reference/register.h"

namespace deepx::ref::testing {

Status take(const dx_host_t* host, dx_error_t* error) {
  Status s;
  if (error != nullptr) {
    s.code = host->error_code(error);
    s.message = host->error_message(error);
    host->error_destroy(error);
  }
  return s;
}

// ---- TestTensor ------------------------------------------------------------------------------

TestTensor::TestTensor(DType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  std::int64_t n = 1;
  for (std::int64_t d : shape_) n *= d;
  storage_.assign(static_cast<std::size_t>(n) * size_of(dtype_) + 1, std::byte{0});
  relink();
}

TestTensor::TestTensor(DType dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> strides, std::int64_t offset_elements,
                       std::int64_t storage_elements)
    : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
  storage_.assign(static_cast<std::size_t>(storage_elements) * size_of(dtype_) + 1, std::byte{0xAB});
  relink();
  dl_.byte_offset = static_cast<std::uint64_t>(offset_elements) * size_of(dtype_);
}

TestTensor::TestTensor(TestTensor&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      strides_(std::move(other.strides_)),
      storage_(std::move(other.storage_)),
      dl_(other.dl_) {
  relink();
}

void TestTensor::relink() {
  const std::uint64_t offset = dl_.byte_offset;
  dl_.data = storage_.data();
  dl_.device = DLDevice{kDLCPU, 0};
  dl_.ndim = static_cast<int32_t>(shape_.size());
  dl_.dtype = to_dlpack(dtype_);
  dl_.shape = shape_.empty() ? nullptr : shape_.data();
  dl_.strides = strides_.empty() ? nullptr : strides_.data();
  dl_.byte_offset = offset;
}

TestTensor TestTensor::of(DType dtype, std::vector<std::int64_t> shape, const std::vector<double>& values) {
  TestTensor t(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel()) throw std::logic_error("value count");
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

TestTensor TestTensor::ints(DType dtype, std::vector<std::int64_t> shape, const std::vector<std::int64_t>& values) {
  TestTensor t(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel()) throw std::logic_error("value count");
  for (std::size_t i = 0; i < values.size(); ++i) t.set_int(static_cast<std::int64_t>(i), values[i]);
  return t;
}

std::int64_t TestTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape_) n *= d;
  return n;
}

std::byte* TestTensor::at(const std::vector<std::int64_t>& index) const {
  std::int64_t offset = 0;
  std::int64_t stride = 1;
  for (std::size_t k = index.size(); k-- > 0;) {
    offset += index[k] * (strides_.empty() ? stride : strides_[k]);
    stride *= shape_[k];
  }
  auto* base = const_cast<std::byte*>(storage_.data()) + dl_.byte_offset;
  return base + offset * static_cast<std::int64_t>(size_of(dtype_));
}

std::byte* TestTensor::flat(std::int64_t i) const {
  std::vector<std::int64_t> index(shape_.size());
  for (std::size_t k = shape_.size(); k-- > 0;) {
    index[k] = i % shape_[k];
    i /= shape_[k];
  }
  return at(index);
}

double TestTensor::get(std::int64_t i) const {
  const std::byte* p = flat(i);
  switch (dtype_) {
    case DType::kF64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::kF32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::kF16: return f16_to_f64(get_bits16(i));
    case DType::kBF16: return bf16_to_f64(get_bits16(i));
    default: throw std::logic_error("get on a non-float tensor");
  }
}

std::uint16_t TestTensor::get_bits16(std::int64_t i) const {
  std::uint16_t v;
  std::memcpy(&v, flat(i), 2);
  return v;
}

std::int64_t TestTensor::get_int(std::int64_t i) const {
  const std::byte* p = flat(i);
  switch (dtype_) {
    case DType::kI64: { std::int64_t v; std::memcpy(&v, p, 8); return v; }
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI16: { std::int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kI8: return static_cast<std::int8_t>(*p);
    case DType::kU8: case DType::kBool: return static_cast<std::uint8_t>(*p);
    default: throw std::logic_error("get_int on a float tensor");
  }
}

void TestTensor::set(std::int64_t i, double v) {
  std::byte* p = flat(i);
  switch (dtype_) {
    case DType::kF64: std::memcpy(p, &v, 8); return;
    case DType::kF32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case DType::kF16: { const std::uint16_t b = f64_to_f16(v); std::memcpy(p, &b, 2); return; }
    case DType::kBF16: { const std::uint16_t b = f64_to_bf16(v); std::memcpy(p, &b, 2); return; }
    default: set_int(i, static_cast<std::int64_t>(v)); return;
  }
}

void TestTensor::set_int(std::int64_t i, std::int64_t v) {
  std::byte* p = flat(i);
  switch (dtype_) {
    case DType::kI64: std::memcpy(p, &v, 8); return;
    case DType::kI32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); return; }
    case DType::kI16: { const auto x = static_cast<std::int16_t>(v); std::memcpy(p, &x, 2); return; }
    case DType::kI8: case DType::kU8: case DType::kBool: *p = static_cast<std::byte>(v); return;
    default: set(i, static_cast<double>(v)); return;
  }
}

std::vector<double> TestTensor::values() const {
  std::vector<double> out;
  for (std::int64_t i = 0; i < numel(); ++i) out.push_back(get(i));
  return out;
}

std::vector<std::int64_t> TestTensor::int_values() const {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < numel(); ++i) out.push_back(get_int(i));
  return out;
}

// ---- attributes ------------------------------------------------------------------------------

dx_attr_t attr_none(const char* name) {
  dx_attr_t a{};
  a.name = name;
  a.type = DX_ATTR_NONE;
  return a;
}
dx_attr_t attr_i64(const char* name, std::int64_t v) {
  dx_attr_t a{};
  a.name = name;
  a.type = DX_ATTR_I64;
  a.count = 1;
  a.value.i64 = v;
  return a;
}
dx_attr_t attr_bool(const char* name, bool v) {
  dx_attr_t a = attr_i64(name, v ? 1 : 0);
  a.type = DX_ATTR_BOOL;
  return a;
}
dx_attr_t attr_f64(const char* name, double v) {
  dx_attr_t a{};
  a.name = name;
  a.type = DX_ATTR_F64;
  a.count = 1;
  a.value.f64 = v;
  return a;
}
dx_attr_t attr_i64s(const char* name, const std::vector<std::int64_t>& values) {
  dx_attr_t a{};
  a.name = name;
  a.type = DX_ATTR_I64_ARRAY;
  a.count = static_cast<std::int64_t>(values.size());
  a.value.i64s = values.data();
  return a;
}

dx_attr_t attr_string(const char* name, const char* value) {
  dx_attr_t a{};
  a.name = name;
  a.type = DX_ATTR_STRING;
  a.count = static_cast<std::int64_t>(std::strlen(value));
  a.value.str = value;
  return a;
}

// ---- Reference -------------------------------------------------------------------------------

Reference::Reference() {
  const Status s = take(fake_.host(), deepx_reference_register(fake_.host(), fake_.context()));
  if (!s.ok()) throw std::runtime_error("registration failed: " + s.message);
}

const RegisteredKernel* Reference::find(const std::string& op, const std::vector<DType>& inputs,
                                        const std::vector<DType>& outputs) {
  std::vector<DLDataType> in, out;
  for (DType d : inputs) in.push_back(to_dlpack(d));
  for (DType d : outputs) out.push_back(to_dlpack(d));
  // A variadic kernel is keyed by its one shared input dtype; find() matches it too.
  return fake_.find(op, in, out, kDLCPU);
}

Status Reference::call(const std::string& op, const std::vector<const TestTensor*>& inputs,
                       const std::vector<const TestTensor*>& outputs,
                       const std::vector<dx_attr_t>& attrs) {
  std::vector<DType> in_types, out_types;
  std::vector<const DLTensor*> in, out;
  for (const TestTensor* t : inputs) {
    // A null (optional) input is looked up with input 0's dtype.
    in_types.push_back(t != nullptr ? t->dtype() : inputs[0]->dtype());
    in.push_back(t != nullptr ? t->dl() : nullptr);
  }
  for (const TestTensor* t : outputs) {
    out_types.push_back(t->dtype());
    out.push_back(t->dl());
  }
  const RegisteredKernel* k = find(op, in_types, out_types);
  if (k == nullptr) return Status{DX_NOT_FOUND, "no kernel for " + op};
  return call_raw(*k, in, out, attrs);
}

Status Reference::call_backward(const std::string& op,
                                const std::vector<const TestTensor*>& output_grads,
                                const std::vector<const TestTensor*>& fwd_inputs,
                                const std::vector<const TestTensor*>& fwd_outputs,
                                const std::vector<const TestTensor*>& input_grads,
                                const std::vector<dx_attr_t>& attrs) {
  std::vector<DType> in_types, out_types;
  for (const TestTensor* t : fwd_inputs) in_types.push_back(t != nullptr ? t->dtype() : fwd_inputs[0]->dtype());
  for (const TestTensor* t : fwd_outputs) out_types.push_back(t->dtype());
  const RegisteredKernel* k = find(op, in_types, out_types);
  if (k == nullptr) return Status{DX_NOT_FOUND, "no kernel for " + op};
  if (k->desc.backward == nullptr) return Status{DX_NOT_FOUND, "no backward for " + op};
  std::vector<const DLTensor*> in, out;
  for (const TestTensor* t : output_grads) in.push_back(t->dl());
  for (const TestTensor* t : fwd_inputs) in.push_back(t != nullptr ? t->dl() : nullptr);
  for (const TestTensor* t : fwd_outputs) in.push_back(t->dl());
  for (const TestTensor* t : input_grads) out.push_back(t == nullptr ? nullptr : t->dl());
  return call_raw(*k, in, out, attrs, true);
}

Status Reference::call_raw(const RegisteredKernel& kernel, const std::vector<const DLTensor*>& inputs,
                           const std::vector<const DLTensor*>& outputs,
                           const std::vector<dx_attr_t>& attrs, bool backward) {
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.kernel_data = kernel.desc.kernel_data;
  call.inputs = inputs.empty() ? nullptr : inputs.data();
  call.outputs = outputs.empty() ? nullptr : outputs.data();
  call.attrs = attrs.empty() ? nullptr : attrs.data();
  call.num_inputs = static_cast<int32_t>(inputs.size());
  call.num_outputs = static_cast<int32_t>(outputs.size());
  call.num_attrs = static_cast<int32_t>(attrs.size());
  call.stream = nullptr;
  call.host = fake_.host();
  return take(fake_.host(), backward ? kernel.desc.backward(&call) : kernel.desc.forward(&call));
}

}  // namespace deepx::ref::testing
