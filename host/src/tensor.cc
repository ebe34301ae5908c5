// Tensors: storage in registered memory spaces, views, host <-> tensor copies, DLPack exchange.
#include <algorithm>
#include <type_traits>
#include <cstdlib>

#include "internal.h"
#include "remote.h"

namespace deepx::host {

void Storage::Release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (imported != nullptr) {
    if (imported->deleter) imported->deleter(imported);
  } else if (imported_legacy != nullptr) {
    if (imported_legacy->deleter) imported_legacy->deleter(imported_legacy);
  } else if (space != nullptr && allocation != nullptr) {
    dx_error_t* e = space->desc.free(space->desc.space_data, allocation, nullptr);
    if (e) DestroyError(e);  // nothing to report to: the tensor is gone either way
  }
  delete this;
}

dx_attr_t AttrView(const AttrItem& item) {
  dx_attr_t v;
  std::memset(&v, 0, sizeof v);
  v.name = item.name.c_str();
  v.type = item.type;
  switch (item.type) {
    case DX_ATTR_I64:
    case DX_ATTR_BOOL:
      v.count = 1;
      v.value.i64 = item.scalar_i;
      break;
    case DX_ATTR_F64:
      v.count = 1;
      v.value.f64 = item.scalar_f;
      break;
    case DX_ATTR_STRING:
      v.count = static_cast<int64_t>(item.str.size());
      v.value.str = item.str.c_str();
      break;
    case DX_ATTR_I64_ARRAY:
      v.count = static_cast<int64_t>(item.ints.size());
      v.value.i64s = item.ints.data();
      break;
    case DX_ATTR_F64_ARRAY:
      v.count = static_cast<int64_t>(item.floats.size());
      v.value.f64s = item.floats.data();
      break;
    default:
      break;
  }
  return v;
}

bool IsCompact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

int64_t Numel(const DLTensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

namespace {

constexpr int32_t kMaxRank = 32;

dx_status_t CheckedNumel(const int64_t* shape, int32_t ndim, uint64_t elem_bytes,
                         int64_t* out_numel, uint64_t* out_bytes, const char* where) {
  if (ndim < 0 || ndim > kMaxRank) {
    return Failf(DX_INVALID_ARGUMENT, "%s: ndim %d outside 0..%d", where, ndim, kMaxRank);
  }
  if (ndim > 0 && shape == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: shape is null", where);
  int64_t numel = 1;
  int64_t extent = 1;  // product of the non-zero sizes: what compact strides reach
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) {
      return Failf(DX_INVALID_ARGUMENT, "%s: dimension %d is negative (%lld)", where, d,
                   static_cast<long long>(shape[d]));
    }
    if (__builtin_mul_overflow(numel, shape[d], &numel) ||
        __builtin_mul_overflow(extent, std::max<int64_t>(shape[d], 1), &extent)) {
      return Failf(DX_OUT_OF_RANGE,
                   "%s: the shape's element count overflows (even an empty tensor's compact "
                   "strides must fit in 64 bits)",
                   where);
    }
  }
  uint64_t extent_bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(extent), elem_bytes, &extent_bytes) ||
      extent_bytes > static_cast<uint64_t>(INT64_MAX)) {
    return Failf(DX_OUT_OF_RANGE, "%s: the shape's byte size overflows", where);
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), elem_bytes, &bytes)) {
    return Failf(DX_OUT_OF_RANGE, "%s: byte size overflows", where);
  }
  *out_numel = numel;
  *out_bytes = bytes;
  return DX_OK;
}

// The one place layouts are measured. For a layout of `ndim` sizes and strides (in elements,
// null for compact), the offset in elements of the last element from the first, computed with
// every product and sum checked. Negative strides are refused (deepx never makes them and
// kernels need not handle them). An empty layout reaches nothing (*out_last = -1).
dx_status_t LastElementOffset(const int64_t* shape, const int64_t* strides, int32_t ndim,
                              int64_t* out_last, const char* where) {
  int64_t last = 0;
  int64_t compact = 1;
  bool empty = false;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    // The stride rule holds for empty layouts too: one rule, whatever the sizes.
    if (strides != nullptr && strides[d] < 0 && shape[d] > 1) {
      return Failf(DX_INVALID_ARGUMENT, "%s: stride %lld of dimension %d is negative", where,
                   static_cast<long long>(strides[d]), d);
    }
    empty = empty || shape[d] == 0;
  }
  if (empty) {
    *out_last = -1;
    return DX_OK;
  }
  for (int32_t d = ndim - 1; d >= 0; --d) {
    int64_t stride = strides ? strides[d] : compact;
    if (shape[d] == 1) continue;  // its stride is never applied
    if (stride < 0) {
      return Failf(DX_INVALID_ARGUMENT, "%s: stride %lld of dimension %d is negative", where,
                   static_cast<long long>(stride), d);
    }
    int64_t reach = 0;
    if (__builtin_mul_overflow(stride, shape[d] - 1, &reach) ||
        __builtin_add_overflow(last, reach, &last) ||
        __builtin_mul_overflow(compact, shape[d], &compact)) {
      return Failf(DX_OUT_OF_RANGE, "%s: the strides reach past 2^63 elements", where);
    }
  }
  *out_last = last;
  return DX_OK;
}

