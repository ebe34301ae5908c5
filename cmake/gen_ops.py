#!/usr/bin/env python3
"""Writes the files generated from abi/ops.json, the one table of the standard ops.

    gen_ops.py ROOT              rewrite the generated files under the source tree ROOT
    gen_ops.py --check ROOT      write nothing; list the stale files and exit 1 if any
    gen_ops.py --check --out DIR ROOT
                                 also write what the files should be under DIR (to diff)

The generated files:
  abi/include/deepx/ops.h        the DX_OP_TABLE macro and the slot enums (between markers)
  host/src/op_table.inc          the host's shape rule per op (included by dispatch.cc)
  conformance/src/op_table.hpp   the suite's rule table (included by shape_rules.hpp)
  docs/ops.md                    the op table for people (between markers)

Python 3 (standard library only) rather than a `cmake -P` script: the generator reads nested
JSON and writes four formats, which CMake's string(JSON) makes long and hard to review; Python 3
is on every Debian machine and the docs link check already runs it. A malformed ops.json is
refused with a message naming the op and the field, and nothing is written.
"""
import argparse
import difflib
import json
import os
import sys

SOURCE = "abi/ops.json"
OPS_H = "abi/include/deepx/ops.h"
HOST_INC = "host/src/op_table.inc"
CONFORMANCE_HPP = "conformance/src/op_table.hpp"
DOCS = "docs/ops.md"

H_BEGIN = "/* BEGIN GENERATED OP TABLE (cmake/gen_ops.py from abi/ops.json; do not edit) */"
H_END = "/* END GENERATED OP TABLE */"
MD_BEGIN = "<!-- BEGIN GENERATED OP TABLE (cmake/gen_ops.py from abi/ops.json; do not edit) -->"
MD_END = "<!-- END GENERATED OP TABLE -->"

ATTR_TYPES = {"i64", "f64", "bool", "string", "i64[]", "f64|i64", "i64|i64[]", "i64|string"}
PORT_DTYPES = {"T", "bool", "i64", "i32|i64", "T|bool"}
NUMERICS = {"movement": "Movement", "exact_arith": "ExactArith", "basic_arith": "BasicArith",
            "transcendental": "Transcendental", "accumulating": "Accumulating",
            "normalising": "Normalising", "random": "Random"}


class TableError(Exception):
    pass


def camel(rule):
    return "k" + "".join(part.capitalize() for part in rule.split("-"))


