// The model of tensors over one storage that fuzz_tensor_view and fuzz_dlpack_import check the
// host against: views (what must be accepted or refused, and where an accepted one lies), and
// the bytes reads must return and writes and copies must leave.
#ifndef DEEPX_HOST_FUZZ_TENSOR_MODEL_H_
#define DEEPX_HOST_FUZZ_TENSOR_MODEL_H_

#include <memory>

#include "fuzz_common.h"

namespace deepx_fuzz {

constexpr int64_t kMaxElems = int64_t{1} << 14;  // reads/writes/copies only below this
constexpr size_t kMaxTensors = 24;

struct Rec {
  dx_tensor_t* handle;
  i128 lo,
      hi;  // the storage range the host must keep views of this tensor in (from `Shadow::base`)
  // An import of memory in a DX_MEMORY_DEVICE space (a DLPack round trip of a device tensor):
  // the host may refuse to read or write it with DX_UNSUPPORTED (README.md, "What the fuzzers
  // accept on purpose").
  bool device_import = false;
  // Writes must be refused (a read-only DLPack import, or a view of one).
  bool read_only = false;
};

// What the host must decide about a layout (shape, strides in elements or null for compact,
// ndim), computed exactly; products and sums are clamped at 2^100.
//   valid:      false only where the host must refuse: ndim outside 0..32, a negative size, a
//               negative stride of a dimension longer than 1 (host.h: strides are non-negative;
//               a size-1 dimension's stride is never applied, so the host lets it be anything),
//               even in an empty layout (the DLPack import refuses those, so a view that has one
//               could not be exported and imported back); for a non-empty layout also an
//               element count, byte size or reach past int64.
//   numel:      the element count; max_offset: the offset in elements of the last element.
struct Layout {
  bool valid = false;
  const char* why = "";  // what makes it invalid
  i128 numel = 0;
  i128 max_offset = 0;
};

inline Layout ModelLayout(const int64_t* shape, const int64_t* strides, int32_t ndim, i128 elem) {
  constexpr i128 kI64Max = std::numeric_limits<int64_t>::max();
  Layout l;
  l.why = "ndim outside 0..32";
  if (ndim < 0 || ndim > 32) return l;
  bool empty = false;
  for (int32_t d = 0; d < ndim; ++d) {
    l.why = "a negative size";
    if (shape[d] < 0) return l;
    l.why = "a negative stride of a dimension longer than 1";
    if (shape[d] > 1 && strides != nullptr && strides[d] < 0) return l;
    if (shape[d] == 0) empty = true;
  }
  l.why = "";
  l.valid = true;
  if (empty) return l;
  i128 compact = 1;
  l.numel = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    const i128 n = shape[d];
    const i128 st = strides ? static_cast<i128>(strides[d]) : compact;
    l.numel = SatMul(l.numel, n);
    if (n > 1) l.max_offset = SatAdd(l.max_offset, SatMul(st, n - 1));
    compact = SatMul(compact, n);
  }
  if (l.numel * elem > kI64Max || l.max_offset > kI64Max) {
    l.valid = false;
    l.why = "an element count, byte size or reach past int64";
  }
  return l;
}

inline const DLTensor& Dl(dx_tensor_t* t) {
  const DLTensor* dl = nullptr;
  FUZZ_OK(dx_tensor_dltensor(t, &dl));
  FUZZ_CHECK(dl != nullptr, "null DLTensor");
  return *dl;
}

inline int64_t Numel(const DLTensor& t) {
  i128 n = ExtentOf(t).numel;
  return n > kMaxElems ? kMaxElems + 1 : static_cast<int64_t>(n);
}

// Byte position of `t`'s data pointer relative to the storage model's base.
inline i128 Rel(const DLTensor& t, const Shadow& s) {
  return static_cast<i128>(reinterpret_cast<intptr_t>(t.data)) -
         static_cast<i128>(reinterpret_cast<intptr_t>(s.base));
}