// Checks that a layout whose element 0 lies `first` bytes after the start of a storage of
// `storage_bytes` bytes stays inside it, with checked arithmetic: [first, first + (last + 1) *
// elem_bytes) within [0, storage_bytes]. An empty layout only needs 0 <= first <= storage_bytes.
dx_status_t CheckWithin(int64_t first, int64_t last, uint64_t elem_bytes, uint64_t storage_bytes,
                        const char* where) {
  if (first < 0 || static_cast<uint64_t>(first) > storage_bytes) {
    return Failf(DX_OUT_OF_RANGE, "%s: the first element lies %lld bytes from the start of a "
                 "storage of %llu bytes", where, static_cast<long long>(first),
                 static_cast<unsigned long long>(storage_bytes));
  }
  if (last < 0) return DX_OK;
  uint64_t span = 0, end = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(last) + 1, elem_bytes, &span) ||
      __builtin_add_overflow(static_cast<uint64_t>(first), span, &end) || end > storage_bytes) {
    return Failf(DX_OUT_OF_RANGE, "%s: the view reaches outside the storage (%llu bytes)", where,
                 static_cast<unsigned long long>(storage_bytes));
  }
  return DX_OK;
}

void SetCompactStrides(Tensor* t) {
  t->strides.assign(t->shape.size(), 1);
  int64_t s = 1;
  for (int32_t d = static_cast<int32_t>(t->shape.size()) - 1; d >= 0; --d) {
    t->strides[d] = s;
    s *= t->shape[d];
  }
  t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
  t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
  t->dl.ndim = static_cast<int32_t>(t->shape.size());
}

// Calls `fn(byte_offset_of_element)` for every element of `t` in row-major order.
template <class Fn>
void ForEachElement(const DLTensor& t, uint64_t elem_bytes, Fn&& fn) {
  int64_t n = Numel(t);
  if (n == 0) return;
  int64_t index[kMaxRank] = {0};
  int64_t strides[kMaxRank];
  int64_t s = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    strides[d] = t.strides ? t.strides[d] : s;
    s *= t.shape[d];
  }
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(static_cast<uint64_t>(offset) * elem_bytes);
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (++index[d] < t.shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (t.shape[d] - 1);
      index[d] = 0;
    }
  }
}

char* FirstByte(const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

// Bytes from the first element of `t` to the end of the last one its strides reach (strides are
// never negative: views and imports refuse them). 0 for an empty tensor.
uint64_t SpanBytes(const DLTensor& t, uint64_t elem_bytes) {
  if (Numel(t) == 0) return 0;
  int64_t last = 0, s = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    last += (t.shape[d] - 1) * (t.strides ? t.strides[d] : s);
    s *= t.shape[d];
  }
  return (static_cast<uint64_t>(last) + 1) * elem_bytes;
}

// Calls `fn(byte_offset, bytes)` for each maximal run of consecutive bytes of `t`, in row-major
// order (a compact tensor is one run, a row-sliced one a run per row).
template <class Fn>
void ForEachRun(const DLTensor& t, uint64_t elem_bytes, Fn&& fn) {
  uint64_t start = 0, length = 0;
  ForEachElement(t, elem_bytes, [&](uint64_t off) {
    if (length != 0 && off == start + length) {
      length += elem_bytes;
      return;
    }
    if (length != 0) fn(start, length);
    start = off;
    length = elem_bytes;
  });
  if (length != 0) fn(start, length);
}


bool HostAccessible(const Tensor* t) {
  if (t->storage && t->storage->space) return t->storage->space->HostAccessible();
  int32_t dt = DeviceTypeOf(t->dl.device);
  return dt == kDLCPU || dt == kDLCUDAHost || dt == kDLROCMHost || dt == kDLCUDAManaged;
}

