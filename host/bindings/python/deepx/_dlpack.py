"""DLPack capsules through ctypes.pythonapi: making them (export) and taking them (import).

Export: a capsule named "dltensor" (legacy DLManagedTensor) or "dltensor_versioned" (DLPack 1.0)
holds the managed tensor deepx returned. A consumer that takes it renames the capsule
"used_dltensor" / "used_dltensor_versioned" and calls the deleter itself later; the capsule's
destructor calls the deleter only when the capsule still has its original name, i.e. nobody took
it. So a consumed capsule is never freed twice and an unconsumed one is always freed.

Import: the producer's capsule is renamed "used_..." as soon as its pointer is read (from then on
the managed tensor is ours), and handed to deepx wrapped in a managed tensor of this module whose
deleter is a ctypes callback. deepx may call the deleter on any thread, with or without the GIL
(from a dx_tensor_destroy() that ctypes runs without it); the callback takes the GIL before it
calls the producer's deleter, which NumPy 1.24's needs (it decrements a Python reference).
"""

import ctypes

from . import _lib

_py = ctypes.pythonapi


def _pyfn(name, restype, argtypes):
    """A private prototype of a Python C-API function (the shared ctypes.pythonapi attribute
    of the same name may be declared differently by other code)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, _py))


# Names the capsules carry. The buffers are never freed: a capsule keeps a pointer to its name.
_NAMES = {n: ctypes.create_string_buffer(n) for n in (
    b"dltensor", b"used_dltensor", b"dltensor_versioned", b"used_dltensor_versioned")}
LEGACY = b"dltensor"
VERSIONED = b"dltensor_versioned"

_capsule_new = _pyfn("PyCapsule_New", ctypes.py_object,
                     [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
_capsule_get_pointer = _pyfn("PyCapsule_GetPointer", ctypes.c_void_p,
                             [ctypes.py_object, ctypes.c_char_p])
_capsule_get_name = _pyfn("PyCapsule_GetName", ctypes.c_char_p, [ctypes.py_object])
_capsule_set_name = _pyfn("PyCapsule_SetName", ctypes.c_int,
                          [ctypes.py_object, ctypes.c_void_p])
_capsule_check = _pyfn("PyCapsule_IsValid", ctypes.c_int, [ctypes.py_object, ctypes.c_char_p])
# The destructor receives the capsule while it is being freed: pass it as a raw address, never
# as a py_object (that would take a reference to an object whose count is already zero).
_raw_get_name = _pyfn("PyCapsule_GetName", ctypes.c_char_p, [ctypes.c_void_p])
_raw_get_pointer = _pyfn("PyCapsule_GetPointer", ctypes.c_void_p,
                         [ctypes.c_void_p, ctypes.c_char_p])
_err_clear = _pyfn("PyErr_Clear", None, [])

_LegacyPtr = ctypes.POINTER(_lib.DLManagedTensor)
_VersionedPtr = ctypes.POINTER(_lib.DLManagedTensorVersioned)


def _capsule_destructor(capsule):
    try:
        name = _raw_get_name(capsule)
        if name == LEGACY:
            managed = ctypes.cast(_raw_get_pointer(capsule, LEGACY), _LegacyPtr)
        elif name == VERSIONED:
            managed = ctypes.cast(_raw_get_pointer(capsule, VERSIONED), _VersionedPtr)
        else:
            return  # consumed ("used_..."): the consumer owns the tensor now
        if managed and managed.contents.deleter:
            managed.contents.deleter(managed)
    except BaseException:  # noqa: BLE001 (nothing may escape a destructor)
        _err_clear()


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)
# Never collected, so capsules freed late during interpreter shutdown still find it.
_py.Py_IncRef(ctypes.py_object(_DESTRUCTOR))
_py.Py_IncRef(ctypes.py_object(_NAMES))


def make_capsule(managed_address, versioned):
    """A capsule owning the managed tensor at `managed_address` (deleted unless consumed)."""
    name = VERSIONED if versioned else LEGACY
    return _capsule_new(managed_address, ctypes.addressof(_NAMES[name]),
                        ctypes.cast(_DESTRUCTOR, ctypes.c_void_p))


def capsule_name(obj):
    """The capsule's name (bytes), or None when `obj` is not a capsule."""
    if type(obj).__name__ != "PyCapsule":
        return None
    return _capsule_get_name(obj) or b""


# --- import -----------------------------------------------------------------------------------

