"""Fixtures of the Python binding's tests.

Every test that takes `rt` runs twice: once with a runtime in this process ("local") and once
with a runtime connected to a deepxd this fixture starts ("remote"), with the same assertions,
except that zero-copy checks (shared addresses, visible mutation) become value checks where the
memory is not shared. The remote run is skipped, with the reason, while the host library's
dx_runtime_connect() or the deepxd binary is missing.

Environment (CTest sets it from host/bindings/python/CMakeLists.txt): DEEPX_HOST_LIBRARY (the
library), DEEPX_CPU_PLUGIN (the CPU plugin's file), DEEPX_DEEPXD (the daemon, when built),
DEEPX_SOURCE_DIR (the repository). Run by hand from the repository root:

    PYTHONPATH=host/bindings/python python3 -m pytest -q -rs host/bindings/python/tests
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, when PYTHONPATH does not name it

import deepx  # noqa: E402

SOURCE_DIR = os.environ.get("DEEPX_SOURCE_DIR") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", ".."))


def cpu_plugin():
    """The CPU plugin to load: the build's file (CTest), else the name "cpu"."""
    return os.environ.get("DEEPX_CPU_PLUGIN") or "cpu"


def _deepxd_binary():
    exe = os.environ.get("DEEPX_DEEPXD")
    if exe:
        return exe
    guess = os.path.join(SOURCE_DIR, "build", "default", "bin", "deepxd")
    return guess if os.path.exists(guess) else None


def _remote_unavailable_reason():
    """Why the remote mode cannot run here, or None."""
    if not deepx._lib.HAS_CONNECT:
        return f"remote mode: {deepx.library_path} has no dx_runtime_connect (ABI < 1.1)"
    # Ask the library to connect to nothing: a host without the remote client says so.
    probe = os.path.join(tempfile.gettempdir(), f"deepx-py-probe-{os.getpid()}.sock")
    try:
        deepx.connect("unix:" + probe, connect_timeout=0.5).close()
    except deepx.UnsupportedError as e:
        return ("remote mode: the host library cannot connect to a daemon yet "
                f"({e.message})")
    except deepx.DeepxError:
        pass  # nothing listens there: expected
    exe = _deepxd_binary()
    if exe is None:
        return ("remote mode: no deepxd binary (no CMake target `deepxd` in this build, and "
                "DEEPX_DEEPXD is not set)")
    if not os.path.exists(exe):
        return f"remote mode: the deepxd binary {exe} does not exist (build the target deepxd)"
    return None


class Daemon:
    """A deepxd serving the CPU plugin on a unix socket in a temporary directory."""

    def __init__(self, exe, plugin):
        self.dir = tempfile.mkdtemp(prefix="deepx-py-")
        self.socket = os.path.join(self.dir, "deepxd.sock")
        self.address = "unix:" + self.socket
        self.config = os.path.join(self.dir, "deepxd.toml")
        self.log = open(os.path.join(self.dir, "deepxd.log"), "w+b")
        with open(self.config, "w") as f:
            f.write(f'[server]\nsocket = "{self.socket}"\n\n'
                    f'[plugins]\npaths = ["{plugin}"]\n\n[log]\nlevel = "warn"\n')
        self.proc = subprocess.Popen([exe, "--config", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if os.path.exists(self.socket):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(self.socket)
                    return
                except OSError:
                    pass
                finally:
                    s.close()
            time.sleep(0.05)
        output = self.output()
        self.stop()
        raise RuntimeError(f"deepxd did not start ({exe} --config {self.config}):\n{output}")

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    reason = _remote_unavailable_reason()
    if reason:
        pytest.skip(reason)
    plugin = os.environ.get("DEEPX_CPU_PLUGIN")
    if not plugin:
        pytest.skip("remote mode: DEEPX_CPU_PLUGIN (the CPU plugin file deepxd loads) is not set")
    d = Daemon(_deepxd_binary(), plugin)
    yield d
    d.stop()


# Which modes to run: DEEPX_PY_MODES="local", "remote" or "local,remote" (the default). CTest
# runs the two as the tests python_bindings and python_bindings_remote.
MODES = [m for m in os.environ.get("DEEPX_PY_MODES", "local,remote").split(",") if m]


@pytest.fixture(params=MODES, scope="session")
def mode(request):
    return request.param


def pytest_collection_modifyitems(config, items):
    """Without "local" in DEEPX_PY_MODES, only the tests that run in a mode are kept (the
    others use an in-process runtime and belong to the local run)."""
    if "local" in MODES:
        return
    keep = [i for i in items if getattr(i, "callspec", None) and "mode" in i.callspec.params]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


def make_runtime(mode, request):
    """A new runtime of `mode`: in-process with the CPU plugin, or connected to the daemon."""
    if mode == "local":
        return deepx.Runtime(plugins=[cpu_plugin()])
    d = request.getfixturevalue("daemon")
    return deepx.connect(d.address)


@pytest.fixture(scope="session")
def rt(mode, request):
    runtime = make_runtime(mode, request)
    yield runtime
    runtime.close()


@pytest.fixture
def new_rt(mode, request):
    """A runtime of the test's own (for tests that close it)."""
    runtime = make_runtime(mode, request)
    yield runtime
    runtime.close()


@pytest.fixture(scope="session")
def local_rt():
    """An in-process runtime, for what only an in-process runtime has (zero-copy DLPack,
    device statistics)."""
    runtime = deepx.Runtime(plugins=[cpu_plugin()])
    yield runtime
    runtime.close()
