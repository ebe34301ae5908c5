"""Errors and lifetimes: each bad input or misuse gives a clear exception carrying the status,
never a crash."""

import ctypes
import gc
import json
import os
import warnings

import numpy as np
import pytest

import deepx
from deepx import _lib, errors, ops

from conftest import SOURCE_DIR


def test_status_table_matches_host_and_abi_json():
    with open(os.path.join(SOURCE_DIR, "abi", "deepx-abi.json")) as f:
        codes = {c["name"][len("DX_"):]: c["value"] for c in json.load(f)["status_codes"]}
    assert {v: k for k, v in codes.items()} == errors.STATUS_NAMES
    for code, name in errors.STATUS_NAMES.items():
        assert _lib.status_string(code) == name
        if code:
            e = errors.from_status(code, "m")
            assert (e.code, e.status, e.message) == (code, name, "m")
            assert isinstance(e, deepx.DeepxError)
    unknown = errors.from_status(999, "from a newer host")
    assert type(unknown) is deepx.DeepxError and unknown.code == 999  # the number is kept


def test_exceptions_also_derive_from_python_ones():
    assert issubclass(deepx.ShapeMismatchError, ValueError)
    assert issubclass(deepx.InvalidArgumentError, ValueError)
    assert issubclass(deepx.OutOfRangeError, IndexError)
    assert issubclass(deepx.NotFoundError, LookupError)
    assert issubclass(deepx.UnavailableError, ConnectionError)
    assert issubclass(deepx.ClosedError, deepx.FailedPreconditionError)


def test_struct_layouts_match_abi_json():
    with open(os.path.join(SOURCE_DIR, "abi", "deepx-abi.json")) as f:
        abi = json.load(f)
    fields = {}
    for entry in abi["struct_fields"]:
        fields.setdefault(entry["struct"], {})[entry["field"]] = (entry["offset"], entry["size"])
    sizes = {s["name"]: s["value"] for s in abi["struct_sizes"]}
    for struct, (cls, named_size) in _lib.STRUCTS.items():
        if named_size is not None:
            size_name = "DX_" + struct[len("dx_"):-len("_t")].upper() + "_SIZE_1_" + (
                "1" if struct == "dx_connect_options_t" else "0")
            assert sizes[size_name] == named_size == ctypes.sizeof(cls), struct
        for name, (offset, size) in fields.get(struct, {}).items():
            assert getattr(cls, name).offset == offset, (struct, name)
            assert getattr(cls, name).size == size, (struct, name)


# --- bad input --------------------------------------------------------------------------------

def test_unknown_op_and_plugin(rt):
    with pytest.raises(deepx.NotFoundError) as e:
        rt.op_id("example.no_such_op")
    assert e.value.code == 3 and "example.no_such_op" in e.value.message
    if not rt.remote:
        with pytest.raises(deepx.NotFoundError):
            rt.load_plugin("/nonexistent/libdeepx-plugin-x.so")
    else:
        with pytest.raises(deepx.UnsupportedError):
            rt.load_plugin("cpu")  # a daemon never loads what a client names


def test_wrong_output_shape(rt):
    with rt.empty((2, 3)) as a, rt.empty((3, 2)) as out:
        with pytest.raises(deepx.ShapeMismatchError) as e:
            ops.add(a, a, out=out)
        assert e.value.code == 9


def test_wrong_dtype(rt):
    with rt.empty((2,), deepx.f32) as a, rt.empty((2,), deepx.i32) as b, \
            rt.empty((2,), deepx.f32) as out:
        with pytest.raises((deepx.ShapeMismatchError, deepx.UnsupportedError)):
            ops.add(a, b, out=out)
        with pytest.raises(deepx.UnsupportedError):
            ops.sqrt(b, out=b)  # no integer sqrt kernel


def test_bad_arguments_to_the_binding(rt):
    with rt.empty((2, 2)) as t:
        with pytest.raises(deepx.ShapeMismatchError):
            t.write(np.zeros((3, 3)))
        with pytest.raises(TypeError):
            ops.add(t, np.ones((2, 2)), out=t)  # a NumPy array is not a deepx tensor
        with pytest.raises(TypeError):
            rt.invoke("dx.add", t, [t])  # not a sequence
        with pytest.raises(TypeError):
            ops.add(t)  # too few inputs
        with pytest.raises(TypeError):
            rt.empty("not a shape")
        with pytest.raises(TypeError):
            rt.empty((2,), dtype="complex128")
        with pytest.raises(TypeError):
            deepx.Attrs(x=object())
        with pytest.raises(deepx.InvalidArgumentError):
            ops.softmax(t, out=t, no_such_attr=1)  # the host checks the op's schema
        with pytest.raises(deepx.InvalidArgumentError):
            ops.softmax(t, out=t, axis="zero")  # an attribute of the wrong type
        with pytest.raises(deepx.OutOfRangeError):
            ops.softmax(t, out=t, axis=5)


def test_none_arguments(rt):
    with rt.empty((2,)) as t:
        with pytest.raises(deepx.InvalidArgumentError):
            rt.invoke("dx.add", [t, None], [t])  # a required input left out
        with pytest.raises(deepx.InvalidArgumentError):
            rt.invoke("dx.add", [t, t], [None])
        with pytest.raises(TypeError):
            rt.find_device(None)
        with pytest.raises(TypeError):
            rt.op_id(None)


