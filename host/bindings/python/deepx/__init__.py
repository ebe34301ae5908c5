"""deepx: the Python binding of the deepx host API (deepx/host.h), over ctypes.

    import deepx, numpy as np
    with deepx.Runtime(plugins=["cpu"]) as rt:            # or: deepx.connect("unix:/path")
        with rt.asarray(np.ones((2, 3), np.float32)) as a, deepx.ops.add(a, a) as s:
            print(s.numpy())

See README.md (host/bindings/python) and docs/bindings-python.md.
"""

from . import dtypes, errors, ops
from ._core import (Attrs, DeviceInfo, KernelInfo, MemoryStats, PluginInfo, Runtime, Tensor,
                    connect, from_dlpack, to_dlpack)
from ._lib import ABI_VERSION
from ._lib import path as library_path
from .dtypes import DType, bf16, bool_, dtype, f16, f32, f64, i8, i16, i32, i64, u8
from .errors import *  # noqa: F401,F403 (DeepxError and one class per status)

float64, float32, float16, bfloat16 = f64, f32, f16, bf16
int64, int32, int16, int8, uint8 = i64, i32, i16, i8, u8

__version__ = "0.1.0"
