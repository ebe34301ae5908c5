#!/usr/bin/env python3
"""Zero-copy DLPack exchange between PyTorch (CUDA) and deepx's CUDA plugin, on a real GPU.

    python3 torch_dlpack_check.py LIBDEEPX_HOST LIBDEEPX_PLUGIN [cuda|cpu]

With `cpu` the same exchange runs between torch's CPU tensors and deepx's CPU plugin (no GPU
needed; torch builds without DLPack 1.0 support use the legacy capsules only).

Drives the C ABI through ctypes (the Python binding builds on the same calls):
  1. torch -> deepx: CUDA tensors exported by torch (DLPack 1.0 and legacy capsules, a
     transposed view among them) are imported, dx.add runs on them into a torch-owned output,
     and the result must equal torch's own a + b bit for bit;
  2. deepx -> torch: a tensor deepx allocated on cuda:0 is exported (DLPack 1.0 and legacy);
     torch must see the same device pointer, the same values, and writes through either side
     must be visible to the other; the deepx handle is destroyed before torch's tensor, which
     must stay valid (the export keeps the storage alive);
  3. a capsule that is never consumed is released through its destructor (no leak, no crash).
Exits 0 when every check holds, 1 otherwise, 77 when torch (or, for cuda, a CUDA device) is
missing.
"""
import ctypes
import gc
import sys

try:
    import torch
    import torch.utils.dlpack
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"skipped: no torch ({e})")
    sys.exit(77)

if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("cuda", "cpu")):
    print(__doc__)
    sys.exit(2)
KIND = sys.argv[3] if len(sys.argv) == 4 else "cuda"
if KIND == "cuda" and not torch.cuda.is_available():
    print("skipped: torch sees no CUDA device")
    sys.exit(77)
DX_DEVICE = b"cuda:0" if KIND == "cuda" else b"cpu"
DL_DEVICE_TYPE = 2 if KIND == "cuda" else 1  # kDLCUDA, kDLCPU


def sync():
    if KIND == "cuda":
        torch.cuda.synchronize()


def versioned_supported():
    """torch >= 2.4 exports DLPack 1.0 when asked with max_version; older builds do not."""
    try:
        torch.zeros(1).__dlpack__(max_version=(1, 0))
        return True
    except TypeError:
        return False

host = ctypes.CDLL(sys.argv[1])
plugin_path = sys.argv[2].encode()

c_void_pp = ctypes.POINTER(ctypes.c_void_p)
for name, args in {
    "dx_runtime_create": [ctypes.c_void_p, c_void_pp],
    "dx_runtime_destroy": [ctypes.c_void_p],
    "dx_runtime_load_plugin": [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)],
    "dx_runtime_find_device": [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)],
    "dx_tensor_create": [ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32,
                         ctypes.POINTER(ctypes.c_int64), ctypes.c_int32, c_void_pp],
    "dx_tensor_destroy": [ctypes.c_void_p],
    "dx_tensor_write": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64],
    "dx_tensor_read": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64],
    "dx_tensor_dltensor": [ctypes.c_void_p, c_void_pp],
    "dx_tensor_device": [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)],
    "dx_tensor_from_dlpack": [ctypes.c_void_p, ctypes.c_void_p, c_void_pp],
    "dx_tensor_from_dlpack_legacy": [ctypes.c_void_p, ctypes.c_void_p, c_void_pp],
    "dx_tensor_to_dlpack": [ctypes.c_void_p, c_void_pp],
    "dx_tensor_to_dlpack_legacy": [ctypes.c_void_p, c_void_pp],
    "dx_invoke_by_name": [ctypes.c_void_p, ctypes.c_char_p, c_void_pp, ctypes.c_int32,
                          c_void_pp, ctypes.c_int32, ctypes.c_void_p],
}.items():
    fn = getattr(host, name)
    fn.argtypes = args
    fn.restype = ctypes.c_void_p  # dx_error_t*
host.dx_error_message.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
host.dx_error_message.restype = ctypes.c_char_p
host.dx_error_code.argtypes = [ctypes.c_void_p]
host.dx_error_code.restype = ctypes.c_int32
host.dx_error_destroy.argtypes = [ctypes.c_void_p]
host.dx_error_destroy.restype = None

DX_DTYPE_F32 = 0x00012002

