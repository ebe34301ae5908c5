#!/usr/bin/python3
"""Writes deepx/_optable.py, the op table the Python binding builds deepx.ops from, out of the
standard op set abi/ops.json.

    python3 host/bindings/python/tools/gen_optable.py [OPS_JSON [OUT]]     (write)
    python3 host/bindings/python/tools/gen_optable.py --check [OPS_JSON [OUT]]

The table is checked in so that an installed package needs no abi/ folder; --check (run by the
test test_optable_current) exits 1 when the checked-in file differs from what ops.json gives.
"""

import json
import os
import pprint
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "..", "..", "..", "..", "abi", "ops.json")
DEFAULT_OUT = os.path.join(HERE, "..", "deepx", "_optable.py")


def render(ops_json_path):
    with open(ops_json_path, encoding="utf-8") as f:
        table = json.load(f)
    ops = []
    for op in table["ops"]:
        ops.append({
            "name": op["name"],
            "family": op["family"],
            "inputs": [(p["name"], p["dtype"], bool(p.get("optional")), bool(p.get("variadic")))
                       for p in op["inputs"]],
            "outputs": [(p["name"], p["dtype"], bool(p.get("optional")),
                         bool(p.get("variadic"))) for p in op["outputs"]],
            "attrs": [(a["name"], a["type"], a.get("default", "")) for a in op["attrs"]],
            "dtypes": op["dtypes"],
            "dtype_rule": op["dtype_rule"],
            "shape_rule": op["shape_rule"],
            "backward": bool(op.get("backward")),
        })
    body = pprint.pformat(ops, width=100, sort_dicts=False)
    return ("# Generated from abi/ops.json by host/bindings/python/tools/gen_optable.py: do not "
            "edit.\n# Inputs and outputs: (name, dtype, optional, variadic); attributes: (name, "
            "type, default).\n\nFORMAT = %d\n\nOPS = %s\n" % (table["format"], body))


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    src = args[0] if args else DEFAULT_JSON
    out = args[1] if len(args) > 1 else DEFAULT_OUT
    text = render(src)
    if check:
        try:
            with open(out, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print(f"{out} is stale: regenerate it with {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
