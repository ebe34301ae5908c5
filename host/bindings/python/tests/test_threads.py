"""Threads: calls release the GIL; many threads calling at once get correct results; closing a
handle another thread is using never crashes."""

import ctypes
import threading
import time

import numpy as np
import pytest

import deepx
from deepx import _lib, ops


def test_functions_are_called_without_the_gil():
    """CDLL functions run with the GIL released; PyDLL (FUNCFLAG_PYTHONAPI) ones would not."""
    for name in ("dx_invoke", "dx_invoke_ex", "dx_tensor_read", "dx_tensor_write",
                 "dx_tensor_create", "dx_tensor_copy", "dx_runtime_create"):
        assert not getattr(_lib.lib, name)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name


def _long_matmul(rt):
    """Square f32 tensors whose dx.matmul takes at least 0.1 s here."""
    n = 256
    while True:
        a = rt.asarray(np.ones((n, n), np.float32))
        out = rt.empty((n, n))
        start = time.perf_counter()
        ops.matmul(a, a, out=out)
        if time.perf_counter() - start >= 0.1 or n >= 8192:
            return a, out
        a.close()
        out.close()
        n *= 2


def test_gil_released_while_an_op_runs(rt):
    """A Python thread keeps running while another is inside dx_invoke: with the GIL held
    during the call it could not run in the middle of the call at all."""
    a, out = _long_matmul(rt)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    spinner = threading.Thread(target=spin)
    spinner.start()
    windows = []
    try:
        for _ in range(3):
            t0 = time.perf_counter()
            ops.matmul(a, a, out=out)
            windows.append((t0, time.perf_counter()))
    finally:
        stop.set()
        spinner.join()
        a.close()
        out.close()
    inside = 0
    for t0, t1 in windows:
        lo, hi = t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0)
        inside += sum(1 for x in ticks if lo < x < hi)
    assert inside > 0, f"no Python progress during {len(windows)} calls of {windows}"


def test_many_threads_at_once(rt):
    n_threads, n_iter = 8, 60
    shared = rt.asarray(np.arange(64, dtype=np.float32).reshape(8, 8))
    failures = []
    barrier = threading.Barrier(n_threads)

    def work(k):
        try:
            barrier.wait()
            for i in range(n_iter):
                x = np.full((8, 8), float(k * 1000 + i), np.float32)
                with rt.asarray(x) as t, ops.add(t, shared) as s, ops.matmul(s, shared) as m:
                    expected = x + shared_np
                    got = s.numpy()
                    if not np.array_equal(got, expected):
                        failures.append((k, i, "add"))
                    if not np.allclose(m.numpy(), expected @ shared_np, rtol=1e-5):
                        failures.append((k, i, "matmul"))
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append((k, repr(e)))

    shared_np = shared.numpy()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared.close()
    assert failures == []


def test_close_while_other_threads_use_it(rt):
    """Closing a tensor other threads are reading: each call either completes or raises
    ClosedError; the handle is destroyed once, by whichever thread finishes last."""
    for _ in range(20):
        t = rt.asarray(np.arange(4096, dtype=np.float32))
        outcomes = []
        start = threading.Event()

        def reader():
            start.wait()
            for _ in range(50):
                try:
                    v = t.numpy()
                    outcomes.append("ok" if v[100] == 100.0 else "wrong")
                except deepx.ClosedError:
                    outcomes.append("closed")

        readers = [threading.Thread(target=reader) for _ in range(4)]
        for r in readers:
            r.start()
        start.set()
        time.sleep(0.0005)
        t.close()
        for r in readers:
            r.join()
        assert set(outcomes) <= {"ok", "closed"}
        assert t._h is None  # destroyed
        with pytest.raises(deepx.ClosedError):
            t.numpy()


def test_plugin_load_while_other_threads_invoke(new_rt):
    """host.h: a load may run while other threads invoke on the same runtime."""
    import os
    if new_rt.remote:
        with pytest.raises(deepx.UnsupportedError):
            new_rt.load_plugin("reference")
        return
    cpu = [p.path for p in new_rt.plugins()][0]
    reference = os.path.join(os.path.dirname(cpu), "libdeepx-plugin-reference.so")
    if not os.path.exists(reference):
        pytest.skip(f"no reference plugin next to the cpu plugin ({reference})")
    stop = threading.Event()
    failures = []
    shared = new_rt.asarray(np.arange(16, dtype=np.float32))

    def work():
        while not stop.is_set():
            try:
                with ops.add(shared, shared) as s:
                    if s.numpy()[3] != 6.0:
                        failures.append("wrong")
            except Exception as e:  # noqa: BLE001 (reported below)
                failures.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        index = new_rt.load_plugin(reference)
    finally:
        time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
        shared.close()
    assert index == 1 and [p.name for p in new_rt.plugins()] == ["cpu", "reference"]
    assert failures == []