py = ctypes.pythonapi
py.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
py.PyCapsule_GetPointer.restype = ctypes.c_void_p
py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
py.PyCapsule_SetName.restype = ctypes.c_int
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, CAPSULE_DESTRUCTOR]
py.PyCapsule_New.restype = ctypes.py_object
py.PyCapsule_GetName.argtypes = [ctypes.c_void_p]
py.PyCapsule_GetName.restype = ctypes.c_char_p

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Offsets of `deleter`: DLManagedTensorVersioned {version 8, manager_ctx 8, deleter, ...};
# DLManagedTensor {DLTensor 48, manager_ctx 8, deleter}.
VERSIONED_DELETER_OFFSET = 16
LEGACY_DELETER_OFFSET = 56

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def dx(err, what):
    if err:
        msg = host.dx_error_message(err, None).decode(errors="replace")
        code = host.dx_error_code(err)
        host.dx_error_destroy(err)
        raise RuntimeError(f"{what}: status {code}: {msg}")


def call_deleter(managed, offset):
    fn = ctypes.c_void_p.from_address(managed + offset).value
    if fn:
        DELETER(fn)(managed)


@CAPSULE_DESTRUCTOR
def capsule_destructor(capsule):
    # Called by CPython when the capsule dies; a consumer renames a capsule it took
    # ("used_dltensor..."), so only an unconsumed one still owns its tensor.
    name = py.PyCapsule_GetName(capsule)
    if name == b"dltensor_versioned":
        call_deleter(py.PyCapsule_GetPointer(capsule, name), VERSIONED_DELETER_OFFSET)
        released.append("versioned")
    elif name == b"dltensor":
        call_deleter(py.PyCapsule_GetPointer(capsule, name), LEGACY_DELETER_OFFSET)
        released.append("legacy")


released = []


