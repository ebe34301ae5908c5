"""The host library, found and declared once: every dx_* function of deepx/host.h with its
restype and argtypes, the structs the binding fills or reads, and check(), which turns a
returned dx_error_t* into an exception.

Functions are called through ctypes.CDLL, which releases the GIL for the duration of each call
(ctypes' FUNCFLAG_PYTHONAPI is not set on them; tests/test_threads.py checks both the flag and
the behaviour), so Python threads run deepx calls in parallel.
"""

import ctypes
import ctypes.util
import os

from . import errors

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int32 = ctypes.c_int32
c_uint32 = ctypes.c_uint32
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
POINTER = ctypes.POINTER

# The environment variable that names the host library to load, before any search.
LIBRARY_ENV = "DEEPX_HOST_LIBRARY"
_LIBRARY_NAMES = ("libdeepx_host.so", "libdeepx_host.so.0")


# --- structs (layouts of deepx/types.h, deepx/host.h and dlpack/dlpack.h on LP64) -------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensorDeleter = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", DLManagedTensorDeleter),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """dx_dlpack_versioned_t: DLPack 1.0's DLManagedTensorVersioned."""


DLManagedTensorVersionedDeleter = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", c_void_p),
    ("deleter", DLManagedTensorVersionedDeleter),
    ("flags", c_uint64),
    ("dl_tensor", DLTensor),
]

DLPACK_FLAG_READ_ONLY = 1 << 0
DLPACK_FLAG_IS_COPIED = 1 << 1

LogFn = ctypes.CFUNCTYPE(None, c_void_p, c_int32, c_char_p, c_void_p, c_size_t)


class RuntimeOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("flags", c_uint64),
        ("plugin_path", c_char_p),
        ("certificate_path", c_char_p),
        ("log", LogFn),
        ("log_user_data", c_void_p),
        ("next", c_void_p),
    ]


RUNTIME_OPTIONS_SIZE_1_0 = 56
RUNTIME_FLAG_IGNORE_ENV = 1 << 0
RUNTIME_FLAG_REQUIRE_CERTIFIED = 1 << 1


class ConnectOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("connect_timeout_ms", c_uint32),
        ("request_timeout_ms", c_uint32),
        ("client_name", c_char_p),
        ("next", c_void_p),
    ]


CONNECT_OPTIONS_SIZE_1_1 = 32


class PluginInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("vendor", c_char_p),
        ("version", c_char_p),
        ("build_id", c_char_p),
        ("path", c_char_p),
        ("abi_version", c_uint32),
        ("reserved", c_uint32),
        ("capabilities", c_uint64),
        ("num_kernels", c_int32),
        ("num_memory_spaces", c_int32),
        ("num_transports", c_int32),
        ("certification", c_int32),
        ("certificate", c_char_p),
        ("certification_note", c_char_p),
    ]


PLUGIN_INFO_SIZE_1_0 = 96


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("device_type", c_int32),
        ("device_id", c_int32),
        ("kind", c_int32),
        ("plugin_index", c_int32),
        ("capacity", c_uint64),
        ("alignment", c_uint64),
    ]


DEVICE_INFO_SIZE_1_0 = 48


class KernelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("plugin_index", c_int32),
        ("device_type", c_int32),
        ("num_inputs", c_int32),
        ("num_outputs", c_int32),
        ("num_dtypes", c_int32),
        ("reserved", c_int32),
        ("dtypes", POINTER(c_uint32)),
        ("flags", c_uint64),
        ("has_backward", c_int32),
        ("has_supports", c_int32),
        ("certified", c_int32),
        ("reserved2", c_int32),
    ]


KERNEL_INFO_SIZE_1_0 = 64


class MemoryStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("in_use_bytes", c_uint64),
        ("peak_in_use_bytes", c_uint64),
        ("reserved_bytes", c_uint64),
        ("peak_reserved_bytes", c_uint64),
        ("live_allocations", c_uint64),
    ]


MEMORY_STATS_SIZE_1_0 = 48


class InvokeOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("flags", c_uint64),
        ("plugin_index", c_int32),
        ("reserved", c_int32),
        ("next", c_void_p),
    ]


INVOKE_OPTIONS_SIZE_1_0 = 32
INVOKE_FLAG_BACKWARD = 1 << 0
INVOKE_FLAG_PLUGIN = 1 << 1