def arity(ports):
    return -1 if any(p.get("variadic") for p in ports) else len(ports)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError) as e:
        raise TableError(f"{path}: {e}")
    for key in ("format", "dtype_groups", "dtype_rules", "shape_rules", "slot_enums", "ops"):
        if key not in table:
            raise TableError(f"{path}: the key '{key}' is missing")
    if table["format"] != 1:
        raise TableError(f"{path}: format {table['format']} is not 1")
    names, ids, used_rules, used_slots = set(), set(), set(), {}
    for i, op in enumerate(table["ops"]):
        where = f"{path}: ops[{i}] ({op.get('name', '?')})"
        for key in ("id", "name", "family", "inputs", "outputs", "attrs", "dtypes", "dtype_rule",
                    "shape_rule", "numerics", "backward"):
            if key not in op:
                raise TableError(f"{where}: the field '{key}' is missing")
        if not op["name"].startswith("dx.") or op["name"] in names:
            raise TableError(f"{where}: the name must be a new 'dx.' name")
        if not op["id"].isidentifier() or op["id"] != op["id"].upper() or op["id"] in ids:
            raise TableError(f"{where}: the id must be a new upper-case identifier")
        names.add(op["name"])
        ids.add(op["id"])
        if op["shape_rule"] not in table["shape_rules"]:
            raise TableError(f"{where}: shape_rule '{op['shape_rule']}' is not in shape_rules")
        if op["dtype_rule"] not in table["dtype_rules"]:
            raise TableError(f"{where}: dtype_rule '{op['dtype_rule']}' is not in dtype_rules")
        if op["numerics"] not in NUMERICS:
            raise TableError(f"{where}: numerics '{op['numerics']}' is not one of {sorted(NUMERICS)}")
        used_rules.add(op["shape_rule"])
        for kind in ("inputs", "outputs"):
            if sum(1 for p in op[kind] if p.get("variadic")) > 1:
                raise TableError(f"{where}: at most one variadic {kind[:-1]}")
            for p in op[kind]:
                if p.get("dtype") not in PORT_DTYPES:
                    raise TableError(f"{where}: {kind} '{p.get('name')}' has dtype "
                                     f"{p.get('dtype')!r}, not one of {sorted(PORT_DTYPES)}")
        attr_names = [a.get("name") for a in op["attrs"]]
        if len(set(attr_names)) != len(attr_names):
            raise TableError(f"{where}: an attribute is listed twice")
        for a in op["attrs"]:
            if not a.get("name", "").isidentifier() or a.get("type") not in ATTR_TYPES:
                raise TableError(f"{where}: attribute {a.get('name')!r} needs a name and a type "
                                 f"in {sorted(ATTR_TYPES)}")
            if not a.get("required") and "default" not in a:
                raise TableError(f"{where}: attribute '{a['name']}' needs a default or "
                                 "\"required\": true")
        if "slot_enum" in op:
            if op["slot_enum"] not in table["slot_enums"]:
                raise TableError(f"{where}: slot_enum '{op['slot_enum']}' is not in slot_enums")
            first = used_slots.setdefault(op["slot_enum"], op)
            if [a["name"] for a in first["attrs"]] != attr_names:
                raise TableError(f"{where}: its attributes differ from those of {first['name']}, "
                                 f"which shares the slot enum {op['slot_enum']}")
    unused = set(table["shape_rules"]) - used_rules
    if unused:
        raise TableError(f"{path}: shape rules no op uses: {sorted(unused)}")
    unused = set(table["slot_enums"]) - set(used_slots)
    if unused:
        raise TableError(f"{path}: slot enums no op uses: {sorted(unused)}")
    return table


def replace_region(text, begin, end, body, path):
    b = text.find(begin)
    e = text.find(end)
    if b < 0 or e < b:
        raise TableError(f"{path}: the markers '{begin}' and '{end}' are missing")
    return text[:b + len(begin)] + "\n" + body + text[e:]


# --- abi/include/deepx/ops.h -----------------------------------------------------------------

def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gen_ops_h(table, text):
    lines = [
        "/**",
        " * @brief X(ID, \"name\", inputs, outputs, \"attr,attr,...\") for every standard op.",
        " *",
        " * `inputs` is the number of inputs (-1: variadic, at least one), counting optional inputs",
        " * (an optional input may be passed as a null tensor). `outputs` likewise.",
        " * @since 1.0",
        " */",
    ]
    rows = ["#define DX_OP_TABLE(X)"]
    family = None
    for op in table["ops"]:
        if op["family"] != family:
            family = op["family"]
            rows.append(f"  /* {family} */")
        head = f"  X({op['id']}, {c_string(op['name'])}, {arity(op['inputs'])}, {arity(op['outputs'])},"
        attrs = c_string(",".join(a["name"] for a in op["attrs"]))
        if len(head) + 1 + len(attrs) + 1 <= 77:
            rows.append(f"{head} {attrs})")
        else:
            rows.append(head)
            rows.append(f"    {attrs})")
    lines += [r.ljust(77) + "\\" for r in rows[:-1]] + [rows[-1], ""]
    by_enum = {}
    for op in table["ops"]:
        if "slot_enum" in op:
            by_enum.setdefault(op["slot_enum"], []).append(op)
    for prefix in table["slot_enums"]:
        ops = by_enum[prefix]
        names = [o["name"] for o in ops]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        slots = ops[0]["attrs"]
        lines.append(f"/** @brief Schema slot{'s' if len(slots) > 1 else ''} of {listed}. @since 1.0 */")
        for i, a in enumerate(slots):
            doc = a.get("doc") or f"{a['type']}; unset = {a.get('default', 'required')}."
            lead = "enum { " if i == 0 else "       "
            last = i + 1 == len(slots)
            lines.append(f"{lead}DX_{prefix}_{a['name'].upper()} = {i}{'' if last else ','} "
                         f"/**< {doc} */{' };' if last else ''}")
    return replace_region(text, H_BEGIN, H_END, "\n".join(lines) + "\n", OPS_H)


