#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_wire (daemon/wire/fuzz/corpus/wire/).

The seeds are checked in; run this again only to change them (flatc, Debian's
flatbuffers-compiler, must be on PATH):

    python3 daemon/wire/fuzz/make_seeds.py

Each seed is fuzz_wire's input (fuzz_wire.cc): one control byte (bit 0: 0 server role, 1 client
role; bits 1..7: chunk size - 1), then a byte stream of frames (docs/protocol.md). The FlatBuffers
headers are written by `flatc --binary` from the JSON below against abi/protocol/deepx_wire.fbs.
It rewrites the seed-* files and leaves every other file alone.
"""
import json
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SCHEMA = os.path.join(ROOT, "abi", "protocol", "deepx_wire.fbs")
OUT = os.path.join(HERE, "corpus", "wire")


def flatbuffer(obj, root):
    """The binary FlatBuffer of |obj| (a dict) with root type |root| (Request or Reply)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "msg.json")
        with open(src, "w") as f:
            json.dump(obj, f)
        subprocess.run(["flatc", "--binary", "--root-type", "deepx.wire.fb." + root, "-o", tmp,
                        SCHEMA, src], check=True)
        with open(os.path.join(tmp, "msg.bin"), "rb") as f:
            return f.read()


def frame(payload, bulk=False):
    return b"DXWF" + struct.pack("<II", 1 if bulk else 0, len(payload)) + payload


def req(obj):
    return frame(flatbuffer(obj, "Request"))


def rep(obj):
    return frame(flatbuffer(obj, "Reply"))


HELLO = req({"task_id": 0, "body_type": "Hello",
             "body": {"major": 1, "minor": 0, "client_name": "seed"}})
HELLO_REPLY = rep({"task_id": 0, "status": "OK", "body_type": "HelloReply",
                   "body": {"major": 1, "minor": 0, "server_name": "deepxd"}})
H = {"value": (1 << 32) | 7}

SEEDS = {
    # server role, fed whole (chunk 128)
    "seed-hello-list": (0xFE, HELLO + req({"task_id": 1, "body_type": "ListOps", "body": {}})),
    "seed-create-write-read": (0x00 | (12 << 1), HELLO
        + req({"task_id": 2, "body_type": "TensorCreate",
               "body": {"dtype": 73730, "shape": [2, 3], "device": "cpu:0"}})
        + req({"task_id": 3, "body_type": "TensorWrite", "body": {"tensor": H, "offset": 0},
               "bulk_bytes": 24})
        + frame(bytes(range(16)), bulk=True) + frame(bytes(range(8)), bulk=True)
        + req({"task_id": 4, "body_type": "TensorRead",
               "body": {"tensor": H, "offset": 0, "length": 24}})),
    "seed-submit": (0xFE, HELLO + req({"task_id": 5, "body_type": "Submit", "body": {"ops": [
        {"op": "dx.add", "inputs": [H, H], "outputs": [H]},
        {"op": "dx.sum", "inputs": [H], "outputs": [H], "backward": True,
         "attrs": [{"name": "axes", "type": "INTS", "ints": [0, -1]},
                   {"name": "mode", "type": "STRING", "s": "mean"}]}]}})),
    "seed-view-name": (0x06, HELLO
        + req({"task_id": 6, "body_type": "TensorView",
               "body": {"base": H, "shape": [3, 2], "strides": [1, 3], "element_offset": 0}})
        + req({"task_id": 7, "body_type": "TensorName", "body": {"tensor": H, "name": "w"}})
        + req({"task_id": 8, "body_type": "TensorOpen", "body": {"name": "w"}})
        + req({"task_id": 9, "body_type": "Cancel", "body": {"task_id": 5}})),
    "seed-out-of-order": (0xFE, req({"task_id": 1, "body_type": "Stats", "body": {}}) + HELLO
        + HELLO),
    # client role
    "seed-client-replies": (0xFF, HELLO_REPLY
        + rep({"task_id": 1, "status": "OK", "body_type": "PluginList",
               "body": {"plugins": [{"name": "cpu", "version": "1.0", "certified": True}]}})
        + rep({"task_id": 2, "status": "OK", "body_type": "TensorInfo",
               "body": {"tensor": H, "dtype": 73730, "shape": [2, 3], "strides": [3, 1],
                        "device": "cpu:0"}})
        + rep({"task_id": 4, "status": "OK", "bulk_bytes": 4}) + frame(b"\x01\x02\x03\x04", True)
        + rep({"task_id": 5, "status": "NOT_FOUND", "message": "no op dx.frob"})),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (control, stream) in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([control]) + stream)


if __name__ == "__main__":
    main()
