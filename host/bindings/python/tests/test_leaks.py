"""No leak under a stress loop: the CPU device's live allocations come back to where they were
(in-process) and the process's resident memory stays bounded (both modes)."""

import gc

import numpy as np
import pytest

import deepx
from deepx import ops

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _round(rt, i):
    x = np.full((32, 32), float(i), np.float32)
    with rt.asarray(x) as a, ops.add(a, a) as s, ops.softmax(s) as p, rt.empty((32,)) as r:
        ops.sum(p, axes=[1], out=r)
        assert abs(float(r.numpy()[0]) - 1.0) < 1e-4
        with s.view((1024,)) as v:
            assert v.numpy()[5] == 2.0 * i
        exported = np.from_dlpack(s)  # an export (a copy, remotely)
        assert exported[0, 0] == 2.0 * i
        del exported
        tt = torch.from_dlpack(p)
        del tt
        cap = s.to_dlpack()  # a capsule nobody consumes
        del cap
        with deepx.Attrs(axis=-1) as attrs:
            rt.invoke("dx.softmax", [s], [p], attrs)
    if not rt.remote:
        arr = np.ones(256, np.float64)
        with deepx.from_dlpack(arr, rt) as imported, ops.add(imported, imported) as twice:
            assert twice.numpy()[0] == 2.0
        with deepx.from_dlpack(torch.ones(8), rt) as imported:
            assert imported.numpy()[0] == 1.0
    try:
        rt.op_id("example.no_such_op")  # an error object made and freed
    except deepx.NotFoundError:
        pass


def test_stress_loop_does_not_leak(rt):
    for i in range(200):  # warm up (allocator caches, op-id cache)
        _round(rt, i)
    gc.collect()
    base_alloc = None if rt.remote else rt.device_stats("cpu").live_allocations
    base_rss = rss_bytes()
    for i in range(3000):
        _round(rt, i)
    gc.collect()
    grown = rss_bytes() - base_rss
    if base_alloc is not None:
        assert rt.device_stats("cpu").live_allocations == base_alloc
    # 3000 rounds make ~40,000 tensors, exports and imports: a leak of even one 4 KiB tensor or
    # one capsule per round would pass this bound several times over.
    assert grown < 24 * 1024 * 1024, f"resident memory grew by {grown} bytes"


def test_runtimes_created_and_closed_repeatedly():
    base_rss = None
    for i in range(25):
        with deepx.Runtime(plugins=[__import__("conftest").cpu_plugin()]) as rt:
            with rt.asarray(np.arange(4, dtype=np.float32)) as t:
                assert t.numpy()[3] == 3.0
        if i == 5:
            gc.collect()
            base_rss = rss_bytes()
    gc.collect()
    assert rss_bytes() - base_rss < 16 * 1024 * 1024