class DeepxExport:
    """Hands a deepx tensor to torch.from_dlpack through the Python DLPack protocol."""

    def __init__(self, tensor, device_id):
        self.tensor = tensor
        self.device_id = device_id
        self.versions_asked = []

    def __dlpack_device__(self):
        return (DL_DEVICE_TYPE, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # deepx calls are synchronous (host.h): any consumer stream may use the memory at once.
        self.versions_asked.append(max_version)
        out = ctypes.c_void_p()
        if max_version is not None and max_version[0] >= 1:
            dx(host.dx_tensor_to_dlpack(self.tensor, ctypes.byref(out)), "dx_tensor_to_dlpack")
            return py.PyCapsule_New(out.value, b"dltensor_versioned", capsule_destructor)
        dx(host.dx_tensor_to_dlpack_legacy(self.tensor, ctypes.byref(out)),
           "dx_tensor_to_dlpack_legacy")
        return py.PyCapsule_New(out.value, b"dltensor", capsule_destructor)


def import_torch(rt, t, versioned):
    """torch -> deepx: consumes the capsule as the DLPack protocol says (rename it 'used_')."""
    sync()  # host.h: the producer finishes its writes first
    out = ctypes.c_void_p()
    if versioned:
        cap = t.__dlpack__(max_version=(1, 0))
        ptr = py.PyCapsule_GetPointer(id(cap), b"dltensor_versioned")
        py.PyCapsule_SetName(cap, b"used_dltensor_versioned")
        dx(host.dx_tensor_from_dlpack(rt, ptr, ctypes.byref(out)), "dx_tensor_from_dlpack")
    else:
        cap = torch.utils.dlpack.to_dlpack(t)
        ptr = py.PyCapsule_GetPointer(id(cap), b"dltensor")
        py.PyCapsule_SetName(cap, b"used_dltensor")
        dx(host.dx_tensor_from_dlpack_legacy(rt, ptr, ctypes.byref(out)),
           "dx_tensor_from_dlpack_legacy")
    return out


def data_pointer(tensor):
    dl = ctypes.c_void_p()
    dx(host.dx_tensor_dltensor(tensor, ctypes.byref(dl)), "dx_tensor_dltensor")
    return ctypes.c_void_p.from_address(dl.value).value  # DLTensor.data is the first field


def main():
    name = torch.cuda.get_device_name(0) if KIND == "cuda" else "cpu"
    versioned = versioned_supported()
    print(f"torch {torch.__version__}, device {name}, DLPack 1.0 export in torch: {versioned}")
    rt = ctypes.c_void_p()
    dx(host.dx_runtime_create(None, ctypes.byref(rt)), "dx_runtime_create")
    dx(host.dx_runtime_load_plugin(rt, plugin_path, None), "load the cuda plugin")
    dev = ctypes.c_int32()
    dx(host.dx_runtime_find_device(rt, DX_DEVICE, ctypes.byref(dev)), f"find {DX_DEVICE.decode()}")

    # 1. torch -> deepx, dx.add into a torch-owned output.
    torch.manual_seed(7)
    a = torch.randn(257, 129, device=KIND)
    b = torch.randn(129, 257, device=KIND).t()  # a transposed (non-contiguous) view
    c = torch.empty(257, 129, device=KIND)
    ta = import_torch(rt, a, versioned=versioned)
    tb = import_torch(rt, b, versioned=False)
    tc = import_torch(rt, c, versioned=versioned)
    d = ctypes.c_int32()
    dx(host.dx_tensor_device(ta, ctypes.byref(d)), "dx_tensor_device")
    check(d.value == dev.value, f"an imported torch tensor lands on deepx's {DX_DEVICE.decode()} (device {d.value})")
    check(data_pointer(tb) == b.data_ptr(), "the import is zero-copy (same device pointer)")
    ins = (ctypes.c_void_p * 2)(ta, tb)
    outs = (ctypes.c_void_p * 1)(tc)
    dx(host.dx_invoke_by_name(rt, b"dx.add", ins, 2, outs, 1, None), "dx.add")
    check(torch.equal(c, a + b), "dx.add on torch memory (one operand transposed) equals torch's a + b")
    for t in (ta, tb, tc):
        dx(host.dx_tensor_destroy(t), "dx_tensor_destroy")
    gc.collect()
    check(torch.equal(c, a + b), "torch's tensors stay valid after deepx released its imports")

    # 2. deepx -> torch.
    shape = (ctypes.c_int64 * 2)(64, 33)
    n = 64 * 33
    host_data = (ctypes.c_float * n)(*[float(i) * 0.5 for i in range(n)])
    for export_versioned in (True, False):
        t = ctypes.c_void_p()
        dx(host.dx_tensor_create(rt, dev.value, DX_DTYPE_F32, shape, 2, ctypes.byref(t)),
           "dx_tensor_create")
        dx(host.dx_tensor_write(t, host_data, n * 4), "dx_tensor_write")
        export = DeepxExport(t, 0)
        if export_versioned:
            x = torch.from_dlpack(export)  # the protocol: torch picks the version it asks for
        else:
            x = torch.utils.dlpack.from_dlpack(export.__dlpack__())
        kind = "torch.from_dlpack(protocol)" if export_versioned else "legacy capsule"
        if export_versioned and versioned:
            check(export.versions_asked and export.versions_asked[-1] is not None
                  and export.versions_asked[-1][0] >= 1,
                  f"torch asked for DLPack >= 1.0 (max_version {export.versions_asked})")
        check(x.device.type == KIND and x.shape == (64, 33) and x.dtype == torch.float32,
              f"{kind}: torch sees a (64, 33) float32 {KIND} tensor")
        check(x.data_ptr() == data_pointer(t), f"{kind}: the export is zero-copy")
        expect = torch.arange(n, dtype=torch.float32, device=KIND).reshape(64, 33) * 0.5
        check(torch.equal(x, expect), f"{kind}: torch reads what deepx wrote")
        x.mul_(2.0)
        sync()
        back = (ctypes.c_float * n)()
        dx(host.dx_tensor_read(t, back, n * 4), "dx_tensor_read")
        check(all(back[i] == float(i) for i in range(0, n, 97)), f"{kind}: deepx reads torch's write")
        dx(host.dx_tensor_destroy(t), "dx_tensor_destroy")
        gc.collect()
        check(torch.equal(x, expect * 2.0), f"{kind}: torch's tensor outlives the deepx handle")
        del x
        gc.collect()
        sync()

    # 3. an unconsumed capsule is released by its destructor.
    t = ctypes.c_void_p()
    dx(host.dx_tensor_create(rt, dev.value, DX_DTYPE_F32, shape, 2, ctypes.byref(t)),
       "dx_tensor_create")
    for max_version in ((1, 0), None):
        before = len(released)
        cap = DeepxExport(t, 0).__dlpack__(max_version=max_version)
        del cap
        gc.collect()
        check(len(released) == before + 1,
              f"an unconsumed capsule (max_version {max_version}) calls deepx's deleter")
    dx(host.dx_tensor_destroy(t), "dx_tensor_destroy")
    dx(host.dx_runtime_destroy(rt), "dx_runtime_destroy")

    print(f"torch_dlpack_check: {'PASS' if not failures else 'FAIL'} ({len(failures)} failed)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
