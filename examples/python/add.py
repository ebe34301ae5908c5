#!/usr/bin/python3
"""deepx from Python: a runtime with the cpu plugin, dx.add and dx.matmul, NumPy in and out.
Run with PYTHONPATH=host/bindings/python (README.md there says how the library is found).
Pass a daemon's address (unix:/path) to run the same program against deepxd."""
import sys

import numpy as np

import deepx

a_np = np.arange(6, dtype=np.float32).reshape(2, 3)
b_np = np.full((2, 3), 0.5, dtype=np.float32)
rt = deepx.connect(sys.argv[1]) if len(sys.argv) > 1 else deepx.Runtime(plugins=["cpu"])
with rt, rt.asarray(a_np) as a, rt.asarray(b_np) as b:
    with deepx.ops.add(a, b) as s, deepx.ops.matmul(a, b, transpose_b=True) as p:
        print("a + b =\n", s.numpy())
        print("a @ b.T =\n", p.numpy())
        assert np.array_equal(s.numpy(), a_np + b_np)
        assert np.allclose(p.numpy(), a_np @ b_np.T)
    try:
        rt.invoke("example.no_such_op", [a], [b])
    except deepx.NotFoundError as e:
        print("as expected:", e.status, "-", e.message)
print("OK")
