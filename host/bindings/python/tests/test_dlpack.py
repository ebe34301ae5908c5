"""DLPack both ways with NumPy 1.24 and torch 1.13: zero-copy in-process (shared addresses,
mutation seen through both), values through a remote runtime; the legacy capsule path and its
deleter semantics."""

import gc

import numpy as np
import pytest

import deepx
from deepx import _dlpack, ops

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def live_allocations(rt):
    return rt.device_stats("cpu").live_allocations


# --- deepx -> NumPy / torch -------------------------------------------------------------------

def test_numpy_from_deepx(rt):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with rt.asarray(a) as t:
        view = np.from_dlpack(t)
        np.testing.assert_array_equal(view, a)
        if rt.remote:
            return  # the daemon's memory is not shared: a value check only
        assert view.ctypes.data == t.data_ptr  # the same memory
        t.write(np.full((2, 3), 7.0))  # a write through deepx shows in NumPy
        assert (view == 7.0).all()
        with rt.asarray(np.ones((2, 3), np.float32)) as one:
            ops.add(t, one, out=t)  # and so does an op's output
        assert (view == 8.0).all()


def test_torch_from_deepx(rt):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    with rt.asarray(a) as t:
        tt = torch.from_dlpack(t)
        assert tt.dtype == torch.float64 and tuple(tt.shape) == (3, 4)
        np.testing.assert_array_equal(tt.numpy(), a)
        if rt.remote:
            return
        assert tt.data_ptr() == t.data_ptr
        tt[1, 2] = -5.0  # a write through torch shows in deepx
        assert t.numpy()[1, 2] == -5.0
        t.write(np.zeros((3, 4)))  # and the other way
        assert float(tt.abs().sum()) == 0.0


def test_export_outlives_tensor_and_runtime(mode, request):
    from conftest import make_runtime
    rt = make_runtime(mode, request)
    t = rt.asarray(np.arange(4, dtype=np.int32))
    tt = torch.from_dlpack(t)
    t.close()
    rt.close()  # the export keeps the storage (and the plugins) alive
    assert tt.tolist() == [0, 1, 2, 3]
    del tt
    gc.collect()


# --- NumPy / torch -> deepx -------------------------------------------------------------------

def test_deepx_from_numpy_shares_memory(local_rt):
    arr = np.arange(8, dtype=np.float32)
    with deepx.from_dlpack(arr, local_rt) as t:
        assert t.data_ptr == arr.ctypes.data
        assert t.shape == (8,) and t.dtype == deepx.f32
        arr[3] = 100.0  # NumPy writes, deepx reads
        assert t.numpy()[3] == 100.0
        with local_rt.asarray(np.ones(8, np.float32)) as one:
            ops.add(t, one, out=t)  # deepx writes, NumPy reads
        assert arr[3] == 101.0 and arr[0] == 1.0


def test_deepx_from_torch_shares_memory(local_rt):
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with local_rt.from_dlpack(tt) as t:
        assert t.data_ptr == tt.data_ptr()
        tt[0, 0] = 42.0
        assert t.numpy()[0, 0] == 42.0
        with ops.add(t, t) as twice:
            np.testing.assert_array_equal(twice.numpy(), (tt * 2).numpy())
        t.write(np.full((2, 3), 3.0))
        assert bool((tt == 3.0).all())


def test_deepx_from_deepx_versioned_capsule(local_rt):
    with local_rt.asarray(np.arange(5, dtype=np.int64)) as src:
        cap = src.__dlpack__(max_version=(1, 0))
        assert _dlpack.capsule_name(cap) == b"dltensor_versioned"
        with deepx.from_dlpack(cap, local_rt) as t:
            assert _dlpack.capsule_name(cap) == b"used_dltensor_versioned"
            assert t.data_ptr == src.data_ptr
            assert t.numpy().tolist() == [0, 1, 2, 3, 4]
        # A deepx Tensor is itself a producer: from_dlpack(tensor) asks for the versioned form.
        with deepx.from_dlpack(src, local_rt) as t2:
            assert t2.data_ptr == src.data_ptr
        with deepx.from_dlpack(src) as t3:  # a deepx Tensor's own runtime by default
            assert t3.data_ptr == src.data_ptr and t3.runtime is local_rt


def test_import_into_remote_runtime_is_refused(rt):
    if not rt.remote:
        pytest.skip("local mode: imports are zero-copy (the tests above)")
    arr = np.ones(4, np.float32)
    with pytest.raises(deepx.UnsupportedError):
        deepx.from_dlpack(arr, rt)
    arr[0] = 2.0  # the refused import released NumPy's export: the array is intact
    with rt.asarray(arr) as t:  # what works remotely: a copy
        assert t.numpy().tolist() == [2.0, 1.0, 1.0, 1.0]


# --- the export's options ---------------------------------------------------------------------

def test_dlpack_device_and_options(local_rt):
    with local_rt.asarray(np.arange(3, dtype=np.float32)) as t:
        assert t.__dlpack_device__() == (1, 0)  # kDLCPU
        cap = t.__dlpack__(stream=None, max_version=None, dl_device=(1, 0), copy=False)
        assert _dlpack.capsule_name(cap) == b"dltensor"
        del cap
        copied = np.from_dlpack(_Exporter(t.__dlpack__(copy=True), t))
        assert copied.ctypes.data != t.data_ptr and copied.tolist() == [0.0, 1.0, 2.0]
        with pytest.raises(BufferError):
            t.__dlpack__(dl_device=(2, 0))  # kDLCUDA: not where the tensor is