# --- host/src/op_table.inc -------------------------------------------------------------------

def gen_host_inc(table):
    out = [
        "// Generated by cmake/gen_ops.py from abi/ops.json; do not edit (the build target",
        "// ops-table-update rewrites it, the CTest ops_table_current fails when it is stale).",
        "// Included by dispatch.cc inside namespace deepx::host: the shape rule of every standard",
        "// op, in DX_OP_TABLE order. dispatch.cc checks at compile time that the names and arities",
        "// agree with deepx/ops.h and implements the rules the host checks before a kernel runs.",
        "",
        "// The closed set of shape rules (abi/ops.json \"shape_rules\").",
        "enum class ShapeRule {",
    ]
    out += [f"  {camel(r)},  // {r}: {doc}" for r, doc in table["shape_rules"].items()]
    out += [
        "};",
        "",
        "struct OpTableRow {",
        "  const char* name;",
        "  int32_t num_inputs;   // -1: variadic",
        "  int32_t num_outputs;  // -1: variadic",
        "  ShapeRule rule;",
        "};",
        "",
        "inline constexpr OpTableRow kOpTable[] = {",
    ]
    for op in table["ops"]:
        out.append(f"    {{{c_string(op['name'])}, {arity(op['inputs'])}, {arity(op['outputs'])}, "
                   f"ShapeRule::{camel(op['shape_rule'])}}},")
    out.append("};")
    return "\n".join(out) + "\n"


# --- conformance/src/op_table.hpp ------------------------------------------------------------

def gen_conformance_hpp(table):
    out = [
        "// Generated by cmake/gen_ops.py from abi/ops.json; do not edit (the build target",
        "// ops-table-update rewrites it, the CTest ops_table_current fails when it is stale).",
        "// The suite's table of the standard ops: arity, attributes, tolerance class, backward, and",
        "// the dtype and shape rules by name. shape_rules.cpp implements each rule once and selects",
        "// it from this table; test_shape_rules.cpp checks the table against deepx/ops.h and that",
        "// every op's rule is implemented.",
        "#pragma once",
        "",
        "namespace deepx::conformance {",
        "",
        "// The closed set of shape rules (abi/ops.json \"shape_rules\").",
        "enum class ShapeRule {",
    ]
    out += [f"  {camel(r)},  // {r}: {doc}" for r, doc in table["shape_rules"].items()]
    out += ["};", "inline constexpr const char* kShapeRuleNames[] = {"]
    out += [f"    {c_string(r)}," for r in table["shape_rules"]]
    out += ["};", "", "// The closed set of dtype rules (abi/ops.json \"dtype_rules\").", "enum class DtypeRule {"]
    out += [f"  {camel(r)},  // {r}: {doc}" for r, doc in table["dtype_rules"].items()]
    out += [
        "};",
        "",
        "}  // namespace deepx::conformance",
        "",
        "// X(\"name\", inputs, outputs, \"attr,...\", OpClass, backward, ShapeRule, DtypeRule,",
        "//   index_inputs, bool_outputs): inputs/outputs -1 mean variadic; index_inputs is a bit",
        "//   mask of the inputs that hold indices (i64 in the suite's default signature),",
        "//   bool_outputs of the outputs that are bool whatever T is. OpClass is the op's",
        "//   tolerance class (abi/ops.json \"numerics\").",
        "#define DEEPX_CONFORMANCE_OP_TABLE(X) \\",
    ]
    rows = []
    for op in table["ops"]:
        mask = 0
        for i, p in enumerate(op["inputs"]):
            if p["dtype"] in ("i64", "i32|i64"):
                mask |= 1 << i
        bools = 0
        for i, p in enumerate(op["outputs"]):
            if p["dtype"] == "bool":
                bools |= 1 << i
        attrs = c_string(",".join(a["name"] for a in op["attrs"]))
        rows.append(f"  X({c_string(op['name'])}, {arity(op['inputs'])}, {arity(op['outputs'])}, {attrs}, "
                    f"OpClass::{NUMERICS[op['numerics']]}, {'true' if op['backward'] else 'false'}, "
                    f"ShapeRule::{camel(op['shape_rule'])}, DtypeRule::{camel(op['dtype_rule'])}, {mask}, {bools})")
    out += [r + " \\" for r in rows[:-1]] + [rows[-1]]
    return "\n".join(out) + "\n"


