// dx.matmul with NumPy semantics (batched, broadcast batch dims, rank-1 operands promoted and
// their dim removed, transpose_a / transpose_b). Two engines:
// - cuBLAS (CUDA, F dtypes) when every operand is expressible as a BLAS matrix (one unit
//   stride), with strided-batched calls when the batch collapses to one stride per operand;
// - the portable tiled GEMM (include/deepx/gpu/gemm.h) otherwise: always on HIP, for
//   i8 x i8 -> i32, and on CUDA when DEEPX_CUDA_GEMM=portable.
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_fns.h"
#include "nn_fns.h"
#include "deepx/gpu/gemm.h"
#include "dispatch.h"
#include "launch.h"

#if defined(DXG_BACKEND_CUDA)
#include <cublas_v2.h>
#include <dlfcn.h>
#endif

#define DEEPX_STRINGIFY_(x) #x
#define DEEPX_STRINGIFY(x) DEEPX_STRINGIFY_(x)

namespace deepx::gpu {
namespace {

/// A matmul call reduced to a batched (M x K) * (K x N) problem over element strides.
struct Problem {
  GemmShape shape;
  DType dtype = DType::Invalid;
  const char* a = nullptr;
  const char* b = nullptr;
  char* c = nullptr;
};

/// A matmul operand as a logical matrix: rows, cols, their element strides (after the
/// transpose attribute; a vector is a row on the left, a column on the right) and batch dims.
struct Mat {
  int64_t rows, cols, rs, cs;
  std::vector<int64_t> batch_shape, batch_strides;
};

Mat logical_matrix(const View& v, bool transpose, bool is_left) {
  Mat m{};
  const int r = v.rank();
  if (r == 1) {
    if (is_left) m = Mat{1, v.shape[0], 0, v.strides[0], {}, {}};
    else m = Mat{v.shape[0], 1, v.strides[0], 0, {}, {}};
    return m;
  }
  const auto u = static_cast<size_t>(r);
  m.rows = v.shape[u - 2];
  m.cols = v.shape[u - 1];
  m.rs = v.strides[u - 2];
  m.cs = v.strides[u - 1];
  if (transpose) {
    std::swap(m.rows, m.cols);
    std::swap(m.rs, m.cs);
  }
  m.batch_shape.assign(v.shape.begin(), v.shape.end() - 2);
  m.batch_strides.assign(v.strides.begin(), v.strides.end() - 2);
  return m;
}

Problem plan_views(const dx_kernel_call_t* call, const View& a, const View& b, const View& out);

Problem plan(const dx_kernel_call_t* call, View& a, View& b, View& out) {
  expect_arity(call, 2, 1);
  a = make_view(call->inputs[0], "input 0");
  b = make_view(call->inputs[1], "input 1");
  out = make_view(call->outputs[0], "output 0");
  return plan_views(call, a, b, out);
}

/// Checks a (a, b) -> out matmul and reduces it to a batched GEMM (out may be the output
/// gradient of a backward call: it has the output's shape).
Problem plan_views(const dx_kernel_call_t* call, const View& a, const View& b, const View& out) {
  expect_one_device({&a, &b, &out});
  expect_dtype(b, a.dtype, "input 1");
  if (a.dtype == DType::I8) expect_dtype(out, DType::I32, "output 0");
  else if (dtype_is_float(a.dtype)) expect_dtype(out, a.dtype, "output 0");
  else fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": matmul: unsupported dtype");
  if (a.rank() == 0 || b.rank() == 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": matmul: rank-0 operand");
  const bool ta = attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false);
  const bool tb = attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false);
  const Mat ma = logical_matrix(a, ta, true), mb = logical_matrix(b, tb, false);
  if (ma.cols != mb.rows) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": matmul: inner dimensions ") +
                                std::to_string(ma.cols) + " and " + std::to_string(mb.rows) + " differ");
  }
  const auto batch = broadcast_shapes({ma.batch_shape, mb.batch_shape});
  if (!batch) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": matmul: batch dimensions do not broadcast");
  std::vector<int64_t> expected = *batch;
  if (a.rank() > 1) expected.push_back(ma.rows);
  if (b.rank() > 1) expected.push_back(mb.cols);
  if (expected != out.shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": matmul: output shape ") + shape_string(out.shape) +
                                ", expected " + shape_string(expected));
  }
  Problem p;
  p.dtype = a.dtype;
  p.a = a.base;
  p.b = b.base;
  p.c = out.base;
  GemmShape& s = p.shape;
  s.m = ma.rows;
  s.n = mb.cols;
  s.k = ma.cols;
  s.a_rs = ma.rs;
  s.a_cs = ma.cs;
  s.b_rs = mb.rs;
  s.b_cs = mb.cs;
  const size_t batch_rank = batch->size();
  size_t next = out.strides.size();
  s.c_cs = b.rank() > 1 ? out.strides[--next] : 0;
  s.c_rs = a.rank() > 1 ? out.strides[--next] : 0;
  std::vector<int64_t> c_batch_strides(out.strides.begin(), out.strides.begin() + static_cast<long>(batch_rank));
  s.batch = make_layout(*batch, {OperandShape{*batch, c_batch_strides},
                                 OperandShape{ma.batch_shape, ma.batch_strides},
                                 OperandShape{mb.batch_shape, mb.batch_strides}});
  return p;
}