def test_out_of_range_indices(rt):
    with pytest.raises(deepx.OutOfRangeError):
        rt.empty((2,), device=99)
    with pytest.raises(deepx.OutOfRangeError):
        rt.device_info(-1)
    with pytest.raises(deepx.NotFoundError):
        rt.find_device("no-such-device")
    with rt.empty((4,)) as t:
        with pytest.raises(deepx.OutOfRangeError):
            t.view((8,))  # reaches outside the storage
        with pytest.raises(deepx.OutOfRangeError):
            t.view((2,), offset=3)
    with pytest.raises((deepx.InvalidArgumentError, deepx.OutOfRangeError)):
        rt.empty((-1,))


# --- lifetimes --------------------------------------------------------------------------------

def test_use_after_close_and_double_close(rt):
    t = rt.empty((2,))
    t.close()
    assert t.closed
    t.close()  # a second close is a no-op, as for files
    for use in (t.numpy, lambda: t.write([1, 2]), lambda: t.view((2,)), t.__dlpack__,
                lambda: ops.add(t, t), lambda: rt.copy(t, t)):
        with pytest.raises(deepx.ClosedError) as e:
            use()
        assert e.value.code == 8 and e.value.status == "FAILED_PRECONDITION"
    with pytest.raises(deepx.ClosedError):
        with t:
            pass
    a = deepx.Attrs(axis=0)
    a.close()
    a.close()
    with pytest.raises(deepx.ClosedError):
        a.set("axis", 1)


def test_stale_handle_refused_by_the_host(rt):
    """What the host does with a destroyed handle (the binding never passes one on: it forgets
    the handle at close)."""
    t = rt.empty((2,))
    handle = t._h
    t.close()
    with pytest.raises(deepx.FailedPreconditionError) as e:
        _lib.check(_lib.lib.dx_tensor_destroy(handle))
    assert e.value.code == 8
    n = ctypes.c_int64()
    with pytest.raises(deepx.FailedPreconditionError):
        _lib.check(_lib.lib.dx_tensor_numel(handle, ctypes.byref(n)))
    with pytest.raises(deepx.InvalidArgumentError):
        _lib.check(_lib.lib.dx_tensor_numel(None, ctypes.byref(n)))


def test_runtime_closed_while_tensors_live(new_rt):
    rt = new_rt
    a = rt.asarray(np.arange(4, dtype=np.float32))
    b = rt.empty((4,))
    rt.close()
    rt.close()
    assert rt.closed
    # The tensors stay usable (host.h: they keep the runtime's plugins alive)...
    np.testing.assert_array_equal(a.numpy(), [0, 1, 2, 3])
    b.write(np.ones(4))
    assert b.numpy().tolist() == [1.0, 1.0, 1.0, 1.0]
    # ...but nothing can run through the closed runtime.
    with pytest.raises(deepx.ClosedError):
        ops.add(a, a, out=b)
    with pytest.raises(deepx.ClosedError):
        rt.empty((1,))
    with pytest.raises(deepx.ClosedError):
        rt.plugins()
    a.close()
    b.close()


def test_finalizer_warns_and_frees(local_rt):
    base = local_rt.device_stats().live_allocations
    t = local_rt.empty((16,))
    assert local_rt.device_stats().live_allocations == base + 1
    with pytest.warns(ResourceWarning, match="never closed"):
        del t
        gc.collect()
    assert local_rt.device_stats().live_allocations == base


def test_runtime_finalizer_warns():
    rt = deepx.Runtime()
    with pytest.warns(ResourceWarning, match="runtime was never closed"):
        del rt
        gc.collect()


def test_context_managers_close(rt):
    with rt.empty((2,)) as t:
        pass
    assert t.closed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no leak warning for closed objects
        del t
        gc.collect()


def test_remote_only_refusals(rt):
    if not rt.remote:
        with rt.empty((2,)) as t:
            assert t.data_ptr != 0
        return
    with pytest.raises(deepx.UnsupportedError):
        rt.device_stats(0)
    with rt.empty((2,)) as t:
        with pytest.raises(BufferError):
            t.__dlpack__(copy=False)


def test_daemon_that_dies_mid_session(mode, request):
    """A daemon that exits: the next call fails with UnavailableError (status 19), and closing
    the runtime and its tensors still succeeds."""
    if mode == "local":
        pytest.skip("local mode: there is no daemon to lose")
    request.getfixturevalue("daemon")  # skips with the reason when remote mode cannot run
    from conftest import Daemon, _deepxd_binary
    d = Daemon(_deepxd_binary(), os.environ["DEEPX_CPU_PLUGIN"])
    try:
        rt = deepx.connect(d.address, request_timeout=10)
        t = rt.asarray(np.arange(4, dtype=np.float32))
        assert t.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
        d.proc.kill()
        d.proc.wait()
        with pytest.raises(deepx.UnavailableError) as e:
            t.numpy()
        assert e.value.code == 19
        with pytest.raises(deepx.UnavailableError):
            ops.add(t, t, out=t)
        with pytest.raises(ConnectionError):  # UnavailableError is a ConnectionError too
            rt.empty((2,))
        t.close()
        rt.close()
    finally:
        d.stop()


def test_connect_to_nothing():
    if not _lib.HAS_CONNECT:
        pytest.skip("the host library has no dx_runtime_connect (ABI < 1.1)")
    try:
        deepx.connect("unix:/nonexistent/deepxd.sock", connect_timeout=1).close()
    except deepx.UnsupportedError as e:
        pytest.skip(f"remote mode: the host library cannot connect yet ({e.message})")
    except deepx.UnavailableError as e:
        assert e.code == 19 and "/nonexistent/deepxd.sock" in e.message
    else:
        pytest.fail("connected to a socket that does not exist")
    with pytest.raises(deepx.UnsupportedError):
        deepx.connect("tcp:127.0.0.1:1")
    with pytest.raises(deepx.InvalidArgumentError):
        deepx.connect("")
