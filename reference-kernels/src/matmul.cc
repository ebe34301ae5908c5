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

// The operands of a matmul call, checked, with the broadcast batch and the output shape.
struct MatmulProblem {
  MatrixOperand a, b;
  std::vector<std::int64_t> batch, out_shape;
};

MatmulProblem plan_matmul(const Call& call, const DLTensor* a_dl, const DLTensor* b_dl) {
  const bool transpose_a = attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false);
  const bool transpose_b = attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false);
  MatmulProblem p{as_matrix(view(a_dl, "input 0"), true, transpose_a, "input 0"),
                  as_matrix(view(b_dl, "input 1"), false, transpose_b, "input 1"), {}, {}};
  if (p.a.cols != p.b.rows) {
    fail(DX_SHAPE_MISMATCH, "dx.matmul inner dimensions differ: " + std::to_string(p.a.cols) +
                                " vs " + std::to_string(p.b.rows) + " (shapes " +
                                shape_string(p.a.tensor.shape) + " and " +
                                shape_string(p.b.tensor.shape) + ")");
  }
  p.batch = broadcast_shapes(p.a.batch, p.b.batch);
  p.out_shape = p.batch;
  if (!p.a.promoted) p.out_shape.push_back(p.a.rows);
  if (!p.b.promoted) p.out_shape.push_back(p.b.cols);
  return p;
}

// Output index of (batch index, row, col): the row unless A was 1-D, the col unless B was 1-D.
void output_index(const MatmulProblem& p, std::span<const std::int64_t> bi, std::int64_t row,
                  std::int64_t col, std::vector<std::int64_t>& index) {
  index.resize(p.out_shape.size());
  std::size_t k = 0;
  for (; k < bi.size(); ++k) index[k] = bi[k];
  if (!p.a.promoted) index[k++] = row;
  if (!p.b.promoted) index[k++] = col;
}

}  // namespace

void matmul(const Call& call) {
  const MatmulProblem p = plan_matmul(call, call.inputs[0], call.inputs[1]);
  const MatrixOperand& a = p.a;
  const MatrixOperand& b = p.b;
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, p.out_shape);
  const std::vector<std::int64_t>& batch = p.batch;

  const Tensor a_batch = broadcast_to(batch_part(a), batch);
  const Tensor b_batch = broadcast_to(batch_part(b), batch);
  const std::int64_t depth = a.cols;
  const DType in_type = a.tensor.dtype;
  const DType out_type = out.dtype;
  std::vector<std::int64_t> out_index(out.rank());

  for_each_index(batch, [&](std::span<const std::int64_t> bi) {
    for (std::int64_t row = 0; row < a.rows; ++row) {
      for (std::int64_t col = 0; col < b.cols; ++col) {
        output_index(p, bi, row, col, out_index);
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

void matmul_backward(const Call& call) {
  // inputs: dy, a, b, y; outputs: da, db. dA[row, i] += dy[row, col] * B[i, col] and
  // dB[i, col] += A[row, i] * dy[row, col], accumulated in f64 buffers that are viewed exactly
  // like the operands (same promotion, transposition and batch broadcast), so broadcast batch
  // dims and transposed operands are summed back to the operand's own layout.
  const MatmulProblem p = plan_matmul(call, call.inputs[1], call.inputs[2]);
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.out_shape);
  expect_output_shape(view(call.inputs[3], "forward output 0"), p.out_shape);
  const std::optional<Tensor> ga = grad_output(call, 0, p.a.tensor.shape);
  const std::optional<Tensor> gb = grad_output(call, 1, p.b.tensor.shape);
  const bool transpose_a = attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false);
  const bool transpose_b = attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false);
  GradBuffer buf_a(p.a.tensor.shape), buf_b(p.b.tensor.shape);
  const MatrixOperand acc_a = as_matrix(buf_a.view, true, transpose_a, "input 0");
  const MatrixOperand acc_b = as_matrix(buf_b.view, false, transpose_b, "input 1");
  const Tensor a_batch = broadcast_to(batch_part(p.a), p.batch);
  const Tensor b_batch = broadcast_to(batch_part(p.b), p.batch);
  const Tensor acc_a_batch = broadcast_to(batch_part(acc_a), p.batch);
  const Tensor acc_b_batch = broadcast_to(batch_part(acc_b), p.batch);
  const DType t = p.a.tensor.dtype;
  std::vector<std::int64_t> index;
  for_each_index(p.batch, [&](std::span<const std::int64_t> bi) {
    for (std::int64_t row = 0; row < p.a.rows; ++row) {
      for (std::int64_t col = 0; col < p.b.cols; ++col) {
        output_index(p, bi, row, col, index);
        const double g = load_float(dy.dtype, dy.at(index));
        for (std::int64_t i = 0; i < p.a.cols; ++i) {
          if (ga) {
            GradBuffer::add(const_cast<std::byte*>(matrix_element(acc_a, acc_a_batch, bi, row, i)),
                            g * load_float(t, matrix_element(p.b, b_batch, bi, i, col)));
          }
          if (gb) {
            GradBuffer::add(const_cast<std::byte*>(matrix_element(acc_b, acc_b_batch, bi, i, col)),
                            g * load_float(t, matrix_element(p.a, a_batch, bi, row, i)));
          }
        }
      }
    }
  });
  if (ga) buf_a.store(*ga);
  if (gb) buf_b.store(*gb);
}

}  // namespace deepx::ref
