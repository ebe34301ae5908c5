"""Builds the functions of deepx.ops from the op table (_optable.py, generated from
abi/ops.json). Kept apart from ops.py, whose namespace gets functions named max, min, abs, pow
and round."""

import inspect

from . import dtypes
from ._core import Runtime, Tensor
from ._optable import OPS

# Output shapes the binding works out when `out=` is omitted, for the shape rules whose rule is
# a line of NumPy; the host checks every output shape again before a kernel runs.
_INFERRED_SHAPES = {"same", "broadcast", "softmax", "matmul"}


def _broadcast(shapes):
    import numpy as np
    return tuple(np.broadcast_shapes(*shapes))


def _matmul_shape(a, b, attrs):
    import numpy as np
    if attrs.get("transpose_a") and len(a) >= 2:
        a = a[:-2] + (a[-1], a[-2])
    if attrs.get("transpose_b") and len(b) >= 2:
        b = b[:-2] + (b[-1], b[-2])
    try:
        return np.matmul(np.empty(a, dtype=np.int8), np.empty(b, dtype=np.int8)).shape
    except ValueError:
        return None  # let the host say what is wrong


def _infer_output(op, inputs, attrs):
    """(shape, dtype) of op's single output, or None when the binding does not infer it."""
    if (op["shape_rule"] not in _INFERRED_SHAPES
            or op["dtype_rule"] not in ("same", "to-bool", "matmul")):
        return None
    tensors = [t for t in inputs if t is not None]
    if not tensors:
        return None
    # T is the dtype of the first input whose schema dtype is T.
    t_dtype = None
    for (name, dt, _opt, _var), t in zip(op["inputs"], inputs):
        if dt == "T" and t is not None:
            t_dtype = t.dtype
            break
    out_dt = op["outputs"][0][1]
    dtype = dtypes.bool_ if (out_dt == "bool" or op["dtype_rule"] == "to-bool") else t_dtype
    if op["dtype_rule"] == "matmul" and dtype == dtypes.i8:
        dtype = dtypes.i32  # (i8, i8) -> i32
    if dtype is None:
        return None
    rule = op["shape_rule"]
    if rule in ("same", "softmax"):
        shape = tensors[0].shape
    elif rule == "broadcast":
        shape = _broadcast([t.shape for t in tensors])
    else:
        if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
            return None
        shape = _matmul_shape(inputs[0].shape, inputs[1].shape, attrs)
        if shape is None:
            return None
    return shape, dtype


def _runtime_of(runtime, inputs, outs):
    if runtime is not None:
        return runtime
    for t in list(inputs) + list(outs):
        if isinstance(t, Tensor):
            return t.runtime
    raise TypeError("deepx.ops: no tensor to take the runtime from; pass runtime=")


def make(op):
    name = op["name"]
    ins = op["inputs"]
    outs = op["outputs"]
    variadic_in = any(p[3] for p in ins)
    variadic_out = any(p[3] for p in outs)
    multi_out = len(outs) > 1 or variadic_out
    attr_names = [a[0] for a in op["attrs"]]

    def fn(*inputs, out=None, runtime=None, backward=False, plugin=None, **attrs):
        if not variadic_in and not backward:
            required = sum(1 for p in ins if not p[2])
            if len(inputs) < required or len(inputs) > len(ins):
                raise TypeError(f"deepx.ops.{py_name}: takes {required}"
                                + (f" to {len(ins)}" if len(ins) != required else "")
                                + f" input tensors, got {len(inputs)}")
            # Absent optional inputs are passed as null entries: the host wants every slot.
            inputs = inputs + (None,) * (len(ins) - len(inputs))
        attrs = {k: v for k, v in attrs.items() if v is not None}
        rt = _runtime_of(runtime, inputs, [out] if isinstance(out, Tensor) else (out or ()))
        if isinstance(rt, Runtime) is False:
            raise TypeError(f"deepx.ops.{py_name}: runtime must be a deepx.Runtime")
        created = None
        if out is None:
            if multi_out or backward:
                raise TypeError(f"deepx.ops.{py_name}: pass out= (its outputs: "
                                f"{', '.join(p[0] for p in outs)})")
            inferred = _infer_output(op, inputs, attrs)
            if inferred is None:
                raise TypeError(f"deepx.ops.{py_name}: pass out=; the binding does not work out "
                                f"outputs of shape rule '{op['shape_rule']}'")
            device = next(t.device for t in inputs if t is not None)
            out = created = rt.empty(inferred[0], inferred[1], device)
        outputs = list(out) if isinstance(out, (list, tuple)) else [out]
        try:
            rt.invoke(name, inputs, outputs, attrs or None, backward=backward, plugin=plugin)
        except BaseException:
            if created is not None:
                created.close()
            raise
        return out

    py_name = name.split(".", 1)[1] if name.startswith("dx.") else name
    fn.__name__ = fn.__qualname__ = py_name
    params = []
    if variadic_in:
        params.append(inspect.Parameter(ins[0][0], inspect.Parameter.VAR_POSITIONAL))
    else:
        for pname, _dt, optional, _var in ins:
            params.append(inspect.Parameter(
                pname, inspect.Parameter.POSITIONAL_ONLY,
                default=None if optional else inspect.Parameter.empty))
    params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
    for a in attr_names:
        params.append(inspect.Parameter(a, inspect.Parameter.KEYWORD_ONLY, default=None))
    for kw in ("runtime", "backward", "plugin"):
        params.append(inspect.Parameter(kw, inspect.Parameter.KEYWORD_ONLY,
                                        default=False if kw == "backward" else None))
    fn.__signature__ = inspect.Signature(params)
    attrs_doc = "; ".join(f"{a[0]} ({a[1]}, default {a[2]})" for a in op["attrs"]) or "none"
    out_doc = ", ".join(p[0] for p in outs)
    fn.__doc__ = (
        f"{name} ({op['family']}): inputs {', '.join(p[0] + ('?' if p[2] else '') for p in ins) or 'none'};"
        f" outputs {out_doc}; attributes: {attrs_doc}. dtypes {op['dtypes']}, shape rule "
        f"'{op['shape_rule']}' (docs/ops.md).\n\n"
        f"`out=` is the output tensor ({'a sequence of them' if multi_out else 'one tensor'}); "
        f"{'it may be omitted: the binding allocates it and the caller closes it. ' if op['shape_rule'] in _INFERRED_SHAPES and not multi_out else ''}"
        "The runtime is the tensors' unless `runtime=` is given. Returns `out`.")
    return py_name, fn


def build():
    return dict(make(op) for op in OPS)
