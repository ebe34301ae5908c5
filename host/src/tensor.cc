// Tensors: storage in registered memory spaces, views, host <-> tensor copies, DLPack exchange.
#include <algorithm>
#include <cstdlib>

#include "internal.h"

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
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) {
      return Failf(DX_INVALID_ARGUMENT, "%s: dimension %d is negative (%lld)", where, d,
                   static_cast<long long>(shape[d]));
    }
    if (__builtin_mul_overflow(numel, shape[d], &numel)) {
      return Failf(DX_OUT_OF_RANGE, "%s: element count overflows", where);
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), elem_bytes, &bytes)) {
    return Failf(DX_OUT_OF_RANGE, "%s: byte size overflows", where);
  }
  *out_numel = numel;
  *out_bytes = bytes;
  return DX_OK;
}

void SetCompactStrides(dx_tensor_t* t) {
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


bool HostAccessible(const dx_tensor_t* t) {
  if (t->storage && t->storage->space) return t->storage->space->HostAccessible();
  int32_t dt = t->dl.device.device_type;
  return dt == kDLCPU || dt == kDLCUDAHost || dt == kDLROCMHost || dt == kDLCUDAManaged;
}

dx_status_t ImportCommon(dx_runtime_t* runtime, const DLTensor& dl, Storage* storage,
                         dx_tensor_t** out_tensor) {
  std::unique_ptr<dx_tensor_t> t(new (std::nothrow) dx_tensor_t());
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
  int64_t max_offset = 0;
  if (dl.strides != nullptr) {
    t->strides.assign(dl.strides, dl.strides + dl.ndim);
    for (int32_t d = 0; d < dl.ndim; ++d) {
      if (dl.strides[d] < 0) {
        return Fail(DX_UNSUPPORTED, "DLPack import: negative strides are not supported");
      }
      if (dl.shape[d] > 0) max_offset += dl.strides[d] * (dl.shape[d] - 1);
    }
    t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
    t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
    t->dl.ndim = dl.ndim;
  } else {
    SetCompactStrides(t.get());
    max_offset = numel > 0 ? numel - 1 : 0;
  }
  t->dl.data = dl.data;
  t->dl.byte_offset = dl.byte_offset;
  t->dl.device = dl.device;
  t->dl.dtype = dl.dtype;
  char* first = FirstByte(t->dl);
  storage->lo = first;
  storage->hi = numel > 0 ? first + (max_offset + 1) * DtypeBytes(dtype) : first;
  const MemorySpace* space = runtime->core->FindSpace(dl.device);
  t->device_index = space ? space->index : -1;
  *out_tensor = t.release();
  return DX_OK;
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

ExportContext* MakeExport(const dx_tensor_t* t, DLTensor* out) {
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
}  // namespace deepx::host

using namespace deepx::host;

#define DX_REQUIRE(cond, ...) \
  do {                        \
    if (!(cond)) return Failf(DX_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

extern "C" {

DX_EXPORT dx_status_t dx_tensor_create(dx_runtime_t* runtime, int32_t device_index,
                                       dx_dtype_t dtype, const int64_t* shape, int32_t ndim,
                                       dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(runtime != nullptr, "dx_tensor_create: runtime is null");
    DX_REQUIRE(out_tensor != nullptr, "dx_tensor_create: out_tensor is null");
    Core& core = *runtime->core;
    if (device_index < 0 || device_index >= static_cast<int32_t>(core.spaces.size())) {
      return Failf(DX_OUT_OF_RANGE, "dx_tensor_create: device index %d out of range (%zu devices)",
                   device_index, core.spaces.size());
    }
    if (!IsKnownDtype(dtype)) {
      return Fail(DX_UNSUPPORTED, "dx_tensor_create: unsupported dtype " + DtypeName(dtype));
    }
    int64_t numel = 0;
    uint64_t bytes = 0;
    if (dx_status_t st = CheckedNumel(shape, ndim, DtypeBytes(dtype), &numel, &bytes,
                                      "dx_tensor_create");
        st != DX_OK) {
      return st;
    }
    const MemorySpace& space = core.spaces[device_index];
    if (space.desc.capacity != 0 && bytes > space.desc.capacity) {
      return Failf(DX_OUT_OF_MEMORY, "dx_tensor_create: %llu bytes exceed the capacity of '%s'",
                   static_cast<unsigned long long>(bytes), space.name.c_str());
    }
    auto t = std::make_unique<dx_tensor_t>();
    t->shape.assign(shape, shape + ndim);
    SetCompactStrides(t.get());
    void* ptr = nullptr;
    if (bytes > 0) {
      dx_error_t* e = space.desc.alloc(space.desc.space_data, bytes, nullptr, &ptr);
      if (e != nullptr) {
        return FailFromError(e, "dx_tensor_create: allocation in '" + space.name + "' failed: ");
      }
      if (ptr == nullptr) {
        return Failf(DX_PLUGIN_ERROR, "dx_tensor_create: '%s' returned a null allocation",
                     space.name.c_str());
      }
    }
    auto* storage = new Storage();
    storage->core = runtime->core;
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
    *out_tensor = t.release();
    return DX_OK;
  });
}

DX_EXPORT dx_status_t dx_tensor_view(const dx_tensor_t* base, const int64_t* shape,
                                     const int64_t* strides, int32_t ndim, int64_t elem_offset,
                                     dx_tensor_t** out_tensor) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(base != nullptr, "dx_tensor_view: base is null");
    DX_REQUIRE(out_tensor != nullptr, "dx_tensor_view: out_tensor is null");
    uint64_t elem = DtypeBytes(PackDtype(base->dl.dtype));
    int64_t numel = 0;
    uint64_t bytes = 0;
    if (dx_status_t st = CheckedNumel(shape, ndim, elem, &numel, &bytes, "dx_tensor_view");
        st != DX_OK) {
      return st;
    }
    auto t = std::make_unique<dx_tensor_t>();
    t->shape.assign(shape, shape + ndim);
    if (strides != nullptr) {
      t->strides.assign(strides, strides + ndim);
      t->dl.shape = t->shape.empty() ? nullptr : t->shape.data();
      t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
      t->dl.ndim = ndim;
    } else {
      SetCompactStrides(t.get());
    }
    int64_t max_offset = 0;
    for (int32_t d = 0; d < ndim; ++d) {
      if (t->strides[d] < 0) return Fail(DX_INVALID_ARGUMENT, "dx_tensor_view: negative stride");
      int64_t reach = 0;
      if (shape[d] > 0 && (__builtin_mul_overflow(t->strides[d], shape[d] - 1, &reach) ||
                           __builtin_add_overflow(max_offset, reach, &max_offset))) {
        return Fail(DX_OUT_OF_RANGE, "dx_tensor_view: strides overflow");
      }
    }
    const char* first = FirstByte(base->dl) + elem_offset * static_cast<int64_t>(elem);
    const Storage* s = base->storage;
    if (numel > 0 &&
        (first < s->lo || first + (max_offset + 1) * static_cast<int64_t>(elem) > s->hi)) {
      return Fail(DX_OUT_OF_RANGE, "dx_tensor_view: the view reaches outside the storage");
    }
    t->dl.data = base->dl.data;
    t->dl.byte_offset = static_cast<uint64_t>(first - static_cast<const char*>(base->dl.data));
    t->dl.device = base->dl.device;
    t->dl.dtype = base->dl.dtype;
    t->device_index = base->device_index;
    t->storage = base->storage;
    t->storage->Retain();
    *out_tensor = t.release();
    return DX_OK;
  });
}

