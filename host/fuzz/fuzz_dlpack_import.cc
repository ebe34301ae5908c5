// fuzz_dlpack_import: dx_tensor_from_dlpack() and dx_tensor_from_dlpack_legacy() on
// DLManagedTensor / dx_dlpack_versioned_t structs built from the input (version, flags, ndim,
// shape, strides, byte_offset, dtype, device, data null or a fixed heap buffer, deleter null or
// counting), then reads, writes, views, copies, exports and re-imports of what was accepted.
//
// Checks, besides the sanitizers:
//   - the deleter runs exactly once in every case: before the import returns when it is
//     refused, and only when the last tensor and export of the storage are gone when it is
//     accepted (the deleter frees the struct, so a later use of it is a use-after-free);
//   - a refused import leaves *out_tensor alone; an accepted one describes what was given;
//   - what must be refused is: a versioned major other than 1, ndim outside 0..32, a negative
//     size or stride, an unknown dtype, null data with elements, an element count that
//     overflows, and memory that cannot be addressed (first byte + extent past 2^64);
//   - views of the import stay inside the memory it describes (the host cannot know more);
//     reads and writes of an import that lies inside the buffer touch exactly its elements;
//     read-only imports refuse writes.
//
// Input (fuzz_common.h for Int()):
//   U8 kind: bit 0 legacy, bit 1 null deleter, bit 2 strides given, bit 3 null data,
//            bit 4 DX_DLPACK_FLAG_READ_ONLY, bits 5-7 device (0-3 CPU, 4 ExtDev, 5 CUDA,
//            6 CUDAHost, 7 an Int() device type, modulo 32)
//   Int major - 1, Int minor, Int more flags (shifted past the two defined bits)
//   Int ndim, ndim x Int shape (at most 64 read), [ndim x Int strides], Int byte_offset
//   U8 dtype: below 0xf0 kDtypes[% 10], else U8 code, U8 bits, U8 U8 lanes
//   U8 device id (signed)
//   then up to 24 operations, U8 opcode (% 8) and operands:
//     0 read U8 t   1 write U8 t, U8 pattern   2 view (as fuzz_tensor_view)
//     3 export U8 t, U8 legacy   4 reimport U8 export   5 destroy U8 t
//     6 release U8 export   7 copy U8 dst, U8 src
#include "tensor_model.h"

using namespace deepx_fuzz;

