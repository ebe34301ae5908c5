"""Exceptions carrying a deepx status (deepx/status.h, docs/error-model.md).

Every failed deepx call raises a DeepxError whose `code` is the dx_status_t the host returned
(an int, kept as is even when this module does not know it), `status` its name
("SHAPE_MISMATCH") and `message` the host's message, which names the call and the argument at
fault. Each status has its own subclass; several also derive from the Python exception a caller
would expect (a ShapeMismatchError is a ValueError, a NotFoundError a LookupError), so that
`except ValueError` catches it too.
"""

# (code, name, class name, extra Python base). Codes are stable and never reused
# (deepx/status.h); tests/test_errors.py checks this table against the host's
# dx_status_string() and abi/deepx-abi.json.
_TABLE = [
    (1, "INVALID_ARGUMENT", "InvalidArgumentError", ValueError),
    (2, "OUT_OF_RANGE", "OutOfRangeError", IndexError),
    (3, "NOT_FOUND", "NotFoundError", LookupError),
    (4, "ALREADY_EXISTS", "AlreadyExistsError", None),
    (5, "UNSUPPORTED", "UnsupportedError", None),
    (6, "OUT_OF_MEMORY", "OutOfMemoryError", MemoryError),
    (7, "VERSION_MISMATCH", "VersionMismatchError", None),
    (8, "FAILED_PRECONDITION", "FailedPreconditionError", None),
    (9, "SHAPE_MISMATCH", "ShapeMismatchError", ValueError),
    (10, "DEVICE_ERROR", "DeviceError", None),
    (11, "IO_ERROR", "DeepxIOError", OSError),
    (12, "TIMEOUT", "DeepxTimeoutError", TimeoutError),
    (13, "PLUGIN_ERROR", "PluginError", None),
    (14, "INTERNAL", "InternalError", None),
    (15, "ARITHMETIC_ERROR", "DeepxArithmeticError", ArithmeticError),
    (16, "PERMISSION_DENIED", "PermissionDeniedError", PermissionError),
    (17, "UNKNOWN", "UnknownError", None),
    (18, "CANCELLED", "CancelledError", None),
    (19, "UNAVAILABLE", "UnavailableError", ConnectionError),
    (20, "RESOURCE_EXHAUSTED", "ResourceExhaustedError", None),
    (21, "DATA_LOSS", "DataLossError", None),
]


class DeepxError(Exception):
    """A deepx call failed. `code` is the status (int), `status` its name, `message` the text."""

    code = 17
    status = "UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = int(code)
            self.status = STATUS_NAMES.get(self.code, "UNKNOWN")
        self.message = message

    def __str__(self):
        return f"{self.status}: {self.message}"


STATUS_NAMES = {0: "OK"}
_BY_CODE = {}
__all__ = ["DeepxError", "ClosedError", "from_status", "STATUS_NAMES"]

for _code, _name, _cls_name, _base in _TABLE:
    _bases = (DeepxError,) if _base is None else (DeepxError, _base)
    _cls = type(_cls_name, _bases, {
        "code": _code, "status": _name,
        "__doc__": f"deepx status {_name} ({_code}).",
        "__module__": __name__,
    })
    # OSError and friends take over __init__/__str__; keep DeepxError's.
    _cls.__init__ = DeepxError.__init__
    _cls.__str__ = DeepxError.__str__
    globals()[_cls_name] = _cls
    _BY_CODE[_code] = _cls
    STATUS_NAMES[_code] = _name
    __all__.append(_cls_name)


class ClosedError(FailedPreconditionError):  # noqa: F821 (defined by the loop above)
    """A Runtime, Tensor or Attrs used after close(): raised by the binding itself, with the
    status the host gives a destroyed handle (FAILED_PRECONDITION)."""


def from_status(code, message):
    """The exception for status `code` (an unknown code gives a DeepxError keeping it)."""
    cls = _BY_CODE.get(code, DeepxError)
    return cls(message, code)