dx_status_t ImportCommon(Runtime* runtime, const DLTensor& dl, Storage* storage,
                         dx_tensor_t** out_tensor) {
  std::unique_ptr<Tensor> t(new (std::nothrow) Tensor());
  if (!t) {
    storage->Release();
    return Fail(DX_OUT_OF_MEMORY, "DLPack import: out of memory");
  }
  t->storage = storage;  // owned by `t` from here on, even if we fail below
  dx_dtype_t dtype = PackDtype(dl.dtype);
  if (!IsKnownDtype(dtype)) {
    return Fail(DX_UNSUPPORTED, "DLPack import: dtype " + DtypeName(dtype) + " is not supported");
  }
  int64_t numel = 0;
  uint64_t bytes = 0;
  if (dx_status_t st = CheckedNumel(dl.shape, dl.ndim, DtypeBytes(dtype), &numel, &bytes,
                                    "DLPack import");
      st != DX_OK) {
    return st;
  }
  if (numel > 0 && dl.data == nullptr) {
    return Fail(DX_INVALID_ARGUMENT, "DLPack import: data is null but the tensor has elements");
  }
  t->shape.assign(dl.shape, dl.shape + dl.ndim);
  int64_t last = 0;
  if (dl.strides != nullptr) {
    for (int32_t d = 0; d < dl.ndim; ++d) {
      if (dl.strides[d] < 0 && dl.shape[d] > 1) {
        return Fail(DX_UNSUPPORTED, "DLPack import: negative strides are not supported");
      }
    }
  }
  if (dx_status_t st = LastElementOffset(dl.shape, dl.strides, dl.ndim, &last, "DLPack import")) {
    return st;
  }
  // The memory the tensor reaches, [data + byte_offset, + (last + 1) * element size), must not
  // wrap around the address space.
  uint64_t first_address = 0, span = 0, end_address = 0;
  if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(dl.data), dl.byte_offset,
                             &first_address) ||
      first_address > static_cast<uint64_t>(INTPTR_MAX) ||
      __builtin_mul_overflow(last < 0 ? uint64_t{0} : static_cast<uint64_t>(last) + 1,
                             DtypeBytes(dtype), &span) ||
      __builtin_add_overflow(first_address, span, &end_address) ||
      end_address > static_cast<uint64_t>(INTPTR_MAX)) {
    return Failf(DX_OUT_OF_RANGE,
                 "DLPack import: data + byte_offset (%llu) + the bytes the strides reach wrap "
                 "around the address space",
                 static_cast<unsigned long long>(dl.byte_offset));
  }
  if (dl.strides != nullptr) {
    t->strides.assign(dl.strides, dl.strides + dl.ndim);
    t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
    t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
    t->dl.ndim = dl.ndim;
  } else {
    SetCompactStrides(t.get());
  }
  t->dl.data = dl.data;
  // An empty import may come without memory (data null, only allowed when there are no
  // elements): it has nothing to offset into, and null + offset would be undefined.
  t->dl.byte_offset = dl.data == nullptr ? 0 : dl.byte_offset;
  t->dl.device = dl.device;
  t->dl.dtype = dl.dtype;
  char* first = FirstByte(t->dl);
  storage->lo = first;
  storage->hi = first + span;
  {
    std::shared_lock<RegistryLock> registry(runtime->core->registry);
    const MemorySpace* space = runtime->core->FindSpace(dl.device);
    t->device_index = space ? space->index : -1;
    // Memory of a device a loaded plugin serves is read and written through that space (the
    // producer still owns and frees it). The storage then holds the Core, so the space outlives
    // every export of the storage.
    if (space != nullptr) {
      storage->space = space;
      storage->core = runtime->core;
    }
  }
  t->SetCore(runtime->core);
  return Issue(std::move(t), out_tensor, "DLPack import");
}

struct ExportContext {
  Storage* storage;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

void DeleteVersioned(dx_dlpack_versioned_t* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<ExportContext*>(self->manager_ctx);
  ctx->storage->Release();
  delete ctx;
  delete self;
}

void DeleteLegacy(DLManagedTensor* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<ExportContext*>(self->manager_ctx);
  ctx->storage->Release();
  delete ctx;
  delete self;
}

ExportContext* MakeExport(const Tensor* t, DLTensor* out) {
  auto ctx = std::make_unique<ExportContext>();
  ctx->shape = t->shape;
  ctx->strides = t->strides;
  *out = t->dl;
  out->shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  out->strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
  ctx->storage = t->storage;
  t->storage->Retain();
  return ctx.release();
}

}  // namespace

