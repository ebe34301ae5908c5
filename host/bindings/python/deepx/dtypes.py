"""deepx dtypes: the packed dx_dtype_t values of deepx/host.h, with names and NumPy equivalents."""


class DType:
    """A deepx element type. `code` is the packed dx_dtype_t (DLPack code | bits << 8 |
    lanes << 16), `name` deepx's short name ("f32"), `itemsize` its size in bytes."""

    __slots__ = ("code", "name", "itemsize", "_numpy_name")

    def __init__(self, code, name, itemsize, numpy_name):
        self.code = code
        self.name = name
        self.itemsize = itemsize
        self._numpy_name = numpy_name

    @property
    def numpy(self):
        """The numpy.dtype of the same layout; None for bf16, which NumPy lacks."""
        if self._numpy_name is None:
            return None
        import numpy as np
        return np.dtype(self._numpy_name)

    def __repr__(self):
        return f"deepx.{self.name}"

    def __eq__(self, other):
        if isinstance(other, DType):
            return self.code == other.code
        try:
            return self.code == dtype(other).code
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.code)


f64 = DType(0x00014002, "f64", 8, "float64")
f32 = DType(0x00012002, "f32", 4, "float32")
f16 = DType(0x00011002, "f16", 2, "float16")
bf16 = DType(0x00011004, "bf16", 2, None)
i64 = DType(0x00014000, "i64", 8, "int64")
i32 = DType(0x00012000, "i32", 4, "int32")
i16 = DType(0x00011000, "i16", 2, "int16")
i8 = DType(0x00010800, "i8", 1, "int8")
u8 = DType(0x00010801, "u8", 1, "uint8")
bool_ = DType(0x00010806, "bool", 1, "bool")

ALL = (f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool_)
_BY_CODE = {d.code: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float64": f64, "float32": f32, "float16": f16, "bfloat16": bf16,
                 "int64": i64, "int32": i32, "int16": i16, "int8": i8, "uint8": u8})


def dtype(value):
    """The DType of `value`: a DType, a packed code (int), a name ("f32", "float32"), a NumPy
    dtype or scalar type, or a torch dtype. Raises TypeError for anything else."""
    if isinstance(value, DType):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        d = _BY_CODE.get(value)
        if d is None:
            raise TypeError(f"deepx: unknown dtype code {value:#010x}")
        return d
    if value is bool:
        return bool_
    if isinstance(value, str):
        d = _BY_NAME.get(value)
        if d is None:
            raise TypeError(f"deepx: unknown dtype name {value!r}")
        return d
    text = str(value)
    if text.startswith("torch."):
        d = _BY_NAME.get(text[len("torch."):])
        if d is None and text == "torch.bool":
            d = bool_
        if d is not None:
            return d
        raise TypeError(f"deepx: no deepx dtype for {text}")
    try:
        import numpy as np
        nd = np.dtype(value)
    except (ImportError, TypeError):
        raise TypeError(f"deepx: not a dtype: {value!r}") from None
    if nd.byteorder == ">":
        raise TypeError(f"deepx: big-endian dtype {nd} is not supported")
    d = _BY_NAME.get(nd.name)
    if d is None:
        raise TypeError(f"deepx: no deepx dtype for NumPy dtype {nd}")
    return d
