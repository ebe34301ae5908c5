#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_daemon_handler (daemon/deepxd/fuzz/corpus/handler/).

The seeds are checked in; run this again only to change them (flatc, Debian's
flatbuffers-compiler, must be on PATH):

    python3 daemon/deepxd/fuzz/make_seeds.py

Each seed is the target's input (fuzz_daemon_handler.cc): one control byte (bits 0..6: chunk
size - 1), then the client's byte stream after the Hello the target sends itself. Request
headers are FlatBuffers written by `flatc --binary` from the dicts below against
abi/protocol/deepx_wire.fbs. The daemon's n-th handle of an input is (1 << 32) + n. Only the
seed-* files are rewritten.
"""
import json
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SCHEMA = os.path.join(ROOT, "abi", "protocol", "deepx_wire.fbs")
OUT = os.path.join(HERE, "corpus", "handler")
F32 = 0x00012002


def request(task_id, body_type, body, bulk_bytes=0):
    msg = {"task_id": task_id, "body_type": body_type, "body": body, "bulk_bytes": bulk_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "msg.json")
        with open(src, "w") as f:
            json.dump(msg, f)
        subprocess.run(["flatc", "--binary", "--root-type", "deepx.wire.fb.Request", "-o", tmp,
                        SCHEMA, src], check=True)
        with open(os.path.join(tmp, "msg.bin"), "rb") as f:
            payload = f.read()
    return frame(payload)


def frame(payload, bulk=False):
    return b"DXWF" + struct.pack("<II", 1 if bulk else 0, len(payload)) + payload


def handle(n):
    return {"value": (1 << 32) + n}


def create(task_id, shape):
    return request(task_id, "TensorCreate", {"dtype": F32, "shape": shape, "device": ""})


def write(task_id, n, data):
    return request(task_id, "TensorWrite", {"tensor": handle(n), "offset": 0}, len(data)) + \
        frame(data, bulk=True)


FOUR_FLOATS = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)

SEEDS = {
    "seed-lists": (127, request(1, "ListPlugins", {}) + request(2, "ListOps", {})
                   + request(3, "ListDevices", {})
                   + request(4, "ListKernels", {"op": "dx.add", "plugin": ""})
                   + request(5, "Stats", {})),
    "seed-tensors": (15, create(1, [2, 2]) + write(2, 0, FOUR_FLOATS)
                     + request(3, "TensorRead", {"tensor": handle(0), "offset": 4, "length": 8})
                     + request(4, "TensorView", {"base": handle(0), "shape": [2],
                                                 "strides": [1], "element_offset": 2})
                     + request(5, "TensorCopy", {"src": handle(0), "dst": handle(0)})
                     + request(6, "TensorFree", {"tensor": handle(0)})
                     + request(7, "TensorRead", {"tensor": handle(0), "offset": 0,
                                                 "length": 16})),
    "seed-invoke-submit": (127, create(1, [2, 2]) + create(2, [2, 2]) + create(3, [2, 2])
                           + write(4, 0, FOUR_FLOATS) + write(5, 1, FOUR_FLOATS)
                           + request(6, "Invoke", {"op": "dx.add",
                                                   "inputs": [handle(0), handle(1)],
                                                   "outputs": [handle(2)]})
                           + request(7, "Submit", {"ops": [
                               {"op": "dx.mul", "inputs": [handle(0), handle(2)],
                                "outputs": [handle(1)]},
                               {"op": "dx.matmul", "inputs": [handle(1), handle(0)],
                                "outputs": [handle(2)]},
                               {"op": "dx.sum", "inputs": [handle(2)], "outputs": [handle(0)],
                                "attrs": [{"name": "axes", "type": "INTS", "ints": [0]}]}]})
                           + request(8, "Cancel", {"task_id": 7})
                           + request(9, "Stats", {})),
    "seed-names": (31, create(1, [3]) + request(2, "TensorName", {"tensor": handle(0),
                                                                  "name": "w"})
                   + request(3, "TensorOpen", {"name": "w"})
                   + request(4, "TensorUnname", {"name": "w"})
                   + request(5, "TensorOpen", {"name": "w"})),
    "seed-errors": (3, request(1, "Hello", {"major": 1, "minor": 0, "client_name": "again"})
                    + request(2, "ListOps", {}, 4) + frame(b"\0\0\0\0", bulk=True)
                    + request(3, "TensorFree", {"tensor": {"value": 12345}})
                    + create(4, [1 << 40])
                    + b"garbage after the last message"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (control, stream) in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([control]) + stream)
        print(name, len(stream) + 1, "bytes")


if __name__ == "__main__":
    main()
