#!/usr/bin/python3
"""What the Python binding costs (issue 17, item 7), as ratios to C measured in the same run.

    PYTHONPATH=host/bindings/python python3 host/bindings/python/bench.py [--bench-dispatch PATH]

1. Per-call overhead of a tiny op: dx.add of 1-element f32 tensors by interned id, through
   Runtime.invoke(), through deepx.ops.add(out=), and through a bare ctypes call of dx_invoke
   with prebuilt arrays, against C's dx_invoke of the same op in `deepx-bench-dispatch`
   (its summary line for dx_invoke by interned id; this script runs it, about 20 s, and
   says so when it is not built).
2. dx.add of 16 M floats (64 MiB per tensor) through deepx.ops.add(out=) against the bare
   dx_invoke of the same tensors (the C call; ctypes adds about a microsecond to a call of
   milliseconds), and NumPy's np.add(out=) for reference.

Medians of several repetitions; not a test (timings depend on the machine and its load).

With --lines PLUGIN TINY_MS ADD_CALLS ADD_ELEMS it is instead the Python program of
host/bindings/bench/run_bench.py, which runs it in interleaved rounds with the C, Go and Java
programs: the calls of bench_c.c on tensors made once, printing "tiny_ns <x>" (deepx.ops.add(a,
b, out=y) on 1-element f32 tensors, the median of 5 batches of about TINY_MS/5 ms), "invoke_ns
<x>" (rt.invoke(add, (a, b), (y,)) the same way) and "add_ms <x>" (deepx.ops.add(out=) on
ADD_ELEMS f32 elements, the median of ADD_CALLS calls after a warm-up).
"""

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import deepx  # noqa: E402
from deepx import _lib  # noqa: E402


def per_call_ns(fn, calls, repeats=7):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(samples)


def c_invoke_ns(path):
    """ns per dx_invoke by interned id, from the summary deepx-bench-dispatch prints (the
    median of its runs: "dx_invoke (interned id)  85.2 ns ..."), or None."""
    if not path or not os.path.exists(path):
        return None
    out = subprocess.run([path], capture_output=True, text=True, timeout=300).stdout
    found = re.search(r"dx_invoke \(interned id\)\s+([0-9.]+) ns", out)
    return float(found.group(1)) if found else None


def batch_ns(fn, tiny_ms):
    """The median ns per call of fn over 5 batches, each calibrated to about tiny_ms / 5."""
    batch = 100
    while True:
        start = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        if (time.perf_counter_ns() - start) / 1e6 >= tiny_ms / 10 or batch > 1 << 26:
            break
        batch *= 2
    return per_call_ns(fn, batch, repeats=5)


