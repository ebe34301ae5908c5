// Data-movement and shape kernels: dx.copy, dx.transpose, dx.fill, dx.reshape, dx.broadcast_to,
// dx.concat (variadic), dx.split (1..8 outputs), dx.slice, dx.pad, dx.tile, their gradients (F
// dtypes; copy's and transpose's are in elementwise_backward.cc), and the creation op
// dx.arange. index_select / gather / scatter_add live in indexing.cc.
//
// Every forward is bit-exact data movement: each op is turned into one or a few strided copies
// (movement_util.h) between views whose strides and base pointers encode the op (a slice is a
// view with scaled strides, a broadcast one with 0 strides, a tile a view with split dims), so
// contiguous runs become memcpy and large copies run on every OpenMP thread; the copies move
// 1/2/4/8-byte words, so one instantiation serves every dtype of a size. Gradients follow the
// reference bit for bit: accumulated in f64 in the reference's order, rounded once.
#include <string>
#include <vector>

#include "grad.h"
#include "kernels.h"
#include "movement_util.h"

namespace deepx::cpu {
namespace {

using namespace movement;

constexpr dx_kernel_flags_t kFlags = DX_KERNEL_FLAG_DETERMINISTIC;

// Schema slots (deepx/ops.h order).
constexpr int kBroadcastShape = 0;
constexpr int kConcatAxis = 0;
constexpr int kSplitAxis = 0, kSplitSizes = 1;
constexpr int kSliceStarts = 0, kSliceStops = 1, kSliceSteps = 2;
constexpr int kPadPads = 0, kPadValue = 1;
constexpr int kTileRepeats = 0;
constexpr int kArangeStart = 0, kArangeStep = 1;

using Forward = void (*)(const dx_kernel_call_t*, DLDataType);
using Backward = void (*)(const dx_kernel_call_t*);

template <Forward F, class T>
dx_error_t* forward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] { F(call, dtype_of<T>()); });
}
template <Backward B>
dx_error_t* backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] { B(call); });
}

/// `v` moved by `index` elements along dim `d`.
View shifted(View v, int d, int64_t index) {
  v.base += index * v.strides[d] * element_size(v.dtype);
  return v;
}

/// A compact copy of `v` (returned view points into `storage`), or `v` itself when compact.
View compacted(const View& v, std::vector<uint64_t>& storage) {
  if (v.compact()) return compact_view(v.base, v.dtype, v.shape, v.rank);
  const int64_t bytes = v.count() * element_size(v.dtype);
  storage.resize(static_cast<size_t>((bytes + 7) / 8));
  const View c = compact_view(storage.data(), v.dtype, v.shape, v.rank);
  copy_view(c, v);
  return c;
}

// ---- copy / transpose -------------------------------------------------------------------------

/// Copies `in` (any strides, already arranged in the output's dim order) into `out`: the
/// dtype-blind byte mover of movement_util (memcpy runs, blocked tiles for transposes).
template <class T>
void strided_copy(const View& out, const View& in) {
  movement::copy_view(out, in);
}

template <class T>
dx_error_t* copy_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<T, T>(call);
    if (out.count() == 0) return;
    strided_copy<T>(out, in);
  });
}

template <class T>
dx_error_t* transpose_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(in, dtype_of<T>(), "input 0");
    expect_dtype(out, dtype_of<T>(), "output 0");
    const int rank = in.rank;
    int64_t perm[kMaxRank];
    transpose_perm(call, rank, perm);
    View permuted = in;
    for (int d = 0; d < rank; ++d) {
      permuted.shape[d] = in.shape[perm[d]];
      permuted.strides[d] = in.strides[perm[d]];
    }
    check_same_shape(out, permuted);
    if (out.count() == 0) return;
    strided_copy<T>(out, permuted);
  });
}

}  // namespace

void transpose_perm(const dx_kernel_call_t* call, int rank, int64_t* perm) {
  const dx_attr_t* a = attr_at(call, DX_TRANSPOSE_PERM);
  if (a == nullptr) {
    for (int d = 0; d < rank; ++d) perm[d] = rank - 1 - d;
    return;
  }
  if (a->type != DX_ATTR_I64_ARRAY) fail(DX_INVALID_ARGUMENT, "cpu: perm must be an i64 array");
  if (a->count != rank || (rank > 0 && a->value.i64s == nullptr)) {
    fail(DX_INVALID_ARGUMENT, "cpu: perm has " + std::to_string(a->count) +
                                  " entries for a tensor of rank " + std::to_string(rank));
  }
  bool seen[kMaxRank] = {};
  for (int d = 0; d < rank; ++d) {
    int64_t p = a->value.i64s[d];
    if (p < 0) p += rank;
    if (p < 0 || p >= rank || seen[p]) {
      fail(DX_INVALID_ARGUMENT, "cpu: perm is not a permutation of the axes");
    }
    seen[p] = true;
    perm[d] = p;
  }
}