dx_status_t CreateTensor(const std::shared_ptr<Core>& core_ptr, int32_t device_index,
                         dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                         std::unique_ptr<Tensor>* out, const char* where) {
  Core& core = *core_ptr;
  if (core.remote) {
    return Failf(DX_UNSUPPORTED,
                 "%s: not available on a runtime connected to deepxd: it has no devices in this "
                 "process (create the tensors with dx_tensor_create() and write them)",
                 where);
  }
  if (device_index < 0 || device_index >= static_cast<int32_t>(core.spaces.size())) {
    return Failf(DX_OUT_OF_RANGE, "%s: device index %d out of range (%zu devices)",
                 where, device_index, core.spaces.size());
  }
  if (!IsKnownDtype(dtype)) {
    return Fail(DX_UNSUPPORTED, std::string(where) + ": unsupported dtype " + DtypeName(dtype));
  }
  int64_t numel = 0;
  uint64_t bytes = 0;
  if (dx_status_t st = CheckedNumel(shape, ndim, DtypeBytes(dtype), &numel, &bytes, where);
      st != DX_OK) {
    return st;
  }
  const MemorySpace& space = core.spaces[device_index];
  if (space.desc.capacity != 0 && bytes > space.desc.capacity) {
    return Failf(DX_OUT_OF_MEMORY, "%s: %llu bytes exceed the capacity of '%s'", where,
                 static_cast<unsigned long long>(bytes), space.name.c_str());
  }
  auto t = std::make_unique<Tensor>();
  t->shape.assign(shape, shape + ndim);
  SetCompactStrides(t.get());
  t->SetCore(core_ptr);
  void* ptr = nullptr;
  if (bytes > 0) {
    dx_error_t* e = space.desc.alloc(space.desc.space_data, bytes, nullptr, &ptr);
    if (e != nullptr) {
      return FailFromError(e, std::string(where) + ": allocation in '" + space.name + "' failed: ");
    }
    if (ptr == nullptr) {
      return Failf(DX_PLUGIN_ERROR, "%s: '%s' returned a null allocation", where,
                   space.name.c_str());
    }
  }
  auto* storage = new Storage();
  storage->core = core_ptr;
  storage->space = &space;
  storage->allocation = ptr;
  storage->lo = static_cast<char*>(ptr);
  storage->hi = static_cast<char*>(ptr) + bytes;
  t->storage = storage;
  t->dl.data = ptr;
  t->dl.byte_offset = 0;
  t->dl.device = space.desc.device;
  t->dl.dtype = UnpackDtype(dtype);
  t->device_index = device_index;
  *out = std::move(t);
  return DX_OK;
}

dx_status_t ViewTensor(const Tensor* base, const int64_t* shape, const int64_t* strides,
                       int32_t ndim, int64_t elem_offset, std::unique_ptr<Tensor>* out,
                       const char* where) {
  uint64_t elem = DtypeBytes(PackDtype(base->dl.dtype));
  int64_t numel = 0;
  uint64_t bytes = 0;
  if (dx_status_t st = CheckedNumel(shape, ndim, elem, &numel, &bytes, where);
      st != DX_OK) {
    return st;
  }
  auto t = std::make_unique<Tensor>();
  t->shape.assign(shape, shape + ndim);
  if (strides != nullptr) {
    t->strides.assign(strides, strides + ndim);
    t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
    t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
    t->dl.ndim = ndim;
  } else {
    SetCompactStrides(t.get());
  }
  int64_t last = 0;
  if (dx_status_t st = LastElementOffset(shape, strides, ndim, &last, where)) return st;
  // Where element 0 of the view lies, in bytes from the start of the storage, checked.
  const Storage* s = base->storage;
  const int64_t base_first = FirstByte(base->dl) - s->lo;  // within [0, hi - lo]: checked when
                                                           // the base was made
  int64_t delta = 0, first = 0;
  if (__builtin_mul_overflow(elem_offset, static_cast<int64_t>(elem), &delta) ||
      __builtin_add_overflow(base_first, delta, &first)) {
    return Failf(DX_OUT_OF_RANGE, "%s: element offset %lld overflows", where,
                 static_cast<long long>(elem_offset));
  }
  const uint64_t storage_bytes = static_cast<uint64_t>(s->hi - s->lo);
  if (dx_status_t st = CheckWithin(first, last, elem, storage_bytes, where)) {
    return st;
  }
  t->dl.data = base->dl.data;
  t->dl.byte_offset =
      static_cast<uint64_t>((s->lo + first) - static_cast<const char*>(base->dl.data));
  t->dl.device = base->dl.device;
  t->dl.dtype = base->dl.dtype;
  t->device_index = base->device_index;
  t->storage = base->storage;
  t->storage->Retain();
  t->SetCore(base->core);
  *out = std::move(t);
  return DX_OK;
}