# The struct sizes a test compares with abi/deepx-abi.json.
STRUCTS = {
    "dx_runtime_options_t": (RuntimeOptions, RUNTIME_OPTIONS_SIZE_1_0),
    "dx_connect_options_t": (ConnectOptions, CONNECT_OPTIONS_SIZE_1_1),
    "dx_plugin_info_t": (PluginInfo, PLUGIN_INFO_SIZE_1_0),
    "dx_device_info_t": (DeviceInfo, DEVICE_INFO_SIZE_1_0),
    "dx_kernel_info_t": (KernelInfo, KERNEL_INFO_SIZE_1_0),
    "dx_memory_stats_t": (MemoryStats, MEMORY_STATS_SIZE_1_0),
    "dx_invoke_options_t": (InvokeOptions, INVOKE_OPTIONS_SIZE_1_0),
    "dx_dlpack_versioned_t": (DLManagedTensorVersioned, None),
}


# --- finding the library ------------------------------------------------------------------

def _candidates():
    """Where the host library is looked for, in order (README.md, "Finding the library")."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        yield env, LIBRARY_ENV
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _LIBRARY_NAMES:
        yield os.path.join(here, name), "next to the package"
    try:
        from . import _config  # written by an install that knew where the library is
        path = getattr(_config, "HOST_LIBRARY", None)
        if path:
            yield path, "deepx/_config.py"
    except ImportError:
        pass
    # The build tree of the source checkout this package sits in (host/bindings/python/deepx).
    root = os.path.normpath(os.path.join(here, "..", "..", "..", ".."))
    if os.path.isfile(os.path.join(root, "abi", "include", "deepx", "host.h")):
        build = os.path.join(root, "build")
        presets = ["default"]
        if os.path.isdir(build):
            presets += sorted(p for p in os.listdir(build) if p != "default")
        for preset in presets:
            yield os.path.join(build, preset, "lib", "libdeepx_host.so"), "the build tree"
    found = ctypes.util.find_library("deepx_host")
    if found:
        yield found, "the system (ctypes.util.find_library)"


def _load():
    tried = []
    for path, origin in _candidates():
        if origin != "the system (ctypes.util.find_library)" and not os.path.exists(path):
            tried.append(f"{path} ({origin}: no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({origin}: {e})")
            if origin == LIBRARY_ENV:
                break
    raise ImportError(
        "deepx: cannot load the host library libdeepx_host.so; set DEEPX_HOST_LIBRARY to its "
        "path. Tried: " + ("; ".join(tried) if tried else "nothing (no candidate found)"))


lib, path = _load()

_ERR = c_void_p  # dx_error_t*, None on success


def _declare(name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_PP = POINTER(c_void_p)
_DECLS = [
    ("dx_abi_version", c_uint32, []),
    ("dx_status_string", c_char_p, [c_int32]),
    ("dx_dtype_string", c_char_p, [c_uint32]),
    ("dx_error_code", c_int32, [c_void_p]),
    ("dx_error_message", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("dx_error_destroy", None, [c_void_p]),
    ("dx_runtime_create", _ERR, [POINTER(RuntimeOptions), _PP]),
    ("dx_runtime_destroy", _ERR, [c_void_p]),
    ("dx_runtime_load_plugin", _ERR, [c_void_p, c_char_p, POINTER(c_int32)]),
    ("dx_runtime_load_search_path", _ERR, [c_void_p, POINTER(c_int32), POINTER(c_int32)]),
    ("dx_runtime_plugin_count", _ERR, [c_void_p, POINTER(c_int32)]),
    ("dx_runtime_plugin_info", _ERR, [c_void_p, c_int32, POINTER(PluginInfo)]),
    ("dx_runtime_device_count", _ERR, [c_void_p, POINTER(c_int32)]),
    ("dx_runtime_device_info", _ERR, [c_void_p, c_int32, POINTER(DeviceInfo)]),
    ("dx_runtime_device_stats", _ERR, [c_void_p, c_int32, POINTER(MemoryStats)]),
    ("dx_runtime_find_device", _ERR, [c_void_p, c_char_p, POINTER(c_int32)]),
    ("dx_runtime_op_count", _ERR, [c_void_p, POINTER(c_int32)]),
    ("dx_runtime_op_name", _ERR, [c_void_p, c_uint32, POINTER(c_char_p)]),
    ("dx_runtime_op_lookup", _ERR, [c_void_p, c_char_p, POINTER(c_uint32)]),
    ("dx_runtime_kernel_count", _ERR, [c_void_p, c_uint32, POINTER(c_int32)]),
    ("dx_runtime_kernel_info", _ERR, [c_void_p, c_uint32, c_int32, POINTER(KernelInfo)]),
    ("dx_tensor_create", _ERR, [c_void_p, c_int32, c_uint32, POINTER(c_int64), c_int32, _PP]),
    ("dx_tensor_view", _ERR, [c_void_p, POINTER(c_int64), POINTER(c_int64), c_int32, c_int64,
                              _PP]),
    ("dx_tensor_destroy", _ERR, [c_void_p]),
    ("dx_tensor_dltensor", _ERR, [c_void_p, POINTER(POINTER(DLTensor))]),
    ("dx_tensor_ndim", _ERR, [c_void_p, POINTER(c_int32)]),
    ("dx_tensor_shape", _ERR, [c_void_p, POINTER(c_int64), c_int32]),
    ("dx_tensor_dtype", _ERR, [c_void_p, POINTER(c_uint32)]),
    ("dx_tensor_device", _ERR, [c_void_p, POINTER(c_int32)]),
    ("dx_tensor_numel", _ERR, [c_void_p, POINTER(c_int64)]),
    ("dx_tensor_write", _ERR, [c_void_p, c_void_p, c_uint64]),
    ("dx_tensor_read", _ERR, [c_void_p, c_void_p, c_uint64]),
    ("dx_tensor_copy", _ERR, [c_void_p, c_void_p, c_void_p]),
    ("dx_tensor_from_dlpack", _ERR, [c_void_p, c_void_p, _PP]),
    ("dx_tensor_from_dlpack_legacy", _ERR, [c_void_p, c_void_p, _PP]),
    ("dx_tensor_to_dlpack", _ERR, [c_void_p, _PP]),
    ("dx_tensor_to_dlpack_legacy", _ERR, [c_void_p, _PP]),
    ("dx_attrs_create", _ERR, [_PP]),
    ("dx_attrs_destroy", _ERR, [c_void_p]),
    ("dx_attrs_set_i64", _ERR, [c_void_p, c_char_p, c_int64]),
    ("dx_attrs_set_f64", _ERR, [c_void_p, c_char_p, ctypes.c_double]),
    ("dx_attrs_set_bool", _ERR, [c_void_p, c_char_p, c_int32]),
    ("dx_attrs_set_string", _ERR, [c_void_p, c_char_p, c_char_p, c_int64]),
    ("dx_attrs_set_i64_array", _ERR, [c_void_p, c_char_p, POINTER(c_int64), c_int64]),
    ("dx_attrs_set_f64_array", _ERR, [c_void_p, c_char_p, POINTER(ctypes.c_double), c_int64]),
    ("dx_invoke", _ERR, [c_void_p, c_uint32, _PP, c_int32, _PP, c_int32, c_void_p]),
    ("dx_invoke_by_name", _ERR, [c_void_p, c_char_p, _PP, c_int32, _PP, c_int32, c_void_p]),
    ("dx_invoke_ex", _ERR, [c_void_p, c_uint32, _PP, c_int32, _PP, c_int32, c_void_p,
                            POINTER(InvokeOptions)]),
]

for _name, _restype, _argtypes in _DECLS:
    _declare(_name, _restype, _argtypes)

# dx_runtime_connect() arrived in ABI 1.1; an older library lacks it.
HAS_CONNECT = hasattr(lib, "dx_runtime_connect")
if HAS_CONNECT:
    _declare("dx_runtime_connect", _ERR, [c_char_p, POINTER(ConnectOptions), _PP])

ABI_VERSION = lib.dx_abi_version()


def check(err):
    """Raises the DeepxError subclass of a non-null dx_error_t*, after freeing it."""
    if not err:
        return
    try:
        length = c_size_t()
        text = ctypes.string_at(lib.dx_error_message(err, ctypes.byref(length)), length.value)
        code = lib.dx_error_code(err)
    finally:
        lib.dx_error_destroy(err)
    raise errors.from_status(code, text.decode("utf-8", "replace"))


def status_string(code):
    return lib.dx_status_string(code).decode()