namespace {

// ---- fill -------------------------------------------------------------------------------------

template <class T>
dx_error_t* fill_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 0, 1);
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, dtype_of<T>(), "output 0");
    // The value conversion dx.pad shares: i64 rounded once (via round-to-odd) to f16/bf16,
    // f64 truncated and saturated to integers, NaN -> 0, bool = value != 0.
    T typed;
    movement::encode_value(attr_at(call, DX_FILL_VALUE), dtype_of<T>(), &typed);
    movement::fill_view(out, &typed, /*parallel=*/true);
  });
}

// ---- reshape ------------------------------------------------------------------------------------

void reshape_forward(const dx_kernel_call_t* call, DLDataType t) {
  expect_arity(call, 1, 1);
  const View x = input(call, 0, t);
  const View y = output(call, 0, t);
  if (x.count() != y.count()) {
    fail(DX_SHAPE_MISMATCH, "dx.reshape: " + shape_string(x.shape, x.rank) + " and " +
                                shape_string(y.shape, y.rank) + " differ in size");
  }
  if (y.count() == 0) return;
  if (x.compact()) {
    copy_view(y, compact_view(x.base, t, y.shape, y.rank));
  } else if (y.compact()) {
    copy_view(compact_view(y.base, t, x.shape, x.rank), x);
  } else {
    std::vector<uint64_t> storage;
    const View c = compacted(x, storage);
    copy_view(y, compact_view(c.base, t, y.shape, y.rank));
  }
}

template <class T>
void reshape_backward(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  const View dy = input(call, 0, dtype_of<T>());
  const View x = input(call, 1, dtype_of<T>());
  if (dy.count() != x.count()) fail(DX_SHAPE_MISMATCH, "dx.reshape backward: sizes differ");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx || x.count() == 0) return;
  std::vector<uint64_t> storage;
  const View c = compacted(dy, storage);
  copy_gradient<T>(*dx, compact_view(c.base, c.dtype, x.shape, x.rank));
}

// ---- broadcast_to -------------------------------------------------------------------------------

/// DX_SHAPE_MISMATCH unless `x` broadcasts to `shape` (rank >= x's; dims equal or x's is 1).
void expect_broadcastable(const View& x, const int64_t* shape, int rank, const char* op) {
  bool ok = rank >= x.rank;
  for (int k = 0; ok && k < x.rank; ++k) {
    const int64_t target = shape[rank - x.rank + k];
    ok = x.shape[k] == target || x.shape[k] == 1;
  }
  if (!ok) {
    fail(DX_SHAPE_MISMATCH, std::string(op) + ": " + shape_string(x.shape, x.rank) +
                                " does not broadcast to " + shape_string(shape, rank));
  }
}

/// `x` viewed with `like`'s shape: 0 strides on the new leading and the broadcast dims.
View broadcast_view(const View& x, const View& like) {
  View v = like;
  v.base = x.base;
  v.dtype = x.dtype;
  const int lead = like.rank - x.rank;
  for (int d = 0; d < like.rank; ++d) {
    v.strides[d] = d < lead || x.shape[d - lead] == 1 ? 0 : x.strides[d - lead];
  }
  return v;
}

void broadcast_to_forward(const dx_kernel_call_t* call, DLDataType t) {
  expect_arity(call, 1, 1);
  const View x = input(call, 0, t);
  const View y = output(call, 0, t);
  if (const auto shape = attr_i64_list(call, kBroadcastShape, "shape")) {
    expect_shape(y, shape->data(), static_cast<int>(shape->size()), "dx.broadcast_to output");
  }
  expect_broadcastable(x, y.shape, y.rank, "dx.broadcast_to");
  copy_view(y, broadcast_view(x, y));
}