namespace {

/// The checks TensorWrite and TensorRead share: `size` must be the tensor's byte count
/// (returned in *want, its element size in *elem) and `data` non-null unless that is 0.
dx_status_t CheckTransfer(const Tensor* tensor, const void* data, uint64_t size, const char* where,
                          uint64_t* elem, uint64_t* want) {
  *elem = DtypeBytes(PackDtype(tensor->dl.dtype));
  *want = static_cast<uint64_t>(Numel(tensor->dl)) * *elem;
  if (size != *want) {
    return Failf(DX_INVALID_ARGUMENT, "%s: size %llu, the tensor holds %llu bytes", where,
                 static_cast<unsigned long long>(size), static_cast<unsigned long long>(*want));
  }
  if (*want != 0 && data == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: data is null", where);
  return DX_OK;
}

/// The memory space a device tensor's bytes move through, or null (with the failure parked)
/// for an import of a device no loaded plugin serves.
const MemorySpace* TransferSpace(const Tensor* tensor, const char* where) {
  const MemorySpace* space = tensor->storage->space;
  if (space == nullptr) {
    Failf(DX_UNSUPPORTED, "%s: the tensor is an import of a device no loaded plugin serves", where);
  }
  return space;
}

}  // namespace

dx_status_t TensorWrite(Tensor* tensor, const void* data, uint64_t size, const char* where) {
  uint64_t elem = 0, want = 0;
  if (dx_status_t st = CheckTransfer(tensor, data, size, where, &elem, &want)) return st;
  if (want == 0) return DX_OK;
  if (tensor->remote) return tensor->remote->connection->Write(*tensor, data, want, where);
  if (tensor->storage->read_only) {
    return Failf(DX_INVALID_ARGUMENT, "%s: the tensor is a read-only import", where);
  }
  if (HostAccessible(tensor)) {
    const char* src = static_cast<const char*>(data);
    char* base = FirstByte(tensor->dl);
    if (IsCompact(tensor->dl)) {
      std::memcpy(base, src, want);
    } else {
      ForEachElement(tensor->dl, elem, [&](uint64_t off) {
        std::memcpy(base + off, src, elem);
        src += elem;
      });
    }
    return DX_OK;
  }
  const MemorySpace* space = TransferSpace(tensor, where);
  if (space == nullptr) return DX_UNSUPPORTED;
  if (IsCompact(tensor->dl)) {
    dx_error_t* e = space->desc.copy(space->desc.space_data, FirstByte(tensor->dl), data,
                                        want, DX_COPY_HOST_TO_DEVICE, nullptr);
    return e ? FailFromError(e, std::string(where) + ": ") : DX_OK;
  }
  // A strided device view: one copy per run of consecutive bytes, so bytes between the
  // view's elements (another tensor's, perhaps in use) are never touched.
  const char* src = static_cast<const char*>(data);
  dx_error_t* e = nullptr;
  ForEachRun(tensor->dl, elem, [&](uint64_t off, uint64_t bytes) {
    if (e != nullptr) return;
    e = space->desc.copy(space->desc.space_data, FirstByte(tensor->dl) + off, src, bytes,
                            DX_COPY_HOST_TO_DEVICE, nullptr);
    src += bytes;
  });
  return e ? FailFromError(e, std::string(where) + ": ") : DX_OK;
}

dx_status_t TensorRead(const Tensor* tensor, void* data, uint64_t size, const char* where) {
  uint64_t elem = 0, want = 0;
  if (dx_status_t st = CheckTransfer(tensor, data, size, where, &elem, &want)) return st;
  if (want == 0) return DX_OK;
  if (tensor->remote) return tensor->remote->connection->Read(*tensor, data, want, where);
  if (HostAccessible(tensor)) {
    char* dst = static_cast<char*>(data);
    const char* base = FirstByte(tensor->dl);
    if (IsCompact(tensor->dl)) {
      std::memcpy(dst, base, want);
    } else {
      ForEachElement(tensor->dl, elem, [&](uint64_t off) {
        std::memcpy(dst, base + off, elem);
        dst += elem;
      });
    }
    return DX_OK;
  }
  const MemorySpace* space = TransferSpace(tensor, where);
  if (space == nullptr) return DX_UNSUPPORTED;
  if (IsCompact(tensor->dl)) {
    dx_error_t* e = space->desc.copy(space->desc.space_data, data, FirstByte(tensor->dl),
                                        want, DX_COPY_DEVICE_TO_HOST, nullptr);
    return e ? FailFromError(e, std::string(where) + ": ") : DX_OK;
  }
  // A strided device view: one copy of the byte span its elements lie in (reading the bytes
  // between them does no harm and costs one transfer instead of one per run), then a gather.
  const uint64_t span = SpanBytes(tensor->dl, elem);
  std::vector<char> staging(span);
  dx_error_t* e = space->desc.copy(space->desc.space_data, staging.data(),
                                      FirstByte(tensor->dl), span, DX_COPY_DEVICE_TO_HOST,
                                      nullptr);
  if (e != nullptr) return FailFromError(e, std::string(where) + ": ");
  char* dst = static_cast<char*>(data);
  ForEachElement(tensor->dl, elem, [&](uint64_t off) {
    std::memcpy(dst, staging.data() + off, elem);
    dst += elem;
  });
  return DX_OK;
}

}  // namespace deepx::host

using namespace deepx::host;

