"""Runtime, Tensor and Attrs: the handles of deepx/host.h as Python objects."""

import ctypes
from typing import NamedTuple, Tuple

from . import _dlpack, _lib, dtypes
from ._owned import Owned
from .errors import (DeepxError, InvalidArgumentError, ShapeMismatchError, UnsupportedError,
                     from_status)

_lib_ = _lib.lib
_check = _lib.check
_c_void_p = ctypes.c_void_p
_byref = ctypes.byref


class PluginInfo(NamedTuple):
    """What a loaded plugin declared (dx_plugin_info_t)."""
    index: int
    name: str
    vendor: str
    version: str
    build_id: str
    path: str
    abi_version: int
    capabilities: int
    num_kernels: int
    num_memory_spaces: int
    num_transports: int
    certification: int


class DeviceInfo(NamedTuple):
    """A memory space (dx_device_info_t); `index` is what Runtime.empty(device=) takes."""
    index: int
    name: str
    device_type: int
    device_id: int
    kind: int
    plugin_index: int
    capacity: int
    alignment: int


class KernelInfo(NamedTuple):
    """A registered kernel of an op (dx_kernel_info_t); `dtypes` are inputs then outputs."""
    op: str
    plugin_index: int
    device_type: int
    num_inputs: int
    num_outputs: int
    dtypes: Tuple[object, ...]
    flags: int
    has_backward: bool
    certified: bool


class MemoryStats(NamedTuple):
    """Allocation statistics of a device (dx_memory_stats_t)."""
    in_use_bytes: int
    peak_in_use_bytes: int
    reserved_bytes: int
    peak_reserved_bytes: int
    live_allocations: int


def _s(value):
    return value.decode("utf-8", "replace") if value else ""


# --- Attrs ------------------------------------------------------------------------------------

class Attrs(Owned):
    """A reusable attribute list (dx_attrs_t). `Attrs(axis=1, keepdims=True)`; values map by
    Python type: bool -> bool, int -> i64, float -> f64, str or DType -> string, a sequence of
    ints -> i64 array, of floats -> f64 array. set_i64()/set_f64()/... force a type."""

    __slots__ = ()
    _kind = "attribute list"
    _destroy_name = "dx_attrs_destroy"

    def __init__(self, values=None, **kwargs):
        handle = _c_void_p()
        _check(_lib_.dx_attrs_create(_byref(handle)))
        super().__init__(handle.value)
        try:
            for name, value in dict(values or {}, **kwargs).items():
                self.set(name, value)
        except BaseException:
            self.close()
            raise

    def _call(self, fn, *args):
        h = self._use()
        try:
            _check(fn(h, *args))
        finally:
            self._done()

    def set_i64(self, name, value):
        self._call(_lib_.dx_attrs_set_i64, _name(name), int(value))

    def set_f64(self, name, value):
        self._call(_lib_.dx_attrs_set_f64, _name(name), float(value))

    def set_bool(self, name, value):
        self._call(_lib_.dx_attrs_set_bool, _name(name), 1 if value else 0)

    def set_string(self, name, value):
        data = value.encode("utf-8")
        self._call(_lib_.dx_attrs_set_string, _name(name), data, len(data))

    def set_i64_array(self, name, values):
        values = [int(v) for v in values]
        arr = (ctypes.c_int64 * len(values))(*values)
        self._call(_lib_.dx_attrs_set_i64_array, _name(name), arr, len(values))

    def set_f64_array(self, name, values):
        values = [float(v) for v in values]
        arr = (ctypes.c_double * len(values))(*values)
        self._call(_lib_.dx_attrs_set_f64_array, _name(name), arr, len(values))

    def set(self, name, value):
        """Sets `name` with the attribute type given by the Python type of `value`."""
        if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
            value = value.tolist()  # NumPy scalars and arrays
        if isinstance(value, bool):
            self.set_bool(name, value)
        elif isinstance(value, int):
            self.set_i64(name, value)
        elif isinstance(value, float):
            self.set_f64(name, value)
        elif isinstance(value, str):
            self.set_string(name, value)
        elif isinstance(value, dtypes.DType):
            self.set_string(name, value.name)
        elif isinstance(value, (list, tuple)):
            if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                self.set_i64_array(name, value)
            elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                self.set_f64_array(name, value)
            else:
                raise TypeError(f"deepx: attribute {name!r}: a sequence of ints or floats "
                                f"expected, got {value!r}")
        else:
            raise TypeError(f"deepx: attribute {name!r}: no deepx attribute type for "
                            f"{type(value).__name__}")