template <class T>
void broadcast_to_backward(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  const View dy = input(call, 0, dtype_of<T>());
  const View x = input(call, 1, dtype_of<T>());
  expect_broadcastable(x, dy.shape, dy.rank, "dx.broadcast_to backward");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx) return;
  // dx[j] = the sum, in dy's row-major order, of the dy elements that j was broadcast to.
  GradBuffer buffer(x.shape, x.rank);
  const View acc = broadcast_view(buffer.view, dy);
  StridedLoop<2> loop = loop_over(acc, dy);
  double* const pa = buffer.data.data();
  const T* const pd = dy.data<const T>();
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    double* a = pa + off[0];
    const T* g = pd + off[1];
    if (st[0] == 0) {
      double sum = *a;
      for (int64_t i = 0; i < n; ++i) sum += to_f64(g[i * st[1]]);
      *a = sum;
    } else {
      for (int64_t i = 0; i < n; ++i) a[i * st[0]] += to_f64(g[i * st[1]]);
    }
  };
  if (dy.count() > 0) run_range(loop, 0, loop.count(), row);
  buffer.store<T>(*dx);
}

// ---- concat -------------------------------------------------------------------------------------

void concat_forward(const dx_kernel_call_t* call, DLDataType t) {
  if (call->num_inputs < 1 || call->num_outputs != 1 || call->inputs == nullptr ||
      call->outputs == nullptr) {
    fail(DX_INVALID_ARGUMENT, "dx.concat takes one or more inputs and one output");
  }
  const View first = input(call, 0, t);
  const View y = output(call, 0, t);
  const int axis = normal_axis(call, kConcatAxis, first.rank, 0, "dx.concat");
  std::vector<View> xs;
  xs.reserve(static_cast<size_t>(call->num_inputs));
  int64_t expected[kMaxRank];
  for (int d = 0; d < first.rank; ++d) expected[d] = first.shape[d];
  expected[axis] = 0;
  for (int i = 0; i < call->num_inputs; ++i) {
    const View x = input(call, i, t);
    bool ok = x.rank == first.rank;
    for (int d = 0; ok && d < first.rank; ++d) ok = d == axis || x.shape[d] == first.shape[d];
    if (!ok) {
      fail(DX_SHAPE_MISMATCH, "dx.concat: input " + std::to_string(i) + " " +
                                  shape_string(x.shape, x.rank) + " does not match " +
                                  shape_string(first.shape, first.rank) + " off the axis");
    }
    expected[axis] += x.shape[axis];
    xs.push_back(x);
  }
  expect_shape(y, expected, first.rank, "dx.concat output");
  int64_t base = 0;
  for (const View& x : xs) {
    View part = shifted(y, axis, base);
    part.shape[axis] = x.shape[axis];
    copy_view(part, x);
    base += x.shape[axis];
  }
}

/// The gradient of an input that occupies `dy`'s block starting at `offset` along `axis`:
/// dx[i] = dy[i + offset e_axis] where that lies inside dy, else 0 (as the reference).
template <class T>
void block_gradient(const View& dx, const View& dy, int axis, int64_t offset) {
  View part = shifted(dy, axis, offset);
  View target = dx;
  bool whole = true;
  for (int d = 0; d < dx.rank; ++d) {
    const int64_t limit = d == axis ? dy.shape[d] - offset : dy.shape[d];
    if (dx.shape[d] > limit) {
      whole = false;
      target.shape[d] = limit > 0 ? limit : 0;
    }
    part.shape[d] = target.shape[d];
  }
  if (!whole) zero_view(dx);
  copy_gradient<T>(target, part);
}

template <class T>
void concat_backward(const dx_kernel_call_t* call) {
  // inputs: dy, x_0 .. x_{n-1}, y; outputs: dx_0 .. dx_{n-1}.
  const int n = call->num_inputs - 2;
  if (n < 1 || call->num_outputs != n || call->inputs == nullptr || call->outputs == nullptr) {
    fail(DX_INVALID_ARGUMENT, "dx.concat backward takes dy, the n inputs and y, and n gradients");
  }
  const View dy = input(call, 0, dtype_of<T>());
  const View first = input(call, 1, dtype_of<T>());
  const int axis = normal_axis(call, kConcatAxis, first.rank, 0, "dx.concat");
  std::vector<View> xs;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const View x = input(call, 1 + i, dtype_of<T>());
    if (x.rank != dy.rank) fail(DX_SHAPE_MISMATCH, "dx.concat backward: rank mismatch");
    total += x.shape[axis];
    xs.push_back(x);
  }
  if (total != dy.shape[axis]) {
    fail(DX_SHAPE_MISMATCH, "dx.concat backward: gradient shape disagrees with the inputs");
  }
  std::vector<std::optional<View>> grads;
  for (int i = 0; i < n; ++i) grads.push_back(gradient(call, i, xs[static_cast<size_t>(i)]));
  int64_t base = 0;
  for (int i = 0; i < n; ++i) {
    const View& x = xs[static_cast<size_t>(i)];
    if (grads[static_cast<size_t>(i)]) block_gradient<T>(*grads[static_cast<size_t>(i)], dy, axis, base);
    base += x.shape[axis];
  }
}