// What the elements of `t` hold according to the model, in row-major order.
inline std::vector<uint8_t> ModelRead(const DLTensor& t, const Shadow& s) {
  const size_t elem = ElemBytes(t.dtype);
  const i128 rel = Rel(t, s);
  std::vector<uint8_t> out;
  ForEachElement(t, [&](int64_t off) {
    const i128 at = rel + off;
    FUZZ_CHECK(at >= 0 && at + static_cast<i128>(elem) <= static_cast<i128>(s.bytes.size()),
               "model: element outside the storage");
    out.insert(out.end(), s.bytes.begin() + static_cast<size_t>(at),
               s.bytes.begin() + static_cast<size_t>(at) + elem);
  });
  return out;
}

inline void ModelWrite(const DLTensor& t, Shadow& s, const std::vector<uint8_t>& data) {
  const size_t elem = ElemBytes(t.dtype);
  const i128 rel = Rel(t, s);
  size_t i = 0;
  ForEachElement(t, [&](int64_t off) {
    const size_t at = static_cast<size_t>(rel + off);
    std::memcpy(s.bytes.data() + at, data.data() + i, elem);
    i += elem;
  });
}

// Reads `h` and compares with the model. `may_be_unsupported`: DX_UNSUPPORTED is an answer too.
inline void CheckRead(dx_tensor_t* h, const Shadow& s, const char* what,
                      bool may_be_unsupported = false) {
  const DLTensor& t = Dl(h);
  const int64_t n = Numel(t);
  if (n > kMaxElems) return;
  const size_t bytes = static_cast<size_t>(n) * ElemBytes(t.dtype);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[bytes ? bytes : 1]);
  std::string message;
  const dx_status_t st = TakeWithMessage(dx_tensor_read(h, buf.get(), bytes), &message);
  if (st == DX_UNSUPPORTED && may_be_unsupported) return;
  FUZZ_CHECK(st == DX_OK, "%s: dx_tensor_read returned %s: %s", what, dx_status_string(st),
             message.c_str());
  if (!s.valid) return;
  std::vector<uint8_t> want = ModelRead(t, s);
  FUZZ_CHECK(
      want.size() == bytes && (bytes == 0 || std::memcmp(want.data(), buf.get(), bytes) == 0),
      "%s: dx_tensor_read returned other bytes than the storage holds (%zu bytes)", what, bytes);
}

// The checks on a view the host made: its DLTensor, and that it lies inside [lo, hi).
inline void CheckAccepted(const DLTensor& v, const DLTensor& base, const Shadow& s,
                          const int64_t* shape, const int64_t* strides, int32_t ndim, i128 first,
                          i128 lo, i128 hi) {
  FUZZ_CHECK(v.ndim == ndim, "view ndim %d, asked %d", v.ndim, ndim);
  for (int32_t d = 0; d < ndim; ++d) {
    FUZZ_CHECK(v.shape[d] == shape[d], "view shape[%d] %lld, asked %lld", d,
               static_cast<long long>(v.shape[d]), static_cast<long long>(shape[d]));
    if (strides != nullptr && v.strides != nullptr) {
      FUZZ_CHECK(v.strides[d] == strides[d] || shape[d] == 1, "view strides[%d] differ", d);
    }
  }
  FUZZ_CHECK(v.dtype.code == base.dtype.code && v.dtype.bits == base.dtype.bits &&
                 v.dtype.lanes == base.dtype.lanes,
             "view dtype differs from its base");
  FUZZ_CHECK(DeviceType(v.device) == DeviceType(base.device), "view device differs from its base");
  const Extent e = ExtentOf(v);
  const i128 vfirst = Rel(v, s) + e.first;
  const i128 vend = Rel(v, s) + e.end;
  FUZZ_CHECK(vfirst == first, "the view starts at byte %lld of the storage, asked %lld",
             static_cast<long long>(vfirst), static_cast<long long>(first));
  if (e.numel > 0) {
    FUZZ_CHECK(vfirst >= lo && vend <= hi,
               "an accepted view reaches outside its storage: bytes [%lld, %lld) of [%lld, %lld)",
               static_cast<long long>(vfirst), static_cast<long long>(vend),
               static_cast<long long>(lo), static_cast<long long>(hi));
  } else {
    FUZZ_CHECK(vfirst >= lo && vfirst <= hi,
               "an accepted empty view starts outside its storage: byte %lld of [%lld, %lld]",
               static_cast<long long>(vfirst), static_cast<long long>(lo),
               static_cast<long long>(hi));
  }
}

