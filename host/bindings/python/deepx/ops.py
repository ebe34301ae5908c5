"""The standard ops of deepx (docs/ops.md) as functions, one per op of abi/ops.json, built at
import time from the generated table _optable.py: `deepx.ops.add(a, b, out=c)`,
`deepx.ops.softmax(x, axis=-1)`, `deepx.ops.sum(x, axes=[0], keepdims=True, out=y)`.

Inputs are positional (None for an absent optional input), attributes keywords, `out=` the
output tensor(s). For elementwise, broadcast, matmul and softmax ops `out=` may be omitted: the
binding allocates the output (the caller closes it). Each function calls Runtime.invoke(); ops
that a plugin adds beyond the standard set are reached with Runtime.invoke("vendor.op", ...).
"""

from . import _opfuncs

_FUNCS = _opfuncs.build()
globals().update(_FUNCS)
__all__ = sorted(_FUNCS)
del _opfuncs