void run_portable(Exec& exec, const Problem& p) {
  auto run = [&](auto tag, auto out_tag) {
    using T = tag_t<decltype(tag)>;
    using Out = tag_t<decltype(out_tag)>;
    GemmTile<T, Out> g{p.shape, reinterpret_cast<const T*>(p.a), reinterpret_cast<const T*>(p.b),
                       reinterpret_cast<Out*>(p.c)};
    launch_gemm(exec, g);
  };
  switch (p.dtype) {
    case DType::F64: run(static_cast<double*>(nullptr), static_cast<double*>(nullptr)); break;
    case DType::F32: run(static_cast<float*>(nullptr), static_cast<float*>(nullptr)); break;
    case DType::F16: run(static_cast<Half*>(nullptr), static_cast<Half*>(nullptr)); break;
    case DType::BF16: run(static_cast<BFloat16*>(nullptr), static_cast<BFloat16*>(nullptr)); break;
    case DType::I8: run(static_cast<int8_t*>(nullptr), static_cast<int32_t*>(nullptr)); break;
    default: fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": matmul: unsupported dtype");
  }
}

#if defined(DXG_BACKEND_CUDA)

/// cuBLAS, opened on first use: loading the plugin (which every deepx runtime that scans the
/// plugin directory does, GPU or not) then never maps the large cuBLAS libraries.
struct Blas {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_pointer_mode)(cublasHandle_t, cublasPointerMode_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                         int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                 int, const void*, const void*, cudaDataType, int, long long,
                                 const void*, cudaDataType, int, long long, const void*, void*,
                                 cudaDataType, int, long long, int, cublasComputeType_t,
                                 cublasGemmAlgo_t) = nullptr;
  std::string error;
};

const Blas& blas() {
  static const Blas b = [] {
    Blas r;
    void* lib = nullptr;
    for (const char* name : {"libcublas.so." DEEPX_STRINGIFY(CUBLAS_VER_MAJOR), "libcublas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) {
      r.error = std::string("cannot open libcublas: ") + dlerror();
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && r.error.empty()) r.error = std::string("libcublas lacks ") + name;
    };
    sym(r.create, "cublasCreate_v2");
    sym(r.destroy, "cublasDestroy_v2");
    sym(r.set_stream, "cublasSetStream_v2");
    sym(r.set_pointer_mode, "cublasSetPointerMode_v2");
    sym(r.gemm, "cublasGemmEx");
    sym(r.gemm_strided, "cublasGemmStridedBatchedEx");
    return r;
  }();
  return b;
}

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail(status == CUBLAS_STATUS_ALLOC_FAILED ? DX_OUT_OF_MEMORY : DX_INTERNAL,
         std::string("cuda: ") + what + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
  }
}

/// One operand as cuBLAS sees it: the column-major op and leading dimension that give the
/// row-major logical matrix (rows x cols) transposed; nullopt when it has no unit stride.
struct BlasOperand {
  cublasOperation_t op;
  int64_t ld;
};
std::optional<BlasOperand> blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? cols : rs;
    if (ld >= cols && ld > 0) return BlasOperand{CUBLAS_OP_N, ld};
  }
  if (rs == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? rows : cs;
    if (ld >= rows && ld > 0) return BlasOperand{CUBLAS_OP_T, ld};
  }
  return std::nullopt;
}

