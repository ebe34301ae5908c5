// fuzz_tensor_view: dx_tensor_view() with any shape, strides, rank and element offset (huge,
// negative, overflowing), views of views, DLPack round trips of views, and
// dx_tensor_read/write/copy on every view the host accepted, in host memory and in a device
// memory space.
//
// Checks, besides AddressSanitizer and UndefinedBehaviorSanitizer on the host:
//   - an accepted view lies inside its storage (exactly computed, not trusting ASan to see
//     an overflow that lands in another allocation); an empty one starts inside it too;
//   - a view whose parameters are valid and that lies inside its storage is accepted;
//   - the accepted view's DLTensor is the one asked for;
//   - reads return, and writes and copies leave, exactly what a model of the storage says: no
//     byte outside the written elements changes;
//   - destroyed handles are refused; every allocation is freed once all handles and exports
//     are gone.
//
// Input (fuzz_common.h for Int()):
//   U8 dtype (index into kDtypes), U8 device (bit 0: the device space), U8 base rank (% 5),
//   base rank x U8 dims (% 9), then up to 48 operations, each a U8 opcode (% 9) and operands:
//     0 view      U8 base, U8 ndim (signed), U8 flags (bit 0: strides given),
//                 ndim x Int shape, [ndim x Int strides], Int elem_offset
//     1 read      U8 tensor
//     2 write     U8 tensor, U8 pattern
//     3 copy      U8 dst, U8 src
//     4 destroy   U8 tensor
//     5 via copy  U8 tensor, U8 flags: copy into a new compact tensor (bit 0: in the other
//                 space) and back
//     6 reimport  U8 tensor, U8 flags (bit 0: legacy): export and import it again
//     7 export    U8 tensor, U8 flags (bit 0: legacy, bit 1: release the oldest export first)
//     8 stale     use the handle destroyed last: must be refused
#include "tensor_model.h"

using namespace deepx_fuzz;

namespace {

dx_runtime_t* g_rt = nullptr;
int32_t g_host_device = -1;
int32_t g_device_device = -1;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* plugin = std::getenv("DEEPX_FUZZ_PLUGIN");
  g_rt = MakeRuntime(plugin && *plugin ? plugin : DEEPX_FUZZ_PLUGIN);
  g_host_device = FindDevice(g_rt, "fuzzhost");
  g_device_device = FindDevice(g_rt, "fuzzdev");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const dx_dtype_t dtype = kDtypes[r.U8() % 10];
  const bool on_device = (r.U8() & 1) != 0;
  const int32_t device = on_device ? g_device_device : g_host_device;
  const int32_t other = on_device ? g_host_device : g_device_device;
  const int32_t base_ndim = r.U8() % 5;
  int64_t base_shape[4] = {0, 0, 0, 0};
  for (int32_t d = 0; d < base_ndim; ++d) base_shape[d] = r.U8() % 9;

  dx_tensor_t* base = nullptr;
  FUZZ_OK(dx_tensor_create(g_rt, device, dtype, base_shape, base_ndim, &base));
  const DLTensor& bdl = Dl(base);
  const Extent be = ExtentOf(bdl);
  const size_t storage_bytes = static_cast<size_t>(be.end - be.first);
  Shadow shadow;
  shadow.base = static_cast<const uint8_t*>(bdl.data);
  shadow.bytes = Pattern(storage_bytes, 0x11);
  FUZZ_OK(dx_tensor_write(base, shadow.bytes.data(), storage_bytes));
  shadow.Check("the first write");

  std::vector<Rec> recs{Rec{base, 0, static_cast<i128>(storage_bytes)}};
  std::vector<Export> exports;
  dx_tensor_t* stale = nullptr;