def _name(name):
    if not isinstance(name, str):
        raise TypeError(f"deepx: a name must be a str, not {type(name).__name__}")
    return name.encode("utf-8")


# --- Runtime ----------------------------------------------------------------------------------

class Runtime(Owned):
    """A deepx runtime: plugins, devices, ops and the tensors made in it.

    `Runtime(plugins=("cpu",))` creates one in this process and loads the named plugins (a name
    such as "cpu" or a path); `deepx.connect("unix:/run/deepx/deepxd.sock")` returns one whose
    calls go to a deepx daemon. Everything else is the same for both, except what a remote
    runtime refuses (host.h: loading plugins, device statistics, zero-copy DLPack).

    close() (or leaving a `with` block) invalidates the runtime at once; its tensors stay usable
    (reading, writing, DLPack) until they are closed, and keep its plugins loaded until then.
    """

    __slots__ = ("_ops", "address", "__dict__")
    _kind = "runtime"
    _destroy_name = "dx_runtime_destroy"

    def __init__(self, plugins=(), *, plugin_path=None, certificate_path=None,
                 ignore_env=False, require_certified=False):
        options = _lib.RuntimeOptions()
        options.struct_size = _lib.RUNTIME_OPTIONS_SIZE_1_0
        options.flags = ((_lib.RUNTIME_FLAG_IGNORE_ENV if ignore_env else 0)
                         | (_lib.RUNTIME_FLAG_REQUIRE_CERTIFIED if require_certified else 0))
        options.plugin_path = _path(plugin_path)
        options.certificate_path = _path(certificate_path)
        handle = _c_void_p()
        _check(_lib_.dx_runtime_create(_byref(options), _byref(handle)))
        self._init(handle.value, None)
        if isinstance(plugins, str):
            plugins = (plugins,)
        try:
            for plugin in plugins:
                self.load_plugin(plugin)
        except BaseException:
            self.close()
            raise

    def _init(self, handle, address):
        Owned.__init__(self, handle)
        self._ops = {}
        self.address = address

    @classmethod
    def connect(cls, address, *, connect_timeout=None, request_timeout=None,
                client_name="deepx-python"):
        """A runtime connected to the deepx daemon at `address` ("unix:PATH" or a PATH);
        timeouts in seconds (None: the host's defaults, 5 s and 60 s)."""
        if not _lib.HAS_CONNECT:
            raise UnsupportedError(
                f"deepx.connect: the host library {_lib.path} predates dx_runtime_connect "
                "(ABI 1.1)", 5)
        options = _lib.ConnectOptions()
        options.struct_size = _lib.CONNECT_OPTIONS_SIZE_1_1
        if connect_timeout is not None:
            options.connect_timeout_ms = max(1, int(connect_timeout * 1000))
        if request_timeout is not None:
            options.request_timeout_ms = max(1, int(request_timeout * 1000))
        options.client_name = client_name.encode() if client_name else None
        handle = _c_void_p()
        _check(_lib_.dx_runtime_connect(_name(str(address)), _byref(options), _byref(handle)))
        rt = cls.__new__(cls)
        rt._init(handle.value, str(address))
        return rt

    @property
    def remote(self):
        """True for a runtime connected to a daemon."""
        return self.address is not None

    def __repr__(self):
        where = f"connected to {self.address}" if self.remote else "in-process"
        state = "closed" if self.closed else "open"
        return f"<deepx.Runtime {where}, {state}>"

    # -- queries --

    def _query(self, fn, *args):
        h = self._use()
        try:
            _check(fn(h, *args))
        finally:
            self._done()

    def load_plugin(self, name_or_path):
        """Loads a plugin by name ("cpu") or path; returns its index."""
        index = ctypes.c_int32(-1)
        self._query(_lib_.dx_runtime_load_plugin, _name(str(name_or_path)), _byref(index))
        return index.value

    def load_search_path(self):
        """Loads every plugin on the search path; returns (loaded, failed)."""
        loaded, failed = ctypes.c_int32(), ctypes.c_int32()
        self._query(_lib_.dx_runtime_load_search_path, _byref(loaded), _byref(failed))
        return loaded.value, failed.value

    def plugins(self):
        """The loaded plugins, as PluginInfo."""
        count = ctypes.c_int32()
        self._query(_lib_.dx_runtime_plugin_count, _byref(count))
        out = []
        for i in range(count.value):
            info = _lib.PluginInfo()
            info.struct_size = _lib.PLUGIN_INFO_SIZE_1_0
            self._query(_lib_.dx_runtime_plugin_info, i, _byref(info))
            out.append(PluginInfo(i, _s(info.name), _s(info.vendor), _s(info.version),
                                  _s(info.build_id), _s(info.path), info.abi_version,
                                  info.capabilities, info.num_kernels, info.num_memory_spaces,
                                  info.num_transports, info.certification))
        return out

    def devices(self):
        """The devices (memory spaces), as DeviceInfo."""
        count = ctypes.c_int32()
        self._query(_lib_.dx_runtime_device_count, _byref(count))
        return [self.device_info(i) for i in range(count.value)]

    def device_info(self, device):
        index = self._device_index(device)
        info = _lib.DeviceInfo()
        info.struct_size = _lib.DEVICE_INFO_SIZE_1_0
        self._query(_lib_.dx_runtime_device_info, index, _byref(info))
        return DeviceInfo(index, _s(info.name), info.device_type, info.device_id, info.kind,
                          info.plugin_index, info.capacity, info.alignment)

    def device_stats(self, device=0):
        """Allocation statistics of a device (index or name), as MemoryStats."""
        index = self._device_index(device)
        stats = _lib.MemoryStats()
        stats.struct_size = _lib.MEMORY_STATS_SIZE_1_0
        self._query(_lib_.dx_runtime_device_stats, index, _byref(stats))
        return MemoryStats(stats.in_use_bytes, stats.peak_in_use_bytes, stats.reserved_bytes,
                           stats.peak_reserved_bytes, stats.live_allocations)

    def find_device(self, name):
        """The index of the device named `name` ("cpu"); NotFoundError when absent."""
        index = ctypes.c_int32(-1)
        self._query(_lib_.dx_runtime_find_device, _name(name), _byref(index))
        return index.value

    def _device_index(self, device):
        if device is None:
            return 0
        if isinstance(device, str):
            return self.find_device(device)
        if isinstance(device, bool) or not isinstance(device, int):
            raise TypeError(f"deepx: a device is an index or a name, not "
                            f"{type(device).__name__}")
        return device

    def ops(self):
        """The names of the interned ops, by id."""
        count = ctypes.c_int32()
        self._query(_lib_.dx_runtime_op_count, _byref(count))
        names = []
        for i in range(count.value):
            name = ctypes.c_char_p()
            self._query(_lib_.dx_runtime_op_name, i, _byref(name))
            names.append(_s(name.value))
        return names

    def op_id(self, name):
        """The interned id of op `name` (looked up once, then cached); NotFoundError when no
        loaded kernel implements it."""
        op = self._ops.get(name)
        if op is None:
            out = ctypes.c_uint32()
            self._query(_lib_.dx_runtime_op_lookup, _name(name), _byref(out))
            op = self._ops[name] = out.value
        return op

    def kernels(self, op):
        """The kernels registered for op `op` (a name or an id), as KernelInfo."""
        op_id = op if isinstance(op, int) else self.op_id(op)
        name = op if isinstance(op, str) else self.ops()[op_id]
        count = ctypes.c_int32()
        self._query(_lib_.dx_runtime_kernel_count, op_id, _byref(count))
        out = []
        for i in range(count.value):
            info = _lib.KernelInfo()
            info.struct_size = _lib.KERNEL_INFO_SIZE_1_0
            self._query(_lib_.dx_runtime_kernel_info, op_id, i, _byref(info))
            sig = tuple(_dtype_or_code(info.dtypes[j]) for j in range(info.num_dtypes))
            out.append(KernelInfo(name, info.plugin_index, info.device_type, info.num_inputs,
                                  info.num_outputs, sig, info.flags, bool(info.has_backward),
                                  bool(info.certified)))
        return out

    # -- tensors --

    def empty(self, shape, dtype=dtypes.f32, device=None):
        """A new tensor of `shape` and `dtype` on `device` (index or name; None: device 0).
        Its contents are uninitialised."""
        shape = _shape(shape)
        dt = dtypes.dtype(dtype)
        index = self._device_index(device)
        arr = (ctypes.c_int64 * len(shape))(*shape)
        handle = _c_void_p()
        self._query(_lib_.dx_tensor_create, index, dt.code, arr, len(shape), _byref(handle))
        return Tensor._wrap(self, handle.value, shape, dt, index)

    def asarray(self, data, dtype=None, device=None):
        """A new tensor holding a copy of `data` (a NumPy array or anything np.asarray takes),
        converted to `dtype` when given."""
        import numpy as np
        if dtype is not None:
            arr = np.asarray(data, dtype=dtypes.dtype(dtype).numpy, order="C")
        else:
            arr = np.asarray(data, order="C")
        t = self.empty(arr.shape, dtypes.dtype(arr.dtype), device)
        try:
            t.write(arr)
        except BaseException:
            t.close()
            raise
        return t

    from_numpy = asarray

    def from_dlpack(self, obj):
        """Imports `obj` (an object with __dlpack__, or a DLPack capsule) without copying.
        A remote runtime cannot reach this process's memory: use asarray() there."""
        return from_dlpack(obj, self)

    def copy(self, dst, src):
        """Copies src's elements into dst (same dtype and shape; any devices, any strides)."""
        held = []
        try:
            rh = self._use()
            held.append(self)
            dh = dst._use()
            held.append(dst)
            sh = src._use()
            held.append(src)
            _check(_lib_.dx_tensor_copy(rh, dh, sh))
        finally:
            for o in held:
                o._done()

    # -- invocation --

    def invoke(self, op, inputs=(), outputs=(), attrs=None, *, backward=False, plugin=None):
        """Runs op `op` (a name such as "dx.add", or an id from op_id()) on `inputs` (tensors;
        None passes an absent optional input) writing `outputs`, with `attrs` (a dict or an
        Attrs, or None). `backward=True` runs the backward kernel (host.h's
        DX_INVOKE_FLAG_BACKWARD); `plugin=i` runs only plugin i's kernels. Returns None; raises
        the DeepxError of a failed call."""
        op_id = op if isinstance(op, int) and not isinstance(op, bool) else self.op_id(op)
        if isinstance(inputs, Tensor) or isinstance(outputs, Tensor):
            raise TypeError("deepx: invoke() takes sequences of tensors (a list or tuple)")
        n_in, n_out = len(inputs), len(outputs)
        held = []
        temp_attrs = None
        try:
            rh = self._use()
            held.append(self)
            ins = (_c_void_p * n_in)() if n_in else None
            for i, t in enumerate(inputs):
                if t is None:
                    continue
                if type(t) is not Tensor:
                    raise TypeError(f"deepx: input {i} is a {type(t).__name__}, not a "
                                    "deepx.Tensor")
                ins[i] = t._use()
                held.append(t)
            outs = (_c_void_p * n_out)() if n_out else None
            for i, t in enumerate(outputs):
                if t is None:
                    continue
                if type(t) is not Tensor:
                    raise TypeError(f"deepx: output {i} is a {type(t).__name__}, not a "
                                    "deepx.Tensor")
                outs[i] = t._use()
                held.append(t)
            ah = None
            if attrs is not None:
                if not isinstance(attrs, Attrs):
                    attrs = temp_attrs = Attrs(attrs)
                ah = attrs._use()
                held.append(attrs)
            if backward or plugin is not None:
                options = _lib.InvokeOptions()
                options.struct_size = _lib.INVOKE_OPTIONS_SIZE_1_0
                options.flags = ((_lib.INVOKE_FLAG_BACKWARD if backward else 0)
                                 | (_lib.INVOKE_FLAG_PLUGIN if plugin is not None else 0))
                options.plugin_index = plugin or 0
                err = _lib_.dx_invoke_ex(rh, op_id, ins, n_in, outs, n_out, ah,
                                         _byref(options))
            else:
                err = _lib_.dx_invoke(rh, op_id, ins, n_in, outs, n_out, ah)
        finally:
            for o in held:
                o._done()
            if temp_attrs is not None:
                temp_attrs.close()
        _check(err)