/// Runs the problem on cuBLAS; false when its layout does not fit (the caller falls back).
/// `accumulate`: C += A B (beta = 1; dx.linear seeds C with its bias).
bool try_cublas(Exec& exec, const Problem& p, bool accumulate = false) {
  const GemmShape& s = p.shape;
  if (!blas().error.empty()) {
    // No cuBLAS at run time: the portable GEMM serves every call (said once in the log).
    static std::once_flag said;
    std::call_once(said, [&] { exec.state().log(DX_LOG_WARN, "cuda: " + blas().error + "; using the portable GEMM"); });
    return false;
  }
  if (s.m == 0 || s.n == 0 || s.k == 0 || p.dtype == DType::I8) return false;
  // C must be row-major: column-major C^T (N x M) with leading dimension c_rs.
  if (!(s.c_cs == 1 || s.n == 1)) return false;
  const int64_t ldc = s.m == 1 ? s.n : s.c_rs;
  if (ldc < s.n) return false;
  // C^T = B^T A^T: B's memory read column-major is B^T when B is row-major (op N).
  const auto ob = blas_operand(s.k, s.n, s.b_rs, s.b_cs);
  const auto oa = blas_operand(s.m, s.k, s.a_rs, s.a_cs);
  if (!oa || !ob) return false;
  const int64_t limit = 0x7fffffff;
  if (s.m > limit || s.n > limit || s.k > limit || oa->ld > limit || ob->ld > limit || ldc > limit) return false;
  if (s.batch.count == 0) return true;
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (p.dtype) {
    case DType::F64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case DType::F32: type = CUDA_R_32F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::F16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::BF16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default: return false;
  }
  const double one_d = 1.0, zero_d = accumulate ? 1.0 : 0.0;
  const float one_f = 1.0f, zero_f = accumulate ? 1.0f : 0.0f;
  const void* alpha = p.dtype == DType::F64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = p.dtype == DType::F64 ? static_cast<const void*>(&zero_d) : &zero_f;
  const int64_t esize = dtype_size(p.dtype);
  DeviceState& dev = exec.device();
  std::lock_guard<std::mutex> lock(dev.blas_mutex);
  if (dev.blas_handle == nullptr) {
    cublasHandle_t h = nullptr;
    check_blas(blas().create(&h), "create handle");
    dev.blas_handle = h;
  }
  auto* handle = static_cast<cublasHandle_t>(dev.blas_handle);
  check_blas(blas().set_stream(handle, exec.stream()), "set stream");
  check_blas(blas().set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST), "pointer mode");
  const int m = static_cast<int>(s.n), n = static_cast<int>(s.m), k = static_cast<int>(s.k);
  if (s.batch.rank <= 1) {
    const int64_t batches = s.batch.count;
    const int64_t stride_c = s.batch.rank == 1 ? s.batch.strides[0][0] : 0;
    const int64_t stride_a = s.batch.rank == 1 ? s.batch.strides[1][0] : 0;
    const int64_t stride_b = s.batch.rank == 1 ? s.batch.strides[2][0] : 0;
    if (batches > 0x7fffffff) return false;
    check_blas(blas().gemm_strided(handle, ob->op, oa->op, m, n, k, alpha, p.b, type,
                                          static_cast<int>(ob->ld), stride_b, p.a, type,
                                          static_cast<int>(oa->ld), stride_a, beta, p.c, type,
                                          static_cast<int>(ldc), stride_c, static_cast<int>(batches),
                                          compute, CUBLAS_GEMM_DEFAULT),
               "gemm strided batched");
    return true;
  }
  for (int64_t i = 0; i < s.batch.count; ++i) {
    const char* pa = p.a + layout_offset(s.batch, 1, i) * esize;
    const char* pb = p.b + layout_offset(s.batch, 2, i) * esize;
    char* pc = p.c + layout_offset(s.batch, 0, i) * esize;
    check_blas(blas().gemm(handle, ob->op, oa->op, m, n, k, alpha, pb, type, static_cast<int>(ob->ld),
                            pa, type, static_cast<int>(oa->ld), beta, pc, type, static_cast<int>(ldc),
                            compute, CUBLAS_GEMM_DEFAULT),
               "gemm");
  }
  return true;
}

#endif

dx_error_t* matmul_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    View a, b, out;
    const Problem p = plan(call, a, b, out);
    Exec exec(call, out.device);
    bool done = false;
#if defined(DXG_BACKEND_CUDA)
    if (!exec.state().portable_gemm) done = try_cublas(exec, p);