# --- docs/ops.md ------------------------------------------------------------------------------

def md_port(p):
    s = f"`{p['name']}`"
    if p.get("variadic"):
        s += "…"
    if p["dtype"] != "T":
        s += f" {p['dtype']}"
    if p.get("optional"):
        s += " (optional)"
    return s


def md_attr(a):
    s = f"`{a['name']}` {a['type']}"
    s += " (required)" if a.get("required") else f" = {a['default']}"
    return s.replace("|", " or ")


def gen_docs(table, text):
    out = [
        "| op | inputs | outputs | attributes (slot order; type = unset value) | T | dtype rule | shape rule | ∂ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op in table["ops"]:
        ins = ", ".join(md_port(p) for p in op["inputs"]) or "none"
        outs = ", ".join(md_port(p) for p in op["outputs"])
        attrs = "; ".join(md_attr(a) for a in op["attrs"]) or ""
        out.append(f"| `{op['name']}` | {ins.replace('|', ' or ')} | {outs.replace('|', ' or ')} | {attrs} | "
                   f"{op['dtypes']} | {op['dtype_rule']} | {op['shape_rule']} | "
                   f"{'∂' if op['backward'] else ''} |")
    out += ["", "| dtype rule | signature |", "|---|---|"]
    out += [f"| {r} | {doc} |" for r, doc in table["dtype_rules"].items()]
    out += ["", "| shape rule | output shapes |", "|---|---|"]
    out += [f"| {r} | {doc} |" for r, doc in table["shape_rules"].items()]
    text = replace_region(text, MD_BEGIN, MD_END, "\n".join(out) + "\n", DOCS)
    # The prose tables stay hand-written; each op must have its row there.
    missing = [op["name"] for op in table["ops"] if f"`{op['name']}`" not in text.split(MD_BEGIN)[0]
               + text.split(MD_END)[1]]
    if missing:
        raise TableError(f"{DOCS}: no prose row outside the generated table names {missing}")
    return text


def generate(root):
    table = load(os.path.join(root, SOURCE))

    def read(rel):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise TableError(f"{rel}: {e}")

    return {
        OPS_H: gen_ops_h(table, read(OPS_H)),
        HOST_INC: gen_host_inc(table),
        CONFORMANCE_HPP: gen_conformance_hpp(table),
        DOCS: gen_docs(table, read(DOCS)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", help="the source tree (the repository root)")
    parser.add_argument("--check", action="store_true", help="list stale files; write nothing")
    parser.add_argument("--out", help="with --check: write the expected files under this folder")
    args = parser.parse_args()
    try:
        files = generate(args.root)
    except TableError as e:
        print(f"gen_ops.py: {e}", file=sys.stderr)
        return 2
    stale = []
    for rel, text in files.items():
        path = os.path.join(args.root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if args.out:
            dest = os.path.join(args.out, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8") as f:
                f.write(text)
        if current == text:
            continue
        stale.append(rel)
        if args.check:
            diff = difflib.unified_diff((current or "").splitlines(), text.splitlines(),
                                        f"{rel} (checked in)", f"{rel} (from {SOURCE})", lineterm="")
            print("\n".join(list(diff)[:40]))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"gen_ops.py: rewrote {rel}")
    if args.check and stale:
        print(f"gen_ops.py: stale files (not what {SOURCE} says): {' '.join(stale)}\n"
              "Run `cmake --build build/default --target ops-table-update` and commit them with "
              f"{SOURCE}.", file=sys.stderr)
        return 1
    if args.check:
        print(f"gen_ops.py: the {len(files)} files generated from {SOURCE} are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