def _path(value):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        value = ":".join(str(v) for v in value)
    return str(value).encode()


def _shape(shape):
    if isinstance(shape, int):
        shape = (shape,)
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"deepx: a shape is a sequence of ints, not {shape!r}")
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"deepx: a shape is a sequence of ints, not {shape!r}") from None
    return out


def _dtype_or_code(code):
    try:
        return dtypes.dtype(int(code))
    except TypeError:
        return int(code)


def connect(address, **options):
    """deepx.connect("unix:/run/deepx/deepxd.sock"): Runtime.connect() (its options)."""
    return Runtime.connect(address, **options)


# --- Tensor -----------------------------------------------------------------------------------

class Tensor(Owned):
    """A deepx tensor (dx_tensor_t) in a runtime. Made by Runtime.empty(), Runtime.asarray(),
    deepx.from_dlpack(), Tensor.view() or an op without `out=`; close() it (or use `with`).

    Exchange: numpy() copies out, write() copies in; np.from_dlpack(t) and torch.from_dlpack(t)
    share its memory (in-process runtimes), as deepx.from_dlpack(array, rt) shares theirs.
    """

    __slots__ = ("runtime", "shape", "dtype", "device", "_imported")
    _kind = "tensor"
    _destroy_name = "dx_tensor_destroy"

    @classmethod
    def _wrap(cls, runtime, handle, shape=None, dt=None, device=None):
        t = cls.__new__(cls)
        Owned.__init__(t, handle)
        t.runtime = runtime
        t._imported = False
        try:
            if shape is None:
                ndim = ctypes.c_int32()
                _check(_lib_.dx_tensor_ndim(handle, _byref(ndim)))
                arr = (ctypes.c_int64 * max(ndim.value, 1))()
                _check(_lib_.dx_tensor_shape(handle, arr, ndim.value))
                shape = tuple(arr[i] for i in range(ndim.value))
            if dt is None:
                code = ctypes.c_uint32()
                _check(_lib_.dx_tensor_dtype(handle, _byref(code)))
                dt = _dtype_or_code(code.value)
            if device is None:
                index = ctypes.c_int32()
                _check(_lib_.dx_tensor_device(handle, _byref(index)))
                device = index.value
        except BaseException:
            t.close()
            raise
        t.shape = tuple(shape)
        t.dtype = dt
        t.device = device
        return t

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        """The number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __repr__(self):
        state = ", closed" if self.closed else ""
        dt = self.dtype.name if isinstance(self.dtype, dtypes.DType) else hex(self.dtype)
        return f"deepx.Tensor(shape={self.shape}, dtype={dt}, device={self.device}{state})"

    def __len__(self):
        if not self.shape:
            raise TypeError("deepx: len() of a 0-d tensor")
        return self.shape[0]

    def _numpy_dtype(self):
        nd = self.dtype.numpy if isinstance(self.dtype, dtypes.DType) else None
        if nd is None:
            raise UnsupportedError(f"deepx: dtype {self.dtype!r} has no NumPy equivalent; use "
                                   "torch.from_dlpack(tensor) or a dx.cast first", 5)
        return nd

    def numpy(self):
        """A NumPy array holding a copy of the elements (dx_tensor_read)."""
        import numpy as np
        arr = np.empty(self.shape, dtype=self._numpy_dtype())
        h = self._use()
        try:
            _check(_lib_.dx_tensor_read(h, arr.ctypes.data, arr.nbytes))
        finally:
            self._done()
        return arr

    def tolist(self):
        return self.numpy().tolist()

    def write(self, data):
        """Copies `data` (a NumPy array, or what np.asarray takes, of this tensor's shape) into
        the tensor, converting it to the tensor's dtype."""
        import numpy as np
        arr = np.asarray(data, dtype=self._numpy_dtype(), order="C")
        if arr.shape != self.shape:
            raise ShapeMismatchError(
                f"deepx: Tensor.write: data of shape {arr.shape} into a tensor of shape "
                f"{self.shape}", 9)
        h = self._use()
        try:
            _check(_lib_.dx_tensor_write(h, arr.ctypes.data, arr.nbytes))
        finally:
            self._done()

    def view(self, shape, strides=None, offset=0):
        """A new tensor viewing this one's storage with `shape`, `strides` (in elements; None:
        compact) and element `offset` (dx_tensor_view)."""
        shape = _shape(shape)
        sarr = (ctypes.c_int64 * len(shape))(*shape)
        st = None
        if strides is not None:
            strides = _shape(strides)
            if len(strides) != len(shape):
                raise InvalidArgumentError(
                    f"deepx: Tensor.view: {len(strides)} strides for {len(shape)} dimensions",
                    1)
            st = (ctypes.c_int64 * len(strides))(*strides)
        out = _c_void_p()
        h = self._use()
        try:
            _check(_lib_.dx_tensor_view(h, sarr, st, len(shape), int(offset), _byref(out)))
        finally:
            self._done()
        return Tensor._wrap(self.runtime, out.value, shape, self.dtype, self.device)

    def _dltensor(self):
        h = self._use()
        try:
            out = ctypes.POINTER(_lib.DLTensor)()
            _check(_lib_.dx_tensor_dltensor(h, _byref(out)))
            return out.contents
        finally:
            self._done()

    @property
    def data_ptr(self):
        """The address of element 0 (DLTensor data + byte_offset): in-process tensors only."""
        dl = self._dltensor()
        return (dl.data or 0) + dl.byte_offset

    # -- DLPack --

    def __dlpack_device__(self):
        """(DLDeviceType, device id) of the tensor's memory."""
        try:
            dl = self._dltensor()
            return (int(dl.device.device_type), int(dl.device.device_id))
        except UnsupportedError:  # a remote tensor: the daemon's device
            info = self.runtime.device_info(self.device)
            return (info.device_type, info.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """Exports the tensor as a DLPack capsule without copying (unless copy=True): a
        "dltensor_versioned" capsule when `max_version` >= (1, 0), else a legacy "dltensor".
        Every deepx call is synchronous, so any `stream` is satisfied. A remote tensor's memory
        is in the daemon: it is read into a new array (copy=False refuses with BufferError)."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"deepx: cannot export a tensor of device "
                              f"{self.__dlpack_device__()} to device {tuple(dl_device)}")
        if self.runtime.remote:
            if copy is False:
                raise BufferError("deepx: a remote tensor's memory is in the daemon; it can be "
                                  "exported only as a copy (copy=None or True)")
            code = self.dtype.code if isinstance(self.dtype, dtypes.DType) else int(self.dtype)
            buffer = bytearray(self.nbytes)
            h = self._use()
            try:
                if buffer:
                    data = (ctypes.c_char * len(buffer)).from_buffer(buffer)
                    _check(_lib_.dx_tensor_read(h, data, len(buffer)))
                    del data
            finally:
                self._done()
            return _dlpack.make_host_capsule(buffer, self.shape, code)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        source = self
        if copy:
            source = self.runtime.empty(self.shape, self.dtype, self.device)
        try:
            if copy:
                self.runtime.copy(source, self)
            managed = _c_void_p()
            h = source._use()
            try:
                if versioned:
                    err = _lib_.dx_tensor_to_dlpack(h, _byref(managed))
                else:
                    err = _lib_.dx_tensor_to_dlpack_legacy(h, _byref(managed))
            finally:
                source._done()
            try:
                _check(err)
            except UnsupportedError as e:
                raise BufferError(str(e)) from e
            if versioned and copy:
                m = ctypes.cast(managed, ctypes.POINTER(_lib.DLManagedTensorVersioned))
                m.contents.flags |= _lib.DLPACK_FLAG_IS_COPIED
            return _dlpack.make_capsule(managed.value, versioned)
        finally:
            if source is not self:
                source.close()  # the export keeps the copy's storage alive

    def to_dlpack(self):
        """A legacy "dltensor" capsule (torch.utils.dlpack.from_dlpack takes it)."""
        return self.__dlpack__()


def to_dlpack(tensor):
    """deepx.to_dlpack(t): t's legacy "dltensor" capsule."""
    return tensor.to_dlpack()


def from_dlpack(obj, runtime=None):
    """Imports `obj` into `runtime` without copying: an object with __dlpack__ (a NumPy array,
    a torch tensor, a deepx Tensor) or a DLPack capsule ("dltensor" or "dltensor_versioned").
    The tensor shares the producer's memory: writes through either are visible to the other.
    The producer's memory stays alive until the returned tensor (and its views and exports)
    are closed. `runtime` may be left out for a deepx Tensor (its own runtime is used)."""
    if runtime is None and isinstance(obj, Tensor):
        runtime = obj.runtime
    if not isinstance(runtime, Runtime):
        raise TypeError("deepx.from_dlpack(obj, runtime): runtime must be a deepx.Runtime, not "
                        f"{type(runtime).__name__}")
    if _dlpack.capsule_name(obj) is not None:
        capsule = obj
    elif hasattr(obj, "__dlpack__"):
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0's protocol (NumPy 1.24, torch 1.13)
            capsule = obj.__dlpack__()
    else:
        raise TypeError(f"deepx.from_dlpack: {type(obj).__name__} has no __dlpack__ and is not "
                        "a DLPack capsule")
    address, versioned = _dlpack.take_capsule(capsule)
    # Ownership has passed to deepx whatever happens now (host.h: the deleter runs on error).
    out = _c_void_p()
    h = runtime._use()
    try:
        if versioned:
            err = _lib_.dx_tensor_from_dlpack(h, address, _byref(out))
        else:
            err = _lib_.dx_tensor_from_dlpack_legacy(h, address, _byref(out))
    finally:
        runtime._done()
    _check(err)
    t = Tensor._wrap(runtime, out.value)
    t._imported = True
    return t


__all__ = ["Runtime", "Tensor", "Attrs", "connect", "from_dlpack", "to_dlpack",
           "PluginInfo", "DeviceInfo", "KernelInfo", "MemoryStats", "DeepxError"]
