// Data movement and creation: copy, transpose (a copy through permuted strides), fill, arange;
// registers the shape (movement_shape.cu) and indexing (indexing.cu) kernels too. Bit-exact for every
// dtype: copies move element bytes unchanged.
#include <cstring>
#include <string>
#include <vector>

#include "backward_fns.h"
#include "deepx/gpu/elementwise.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {

std::vector<int64_t> transpose_perm(const dx_kernel_call_t* call, int rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  const dx_attr_t* a = attr_at(call, DX_TRANSPOSE_PERM);
  if (a == nullptr) {
    for (int d = 0; d < rank; ++d) perm[static_cast<size_t>(d)] = rank - 1 - d;
    return perm;
  }
  if (a->type != DX_ATTR_I64_ARRAY || a->count != rank) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": transpose: perm must be an i64 array of the input's rank");
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int d = 0; d < rank; ++d) {
    int64_t p = a->value.i64s[d];
    if (p < 0) p += rank;
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)]) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": transpose: perm is not a permutation");
    }
    seen[static_cast<size_t>(p)] = true;
    perm[static_cast<size_t>(d)] = p;
  }
  return perm;
}

namespace {

void launch_copy(Exec& exec, const View& out, const std::vector<int64_t>& in_strides, const View& in) {
  const Layout l = make_layout(out.shape, {out.operand(), OperandShape{out.shape, in_strides}});
  // A contiguous-to-contiguous copy is one memcpy (the copy engines beat any kernel).
  if (l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1) {
    check(gpuMemcpyAsync(out.base, in.base, static_cast<size_t>(l.count) * dtype_size(out.dtype),
                         gpuMemcpyDeviceToDevice, exec.stream()),
          "copy");
    return;
  }
  dispatch_size(out.dtype, [&](auto tag) {
    using W = tag_t<decltype(tag)>;
    launch_for_each(exec, CopyFn<W>{l, out.data<W>(), in.data<W>()}, l.count);
  });
}

dx_error_t* copy_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_same_shape(out, in, "output 0");
    expect_one_device({&in, &out});
    Exec exec(call, out.device);
    const bool same_view = out.base == in.base && out.strides == in.strides;  // in place: done
    if (out.count() > 0 && !same_view) launch_copy(exec, out, in.strides, in);
    exec.finish();
  });
}

dx_error_t* transpose_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_one_device({&in, &out});
    const int rank = in.rank();
    const std::vector<int64_t> perm = transpose_perm(call, rank);
    std::vector<int64_t> shape(static_cast<size_t>(rank)), strides(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      shape[static_cast<size_t>(d)] = in.shape[static_cast<size_t>(perm[static_cast<size_t>(d)])];
      strides[static_cast<size_t>(d)] = in.strides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
    }
    if (shape != out.shape) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": transpose: output shape ") +
                                  shape_string(out.shape) + ", expected " + shape_string(shape));
    }
    Exec exec(call, out.device);
    if (out.count() > 0) launch_copy(exec, out, strides, in);
    exec.finish();
  });
}

dx_error_t* fill_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 0, 1);
    const View out = make_view(call->outputs[0], "output 0");
    const uint64_t bits = encode_value_attr(call, DX_FILL_VALUE, out.dtype, "fill");
    Exec exec(call, out.device);
    const Layout l = make_layout(out.shape, {out.operand()});
    dispatch_size(out.dtype, [&](auto tag) {
      using W = tag_t<decltype(tag)>;
      W value;
      std::memcpy(&value, &bits, sizeof value);
      launch_for_each(exec, FillFn<W>{l, out.data<W>(), value}, l.count);
    });
    exec.finish();
  });
}

dx_error_t* arange_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 0, 1);
    const View out = make_view(call->outputs[0], "output 0");
    const dx_attr_t* start = attr_at(call, 0);
    const dx_attr_t* step = attr_at(call, 1);
    for (const dx_attr_t* a : {start, step}) {
      if (a != nullptr && a->type != DX_ATTR_I64 && a->type != DX_ATTR_F64) {
        fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": arange: start and step must be numbers");
      }
    }
    ArangeFn fn{};
    fn.layout = make_layout(out.shape, {out.operand()});
    fn.out = out.base;
    fn.type = out.dtype;
    fn.integer_attrs = (start == nullptr || start->type == DX_ATTR_I64) &&
                       (step == nullptr || step->type == DX_ATTR_I64);
    fn.start_i = start != nullptr && start->type == DX_ATTR_I64 ? start->value.i64 : 0;
    fn.step_i = step != nullptr && step->type == DX_ATTR_I64 ? step->value.i64 : 1;
    fn.start_f = attr_f64(call, 0, "start", 0.0);
    fn.step_f = attr_f64(call, 1, "step", 1.0);
    Exec exec(call, out.device);
    launch_for_each(exec, fn, fn.layout.count);
    exec.finish();
  });
}

}  // namespace

uint64_t encode_value_attr(const dx_kernel_call_t* call, int slot, DType type, const char* op) {
  // The element's bits, computed on the host with the device's own conversion code.
  uint64_t bits = 0;
  if (const dx_attr_t* a = attr_at(call, slot)) {
    if (a->type == DX_ATTR_I64 || a->type == DX_ATTR_BOOL) store_int_wrapping(&bits, type, a->value.i64);
    else if (a->type == DX_ATTR_F64) store_from_double(&bits, type, a->value.f64);
    else fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + op + ": value must be an i64 or an f64");
  }
  return bits;
}

void register_movement_kernels(Registrar& r) {
  for (DType d : all_types()) {
    const bool f = dtype_is_float(d);
    r.add("dx.copy", 1, 1, {d, d}, &copy_forward, kInPlace, f ? copy_backward_fn() : nullptr);
    r.add("dx.transpose", 1, 1, {d, d}, &transpose_forward, kDeterministic, f ? transpose_backward_fn() : nullptr);
    r.add("dx.fill", 0, 1, {d}, &fill_forward, kDeterministic);
  }
  for (DType d : float_types()) r.add("dx.arange", 0, 1, {d}, &arange_forward, kDeterministic);
  for (DType d : int_types()) r.add("dx.arange", 0, 1, {d}, &arange_forward, kDeterministic);
  register_shape_kernels(r);
  register_indexing_kernels(r);
}

}  // namespace deepx::gpu