#define DX_REQUIRE(cond, ...) \
  do {                        \
    if (!(cond)) return Failf(DX_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

namespace {

// Both DLPack imports. Ownership of `managed` passes to deepx on every path: a refusal calls
// its deleter before returning; from the Storage on, the storage owns it.
template <class Managed>
dx_status_t ImportManaged(dx_runtime_t* runtime, Managed* managed, dx_tensor_t** out_tensor,
                          const char* where) {
  constexpr bool kVersioned = std::is_same_v<Managed, dx_dlpack_versioned_t>;
  if (managed == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: managed is null", where);
  auto refuse = [&](dx_status_t code, const std::string& message) {
    if (managed->deleter) managed->deleter(managed);
    return Fail(code, message);
  };
  Runtime* rt = nullptr;
  if (dx_status_t st = Resolve(runtime, where, "runtime", &rt)) {
    return refuse(st, PendingMessage() + "; the tensor was released");
  }
  if (out_tensor == nullptr) {
    return refuse(DX_INVALID_ARGUMENT, std::string(where) + ": out_tensor is null");
  }
  if (rt->remote) {
    return refuse(DX_UNSUPPORTED,
                  std::string(where) + ": not available on a runtime connected to deepxd at " +
                      rt->remote->address() +
                      ": the daemon cannot reach this process's memory (copy the data in with "
                      "dx_tensor_create() and dx_tensor_write()); the tensor was released");
  }
  if constexpr (kVersioned) {
    if (managed->version.major != 1) {
      return refuse(DX_VERSION_MISMATCH, std::string(where) +
                                             ": DLPack major version is not 1; the tensor was "
                                             "released");
    }
  }
  Storage* storage = new (std::nothrow) Storage();
  if (storage == nullptr) return refuse(DX_OUT_OF_MEMORY, std::string(where) + ": out of memory");
  if constexpr (kVersioned) {
    storage->imported = managed;
    storage->read_only = (managed->flags & DX_DLPACK_FLAG_READ_ONLY) != 0;
  } else {
    storage->imported_legacy = managed;
  }
  return ImportCommon(rt, managed->dl_tensor, storage, out_tensor);
}

// What a remote tensor answers to a call that needs its memory in this process.
dx_status_t RefuseRemoteMemory(const Tensor& t, const char* where) {
  return Failf(DX_UNSUPPORTED,
               "%s: the tensor lives in deepxd at %s and its memory is not reachable from this "
               "process; read it with dx_tensor_read()",
               where, t.remote->connection->address().c_str());
}

// The shape of the tensor queries: resolve the handle, check the out-parameter, answer.
template <class Out, class Answer>
dx_error_t* QueryTensor(const dx_tensor_t* handle, const char* where, const char* out_name,
                        Out* out, Answer&& answer) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, where, "tensor", &tensor)) return st;
    if (out == nullptr) return Failf(DX_INVALID_ARGUMENT, "%s: %s is null", where, out_name);
    *out = answer(static_cast<const Tensor&>(*tensor));
    return DX_OK;
  });
}

}  // namespace

extern "C" {

DX_EXPORT dx_error_t* dx_tensor_create(dx_runtime_t* runtime, int32_t device_index,
                                       dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                                       dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_tensor_create", "runtime", &rt)) return st;
    DX_REQUIRE(out_tensor != nullptr, "dx_tensor_create: out_tensor is null");
    std::unique_ptr<Tensor> t;
    if (rt->remote) {
      constexpr const char* kWhere = "dx_tensor_create";
      if (!IsKnownDtype(dtype)) {
        return Fail(DX_UNSUPPORTED, std::string(kWhere) + ": unsupported dtype " + DtypeName(dtype));
      }
      int64_t numel = 0;
      uint64_t bytes = 0;
      if (dx_status_t st = CheckedNumel(shape, ndim, DtypeBytes(dtype), &numel, &bytes, kWhere)) {
        return st;
      }
      if (dx_status_t st =
              rt->remote->CreateTensor(rt->core, device_index, dtype, shape, ndim, &t, kWhere)) {
        return st;
      }
      return Issue(std::move(t), out_tensor, kWhere);
    }
    {
      std::shared_lock<RegistryLock> registry(rt->core->registry);
      if (dx_status_t st = CreateTensor(rt->core, device_index, dtype, shape, ndim, &t,
                                        "dx_tensor_create")) {
        return st;
      }
    }
    return Issue(std::move(t), out_tensor, "dx_tensor_create");
  });
}

DX_EXPORT dx_error_t* dx_tensor_view(const dx_tensor_t* base_handle, const int64_t* shape,
                                     const int64_t* strides, int32_t ndim, int64_t elem_offset,
                                     dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    Tensor* base = nullptr;
    if (dx_status_t st = Resolve(base_handle, "dx_tensor_view", "base", &base)) return st;
    DX_REQUIRE(out_tensor != nullptr, "dx_tensor_view: out_tensor is null");
    std::unique_ptr<Tensor> t;
    if (base->remote) {
      // The shape and strides are checked here; whether the view stays inside the storage, by
      // the daemon, which knows the storage.
      constexpr const char* kWhere = "dx_tensor_view";
      int64_t numel = 0;
      uint64_t bytes = 0;
      if (dx_status_t st = CheckedNumel(shape, ndim, DtypeBytes(PackDtype(base->dl.dtype)),
                                        &numel, &bytes, kWhere)) {
        return st;
      }
      int64_t last = 0;
      if (dx_status_t st = LastElementOffset(shape, strides, ndim, &last, kWhere)) return st;
      if (dx_status_t st = base->remote->connection->ViewTensor(*base, shape, strides, ndim,
                                                                elem_offset, &t, kWhere)) {
        return st;
      }
      return Issue(std::move(t), out_tensor, kWhere);
    }
    if (dx_status_t st =
            ViewTensor(base, shape, strides, ndim, elem_offset, &t, "dx_tensor_view")) {
      return st;
    }
    return Issue(std::move(t), out_tensor, "dx_tensor_view");
  });
}

