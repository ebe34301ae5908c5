"""The lifetime of one deepx handle held by a Python object.

host.h forbids destroying a handle while another thread uses it (and a runtime while any call
on it runs). The binding makes that impossible from Python: every call takes the handle with
_use() and gives it back with _done(); close() marks the handle closed at once (later uses
raise ClosedError) and destroys it as soon as no call holds it, so the last of several threads
to finish does the destroy. A second close() is a no-op, as for Python files.

An object that is collected without close() is destroyed by its finalizer, which warns
(ResourceWarning, shown with `python3 -X dev` or `-W default`) that it leaked.
"""

import threading
import warnings

from . import _lib
from .errors import ClosedError


class Owned:
    __slots__ = ("_h", "_lock", "_uses", "_closing", "__weakref__")

    _kind = "handle"
    _destroy_name = None  # the dx_*_destroy of the kind

    def __init__(self, handle):
        self._h = handle
        self._lock = threading.Lock()
        self._uses = 0
        self._closing = False

    def _use(self):
        lock = self._lock
        lock.acquire()
        if self._closing:
            lock.release()
            raise ClosedError(f"deepx: the {self._kind} is closed", 8)
        self._uses += 1
        lock.release()
        return self._h

    def _done(self):
        lock = self._lock
        lock.acquire()
        self._uses -= 1
        if self._uses or not self._closing or self._h is None:
            lock.release()
            return
        handle, self._h = self._h, None
        lock.release()
        self._destroy(handle)

    @property
    def closed(self):
        """True once close() was called."""
        return self._closing

    def close(self):
        """Destroys the handle (at once, or when the last call using it on another thread
        returns). A second close() does nothing."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._uses:
                return
            handle, self._h = self._h, None
        self._destroy(handle)

    def _destroy(self, handle):
        if handle is not None:
            _lib.check(getattr(_lib.lib, self._destroy_name)(handle))

    def __enter__(self):
        if self._closing:
            raise ClosedError(f"deepx: the {self._kind} is closed", 8)
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            handle = self._h
        except AttributeError:  # __init__ did not run to the end
            return
        if handle is None or self._closing:
            return
        self._closing = True
        self._h = None
        try:
            self._destroy(handle)
        except Exception:  # noqa: BLE001 (a finalizer must not raise)
            pass
        try:
            warnings.warn(f"deepx: a {self._kind} was never closed; its finalizer destroyed "
                          "it (close it, or use it in a `with` block)", ResourceWarning,
                          stacklevel=2)
        except Exception:  # noqa: BLE001 (-W error turns the warning into an exception)
            pass