def lines(plugin, tiny_ms, add_calls, add_elems):
    """The driver mode (--lines): see the module's docstring."""
    add_calls = max(1, add_calls)
    with deepx.Runtime(plugins=[plugin]) as rt:
        add = rt.op_id("dx.add")
        with rt.asarray(np.ones(1, np.float32)) as a, rt.asarray(np.ones(1, np.float32)) as b, \
                rt.empty((1,)) as y:
            tiny = batch_ns(lambda: deepx.ops.add(a, b, out=y), tiny_ms)
            invoke = batch_ns(lambda: rt.invoke(add, (a, b), (y,)), tiny_ms)
            if y.numpy()[0] != 2:
                sys.exit(f"bench.py: 1 + 1 gave {y.numpy()[0]}")
        print(f"tiny_ns {tiny:.2f}")
        print(f"invoke_ns {invoke:.2f}")
        ones = np.ones(add_elems, np.float32)
        with rt.asarray(ones) as a, rt.asarray(ones) as b, rt.empty((add_elems,)) as y:
            del ones
            deepx.ops.add(a, b, out=y)  # warm up
            runs = []
            for _ in range(add_calls):
                start = time.perf_counter_ns()
                deepx.ops.add(a, b, out=y)
                runs.append((time.perf_counter_ns() - start) / 1e6)
        print(f"add_ms {sorted(runs)[len(runs) // 2]:.4f}", flush=True)


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--lines":
        lines(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    default_bench = os.path.join(HERE, "..", "..", "..", "build", "default", "bin",
                                 "deepx-bench-dispatch")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench-dispatch", default=os.path.normpath(default_bench))
    parser.add_argument("--plugin", default=os.environ.get("DEEPX_CPU_PLUGIN", "cpu"))
    args = parser.parse_args()

    with deepx.Runtime(plugins=[args.plugin]) as rt:
        add = rt.op_id("dx.add")
        with rt.asarray(np.ones(1, np.float32)) as a, rt.asarray(np.ones(1, np.float32)) as b, \
                rt.empty((1,)) as y:
            ins = (ctypes.c_void_p * 2)(a._h, b._h)
            outs = (ctypes.c_void_p * 1)(y._h)
            raw = _lib.lib.dx_invoke
            rh = rt._h

            def bare():
                err = raw(rh, add, ins, 2, outs, 1, None)
                if err:
                    _lib.check(err)

            calls = 20000
            t_bare = per_call_ns(bare, calls)
            t_invoke = per_call_ns(lambda: rt.invoke(add, (a, b), (y,)), calls)
            t_ops = per_call_ns(lambda: deepx.ops.add(a, b, out=y), calls)
        t_c = c_invoke_ns(args.bench_dispatch)
        print("per-call overhead, dx.add of 1-element f32 tensors (median ns per call)")
        print(f"  bare ctypes dx_invoke           {t_bare:9.0f} ns")
        print(f"  Runtime.invoke(id, ...)         {t_invoke:9.0f} ns")
        print(f"  deepx.ops.add(a, b, out=y)      {t_ops:9.0f} ns")
        if t_c:
            print(f"  C dx_invoke (bench-dispatch)    {t_c:9.1f} ns")
            print(f"  ratio to C: bare {t_bare / t_c:.1f}x, invoke {t_invoke / t_c:.1f}x, "
                  f"ops.add {t_ops / t_c:.1f}x")
        else:
            print(f"  C dx_invoke: {args.bench_dispatch} not found (build deepx-bench-dispatch);"
                  " no ratio")

        n = 16 * 1024 * 1024
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        with rt.asarray(x) as a, rt.asarray(x) as b, rt.empty((n,)) as y:
            ins = (ctypes.c_void_p * 2)(a._h, b._h)
            outs = (ctypes.c_void_p * 1)(y._h)
            rh = rt._h
            bare()  # warm up
            # Interleaved, so that both see the same machine load.
            c_runs, py_runs = [], []
            for _ in range(9):
                c_runs.append(per_call_ns(bare, 3, repeats=1))
                py_runs.append(per_call_ns(lambda: deepx.ops.add(a, b, out=y), 3, repeats=1))
            t_c16, t_py16 = statistics.median(c_runs), statistics.median(py_runs)
            assert np.array_equal(y.numpy()[:8], x[:8] + x[:8])
        x2, out_np = x.copy(), np.empty_like(x)
        t_np16 = per_call_ns(lambda: np.add(x, x2, out=out_np), 3, repeats=9)
        gbs = lambda t: 3 * 4 * n / t  # bytes moved (2 reads, 1 write) per ns = GB/s
        print("dx.add of 16 M f32 (median per call)")
        print(f"  deepx.ops.add(out=)   {t_py16 / 1e6:8.2f} ms  {gbs(t_py16):6.1f} GB/s")
        print(f"  bare dx_invoke (C)    {t_c16 / 1e6:8.2f} ms  {gbs(t_c16):6.1f} GB/s")
        print(f"  numpy np.add(out=)    {t_np16 / 1e6:8.2f} ms  {gbs(t_np16):6.1f} GB/s")
        print(f"  binding throughput / C: {t_c16 / t_py16:.3f}x (target >= 0.95x)")


if __name__ == "__main__":
    main()