DX_EXPORT dx_status_t dx_tensor_destroy(dx_tensor_t* tensor) {
  return Guard([&]() -> dx_status_t {
    delete tensor;
    return DX_OK;
  });
}

DX_EXPORT dx_status_t dx_tensor_dltensor(const dx_tensor_t* tensor, const DLTensor** out) {
  DX_REQUIRE(tensor != nullptr && out != nullptr, "dx_tensor_dltensor: null argument");
  *out = &tensor->dl;
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_ndim(const dx_tensor_t* tensor, int32_t* out_ndim) {
  DX_REQUIRE(tensor != nullptr && out_ndim != nullptr, "dx_tensor_ndim: null argument");
  *out_ndim = tensor->dl.ndim;
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_shape(const dx_tensor_t* tensor, int64_t* out_shape,
                                      int32_t capacity) {
  DX_REQUIRE(tensor != nullptr, "dx_tensor_shape: tensor is null");
  DX_REQUIRE(out_shape != nullptr || tensor->dl.ndim == 0, "dx_tensor_shape: out_shape is null");
  if (capacity < tensor->dl.ndim) {
    return Failf(DX_OUT_OF_RANGE, "dx_tensor_shape: capacity %d < ndim %d", capacity,
                 tensor->dl.ndim);
  }
  std::copy(tensor->shape.begin(), tensor->shape.end(), out_shape);
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_dtype(const dx_tensor_t* tensor, dx_dtype_t* out_dtype) {
  DX_REQUIRE(tensor != nullptr && out_dtype != nullptr, "dx_tensor_dtype: null argument");
  *out_dtype = PackDtype(tensor->dl.dtype);
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_device(const dx_tensor_t* tensor, int32_t* out_device_index) {
  DX_REQUIRE(tensor != nullptr && out_device_index != nullptr, "dx_tensor_device: null argument");
  *out_device_index = tensor->device_index;
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_numel(const dx_tensor_t* tensor, int64_t* out_numel) {
  DX_REQUIRE(tensor != nullptr && out_numel != nullptr, "dx_tensor_numel: null argument");
  *out_numel = Numel(tensor->dl);
  return DX_OK;
}

DX_EXPORT dx_status_t dx_tensor_write(dx_tensor_t* tensor, const void* data, uint64_t size) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(tensor != nullptr, "dx_tensor_write: tensor is null");
    uint64_t elem = DtypeBytes(PackDtype(tensor->dl.dtype));
    uint64_t want = static_cast<uint64_t>(Numel(tensor->dl)) * elem;
    if (size != want) {
      return Failf(DX_INVALID_ARGUMENT, "dx_tensor_write: size %llu, the tensor holds %llu bytes",
                   static_cast<unsigned long long>(size), static_cast<unsigned long long>(want));
    }
    if (want == 0) return DX_OK;
    DX_REQUIRE(data != nullptr, "dx_tensor_write: data is null");
    if (tensor->storage->read_only) {
      return Fail(DX_INVALID_ARGUMENT, "dx_tensor_write: the tensor is a read-only import");
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
    const Storage* s = tensor->storage;
    if (s->space == nullptr) {
      return Fail(DX_UNSUPPORTED,
                  "dx_tensor_write: the tensor is an import of a device no loaded plugin serves");
    }
    if (IsCompact(tensor->dl)) {
      dx_error_t* e = s->space->desc.copy(s->space->desc.space_data, FirstByte(tensor->dl), data,
                                          want, DX_COPY_HOST_TO_DEVICE, nullptr);
      return e ? FailFromError(e, "dx_tensor_write: ") : DX_OK;
    }
    // A strided device view: one copy per run of consecutive bytes, so bytes between the
    // view's elements (another tensor's, perhaps in use) are never touched.
    const char* src = static_cast<const char*>(data);
    dx_error_t* e = nullptr;
    ForEachRun(tensor->dl, elem, [&](uint64_t off, uint64_t bytes) {
      if (e != nullptr) return;
      e = s->space->desc.copy(s->space->desc.space_data, FirstByte(tensor->dl) + off, src, bytes,
                              DX_COPY_HOST_TO_DEVICE, nullptr);
      src += bytes;
    });
    return e ? FailFromError(e, "dx_tensor_write: ") : DX_OK;
  });
}

DX_EXPORT dx_status_t dx_tensor_read(const dx_tensor_t* tensor, void* data, uint64_t size) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(tensor != nullptr, "dx_tensor_read: tensor is null");
    uint64_t elem = DtypeBytes(PackDtype(tensor->dl.dtype));
    uint64_t want = static_cast<uint64_t>(Numel(tensor->dl)) * elem;
    if (size != want) {
      return Failf(DX_INVALID_ARGUMENT, "dx_tensor_read: size %llu, the tensor holds %llu bytes",
                   static_cast<unsigned long long>(size), static_cast<unsigned long long>(want));
    }
    if (want == 0) return DX_OK;
    DX_REQUIRE(data != nullptr, "dx_tensor_read: data is null");
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
    const Storage* s = tensor->storage;
    if (s->space == nullptr) {
      return Fail(DX_UNSUPPORTED,
                  "dx_tensor_read: the tensor is an import of a device no loaded plugin serves");
    }
    if (IsCompact(tensor->dl)) {
      dx_error_t* e = s->space->desc.copy(s->space->desc.space_data, data, FirstByte(tensor->dl),
                                          want, DX_COPY_DEVICE_TO_HOST, nullptr);
      return e ? FailFromError(e, "dx_tensor_read: ") : DX_OK;
    }
    // A strided device view: one copy of the byte span its elements lie in (reading the bytes
    // between them does no harm and costs one transfer instead of one per run), then a gather.
    const uint64_t span = SpanBytes(tensor->dl, elem);
    std::vector<char> staging(span);
    dx_error_t* e = s->space->desc.copy(s->space->desc.space_data, staging.data(),
                                        FirstByte(tensor->dl), span, DX_COPY_DEVICE_TO_HOST,
                                        nullptr);
    if (e != nullptr) return FailFromError(e, "dx_tensor_read: ");
    char* dst = static_cast<char*>(data);
    ForEachElement(tensor->dl, elem, [&](uint64_t off) {
      std::memcpy(dst, staging.data() + off, elem);
      dst += elem;
    });
    return DX_OK;
  });
}