inline void DoView(Reader& r, std::vector<Rec>& recs, Shadow& s) {
  const Rec base = recs[r.U8() % recs.size()];
  const int32_t ndim = static_cast<int8_t>(r.U8());
  const bool with_strides = (r.U8() & 1) != 0;
  const size_t entries = static_cast<size_t>(std::clamp<int32_t>(ndim, 0, 64));
  // Exactly `entries` values on the heap: a host that read past ndim would overflow them.
  std::unique_ptr<int64_t[]> shape(entries ? new int64_t[entries] : nullptr);
  std::unique_ptr<int64_t[]> strides(with_strides && entries ? new int64_t[entries] : nullptr);
  for (size_t d = 0; d < entries; ++d) shape[d] = r.Int();
  if (with_strides) {
    for (size_t d = 0; d < entries; ++d) strides[d] = r.Int();
  }
  const int64_t elem_offset = r.Int();

  const DLTensor& b = Dl(base.handle);
  const i128 elem = static_cast<i128>(ElemBytes(b.dtype));
  const Layout layout =
      ModelLayout(shape.get(), with_strides ? strides.get() : nullptr, ndim, elem);
  const bool valid = layout.valid;
  const i128 numel = layout.numel, max_offset = layout.max_offset;
  const i128 first =
      Rel(b, s) + static_cast<i128>(b.byte_offset) + static_cast<i128>(elem_offset) * elem;
  const bool inside = first >= base.lo && first + (max_offset + 1) * elem <= base.hi;
  const bool must_accept = valid && numel > 0 && inside;

  dx_tensor_t* v = nullptr;
  std::string message;
  const dx_status_t st =
      TakeWithMessage(dx_tensor_view(base.handle, shape.get(),
                                     with_strides ? strides.get() : nullptr, ndim, elem_offset, &v),
                      &message);
  if (st != DX_OK) {
    FUZZ_CHECK(v == nullptr, "a refused view set out_tensor");
    FUZZ_CHECK(!must_accept,
               "a valid view inside its storage was refused (%s: %s): ndim %d, numel %lld, "
               "elem_offset %lld",
               dx_status_string(st), message.c_str(), ndim, static_cast<long long>(numel),
               static_cast<long long>(elem_offset));
    return;
  }
  FUZZ_CHECK(valid, "an invalid view was accepted: %s (ndim %d, numel %lld)", layout.why, ndim,
             static_cast<long long>(numel));
  CheckAccepted(Dl(v), b, s, shape.get(), with_strides ? strides.get() : nullptr, ndim, first,
                base.lo, base.hi);
  if (recs.size() >= kMaxTensors) {
    FUZZ_OK(dx_tensor_destroy(v));
    return;
  }
  recs.push_back(Rec{v, base.lo, base.hi, base.device_import, base.read_only});
}

inline std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> p(bytes);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return p;
}

struct Export {
  dx_dlpack_versioned_t* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;
  void Release() {
    if (versioned && versioned->deleter) versioned->deleter(versioned);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
    versioned = nullptr;
    legacy = nullptr;
  }
};

}  // namespace deepx_fuzz

#endif  // DEEPX_HOST_FUZZ_TENSOR_MODEL_H_
