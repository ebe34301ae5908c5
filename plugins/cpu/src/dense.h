// Dense compute-type copies of strided tensors, for the kernels that work on whole matrices
// (conv2d, pooling, attention): an input is read through a row-major buffer of its compute type
// (f32 for f32/f16/bf16, f64 for f64), which is the tensor itself when it already is one, and an
// output is produced in such a buffer and stored (rounded once) into the caller's view, and the
// fork/join helper that the GEMMs (sgemm.h) and the loops between them share. GEMMs are only
// ever called outside OpenMP regions (their own threads do the work), as in matmul.cc.
#ifndef DEEPX_PLUGINS_CPU_DENSE_H_
#define DEEPX_PLUGINS_CPU_DENSE_H_

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common.h"
#include "sgemm.h"
#include "strided.h"

namespace deepx::cpu {

/// The type a storage type S is computed in by the GEMM-based kernels.
template <class S>
using ComputeOf = std::conditional_t<std::is_same_v<S, double>, double, float>;

/// Work (in elements) from which fork_join() uses more than the calling thread: thread start and
/// join cost some tens of microseconds.
constexpr int64_t kForkJoinThreshold = int64_t{1} << 17;

/// Runs body(begin, end) over [0, tasks), split into one contiguous range per thread when `work`
/// reaches kForkJoinThreshold. For loops that sit between BLAS calls: the threads are started
/// for the loop and joined after it, so nothing spins afterwards. An OpenMP team's idle workers
/// spin for a while after each region (libgomp's default wait policy) and would take a core away
/// from the OpenBLAS threads of the next GEMM (measured: conv2d at 0.3x of sgemm with OpenMP
/// loops around the GEMMs on a loaded 2-core box, 0.8x without spinning). `body` must not throw.
template <class Body>
void fork_join(int64_t tasks, int64_t work, Body&& body) {
  if (tasks <= 0) return;
  const int64_t threads =
      work >= kForkJoinThreshold ? std::min<int64_t>(available_threads(), tasks) : 1;
  auto range = [&](int64_t t) { body(tasks * t / threads, tasks * (t + 1) / threads); };
  if (threads <= 1) {
    body(int64_t{0}, tasks);
    return;
  }
  std::vector<std::thread> helpers;
  int64_t started = 1;
  try {
    helpers.reserve(static_cast<size_t>(threads - 1));
    for (; started < threads; ++started) helpers.emplace_back(range, started);
  } catch (...) {
    // No thread to be had: the calling thread runs the ranges that did not start.
  }
  range(0);
  for (int64_t t = started; t < threads; ++t) range(t);
  for (std::thread& helper : helpers) helper.join();
}

/// Runs a StridedLoop's rows through fork_join (see there: no OpenMP team spinning next to BLAS).
template <int N, class RowFn>
void fork_join_rows(const StridedLoop<N>& loop, RowFn& row) {
  const int64_t total = loop.count();
  fork_join(total, total, [&](int64_t begin, int64_t end) { run_range(loop, begin, end, row); });
}

/// Copies `v` (storage S) into `dst` as a row-major array of F (converted exactly: f16/bf16 ->
/// f32 is exact).
template <class F, class S>
void pack_dense(const View& v, F* dst) {
  if (v.count() == 0) return;
  StridedLoop<2> loop;
  loop.rank = v.rank;
  int64_t compact = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    loop.shape[d] = v.shape[d];
    loop.strides[0][d] = compact;
    loop.strides[1][d] = v.strides[d];
    compact *= v.shape[d];
  }
  loop.simplify();
  const S* src = v.data<const S>();
  auto row = [dst, src](int64_t n, const int64_t* off, const int64_t* st) {
    F* d = dst + off[0];
    const S* s = src + off[1];
    const int64_t sd = st[0], ss = st[1];
    if (sd == 1 && ss == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<F>(Num<S>::load(s[i]));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * sd] = static_cast<F>(Num<S>::load(s[i * ss]));
    }
  };
  fork_join_rows(loop, row);
}

/// Stores the row-major array `src` of F into `v` (storage S), rounding once.
template <class F, class S>
void store_dense(const F* src, const View& v) {
  if (v.count() == 0) return;
  StridedLoop<2> loop;
  loop.rank = v.rank;
  int64_t compact = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    loop.shape[d] = v.shape[d];
    loop.strides[0][d] = v.strides[d];
    loop.strides[1][d] = compact;
    compact *= v.shape[d];
  }
  loop.simplify();
  S* dst = v.data<S>();
  using C = typename Num<S>::C;
  auto row = [dst, src](int64_t n, const int64_t* off, const int64_t* st) {
    S* d = dst + off[0];
    const F* s = src + off[1];
    const int64_t sd = st[0], ss = st[1];
    if (sd == 1 && ss == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = Num<S>::store(static_cast<C>(s[i]));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * sd] = Num<S>::store(static_cast<C>(s[i * ss]));
    }
  };
  fork_join_rows(loop, row);
}