// ---- split --------------------------------------------------------------------------------------

void split_forward(const dx_kernel_call_t* call, DLDataType t) {
  const int n = call->num_outputs;
  expect_arity(call, 1, n);
  if (n < 1) fail(DX_INVALID_ARGUMENT, "dx.split needs at least one output");
  const View x = input(call, 0, t);
  const int axis = normal_axis(call, kSplitAxis, x.rank, 0, "dx.split");
  std::vector<int64_t> sizes = attr_i64_list(call, kSplitSizes, "sizes").value_or(std::vector<int64_t>{});
  if (sizes.empty()) {
    if (x.shape[axis] % n != 0) {
      fail(DX_SHAPE_MISMATCH, "dx.split: axis of size " + std::to_string(x.shape[axis]) +
                                  " does not split into " + std::to_string(n) + " equal parts");
    }
    sizes.assign(static_cast<size_t>(n), x.shape[axis] / n);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(DX_INVALID_ARGUMENT, "dx.split: negative size");
    total += s;
  }
  if (static_cast<int>(sizes.size()) != n || total != x.shape[axis]) {
    fail(DX_SHAPE_MISMATCH, "dx.split: sizes " + shape_string(sizes.data(), static_cast<int>(sizes.size())) +
                                " do not split axis " + std::to_string(axis) + " of " +
                                shape_string(x.shape, x.rank) + " into " + std::to_string(n) +
                                " outputs");
  }
  std::vector<View> ys;
  for (int o = 0; o < n; ++o) {
    const View y = output(call, o, t);
    int64_t expected[kMaxRank];
    for (int d = 0; d < x.rank; ++d) expected[d] = x.shape[d];
    expected[axis] = sizes[static_cast<size_t>(o)];
    expect_shape(y, expected, x.rank, "dx.split output");
    ys.push_back(y);
  }
  int64_t base = 0;
  for (int o = 0; o < n; ++o) {
    const View& y = ys[static_cast<size_t>(o)];
    View part = shifted(x, axis, base);
    part.shape[axis] = y.shape[axis];
    copy_view(y, part);
    base += y.shape[axis];
  }
}

template <class T>
void split_backward(const dx_kernel_call_t* call) {
  // inputs: dy_0 .. dy_{m-1}, x, y_0 .. y_{m-1}; output dx (the dy's concatenated).
  const int m = (call->num_inputs - 1) / 2;
  expect_arity(call, 2 * m + 1, 1);
  if (m < 1) fail(DX_INVALID_ARGUMENT, "dx.split backward needs at least one gradient");
  const View x = input(call, m, dtype_of<T>());
  const int axis = normal_axis(call, kSplitAxis, x.rank, 0, "dx.split");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx) return;
  std::vector<View> dys;
  int64_t total = 0;
  bool whole = true;
  for (int o = 0; o < m; ++o) {
    const View dy = input(call, o, dtype_of<T>());
    if (dy.rank != x.rank) fail(DX_SHAPE_MISMATCH, "dx.split backward: rank mismatch");
    for (int d = 0; d < x.rank; ++d) {
      if (d == axis) continue;
      if (dy.shape[d] > x.shape[d]) fail(DX_SHAPE_MISMATCH, "dx.split backward: gradient larger than the input");
      whole = whole && dy.shape[d] == x.shape[d];
    }
    total += dy.shape[axis];
    dys.push_back(dy);
  }
  if (total != x.shape[axis]) {
    fail(DX_SHAPE_MISMATCH, "dx.split backward: gradients do not cover the input");
  }
  if (!whole) zero_view(*dx);
  int64_t base = 0;
  for (const View& dy : dys) {
    View part = shifted(*dx, axis, base);
    for (int d = 0; d < x.rank; ++d) part.shape[d] = dy.shape[d];
    copy_gradient<T>(part, dy);
    base += dy.shape[axis];
  }
}

// ---- slice --------------------------------------------------------------------------------------

struct SlicePlan {
  int64_t start[kMaxRank];
  int64_t step[kMaxRank];
  int64_t out_shape[kMaxRank];
};