namespace {

constexpr size_t kBufferBytes = 256;

dx_runtime_t* g_rt = nullptr;
int g_deleter_calls = 0;

struct Ctx {
  int64_t* shape;
  int64_t* strides;
};

void FreeCtx(void* p) {
  auto* c = static_cast<Ctx*>(p);
  delete[] c->shape;
  delete[] c->strides;
  delete c;
}

void DeleteVersioned(dx_dlpack_versioned_t* m) {
  ++g_deleter_calls;
  FreeCtx(m->manager_ctx);
  delete m;
}

void DeleteLegacy(DLManagedTensor* m) {
  ++g_deleter_calls;
  FreeCtx(m->manager_ctx);
  delete m;
}

// The device types whose memory the host reads and writes directly (tensor.cc).
bool HostReadable(int32_t device_type) {
  return device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost ||
         device_type == kDLCUDAManaged;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* plugin = std::getenv("DEEPX_FUZZ_PLUGIN");
  g_rt = MakeRuntime(plugin && *plugin ? plugin : DEEPX_FUZZ_PLUGIN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const uint8_t kind = r.U8();
  const bool legacy = kind & 1;
  const bool null_deleter = kind & 2;
  const bool with_strides = kind & 4;
  const bool null_data = kind & 8;
  const bool read_only = !legacy && (kind & 16);
  int32_t device_type = kDLCPU;
  switch (kind >> 5) {
    case 4:
      device_type = kDLExtDev;
      break;
    case 5:
      device_type = kDLCUDA;
      break;
    case 6:
      device_type = kDLCUDAHost;
      break;
    // 0..31: the device types of DLPack 1.x reach past the 0.6 header's enum (kDLOneAPI 14,
    // kDLWebGPU 15, kDLHexagon 16, kDLMAIA 17, ...), and a producer may hand them over.
    case 7:
      device_type = static_cast<int32_t>(r.Int() & 31);
      break;
    default:
      break;
  }
  const uint32_t major = static_cast<uint32_t>(static_cast<uint64_t>(r.Int()) + 1);
  const uint32_t minor = static_cast<uint32_t>(r.Int());
  const uint64_t flags =
      (static_cast<uint64_t>(r.Int()) << 2) | (read_only ? DX_DLPACK_FLAG_READ_ONLY : 0);
  const int32_t ndim = static_cast<int32_t>(r.Int());
  const size_t entries = static_cast<size_t>(std::clamp<int64_t>(ndim, 0, 64));
  auto* ctx = new Ctx{entries ? new int64_t[entries] : nullptr,
                      with_strides && entries ? new int64_t[entries] : nullptr};
  for (size_t d = 0; d < entries; ++d) ctx->shape[d] = r.Int();
  if (ctx->strides) {
    for (size_t d = 0; d < entries; ++d) ctx->strides[d] = r.Int();
  }
  const uint64_t byte_offset = static_cast<uint64_t>(r.Int());
  DLDataType dtype;
  const uint8_t dsel = r.U8();
  if (dsel < 0xf0) {
    const dx_dtype_t d = kDtypes[dsel % 10];
    dtype.code = static_cast<uint8_t>(d & 0xff);
    dtype.bits = static_cast<uint8_t>((d >> 8) & 0xff);
    dtype.lanes = static_cast<uint16_t>(d >> 16);
  } else {
    dtype.code = r.U8();
    dtype.bits = r.U8();
    dtype.lanes = static_cast<uint16_t>(r.U8() | (r.U8() << 8));
  }
  const int32_t device_id = static_cast<int8_t>(r.U8());

  std::unique_ptr<uint8_t[]> buffer(new uint8_t[kBufferBytes]);
  Shadow shadow;
  shadow.base = buffer.get();
  shadow.bytes = Pattern(kBufferBytes, 0x5a);
  std::memcpy(buffer.get(), shadow.bytes.data(), kBufferBytes);

  DLTensor dl;
  std::memset(&dl, 0, sizeof dl);
  dl.data = null_data ? nullptr : buffer.get();
  // Stored as the int32 it is on the wire: a value past the 0.6 header's enumerators cannot be
  // assigned through the C++ enum type without undefined behaviour (on this side).
  static_assert(sizeof dl.device.device_type == sizeof(int32_t), "DLDeviceType is 32-bit");
  std::memcpy(&dl.device.device_type, &device_type, sizeof device_type);
  dl.device.device_id = device_id;
  dl.ndim = ndim;
  dl.dtype = dtype;
  dl.shape = ctx->shape;
  dl.strides = ctx->strides;
  dl.byte_offset = byte_offset;

  dx_dlpack_versioned_t* mv = nullptr;
  DLManagedTensor* ml = nullptr;
  if (legacy) {
    ml = new DLManagedTensor;
    std::memset(ml, 0, sizeof *ml);
    ml->dl_tensor = dl;
    ml->manager_ctx = ctx;
    ml->deleter = null_deleter ? nullptr : DeleteLegacy;
  } else {
    mv = new dx_dlpack_versioned_t;
    std::memset(mv, 0, sizeof *mv);
    mv->version.major = major;
    mv->version.minor = minor;
    mv->flags = flags;
    mv->dl_tensor = dl;
    mv->manager_ctx = ctx;
    mv->deleter = null_deleter ? nullptr : DeleteVersioned;
  }
  // With a null deleter the struct stays ours: freed once every tensor and export is gone.
  auto free_unowned = [&]() {
    if (!null_deleter) return;
    FreeCtx(ctx);
    delete mv;
    delete ml;
  };

  // What the host must refuse, computed exactly.
  const dx_dtype_t packed = DX_DTYPE(dtype.code, dtype.bits, dtype.lanes);
  bool known_dtype = false;
  for (dx_dtype_t k : kDtypes) known_dtype = known_dtype || k == packed;
  bool must_refuse = (!legacy && major != 1) || !known_dtype;
  Extent e;
  if (!must_refuse) {
    const Layout layout =
        ModelLayout(ctx->shape, ctx->strides, ndim, static_cast<i128>(ElemBytes(dtype)));
    must_refuse = !layout.valid;
    if (!must_refuse) {
      e = ExtentOf(dl);
      const i128 address = static_cast<i128>(reinterpret_cast<uintptr_t>(dl.data));
      must_refuse = layout.numel > 0 && (dl.data == nullptr || address + e.end > (i128{1} << 64));
    }
  }

  g_deleter_calls = 0;
  dx_tensor_t* const kUntouched = reinterpret_cast<dx_tensor_t*>(uintptr_t{0x5eed});
  dx_tensor_t* imported = kUntouched;
  std::string message;
  const dx_status_t st =
      legacy ? TakeWithMessage(dx_tensor_from_dlpack_legacy(g_rt, ml, &imported), &message)
             : TakeWithMessage(dx_tensor_from_dlpack(g_rt, mv, &imported), &message);
  if (st != DX_OK) {
    FUZZ_CHECK(imported == kUntouched, "a refused import wrote *out_tensor");
    FUZZ_CHECK(g_deleter_calls == (null_deleter ? 0 : 1),
               "a refused import called the deleter %d times (%s: %s)", g_deleter_calls,
               dx_status_string(st), message.c_str());
    free_unowned();
    return 0;
  }
  FUZZ_CHECK(!must_refuse,
             "an import that must be refused was accepted: major %u, ndim %d, dtype 0x%08x, "
             "byte_offset %llu, data %s",
             major, ndim, packed, static_cast<unsigned long long>(byte_offset),
             dl.data ? "set" : "null");
  FUZZ_CHECK(g_deleter_calls == 0, "an accepted import called the deleter");
  {
    const DLTensor& t = Dl(imported);
    // Null data (an empty tensor) has no memory for an offset to point into: the host may keep
    // the offset or make it 0.
    FUZZ_CHECK(t.ndim == ndim && t.data == dl.data &&
                   (t.byte_offset == byte_offset || (dl.data == nullptr && t.byte_offset == 0)) &&
                   DeviceType(t.device) == DeviceType(dl.device) && t.dtype.code == dtype.code &&
                   t.dtype.bits == dtype.bits,
               "the imported tensor is not what was given");
    for (int32_t d = 0; d < ndim; ++d) {
      FUZZ_CHECK(t.shape[d] == ctx->shape[d], "imported shape[%d] differs", d);
    }
    e = ExtentOf(t);
  }

  // The memory the import describes, relative to the buffer, and whether it lies inside it.
  const i128 at = static_cast<i128>(reinterpret_cast<intptr_t>(dl.data)) -
                  static_cast<i128>(reinterpret_cast<intptr_t>(buffer.get()));
  const i128 lo = at + e.first, hi = at + e.end;
  const bool in_buffer = dl.data != nullptr && lo >= 0 && hi <= static_cast<i128>(kBufferBytes);
  const bool host = HostReadable(device_type);
  // Memory of another device: the host refuses to read or write it with DX_UNSUPPORTED when no
  // plugin serves the device (and, today, even when one does: README.md, "What the fuzzers
  // accept on purpose"), or goes through the space's copy.
  const bool may_be_unsupported = !host;
  std::vector<Rec> recs{Rec{imported, lo, hi, may_be_unsupported, read_only}};
  std::vector<Export> exports;
  // A tensor may be read, written or copied by this fuzzer only if everything it reaches lies in
  // the buffer (views are checked to stay inside the import's range, so this holds for them too).
  const bool touchable = in_buffer;

  auto check_alive = [&](const char* after) {
    if (!recs.empty() || !exports.empty()) {
      FUZZ_CHECK(g_deleter_calls == 0,
                 "after %s the deleter ran while %zu tensors and %zu "
                 "exports still use the import",
                 after, recs.size(), exports.size());
    }
  };

  for (int op = 0; op < 24 && !r.empty() && (!recs.empty() || !exports.empty()); ++op) {
    const uint8_t code = r.U8() % 8;
    if (recs.empty() && code != 6) continue;
    switch (code) {
      case 0: {
        dx_tensor_t* h = recs[r.U8() % recs.size()].handle;
        if (touchable) CheckRead(h, shadow, "read of an import", may_be_unsupported);
        break;
      }
      case 1: {
        const Rec& rec = recs[r.U8() % recs.size()];
        dx_tensor_t* h = rec.handle;
        const uint8_t seed = r.U8();
        if (!touchable) break;
        const DLTensor& t = Dl(h);
        const int64_t n = Numel(t);
        if (n > kMaxElems) break;
        const size_t bytes = static_cast<size_t>(n) * ElemBytes(t.dtype);
        std::vector<uint8_t> p = Pattern(bytes, seed);
        const dx_status_t ws = Take(dx_tensor_write(h, p.data(), bytes));
        if (ws == DX_UNSUPPORTED && may_be_unsupported && !rec.read_only) break;
        if (rec.read_only && bytes > 0) {
          FUZZ_CHECK(ws == DX_INVALID_ARGUMENT, "a write into a read-only import returned %s",
                     dx_status_string(ws));
        } else {
          FUZZ_CHECK(ws == DX_OK, "a write into an import returned %s", dx_status_string(ws));
          ModelWrite(t, shadow, p);
        }
        shadow.Check("a write into an import");
        break;
      }
      case 2:
        DoView(r, recs, shadow);
        break;
      case 3: {
        const Rec& rec = recs[r.U8() % recs.size()];
        dx_tensor_t* h = rec.handle;
        const bool as_legacy = r.U8() & 1;
        const DLTensor& t = Dl(h);
        Export x;
        const DLTensor* out;
        if (as_legacy) {
          // A legacy DLManagedTensor cannot say "read-only": exporting a read-only tensor that
          // way may be refused (as NumPy does) or allowed (README.md, "What the fuzzers accept
          // on purpose").
          const dx_status_t xs = Take(dx_tensor_to_dlpack_legacy(h, &x.legacy));
          if (xs != DX_OK && rec.read_only) break;
          FUZZ_CHECK(xs == DX_OK, "dx_tensor_to_dlpack_legacy returned %s", dx_status_string(xs));
          out = &x.legacy->dl_tensor;
        } else {
          FUZZ_OK(dx_tensor_to_dlpack(h, &x.versioned));
          out = &x.versioned->dl_tensor;
          FUZZ_CHECK(((x.versioned->flags & DX_DLPACK_FLAG_READ_ONLY) != 0) == rec.read_only,
                     "the export's read-only flag is not the tensor's");
        }
        FUZZ_CHECK(out->data == t.data && out->byte_offset == t.byte_offset &&
                       out->ndim == t.ndim && DeviceType(out->device) == DeviceType(t.device),
                   "the export does not describe the tensor");
        for (int32_t d = 0; d < t.ndim; ++d) {
          FUZZ_CHECK(out->shape[d] == t.shape[d], "exported shape[%d] differs", d);
        }
        if (exports.size() < kMaxTensors) {
          exports.push_back(x);
        } else {
          x.Release();
        }
        break;
      }
      case 4: {
        if (exports.empty()) break;
        const size_t i = r.U8() % exports.size();
        Export x = exports[i];
        exports.erase(exports.begin() + static_cast<std::ptrdiff_t>(i));
        dx_tensor_t* back = nullptr;
        const DLTensor& xd = x.legacy ? x.legacy->dl_tensor : x.versioned->dl_tensor;
        const i128 at = static_cast<i128>(reinterpret_cast<intptr_t>(xd.data)) -
                        static_cast<i128>(reinterpret_cast<intptr_t>(buffer.get()));
        const Extent xe = ExtentOf(xd);
        if (x.legacy) {
          FUZZ_OK(dx_tensor_from_dlpack_legacy(g_rt, x.legacy, &back));
        } else {
          FUZZ_OK(dx_tensor_from_dlpack(g_rt, x.versioned, &back));
        }
        if (recs.size() < kMaxTensors) {
          // A versioned export carries read-only; a legacy one cannot.
          const bool back_read_only =
              x.versioned != nullptr && (x.versioned->flags & DX_DLPACK_FLAG_READ_ONLY) != 0;
          recs.push_back(Rec{back, at + xe.first, at + xe.end, may_be_unsupported, back_read_only});
        } else {
          FUZZ_OK(dx_tensor_destroy(back));
        }
        check_alive("a re-import");
        break;
      }
      case 5: {
        const size_t i = r.U8() % recs.size();
        FUZZ_OK(dx_tensor_destroy(recs[i].handle));
        recs.erase(recs.begin() + static_cast<std::ptrdiff_t>(i));
        check_alive("a destroy");
        break;
      }
      case 6: {
        if (exports.empty()) break;
        const size_t i = r.U8() % exports.size();
        exports[i].Release();
        exports.erase(exports.begin() + static_cast<std::ptrdiff_t>(i));
        check_alive("releasing an export");
        break;
      }
      case 7: {
        const Rec& drec = recs[r.U8() % recs.size()];
        dx_tensor_t* dst = drec.handle;
        dx_tensor_t* src = recs[r.U8() % recs.size()].handle;
        if (!touchable) break;
        const DLTensor& d = Dl(dst);
        const DLTensor& s = Dl(src);
        bool same = d.ndim == s.ndim;
        for (int32_t i = 0; same && i < d.ndim; ++i) same = d.shape[i] == s.shape[i];
        if (!same || Numel(s) > kMaxElems) break;
        std::vector<uint8_t> staged = ModelRead(s, shadow);
        const dx_status_t cs = Take(dx_tensor_copy(g_rt, dst, src));
        if (cs == DX_UNSUPPORTED && may_be_unsupported && !drec.read_only) break;
        if (drec.read_only) {
          // (an empty copy may succeed or be refused: it writes nothing either way)
          FUZZ_CHECK(cs == DX_INVALID_ARGUMENT || (cs == DX_OK && staged.empty()),
                     "a copy into a read-only import returned %s", dx_status_string(cs));
        } else {
          FUZZ_CHECK(cs == DX_OK, "a copy between imports returned %s", dx_status_string(cs));
          ModelWrite(d, shadow, staged);
        }
        shadow.Check("a copy between imports");
        break;
      }
    }
  }
  for (auto& x : exports) {
    x.Release();
  }
  exports.clear();
  while (!recs.empty()) {
    FUZZ_OK(dx_tensor_destroy(recs.back().handle));
    recs.pop_back();
    check_alive("the final destroys");
  }
  FUZZ_CHECK(g_deleter_calls == (null_deleter ? 0 : 1),
             "the deleter ran %d times once everything was destroyed", g_deleter_calls);
  free_unowned();
  return 0;
}