DX_EXPORT dx_error_t* dx_tensor_destroy(dx_tensor_t* tensor) {
  return Guard([&]() -> dx_status_t {
    return Retire<Tensor>(tensor, "dx_tensor_destroy", "tensor");
  });
}

DX_EXPORT dx_error_t* dx_tensor_dltensor(const dx_tensor_t* handle, const DLTensor** out) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_dltensor", "tensor", &tensor)) return st;
    DX_REQUIRE(out != nullptr, "dx_tensor_dltensor: out is null");
    if (tensor->remote) return RefuseRemoteMemory(*tensor, "dx_tensor_dltensor");
    *out = &tensor->dl;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_tensor_ndim(const dx_tensor_t* handle, int32_t* out_ndim) {
  return QueryTensor(handle, "dx_tensor_ndim", "out_ndim", out_ndim,
                     [](const Tensor& t) { return t.dl.ndim; });
}

DX_EXPORT dx_error_t* dx_tensor_shape(const dx_tensor_t* handle, int64_t* out_shape,
                                      int32_t capacity) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_shape", "tensor", &tensor)) return st;
    DX_REQUIRE(out_shape != nullptr || tensor->dl.ndim == 0,
               "dx_tensor_shape: out_shape is null");
    if (capacity < tensor->dl.ndim) {
      return Failf(DX_OUT_OF_RANGE, "dx_tensor_shape: capacity %d < ndim %d", capacity,
                   tensor->dl.ndim);
    }
    std::copy(tensor->shape.begin(), tensor->shape.end(), out_shape);
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_tensor_dtype(const dx_tensor_t* handle, dx_dtype_t* out_dtype) {
  return QueryTensor(handle, "dx_tensor_dtype", "out_dtype", out_dtype,
                     [](const Tensor& t) { return PackDtype(t.dl.dtype); });
}

DX_EXPORT dx_error_t* dx_tensor_device(const dx_tensor_t* handle, int32_t* out_device_index) {
  return QueryTensor(handle, "dx_tensor_device", "out_device_index", out_device_index,
                     [](const Tensor& t) { return t.device_index; });
}

DX_EXPORT dx_error_t* dx_tensor_numel(const dx_tensor_t* handle, int64_t* out_numel) {
  return QueryTensor(handle, "dx_tensor_numel", "out_numel", out_numel,
                     [](const Tensor& t) { return Numel(t.dl); });
}

DX_EXPORT dx_error_t* dx_tensor_write(dx_tensor_t* handle, const void* data, uint64_t size) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_write", "tensor", &tensor)) return st;
    return TensorWrite(tensor, data, size, "dx_tensor_write");
  });
}

DX_EXPORT dx_error_t* dx_tensor_read(const dx_tensor_t* handle, void* data, uint64_t size) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_read", "tensor", &tensor)) return st;
    return TensorRead(tensor, data, size, "dx_tensor_read");
  });
}

