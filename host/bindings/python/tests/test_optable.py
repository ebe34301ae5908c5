"""The generated op table is current with abi/ops.json, and installable files are complete."""

import os
import subprocess
import sys

from conftest import HERE, SOURCE_DIR

GEN = os.path.join(HERE, "..", "tools", "gen_optable.py")


def test_optable_current():
    ops_json = os.path.join(SOURCE_DIR, "abi", "ops.json")
    out = os.path.join(HERE, "..", "deepx", "_optable.py")
    r = subprocess.run([sys.executable, GEN, "--check", ops_json, out], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_optable_names_every_op_once():
    import json
    from deepx._optable import OPS
    with open(os.path.join(SOURCE_DIR, "abi", "ops.json")) as f:
        names = [op["name"] for op in json.load(f)["ops"]]
    assert [op["name"] for op in OPS] == names