DX_EXPORT dx_status_t dx_tensor_copy(dx_runtime_t* runtime, dx_tensor_t* dst,
                                     const dx_tensor_t* src) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(runtime != nullptr && dst != nullptr && src != nullptr,
               "dx_tensor_copy: null argument");
    if (PackDtype(dst->dl.dtype) != PackDtype(src->dl.dtype)) {
      return Fail(DX_SHAPE_MISMATCH, "dx_tensor_copy: dtypes differ (" +
                                         DtypeName(PackDtype(src->dl.dtype)) + " -> " +
                                         DtypeName(PackDtype(dst->dl.dtype)) + ")");
    }
    if (dst->shape != src->shape) {
      return Fail(DX_SHAPE_MISMATCH, "dx_tensor_copy: shapes differ");
    }
    uint64_t elem = DtypeBytes(PackDtype(src->dl.dtype));
    uint64_t bytes = static_cast<uint64_t>(Numel(src->dl)) * elem;
    if (bytes == 0) return DX_OK;
    if (HostAccessible(src)) {
      // Stage through a compact host buffer only when src is not compact.
      if (IsCompact(src->dl)) return dx_tensor_write(dst, FirstByte(src->dl), bytes);
      std::vector<char> staging(bytes);
      if (dx_status_t st = dx_tensor_read(src, staging.data(), bytes); st != DX_OK) return st;
      return dx_tensor_write(dst, staging.data(), bytes);
    }
    if (HostAccessible(dst) && IsCompact(dst->dl)) {
      return dx_tensor_read(src, FirstByte(dst->dl), bytes);
    }
    const Storage* s = src->storage;
    const Storage* d = dst->storage;
    if (s->space && s->space == d->space && IsCompact(src->dl) && IsCompact(dst->dl)) {
      dx_error_t* e = s->space->desc.copy(s->space->desc.space_data, FirstByte(dst->dl),
                                          FirstByte(src->dl), bytes, DX_COPY_DEVICE_TO_DEVICE,
                                          nullptr);
      return e ? FailFromError(e, "dx_tensor_copy: ") : DX_OK;
    }
    std::vector<char> staging(bytes);
    if (dx_status_t st = dx_tensor_read(src, staging.data(), bytes); st != DX_OK) return st;
    return dx_tensor_write(dst, staging.data(), bytes);
  });
}