SlicePlan plan_slice(const dx_kernel_call_t* call, const View& x) {
  const int r = x.rank;
  const auto starts = attr_i64_list(call, kSliceStarts, "starts").value_or(std::vector<int64_t>{});
  const auto stops = attr_i64_list(call, kSliceStops, "stops").value_or(std::vector<int64_t>{});
  const auto steps = attr_i64_list(call, kSliceSteps, "steps").value_or(std::vector<int64_t>{});
  if (starts.size() > static_cast<size_t>(r) || stops.size() > static_cast<size_t>(r) ||
      steps.size() > static_cast<size_t>(r)) {
    fail(DX_INVALID_ARGUMENT, "dx.slice: more starts/stops/steps than axes (rank " + std::to_string(r) + ")");
  }
  SlicePlan p;
  for (int k = 0; k < r; ++k) {
    const size_t uk = static_cast<size_t>(k);
    const int64_t n = x.shape[k];
    const int64_t step = uk < steps.size() ? steps[uk] : 1;
    if (step <= 0) fail(DX_INVALID_ARGUMENT, "dx.slice: steps must be positive");
    // Python slicing: negative bounds count from the end, then clamp to [0, n].
    const auto clamp_bound = [n](int64_t v) {
      if (v < 0) v += n;
      return v < 0 ? 0 : (v > n ? n : v);
    };
    const int64_t start = uk < starts.size() ? clamp_bound(starts[uk]) : 0;
    const int64_t stop = uk < stops.size() ? clamp_bound(stops[uk]) : n;
    p.start[k] = start;
    p.step[k] = step;
    p.out_shape[k] = stop > start ? (stop - start - 1) / step + 1 : 0;
  }
  return p;
}

/// The elements of `x` that the slice picks, as a view with the slice's shape.
View sliced(const View& x, const SlicePlan& p) {
  View v = x;
  for (int k = 0; k < x.rank; ++k) {
    if (p.out_shape[k] > 0) v.base += p.start[k] * x.strides[k] * element_size(x.dtype);
    v.shape[k] = p.out_shape[k];
    v.strides[k] = x.strides[k] * p.step[k];
  }
  return v;
}

void slice_forward(const dx_kernel_call_t* call, DLDataType t) {
  expect_arity(call, 1, 1);
  const View x = input(call, 0, t);
  const View y = output(call, 0, t);
  const SlicePlan p = plan_slice(call, x);
  expect_shape(y, p.out_shape, x.rank, "dx.slice output");
  if (y.count() == 0) return;
  copy_view(y, sliced(x, p));
}

template <class T>
void slice_backward(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  const View dy = input(call, 0, dtype_of<T>());
  const View x = input(call, 1, dtype_of<T>());
  const SlicePlan p = plan_slice(call, x);
  expect_shape(dy, p.out_shape, x.rank, "dx.slice output gradient");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx) return;
  if (dy.count() != x.count()) zero_view(*dx);  // the slice misses some elements
  if (dy.count() > 0) copy_gradient<T>(sliced(*dx, p), dy);
}

// ---- pad ----------------------------------------------------------------------------------------

struct PadPlan {
  int64_t before[kMaxRank];
  int64_t out_shape[kMaxRank];
};

PadPlan plan_pad(const dx_kernel_call_t* call, const View& x) {
  const auto pads = attr_i64_list(call, kPadPads, "pads").value_or(std::vector<int64_t>{});
  const int r = x.rank;
  if (pads.size() != 2 * static_cast<size_t>(r) && !pads.empty()) {
    fail(DX_INVALID_ARGUMENT, "dx.pad: pads needs 2 entries (before, after) per axis, got " +
                                  std::to_string(pads.size()));
  }
  PadPlan p;
  for (int k = 0; k < r; ++k) {
    const int64_t b = pads.empty() ? 0 : pads[2 * static_cast<size_t>(k)];
    const int64_t a = pads.empty() ? 0 : pads[2 * static_cast<size_t>(k) + 1];
    if (b < 0 || a < 0) fail(DX_INVALID_ARGUMENT, "dx.pad: pads must be non-negative");
    p.before[k] = b;
    p.out_shape[k] = x.shape[k] + b + a;
  }
  return p;
}

/// The block of `y` where `x` lands.
View interior(const View& y, const View& x, const PadPlan& p) {
  View v = y;
  for (int k = 0; k < y.rank; ++k) {
    if (x.shape[k] > 0) v.base += p.before[k] * y.strides[k] * element_size(y.dtype);
    v.shape[k] = x.shape[k];
  }
  return v;
}