class _Exporter:
    """Hands a ready capsule to np.from_dlpack (which calls __dlpack__ itself)."""

    def __init__(self, capsule, tensor):
        self.capsule, self.tensor = capsule, tensor

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


# --- the legacy capsule path ------------------------------------------------------------------

def test_legacy_capsule_consumed_by_torch_is_freed_once(local_rt):
    base = live_allocations(local_rt)
    t = local_rt.asarray(np.arange(4, dtype=np.float32))
    cap = deepx.to_dlpack(t)
    assert _dlpack.capsule_name(cap) == b"dltensor"
    tt = torch.utils.dlpack.from_dlpack(cap)
    assert _dlpack.capsule_name(cap) == b"used_dltensor"  # torch took it
    t.close()
    del cap  # a consumed capsule frees nothing: torch owns the tensor now
    gc.collect()
    assert tt.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert live_allocations(local_rt) == base + 1
    del tt  # torch calls the deleter: the storage is freed exactly once
    gc.collect()
    assert live_allocations(local_rt) == base


def test_legacy_capsule_never_consumed_is_freed(local_rt):
    base = live_allocations(local_rt)
    with local_rt.asarray(np.arange(4, dtype=np.float32)) as t:
        cap = t.to_dlpack()
    assert live_allocations(local_rt) == base + 1  # the capsule holds the storage
    del cap
    gc.collect()
    assert live_allocations(local_rt) == base


def test_torch_legacy_capsule_into_deepx(local_rt):
    tt = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cap = torch.utils.dlpack.to_dlpack(tt)
    with deepx.from_dlpack(cap, local_rt) as t:
        assert _dlpack.capsule_name(cap) == b"used_dltensor"
        assert t.data_ptr == tt.data_ptr()
        assert t.numpy().tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="already consumed"):
        deepx.from_dlpack(cap, local_rt)


def test_import_keeps_producer_alive(local_rt):
    """The producer's memory lives until deepx's tensor is closed, even if Python drops it."""
    arr = np.arange(1000, dtype=np.float64)
    t = deepx.from_dlpack(arr, local_rt)
    del arr
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float64))
    t.close()


def test_not_a_dlpack_object(local_rt):
    with pytest.raises(TypeError):
        deepx.from_dlpack([1, 2, 3], local_rt)
    with pytest.raises(TypeError):
        deepx.from_dlpack(np.ones(2), "not a runtime")
    with pytest.raises(TypeError, match="runtime"):
        deepx.from_dlpack(np.ones(2))  # a foreign array needs the runtime to import into


# --- dtypes and layouts -----------------------------------------------------------------------

def test_strided_imports(local_rt):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    with deepx.from_dlpack(arr, local_rt) as t:
        assert t.shape == (3, 2) and t.data_ptr == arr.ctypes.data
        np.testing.assert_array_equal(t.numpy(), arr)
    tt = torch.arange(12.0).reshape(3, 4).t()
    with deepx.from_dlpack(tt, local_rt) as t, ops.add(t, t) as twice:
        np.testing.assert_array_equal(twice.numpy(), (tt * 2).numpy())


def test_bf16_and_f16_through_torch(rt):
    tb = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    if rt.remote:
        with rt.empty((3,), deepx.bf16) as t, rt.asarray(np.ones(3, np.float32)) as f:
            ops.cast(f, out=t, dtype=deepx.bf16)
            assert torch.from_dlpack(t).tolist() == [1.0, 1.0, 1.0]
        return
    with deepx.from_dlpack(tb, rt) as t, ops.add(t, t) as twice:
        assert t.dtype == deepx.bf16
        with pytest.raises(deepx.UnsupportedError):
            t.numpy()  # NumPy has no bf16
        assert torch.from_dlpack(twice).tolist() == [3.0, -4.0, 6.5]
    th = torch.tensor([0.5, 1.0], dtype=torch.float16)
    with deepx.from_dlpack(th, rt) as t:
        assert t.dtype == deepx.f16 and t.numpy().tolist() == [0.5, 1.0]


def test_consumer_that_refuses_leaves_capsule_to_be_freed(local_rt):
    """torch 1.13 knows no DLPack bool (code 6): it refuses the capsule without taking it, and
    the capsule's destructor frees the export."""
    base = live_allocations(local_rt)
    with local_rt.asarray(np.array([True, False, True])) as t:
        assert t.dtype == deepx.bool_ and t.numpy().tolist() == [True, False, True]
        with pytest.raises(RuntimeError, match="Unsupported code 6"):
            torch.from_dlpack(t)
    gc.collect()
    assert live_allocations(local_rt) == base


def test_import_of_unsupported_dtype_releases_producer(local_rt):
    tc = torch.ones(2, dtype=torch.complex64)
    with pytest.raises(deepx.UnsupportedError, match="dtype"):
        deepx.from_dlpack(tc, local_rt)
    tc += 1  # the producer's tensor is intact and no longer exported
    assert tc.real.tolist() == [2.0, 2.0]