DX_EXPORT dx_error_t* dx_tensor_copy(dx_runtime_t* runtime, dx_tensor_t* dst_handle,
                                     const dx_tensor_t* src_handle) {
  return Guard([&]() -> dx_status_t {
    Runtime* rt = nullptr;
    Tensor* dst = nullptr;
    Tensor* src = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_tensor_copy", "runtime", &rt)) return st;
    if (dx_status_t st = Resolve(dst_handle, "dx_tensor_copy", "dst", &dst)) return st;
    if (dx_status_t st = Resolve(src_handle, "dx_tensor_copy", "src", &src)) return st;
    constexpr const char* kWhere = "dx_tensor_copy";
    if (PackDtype(dst->dl.dtype) != PackDtype(src->dl.dtype)) {
      return Fail(DX_SHAPE_MISMATCH, "dx_tensor_copy: dtypes differ (" +
                                         DtypeName(PackDtype(src->dl.dtype)) + " -> " +
                                         DtypeName(PackDtype(dst->dl.dtype)) + ")");
    }
    if (dst->shape != src->shape) {
      return Fail(DX_SHAPE_MISMATCH, "dx_tensor_copy: shapes differ");
    }
    if (dst->storage->read_only) {
      return Fail(DX_INVALID_ARGUMENT, "dx_tensor_copy: dst is a read-only import");
    }
    uint64_t elem = DtypeBytes(PackDtype(src->dl.dtype));
    uint64_t bytes = static_cast<uint64_t>(Numel(src->dl)) * elem;
    if (bytes == 0) return DX_OK;
    if (src->remote || dst->remote) {
      // In one daemon the daemon copies; between a daemon and this process, or two daemons, the
      // bytes stage through this process.
      if (src->remote && dst->remote && src->remote->connection == dst->remote->connection) {
        return src->remote->connection->Copy(*dst, *src, kWhere);
      }
      std::vector<char> staging(bytes);
      if (dx_status_t st = TensorRead(src, staging.data(), bytes, kWhere)) return st;
      return TensorWrite(dst, staging.data(), bytes, kWhere);
    }
    // Views of one storage, or imports of the same memory, may overlap: then stage through a
    // buffer of our own, so the copy reads all of src before it writes any of dst (a memcpy of
    // overlapping ranges is undefined).
    const uintptr_t src_begin = reinterpret_cast<uintptr_t>(FirstByte(src->dl));
    const uintptr_t dst_begin = reinterpret_cast<uintptr_t>(FirstByte(dst->dl));
    const uintptr_t src_end = src_begin + SpanBytes(src->dl, elem);
    const uintptr_t dst_end = dst_begin + SpanBytes(dst->dl, elem);
    const bool overlap =
        dst->storage == src->storage || (src_begin < dst_end && dst_begin < src_end);
    if (HostAccessible(src) && !overlap) {
      // Stage through a compact host buffer only when src is not compact.
      if (IsCompact(src->dl)) return TensorWrite(dst, FirstByte(src->dl), bytes, kWhere);
      std::vector<char> staging(bytes);
      if (dx_status_t st = TensorRead(src, staging.data(), bytes, kWhere)) return st;
      return TensorWrite(dst, staging.data(), bytes, kWhere);
    }
    if (HostAccessible(dst) && IsCompact(dst->dl) && !overlap) {
      return TensorRead(src, FirstByte(dst->dl), bytes, kWhere);
    }
    const Storage* s = src->storage;
    const Storage* d = dst->storage;
    if (s->space && s->space == d->space && IsCompact(src->dl) && IsCompact(dst->dl) &&
        !overlap) {
      dx_error_t* e = s->space->desc.copy(s->space->desc.space_data, FirstByte(dst->dl),
                                          FirstByte(src->dl), bytes, DX_COPY_DEVICE_TO_DEVICE,
                                          nullptr);
      return e ? FailFromError(e, "dx_tensor_copy: ") : DX_OK;
    }
    std::vector<char> staging(bytes);
    if (dx_status_t st = TensorRead(src, staging.data(), bytes, kWhere)) return st;
    return TensorWrite(dst, staging.data(), bytes, kWhere);
  });
}

DX_EXPORT dx_error_t* dx_tensor_from_dlpack(dx_runtime_t* runtime,
                                            dx_dlpack_versioned_t* managed,
                                            dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    return ImportManaged(runtime, managed, out_tensor, "dx_tensor_from_dlpack");
  });
}

DX_EXPORT dx_error_t* dx_tensor_from_dlpack_legacy(dx_runtime_t* runtime,
                                                   DLManagedTensor* managed,
                                                   dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    return ImportManaged(runtime, managed, out_tensor, "dx_tensor_from_dlpack_legacy");
  });
}

DX_EXPORT dx_error_t* dx_tensor_to_dlpack(const dx_tensor_t* handle,
                                          dx_dlpack_versioned_t** out_managed) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_to_dlpack", "tensor", &tensor)) return st;
    DX_REQUIRE(out_managed != nullptr, "dx_tensor_to_dlpack: out_managed is null");
    if (tensor->remote) return RefuseRemoteMemory(*tensor, "dx_tensor_to_dlpack");
    auto m = std::make_unique<dx_dlpack_versioned_t>();
    std::memset(m.get(), 0, sizeof(dx_dlpack_versioned_t));
    m->version.major = 1;
    m->version.minor = 0;
    m->manager_ctx = MakeExport(tensor, &m->dl_tensor);
    m->deleter = DeleteVersioned;
    m->flags = tensor->storage->read_only ? DX_DLPACK_FLAG_READ_ONLY : 0;
    *out_managed = m.release();
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_tensor_to_dlpack_legacy(const dx_tensor_t* handle,
                                                 DLManagedTensor** out_managed) {
  return Guard([&]() -> dx_status_t {
    Tensor* tensor = nullptr;
    if (dx_status_t st = Resolve(handle, "dx_tensor_to_dlpack_legacy", "tensor", &tensor)) {
      return st;
    }
    DX_REQUIRE(out_managed != nullptr, "dx_tensor_to_dlpack_legacy: out_managed is null");
    if (tensor->remote) return RefuseRemoteMemory(*tensor, "dx_tensor_to_dlpack_legacy");
    if (tensor->storage->read_only) {
      // The legacy struct has no flags: its consumer could not know it must not write.
      return Fail(DX_UNSUPPORTED,
                  "dx_tensor_to_dlpack_legacy: the tensor is read-only, which a legacy "
                  "DLManagedTensor cannot say; export it with dx_tensor_to_dlpack()");
    }
    auto m = std::make_unique<DLManagedTensor>();
    std::memset(m.get(), 0, sizeof(DLManagedTensor));
    m->manager_ctx = MakeExport(tensor, &m->dl_tensor);
    m->deleter = DeleteLegacy;
    *out_managed = m.release();
    return DX_OK;
  });
}

}  // extern "C"