void pad_forward(const dx_kernel_call_t* call, DLDataType t) {
  expect_arity(call, 1, 1);
  const View x = input(call, 0, t);
  const View y = output(call, 0, t);
  const PadPlan p = plan_pad(call, x);
  expect_shape(y, p.out_shape, x.rank, "dx.pad output");
  alignas(8) unsigned char value[8] = {};
  encode_value(attr_at(call, kPadValue), t, value);
  if (y.count() == 0) return;
  copy_view(interior(y, x, p), x);
  // The border, split by the first dim that lies outside x: dims before d inside, dim d in
  // the before or after band, the dims after d whole. These blocks partition it.
  View band = y;
  for (int d = 0; d < y.rank; ++d) {
    View before = band;
    before.shape[d] = p.before[d];
    fill_view(before, value);
    View after = shifted(band, d, p.before[d] + x.shape[d]);
    after.shape[d] = y.shape[d] - p.before[d] - x.shape[d];
    fill_view(after, value);
    if (x.shape[d] == 0) break;  // nothing lies inside along d: the bands so far cover all
    band = shifted(band, d, p.before[d]);
    band.shape[d] = x.shape[d];
  }
}

template <class T>
void pad_backward(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  const View dy = input(call, 0, dtype_of<T>());
  const View x = input(call, 1, dtype_of<T>());
  const PadPlan p = plan_pad(call, x);
  expect_shape(dy, p.out_shape, x.rank, "dx.pad output gradient");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx || x.count() == 0) return;
  copy_gradient<T>(*dx, interior(dy, x, p));
}

// ---- tile ---------------------------------------------------------------------------------------

struct TilePlan {
  int rank = 0;  // the output's rank
  int lead = 0;  // leading dims of size 1 prepended to x
  int64_t reps[kMaxRank];
  int64_t out_shape[kMaxRank];
};

TilePlan plan_tile(const dx_kernel_call_t* call, const View& x) {
  std::vector<int64_t> reps = attr_i64_list(call, kTileRepeats, "repeats").value_or(std::vector<int64_t>{});
  for (int64_t v : reps) {
    if (v < 0) fail(DX_INVALID_ARGUMENT, "dx.tile: repeats must be non-negative");
  }
  TilePlan p;
  const int r = std::max(static_cast<int>(reps.size()), x.rank);
  if (r > kMaxRank) {
    fail(DX_UNSUPPORTED, "cpu: dx.tile output rank " + std::to_string(r) + " is above " +
                             std::to_string(kMaxRank));
  }
  p.rank = r;
  p.lead = r - x.rank;
  const int pad = r - static_cast<int>(reps.size());
  for (int k = 0; k < r; ++k) {
    p.reps[k] = k < pad ? 1 : reps[static_cast<size_t>(k - pad)];
    const int64_t xs = k < p.lead ? 1 : x.shape[k - p.lead];
    p.out_shape[k] = xs * p.reps[k];
  }
  return p;
}

/// The tile loop over the output: each output dim k with both a repeat and an x extent above
/// 1 splits into (repeat, x extent), so output operand strides are (s * xs, s) and x's are
/// (0, x stride). Row-major order over the split dims is the output's row-major order.
/// Operand 0 walks `out_like` (the output or the output gradient), operand 1 walks `x_like`
/// (x or its gradient buffer) with `x_strides`.
StridedLoop<2> tile_loop(const TilePlan& p, const View& x, const int64_t* out_strides,
                         const int64_t* x_strides) {
  StridedLoop<2> loop;
  int r = 0;
  for (int k = 0; k < p.rank; ++k) {
    const int64_t xs = k < p.lead ? 1 : x.shape[k - p.lead];
    const int64_t xst = k < p.lead ? 0 : x_strides[k - p.lead];
    const int64_t reps = p.reps[k];
    if (reps != 1 && xs != 1) {
      if (r + 2 > kMaxRank) fail(DX_UNSUPPORTED, "cpu: dx.tile repeats too many dims for this plugin");
      loop.shape[r] = reps;
      loop.strides[0][r] = out_strides[k] * xs;
      loop.strides[1][r] = 0;
      ++r;
      loop.shape[r] = xs;
      loop.strides[0][r] = out_strides[k];
      loop.strides[1][r] = xst;
      ++r;
    } else {
      if (r + 1 > kMaxRank) fail(DX_UNSUPPORTED, "cpu: dx.tile repeats too many dims for this plugin");
      loop.shape[r] = reps * xs;
      loop.strides[0][r] = out_strides[k];
      loop.strides[1][r] = reps != 1 ? 0 : xst;
      ++r;
    }
  }
  loop.rank = r;
  loop.simplify();
  return loop;
}

