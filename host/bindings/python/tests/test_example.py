"""examples/python/add.py in both modes (CTest also runs it in-process as example_python)."""

import os
import subprocess
import sys

from conftest import SOURCE_DIR

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "python", "add.py")


def test_example_runs(mode, request):
    args = [sys.executable, EXAMPLE]
    if mode == "remote":
        args.append(request.getfixturevalue("daemon").address)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("OK")
    assert len(open(EXAMPLE).read().splitlines()) < 30