  for (int op = 0; op < 48 && !r.empty() && !recs.empty(); ++op) {
    switch (r.U8() % 9) {
      case 0:
        DoView(r, recs, shadow);
        break;
      case 1: {
        const Rec& rec = recs[r.U8() % recs.size()];
        CheckRead(rec.handle, shadow, "read", rec.device_import);
        break;
      }
      case 2: {
        const Rec& rec = recs[r.U8() % recs.size()];
        dx_tensor_t* h = rec.handle;
        const uint8_t seed = r.U8();
        const DLTensor& t = Dl(h);
        const int64_t n = Numel(t);
        const size_t bytes = static_cast<size_t>(n) * ElemBytes(t.dtype);
        if (n > kMaxElems) {
          // The size check comes before any byte is touched.
          uint8_t dummy[16] = {0};
          FUZZ_CHECK(Take(dx_tensor_write(h, dummy, sizeof dummy)) == DX_INVALID_ARGUMENT,
                     "a write of the wrong size was not refused");
          break;
        }
        std::vector<uint8_t> p = Pattern(bytes, seed);
        const dx_status_t ws = Take(dx_tensor_write(h, p.data(), bytes));
        if (ws == DX_UNSUPPORTED && rec.device_import) break;
        FUZZ_CHECK(ws == DX_OK, "dx_tensor_write returned %s", dx_status_string(ws));
        ModelWrite(t, shadow, p);
        shadow.Check("dx_tensor_write");
        CheckRead(h, shadow, "read after write", rec.device_import);
        break;
      }
      case 3: {
        const Rec& drec = recs[r.U8() % recs.size()];
        const Rec& srec = recs[r.U8() % recs.size()];
        dx_tensor_t* dst = drec.handle;
        dx_tensor_t* src = srec.handle;
        const DLTensor& d = Dl(dst);
        const DLTensor& sdl = Dl(src);
        bool same_shape = d.ndim == sdl.ndim;
        for (int32_t i = 0; same_shape && i < d.ndim; ++i) same_shape = d.shape[i] == sdl.shape[i];
        if (!same_shape) {
          FUZZ_CHECK(Take(dx_tensor_copy(g_rt, dst, src)) == DX_SHAPE_MISMATCH,
                     "a copy between different shapes was not refused");
          break;
        }
        if (Numel(sdl) > kMaxElems) break;
        std::vector<uint8_t> staged = ModelRead(sdl, shadow);
        const dx_status_t cs = Take(dx_tensor_copy(g_rt, dst, src));
        if (cs == DX_UNSUPPORTED && (drec.device_import || srec.device_import)) break;
        FUZZ_CHECK(cs == DX_OK, "dx_tensor_copy returned %s", dx_status_string(cs));
        ModelWrite(d, shadow, staged);
        shadow.Check("dx_tensor_copy");
        break;
      }
      case 4: {
        const size_t i = r.U8() % recs.size();
        FUZZ_OK(dx_tensor_destroy(recs[i].handle));
        stale = recs[i].handle;
        recs.erase(recs.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      case 5: {
        const Rec& rec = recs[r.U8() % recs.size()];
        dx_tensor_t* h = rec.handle;
        const bool to_other = (r.U8() & 1) != 0;
        const DLTensor& t = Dl(h);
        if (Numel(t) > kMaxElems) break;
        dx_tensor_t* fresh = nullptr;
        const dx_dtype_t dt = DX_DTYPE(t.dtype.code, t.dtype.bits, t.dtype.lanes);
        FUZZ_OK(dx_tensor_create(g_rt, to_other ? other : device, dt, t.shape, t.ndim, &fresh));
        const dx_status_t cs = Take(dx_tensor_copy(g_rt, fresh, h));
        if (cs == DX_UNSUPPORTED && rec.device_import) {
          FUZZ_OK(dx_tensor_destroy(fresh));
          break;
        }
        FUZZ_CHECK(cs == DX_OK, "dx_tensor_copy into a new tensor returned %s",
                   dx_status_string(cs));
        const std::vector<uint8_t> want = ModelRead(t, shadow);
        std::vector<uint8_t> got(want.size());
        FUZZ_OK(dx_tensor_read(fresh, got.data(), got.size()));
        FUZZ_CHECK(got == want, "a copy into a new tensor does not hold the source's elements");
        FUZZ_OK(dx_tensor_copy(g_rt, h, fresh));
        ModelWrite(t, shadow, want);
        shadow.Check("dx_tensor_copy back");
        FUZZ_OK(dx_tensor_destroy(fresh));
        break;
      }
      case 6: {
        const Rec src = recs[r.U8() % recs.size()];
        const bool legacy = (r.U8() & 1) != 0;
        const DLTensor& t = Dl(src.handle);
        dx_tensor_t* back = nullptr;
        const DLTensor* exported = nullptr;
        if (legacy) {
          DLManagedTensor* m = nullptr;
          FUZZ_OK(dx_tensor_to_dlpack_legacy(src.handle, &m));
          exported = &m->dl_tensor;
          FUZZ_CHECK(exported->data == t.data && exported->byte_offset == t.byte_offset &&
                         exported->ndim == t.ndim,
                     "the legacy export is not the tensor");
          FUZZ_OK(dx_tensor_from_dlpack_legacy(g_rt, m, &back));
        } else {
          dx_dlpack_versioned_t* m = nullptr;
          FUZZ_OK(dx_tensor_to_dlpack(src.handle, &m));
          exported = &m->dl_tensor;
          FUZZ_CHECK(m->version.major == 1, "export version %u", m->version.major);
          FUZZ_CHECK(exported->data == t.data && exported->byte_offset == t.byte_offset &&
                         exported->ndim == t.ndim,
                     "the export is not the tensor");
          FUZZ_OK(dx_tensor_from_dlpack(g_rt, m, &back));
        }
        const DLTensor& bt = Dl(back);
        const Extent e = ExtentOf(bt);
        const i128 at = Rel(bt, shadow);
        if (recs.size() >= kMaxTensors) {
          FUZZ_OK(dx_tensor_destroy(back));
          break;
        }
        recs.push_back(Rec{back, at + e.first, at + e.end, on_device});
        break;
      }
      case 7: {
        dx_tensor_t* h = recs[r.U8() % recs.size()].handle;
        const uint8_t flags = r.U8();
        if ((flags & 2) && !exports.empty()) {
          exports.front().Release();
          exports.erase(exports.begin());
        }
        Export e;
        if (flags & 1) {
          FUZZ_OK(dx_tensor_to_dlpack_legacy(h, &e.legacy));
        } else {
          FUZZ_OK(dx_tensor_to_dlpack(h, &e.versioned));
        }
        exports.push_back(e);
        break;
      }
      case 8:
        if (stale != nullptr) {
          uint8_t b[8];
          const dx_status_t st = Take(dx_tensor_read(stale, b, 0));
          FUZZ_CHECK(st == DX_FAILED_PRECONDITION, "a destroyed handle was not refused (%s)",
                     dx_status_string(st));
          FUZZ_CHECK(Take(dx_tensor_destroy(stale)) == DX_FAILED_PRECONDITION,
                     "a handle was destroyed twice");
        }
        break;
    }
  }
  // The storage goes with the last of the exports and handles, in whatever order.
  for (auto& e : exports) e.Release();
  for (const Rec& rec : recs) FUZZ_OK(dx_tensor_destroy(rec.handle));
  const uint64_t live = LiveAllocations(g_rt);
  FUZZ_CHECK(live == 0, "%llu allocations outlive every handle and export",
             static_cast<unsigned long long>(live));
  return 0;
}