template <class W>
void tile_words(const StridedLoop<2>& loop, W* out, const W* x) {
  auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
    W* o = out + off[0];
    const W* s = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      std::memcpy(o, s, static_cast<size_t>(n) * sizeof(W));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = s[i * st[1]];
    }
  };
  for_each_row(loop, row);
}

void tile_forward(const dx_kernel_call_t* call, DLDataType t) {
  expect_arity(call, 1, 1);
  const View x = input(call, 0, t);
  const View y = output(call, 0, t);
  const TilePlan p = plan_tile(call, x);
  expect_shape(y, p.out_shape, p.rank, "dx.tile output");
  if (y.count() == 0) return;
  const StridedLoop<2> loop = tile_loop(p, x, y.strides, x.strides);
  switch (element_size(t)) {
    case 1: tile_words(loop, y.data<uint8_t>(), x.data<const uint8_t>()); break;
    case 2: tile_words(loop, y.data<uint16_t>(), x.data<const uint16_t>()); break;
    case 4: tile_words(loop, y.data<uint32_t>(), x.data<const uint32_t>()); break;
    default: tile_words(loop, y.data<uint64_t>(), x.data<const uint64_t>()); break;
  }
}

template <class T>
void tile_backward(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  const View dy = input(call, 0, dtype_of<T>());
  const View x = input(call, 1, dtype_of<T>());
  const TilePlan p = plan_tile(call, x);
  expect_shape(dy, p.out_shape, p.rank, "dx.tile output gradient");
  const std::optional<View> dx = gradient(call, 0, x);
  if (!dx) return;
  GradBuffer buffer(x.shape, x.rank);
  if (dy.count() > 0) {
    // Serial, in dy's row-major order: each x element sums its copies in the reference's order.
    const StridedLoop<2> loop = tile_loop(p, x, dy.strides, buffer.view.strides);
    double* const pa = buffer.data.data();
    const T* const pd = dy.data<const T>();
    auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
      const T* g = pd + off[0];
      double* a = pa + off[1];
      for (int64_t i = 0; i < n; ++i) a[i * st[1]] += to_f64(g[i * st[0]]);
    };
    run_range(loop, 0, loop.count(), row);
  }
  buffer.store<T>(*dx);
}

// ---- arange -------------------------------------------------------------------------------------

template <class T>
dx_error_t* arange_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    // out[flat i] = start + i * step over the output's row-major positions. F: in f64, rounded
    // once. I: with i64 (or unset) start and step exact and wrapping; with an f64 one, in f64
    // then truncated and saturated.
    expect_arity(call, 0, 1);
    const View y = output(call, 0, dtype_of<T>());
    const dx_attr_t* start_attr = attr_at(call, kArangeStart);
    const dx_attr_t* step_attr = attr_at(call, kArangeStep);
    const bool exact = (start_attr == nullptr || start_attr->type == DX_ATTR_I64) &&
                       (step_attr == nullptr || step_attr->type == DX_ATTR_I64);
    const double start = attr_f64(call, kArangeStart, "start").value_or(0.0);
    const double step = attr_f64(call, kArangeStep, "step").value_or(1.0);
    const uint64_t istart = exact && start_attr != nullptr ? static_cast<uint64_t>(start_attr->value.i64) : 0;
    const uint64_t istep = exact && step_attr != nullptr ? static_cast<uint64_t>(step_attr->value.i64) : 1;
    if (y.count() == 0) return;
    StridedLoop<1> loop = loop_over(y);
    T* const py = y.data<T>();
    for_each_row_flat(loop, [=](int64_t flat, int64_t n, const int64_t* off, const int64_t* st) {
      T* o = py + off[0];
      const int64_t so = st[0];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t position = flat + i;
        T v;
        if constexpr (is_float_v<T>) {
          v = from_f64<T>(start + static_cast<double>(position) * step);
        } else {
          if (exact) {
            const uint64_t w = istart + static_cast<uint64_t>(position) * istep;
            v = static_cast<T>(static_cast<std::make_unsigned_t<T>>(w));
          } else {
            v = saturating_cast<T>(start + static_cast<double>(position) * step);
          }
        }
        o[i * so] = v;
      }
    });
  });
}