DX_EXPORT dx_status_t dx_tensor_from_dlpack(dx_runtime_t* runtime,
                                            dx_dlpack_versioned_t* managed,
                                            dx_tensor_t** out_tensor) {
  auto refuse = [&](dx_status_t code, const char* msg) {
    if (managed && managed->deleter) managed->deleter(managed);
    return Fail(code, msg);
  };
  if (managed == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_tensor_from_dlpack: managed is null");
  if (runtime == nullptr || out_tensor == nullptr) {
    return refuse(DX_INVALID_ARGUMENT, "dx_tensor_from_dlpack: runtime or out_tensor is null");
  }
  if (managed->version.major != 1) {
    return refuse(DX_VERSION_MISMATCH,
                  "dx_tensor_from_dlpack: DLPack major version is not 1; the tensor was released");
  }
  Storage* storage = nullptr;
  try {
    storage = new Storage();
  } catch (...) {
    return refuse(DX_OUT_OF_MEMORY, "dx_tensor_from_dlpack: out of memory");
  }
  storage->imported = managed;
  storage->read_only = (managed->flags & DX_DLPACK_FLAG_READ_ONLY) != 0;
  // From here the storage owns `managed`: any failure releases it through the deleter.
  return Guard([&]() -> dx_status_t {
    return ImportCommon(runtime, managed->dl_tensor, storage, out_tensor);
  });
}

DX_EXPORT dx_status_t dx_tensor_from_dlpack_legacy(dx_runtime_t* runtime,
                                                   DLManagedTensor* managed,
                                                   dx_tensor_t** out_tensor) {
  if (managed == nullptr) {
    return Fail(DX_INVALID_ARGUMENT, "dx_tensor_from_dlpack_legacy: managed is null");
  }
  if (runtime == nullptr || out_tensor == nullptr) {
    if (managed->deleter) managed->deleter(managed);
    return Fail(DX_INVALID_ARGUMENT, "dx_tensor_from_dlpack_legacy: runtime or out is null");
  }
  Storage* storage = nullptr;
  try {
    storage = new Storage();
  } catch (...) {
    if (managed->deleter) managed->deleter(managed);
    return Fail(DX_OUT_OF_MEMORY, "dx_tensor_from_dlpack_legacy: out of memory");
  }
  storage->imported_legacy = managed;
  return Guard([&]() -> dx_status_t {
    return ImportCommon(runtime, managed->dl_tensor, storage, out_tensor);
  });
}

DX_EXPORT dx_status_t dx_tensor_to_dlpack(const dx_tensor_t* tensor,
                                          dx_dlpack_versioned_t** out_managed) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(tensor != nullptr && out_managed != nullptr, "dx_tensor_to_dlpack: null argument");
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

DX_EXPORT dx_status_t dx_tensor_to_dlpack_legacy(const dx_tensor_t* tensor,
                                                 DLManagedTensor** out_managed) {
  return Guard([&]() -> dx_status_t {
    DX_REQUIRE(tensor != nullptr && out_managed != nullptr,
               "dx_tensor_to_dlpack_legacy: null argument");
    auto m = std::make_unique<DLManagedTensor>();
    std::memset(m.get(), 0, sizeof(DLManagedTensor));
    m->manager_ctx = MakeExport(tensor, &m->dl_tensor);
    m->deleter = DeleteLegacy;
    *out_managed = m.release();
    return DX_OK;
  });
}

}  // extern "C"