# Wrappers handed to deepx, by address, until deepx calls their deleter: (wrapper, producer's).
_pending = {}


def _legacy_deleter(wrapper):
    entry = _pending.pop(ctypes.addressof(wrapper.contents), None)
    if entry is not None:
        original = ctypes.cast(entry[1], _LegacyPtr)
        if original and original.contents.deleter:
            original.contents.deleter(original)


def _versioned_deleter(wrapper):
    entry = _pending.pop(ctypes.addressof(wrapper.contents), None)
    if entry is not None:
        original = ctypes.cast(entry[1], _VersionedPtr)
        if original and original.contents.deleter:
            original.contents.deleter(original)


_LEGACY_DELETER = _lib.DLManagedTensorDeleter(_legacy_deleter)
_VERSIONED_DELETER = _lib.DLManagedTensorVersionedDeleter(_versioned_deleter)
_py.Py_IncRef(ctypes.py_object(_LEGACY_DELETER))
_py.Py_IncRef(ctypes.py_object(_VERSIONED_DELETER))
_py.Py_IncRef(ctypes.py_object(_pending))


def take_capsule(capsule):
    """Takes ownership of a producer's capsule: returns (wrapper address, versioned), where the
    wrapper is a managed tensor whose deleter calls the producer's (once, with the GIL). The
    caller must pass the wrapper to dx_tensor_from_dlpack*(), which owns it from then on."""
    name = capsule_name(capsule)
    if name is None:
        raise TypeError(f"deepx: not a DLPack capsule: {type(capsule).__name__}")
    if name not in (LEGACY, VERSIONED):
        if name.startswith(b"used_"):
            raise BufferError("deepx: this DLPack capsule was already consumed "
                              f"({name.decode()}); a capsule can be imported once")
        raise BufferError(f"deepx: not a DLPack capsule: named {name!r}")
    versioned = name == VERSIONED
    address = _capsule_get_pointer(capsule, name)
    if not address:
        raise BufferError("deepx: the DLPack capsule holds a null pointer")
    if versioned:
        original = ctypes.cast(address, _VersionedPtr).contents
        wrapper = _lib.DLManagedTensorVersioned()
        wrapper.version = original.version
        wrapper.flags = original.flags
        wrapper.deleter = _VERSIONED_DELETER
    else:
        original = ctypes.cast(address, _LegacyPtr).contents
        wrapper = _lib.DLManagedTensor()
        wrapper.deleter = _LEGACY_DELETER
    wrapper.dl_tensor = original.dl_tensor
    wrapper.manager_ctx = None
    _pending[ctypes.addressof(wrapper)] = (wrapper, address)
    # From here on the producer's tensor is ours: the capsule must not delete it.
    if _capsule_set_name(capsule, ctypes.addressof(_NAMES[b"used_" + name])) != 0:
        _pending.pop(ctypes.addressof(wrapper))
        raise BufferError("deepx: could not mark the DLPack capsule as consumed")
    return ctypes.addressof(wrapper), versioned


# --- host copies (the export of a remote tensor) ----------------------------------------------

# Host buffers exported by make_host_capsule(), by managed-tensor address, until their deleter.
_host_exports = {}


def _host_deleter(managed):
    _host_exports.pop(ctypes.addressof(managed.contents), None)


_HOST_DELETER = _lib.DLManagedTensorDeleter(_host_deleter)
_py.Py_IncRef(ctypes.py_object(_HOST_DELETER))
_py.Py_IncRef(ctypes.py_object(_host_exports))


def make_host_capsule(buffer, shape, dtype_code):
    """A legacy capsule of a compact row-major CPU tensor of `shape` and packed dtype
    `dtype_code` over `buffer` (a writable bytes-like object kept alive until the deleter)."""
    managed = _lib.DLManagedTensor()
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(ndim, 1))(*shape)
    data = (ctypes.c_char * len(buffer)).from_buffer(buffer) if len(buffer) else None
    managed.dl_tensor.data = ctypes.addressof(data) if data is not None else None
    managed.dl_tensor.device.device_type = 1  # kDLCPU
    managed.dl_tensor.device.device_id = 0
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype.code = dtype_code & 0xFF
    managed.dl_tensor.dtype.bits = (dtype_code >> 8) & 0xFF
    managed.dl_tensor.dtype.lanes = dtype_code >> 16
    managed.dl_tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _HOST_DELETER
    _host_exports[ctypes.addressof(managed)] = (managed, dims, data, buffer)
    return make_capsule(ctypes.addressof(managed), False)