// ---- registration -------------------------------------------------------------------------------

constexpr int kMaxSplitOutputs = 8;

template <class T>
void add_movement(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  dx_kernel_fn reshape_bw = nullptr, broadcast_bw = nullptr, concat_bw = nullptr,
               split_bw = nullptr, slice_bw = nullptr, pad_bw = nullptr, tile_bw = nullptr;
  if constexpr (is_float_v<T>) {
    reshape_bw = &backward_kernel<&reshape_backward<T>>;
    broadcast_bw = &backward_kernel<&broadcast_to_backward<T>>;
    concat_bw = &backward_kernel<&concat_backward<T>>;
    split_bw = &backward_kernel<&split_backward<T>>;
    slice_bw = &backward_kernel<&slice_backward<T>>;
    pad_bw = &backward_kernel<&pad_backward<T>>;
    tile_bw = &backward_kernel<&tile_backward<T>>;
  }
  r.add("dx.reshape", 1, 1, {t, t}, &forward_kernel<&reshape_forward, T>, kFlags, reshape_bw);
  r.add("dx.broadcast_to", 1, 1, {t, t}, &forward_kernel<&broadcast_to_forward, T>, kFlags,
        broadcast_bw);
  r.add("dx.slice", 1, 1, {t, t}, &forward_kernel<&slice_forward, T>, kFlags, slice_bw);
  r.add("dx.pad", 1, 1, {t, t}, &forward_kernel<&pad_forward, T>, kFlags, pad_bw);
  r.add("dx.tile", 1, 1, {t, t}, &forward_kernel<&tile_forward, T>, kFlags, tile_bw);
  r.add("dx.concat", 1, 1, {t, t}, &forward_kernel<&concat_forward, T>,
        kFlags | DX_KERNEL_FLAG_VARIADIC, concat_bw);
  for (int n = 1; n <= kMaxSplitOutputs; ++n) {
    switch (n) {
      case 1: r.add("dx.split", 1, 1, {t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 2: r.add("dx.split", 1, 2, {t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 3: r.add("dx.split", 1, 3, {t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 4: r.add("dx.split", 1, 4, {t, t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 5: r.add("dx.split", 1, 5, {t, t, t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 6: r.add("dx.split", 1, 6, {t, t, t, t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      case 7: r.add("dx.split", 1, 7, {t, t, t, t, t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
      default: r.add("dx.split", 1, 8, {t, t, t, t, t, t, t, t, t}, &forward_kernel<&split_forward, T>, kFlags, split_bw); break;
    }
  }
}

template <class T>
void add_data_movement(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  r.add("dx.copy", 1, 1, {t, t}, &copy_kernel<T>, kFlags | DX_KERNEL_FLAG_INPLACE, g.copy);
  r.add("dx.transpose", 1, 1, {t, t}, &transpose_kernel<T>, kFlags, g.transpose);
  r.add("dx.fill", 0, 1, {t}, &fill_kernel<T>, kFlags);
}

template <class T>
void add_arange(Registrar& r) {
  r.add("dx.arange", 0, 1, {dtype_of<T>()}, &arange_kernel<T>, kFlags);
}

}  // namespace

void register_movement_kernels(Registrar& r) {
  add_data_movement<double>(r);
  add_data_movement<float>(r);
  add_data_movement<Half>(r);
  add_data_movement<BFloat16>(r);
  add_data_movement<int64_t>(r);
  add_data_movement<int32_t>(r);
  add_data_movement<int16_t>(r);
  add_data_movement<int8_t>(r);
  add_data_movement<uint8_t>(r);
  add_data_movement<Bool>(r);

  add_movement<double>(r);
  add_movement<float>(r);
  add_movement<Half>(r);
  add_movement<BFloat16>(r);
  add_movement<int64_t>(r);
  add_movement<int32_t>(r);
  add_movement<int16_t>(r);
  add_movement<int8_t>(r);
  add_movement<uint8_t>(r);
  add_movement<Bool>(r);
  register_indexing_kernels(r);

  add_arange<double>(r);
  add_arange<float>(r);
  add_arange<Half>(r);
  add_arange<BFloat16>(r);
  add_arange<int64_t>(r);
  add_arange<int32_t>(r);
  add_arange<int16_t>(r);
  add_arange<int8_t>(r);
  add_arange<uint8_t>(r);
}

}  // namespace deepx::cpu
