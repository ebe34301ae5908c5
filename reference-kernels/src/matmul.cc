// dx.matmul with NumPy semantics: batched, batch dims broadcast, rank-1 operands promoted (a
// 1-D left operand is a row vector, a 1-D right operand a column vector, and the promoted dim is
// removed from the result). Attrs transpose_a / transpose_b swap the last two dims of a rank>=2
// operand. Floating products accumulate in f64 and round once; i8 x i8 accumulates in i32 with
// wrap.
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

// One operand seen as a batch of (rows x cols) matrices.
struct MatrixOperand {
  Tensor tensor;                      // the input view
  std::vector<std::int64_t> batch;    // leading dims
  std::int64_t rows = 1, cols = 1;    // after promotion and transposition
  std::int64_t row_stride = 0, col_stride = 0;  // element strides of rows / cols
  bool promoted = false;              // rank 1: the dim of size 1 was added
};

// `is_left`: a 1-D operand becomes (1, K) on the left and (K, 1) on the right.
MatrixOperand as_matrix(const Tensor& t, bool is_left, bool transposed, const char* role) {
  MatrixOperand m;
  m.tensor = t;
  if (t.rank() == 0) fail(DX_SHAPE_MISMATCH, std::string(role) + " of dx.matmul is rank 0");
  if (t.rank() == 1) {
    m.promoted = true;
    if (is_left) {
      m.rows = 1;
      m.cols = t.shape[0];
      m.col_stride = t.strides[0];
    } else {
      m.rows = t.shape[0];
      m.cols = 1;
      m.row_stride = t.strides[0];
    }
    return m;  // transposition is ignored for rank 1
  }
  const std::size_t r = t.rank();
  m.batch.assign(t.shape.begin(), t.shape.end() - 2);
  m.rows = t.shape[r - 2];
  m.cols = t.shape[r - 1];
  m.row_stride = t.strides[r - 2];
  m.col_stride = t.strides[r - 1];
  if (transposed) {
    std::swap(m.rows, m.cols);
    std::swap(m.row_stride, m.col_stride);
  }
  return m;
}

// Address of element (row, col) of the matrix of `m` at the (broadcast) batch index.
const std::byte* matrix_element(const MatrixOperand& m, const Tensor& batch_view,
                                std::span<const std::int64_t> batch_index, std::int64_t row,
                                std::int64_t col) {
  std::int64_t offset = row * m.row_stride + col * m.col_stride;
  for (std::size_t k = 0; k < batch_index.size(); ++k) {
    offset += batch_index[k] * batch_view.strides[k];
  }
  return m.tensor.base + offset * static_cast<std::int64_t>(size_of(m.tensor.dtype));
}

// A view holding only the batch dims of `m` (for broadcast_to).
Tensor batch_part(const MatrixOperand& m) {
  Tensor t = m.tensor;
  t.shape = m.batch;
  t.strides.assign(m.tensor.strides.begin(), m.tensor.strides.begin() + m.batch.size());
  return t;
}

}  // namespace

void matmul(const Call& call) {
  const bool transpose_a = attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false);
  const bool transpose_b = attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false);
  const MatrixOperand a = as_matrix(view(call.inputs[0], "input 0"), true, transpose_a, "input 0");
  const MatrixOperand b = as_matrix(view(call.inputs[1], "input 1"), false, transpose_b, "input 1");
  const Tensor out = view(call.outputs[0], "output 0");
  if (a.cols != b.rows) {
    fail(DX_SHAPE_MISMATCH, "dx.matmul inner dimensions differ: " + std::to_string(a.cols) +
                                " vs " + std::to_string(b.rows) + " (shapes " +
                                shape_string(a.tensor.shape) + " and " +
                                shape_string(b.tensor.shape) + ")");
  }
  const std::vector<std::int64_t> batch = broadcast_shapes(a.batch, b.batch);
  std::vector<std::int64_t> expected = batch;
  if (!a.promoted) expected.push_back(a.rows);
  if (!b.promoted) expected.push_back(b.cols);
  expect_output_shape(out, expected);

  const Tensor a_batch = broadcast_to(batch_part(a), batch);
  const Tensor b_batch = broadcast_to(batch_part(b), batch);
  const std::int64_t depth = a.cols;
  const DType in_type = a.tensor.dtype;
  const DType out_type = out.dtype;
  std::vector<std::int64_t> out_index(out.rank());

  for_each_index(batch, [&](std::span<const std::int64_t> bi) {
    for (std::int64_t row = 0; row < a.rows; ++row) {
      for (std::int64_t col = 0; col < b.cols; ++col) {
        // Output index: batch, then the row unless A was 1-D, then the col unless B was 1-D.
        std::size_t k = 0;
        for (; k < bi.size(); ++k) out_index[k] = bi[k];
        if (!a.promoted) out_index[k++] = row;
        if (!b.promoted) out_index[k++] = col;
        std::byte* dst = out.at(out_index);

        if (is_float(out_type)) {
          double acc = 0;
          for (std::int64_t i = 0; i < depth; ++i) {
            acc += load_float(in_type, matrix_element(a, a_batch, bi, row, i)) *
                   load_float(in_type, matrix_element(b, b_batch, bi, i, col));
          }
          store_float(out_type, dst, acc);
        } else {
          std::uint32_t acc = 0;  // i32 accumulation with wrap, without UB
          for (std::int64_t i = 0; i < depth; ++i) {
            const std::int64_t x = load_int(in_type, matrix_element(a, a_batch, bi, row, i));
            const std::int64_t y = load_int(in_type, matrix_element(b, b_batch, bi, i, col));
            acc += static_cast<std::uint32_t>(x * y);  // |x*y| <= 2^14: exact
          }
          store_int_wrapping(out_type, dst, static_cast<std::int32_t>(acc));
        }
      }
    }
  });
}

}  // namespace deepx::ref