/// A view with no elements and `like`'s dtype: stands in for a tensor a kernel does not need.
inline View empty_view(const View& like) {
  View v;
  v.dtype = like.dtype;
  v.rank = 1;
  v.shape[0] = 0;
  v.strides[0] = 1;
  return v;
}

/// Read access to a tensor as a dense row-major F array: the tensor's own memory when it is
/// already compact F, else a packed copy.
template <class F, class S>
class DenseInput {
 public:
  explicit DenseInput(const View& v) {
    if constexpr (std::is_same_v<F, S>) {
      if (v.compact()) {
        data_ = v.data<const F>();
        return;
      }
    }
    buffer_.resize(static_cast<size_t>(v.count()));
    pack_dense<F, S>(v, buffer_.data());
    data_ = buffer_.data();
  }
  const F* data() const { return data_; }

 private:
  std::vector<F> buffer_;
  const F* data_ = nullptr;
};

/// Write access to an output as a dense row-major F array: the output itself when it is compact
/// F, else a scratch buffer that finish() stores (rounded once) into the output. `zeroed`
/// clears the array first (for kernels that accumulate).
template <class F, class S>
class DenseOutput {
 public:
  DenseOutput(const View& v, bool zeroed) : view_(v) {
    const size_t n = static_cast<size_t>(v.count());
    if constexpr (std::is_same_v<F, S>) {
      if (v.compact()) {
        data_ = v.data<F>();
        if (zeroed && n > 0) std::memset(data_, 0, n * sizeof(F));
        return;
      }
    }
    buffer_.assign(n, F(0));
    data_ = buffer_.data();
  }
  F* data() const { return data_; }
  void finish() const {
    if (!buffer_.empty()) store_dense<F, S>(buffer_.data(), view_);
  }

 private:
  View view_;
  std::vector<F> buffer_;
  F* data_ = nullptr;
};

/// DX_UNSUPPORTED unless every value fits BLAS's int.
inline void check_blas_dims(std::initializer_list<int64_t> dims, const char* op) {
  for (int64_t d : dims) {
    if (d > INT_MAX) fail(DX_UNSUPPORTED, std::string(op) + ": a matrix dim above 2^31 - 1");
  }
}

/// A tensor argument of the call: DX_INVALID_ARGUMENT when null or not of dtype `want` (the
/// reference's checks, done before any shape check).
inline void expect_tensor(const DLTensor* t, DLDataType want, const std::string& role) {
  if (t == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: " + role + " is null");
  if (!same_dtype(t->dtype, want)) {
    fail(DX_INVALID_ARGUMENT,
         "cpu: " + role + " has dtype " + dtype_name(t->dtype) + ", expected " + dtype_name(want));
  }
}

/// Arity of a call with DX_INVALID_ARGUMENT (as the reference), including null arrays.
inline void expect_call_arity(const dx_kernel_call_t* call, int inputs, int outputs,
                              const char* op) {
  if (call->num_inputs != inputs || call->num_outputs != outputs ||
      (inputs > 0 && call->inputs == nullptr) || (outputs > 0 && call->outputs == nullptr) ||
      (call->num_attrs > 0 && call->attrs == nullptr)) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + op + " takes " + std::to_string(inputs) +
                                  " inputs and " + std::to_string(outputs) + " outputs, got " +
                                  std::to_string(call->num_inputs) + " and " +
                                  std::to_string(call->num_outputs));
  }
}

/// DX_SHAPE_MISMATCH unless `v` has exactly `shape`.
inline void expect_shape(const View& v, const int64_t* shape, int rank, const char* what) {
  bool ok = v.rank == rank;
  for (int d = 0; ok && d < rank; ++d) ok = v.shape[d] == shape[d];
  if (!ok) {
    std::string message = std::string("cpu: ") + what + " has shape ";
    message += shape_string(v.shape, v.rank);
    message += ", expected ";
    message += shape_string(shape, rank);
    fail(DX_SHAPE_MISMATCH, std::move(message));
  }
}

/// True when every element of the dense array is finite.
template <class F>
bool all_finite(const F* p, int64_t n) {
  bool finite = true;
#pragma omp simd reduction(&& : finite)
  for (int64_t i = 0; i < n; ++i) finite = finite && (p[i] - p[i] == F(0));
  return finite;
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_DENSE_H_