#endif
    if (!done) run_portable(exec, p);
    exec.finish();
  });
}

/// One matmul gradient as a batched GEMM: grad (rows x cols) = L (rows x inner) * R (inner x
/// cols) over the broadcast batch. When the gradient's operand was broadcast over batches, or
/// the gradient aliases an input, the products go to a compact f64 buffer first and are then
/// summed (in the reference's order) into the gradient.
struct GradientGemm {
  std::vector<int64_t> batch;
  int64_t rows, cols, inner;
  const char* l;
  int64_t l_rs, l_cs;
  OperandShape l_batch;
  const char* r;
  int64_t r_rs, r_cs;
  OperandShape r_batch;
};

/// The products of `g` in a compact f64 buffer of shape (batch..., rows, cols).
std::unique_ptr<Exec::Scratch> gradient_to_buffer(Exec& exec, DType dtype, const GradientGemm& g) {
  std::vector<int64_t> full = g.batch;
  full.push_back(g.rows);
  full.push_back(g.cols);
  int64_t count = 1;
  for (int64_t e : full) count *= e;
  auto buffer = std::make_unique<Exec::Scratch>(exec, static_cast<uint64_t>(count) * 8);
  const std::vector<int64_t> strides = compact_strides(full);
  GemmShape s;
  s.m = g.rows;
  s.n = g.cols;
  s.k = g.inner;
  s.a_rs = g.l_rs;
  s.a_cs = g.l_cs;
  s.b_rs = g.r_rs;
  s.b_cs = g.r_cs;
  s.c_rs = g.cols;
  s.c_cs = 1;
  s.batch = make_layout(g.batch, {OperandShape{g.batch, std::vector<int64_t>(strides.begin(), strides.end() - 2)},
                                  g.l_batch, g.r_batch});
  dispatch_float(dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    launch_gemm(exec, GemmTile<T, double>{s, reinterpret_cast<const T*>(g.l), reinterpret_cast<const T*>(g.r),
                                          static_cast<double*>(buffer->get())});
  });
  return buffer;
}

/// Sums the buffer over the batches the gradient's operand was broadcast across, into grad.
void buffer_to_gradient(Exec& exec, const Exec::Scratch& buffer, const GradientGemm& g, const View& grad,
                        const Mat& grad_mat) {
  std::vector<int64_t> full = g.batch;
  full.push_back(g.rows);
  full.push_back(g.cols);
  View logical = grad;
  logical.shape = grad_mat.batch_shape;
  logical.shape.push_back(g.rows);
  logical.shape.push_back(g.cols);
  logical.strides = grad_mat.batch_strides;
  logical.strides.push_back(grad_mat.rs);
  logical.strides.push_back(grad_mat.cs);
  reduce_gradient(exec, static_cast<const double*>(buffer.get()), full, logical);
}

/// The products of `g` straight into the gradient (no batch broadcast, no aliasing).
void gradient_direct(Exec& exec, DType dtype, const GradientGemm& g, const View& grad, const Mat& grad_mat) {
  GemmShape s;
  s.m = g.rows;
  s.n = g.cols;
  s.k = g.inner;
  s.a_rs = g.l_rs;
  s.a_cs = g.l_cs;
  s.b_rs = g.r_rs;
  s.b_cs = g.r_cs;
  s.c_rs = grad_mat.rs;
  s.c_cs = grad_mat.cs;
  s.batch = make_layout(g.batch, {OperandShape{grad_mat.batch_shape, grad_mat.batch_strides}, g.l_batch, g.r_batch});
  dispatch_float(dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    launch_gemm(exec, GemmTile<T, T>{s, reinterpret_cast<const T*>(g.l), reinterpret_cast<const T*>(g.r),
                                     reinterpret_cast<T*>(grad.base)});
  });
}

/// inputs: dy, a, b, y; outputs: da, db (either may be null). dA = dY B^T and dB = A^T dY per
/// batch, summed over the batches an operand was broadcast across; transposes and vectors
/// follow the forward's logical matrices.
dx_error_t* matmul_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View a = make_view(call->inputs[1], "forward input 0");
    const View b = make_view(call->inputs[2], "forward input 1");
    if (!dtype_is_float(a.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": matmul backward: F only");
    const Problem p = plan_views(call, a, b, dy);
    const bool ta = attr_bool(call, DX_MATMUL_TRANSPOSE_A, "transpose_a", false);
    const bool tb = attr_bool(call, DX_MATMUL_TRANSPOSE_B, "transpose_b", false);
    const Mat ma = logical_matrix(a, ta, true), mb = logical_matrix(b, tb, false);
    const std::vector<int64_t> batch = *broadcast_shapes({ma.batch_shape, mb.batch_shape});
    int64_t batch_count = 1;
    for (int64_t e : batch) batch_count *= e;
    const OperandShape dy_batch{batch, std::vector<int64_t>(dy.strides.begin(), dy.strides.begin() + static_cast<long>(batch.size()))};
    const OperandShape a_batch{ma.batch_shape, ma.batch_strides}, b_batch{mb.batch_shape, mb.batch_strides};
    auto count_of = [](const std::vector<int64_t>& shape) {
      int64_t n = 1;
      for (int64_t e : shape) n *= e;
      return n;
    };
    std::optional<View> da, db;
    if (call->outputs[0] != nullptr) {
      da = make_view(call->outputs[0], "input gradient 0");
      expect_dtype(*da, a.dtype, "input gradient 0");
      expect_same_shape(*da, a, "input gradient 0");
    }
    if (call->outputs[1] != nullptr) {
      db = make_view(call->outputs[1], "input gradient 1");
      expect_dtype(*db, b.dtype, "input gradient 1");
      expect_same_shape(*db, b, "input gradient 1");
    }
    if (!da && !db) return;
    Exec exec(call, dy.device);
    const GemmShape& s = p.shape;
    auto aliases = [&](const View& g) { return g.base == dy.base || g.base == a.base || g.base == b.base; };
    // Gradients read a, b and dy: when one aliases an input, both are computed into buffers
    // before either is stored.
    const bool any_alias = (da && aliases(*da)) || (db && aliases(*db));
    const GradientGemm ga{batch, s.m, s.k, s.n, dy.base, s.c_rs, s.c_cs, dy_batch, b.base, s.b_cs, s.b_rs, b_batch};
    const GradientGemm gb{batch, s.k, s.n, s.m, a.base, s.a_cs, s.a_rs, a_batch, dy.base, s.c_rs, s.c_cs, dy_batch};
    const bool buffer_a = da && (any_alias || count_of(ma.batch_shape) != batch_count);
    const bool buffer_b = db && (any_alias || count_of(mb.batch_shape) != batch_count);
    std::unique_ptr<Exec::Scratch> sa, sb;
    if (buffer_a) sa = gradient_to_buffer(exec, a.dtype, ga);
    if (buffer_b) sb = gradient_to_buffer(exec, b.dtype, gb);
    if (da && !buffer_a) gradient_direct(exec, a.dtype, ga, *da, logical_matrix(*da, ta, true));
    if (db && !buffer_b) gradient_direct(exec, b.dtype, gb, *db, logical_matrix(*db, tb, false));
    if (buffer_a) buffer_to_gradient(exec, *sa, ga, *da, logical_matrix(*da, ta, true));
    if (buffer_b) buffer_to_gradient(exec, *sb, gb, *db, logical_matrix(*db, tb, false));
    exec.finish();
  });
}

}  // namespace

bool gemm_on_blas(Exec& exec, DType dtype, const GemmShape& shape, const void* a, const void* b, void* c,
                  bool accumulate) {
#if defined(DXG_BACKEND_CUDA)
  if (exec.state().portable_gemm) return false;
  Problem p;
  p.shape = shape;
  p.dtype = dtype;
  p.a = static_cast<const char*>(a);
  p.b = static_cast<const char*>(b);
  p.c = static_cast<char*>(c);
  return try_cublas(exec, p, accumulate);
#else
  (void)exec, (void)dtype, (void)shape, (void)a, (void)b, (void)c, (void)accumulate;
  return false;
#endif
}

void release_blas(DeviceState& device) {
#if defined(DXG_BACKEND_CUDA)
  if (device.blas_handle != nullptr && blas().destroy != nullptr) {
    (void)blas().destroy(static_cast<cublasHandle_t>(device.blas_handle));
  }
#endif
  device.blas_handle = nullptr;
}

void register_matmul_kernels(Registrar& r) {
  for (DType d : float_types()) r.add("dx.matmul", 2, 1, {d, d, d}, &matmul_forward, kDeterministic, &matmul_backward);
  r.add("dx.matmul", 2, 1, {DType::I8, DType::I8, DType::I32}, &matmul_forward, kDeterministic);
}

}  // namespace deepx::gpu
